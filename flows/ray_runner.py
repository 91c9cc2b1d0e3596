"""Prefect's Ray task runner, with every Ray worker reporting to the flow's own API server.

prefect-ray hands each remote task the flow's settings. Under Prefect's temporary (ephemeral) API,
`prm-synth run`'s default, those settings name no server, so each Ray worker started a temporary
server of its own (10-30 s each) and recorded its task runs there, where the flow never sees them.
Here the URL the flow's client talks to goes with every task: in the settings the task runs under,
and in the workers' environment (Ray's runtime_env), so no worker starts a server.
"""

from __future__ import annotations

from typing import Any

from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect_ray import RayTaskRunner


def flow_api_url() -> str:
    """The API the current process reports to: PREFECT_API_URL, or the temporary server's URL."""
    configured = PREFECT_API_URL.value()
    if configured:
        return str(configured)
    with get_client(sync_client=True) as client:  # starts nothing new: the flow's server is up
        return str(client.api_url).rstrip("/")


class FlowServerRayTaskRunner(RayTaskRunner):
    """A RayTaskRunner whose tasks report to the flow's server (see the module docstring)."""

    def __enter__(self) -> FlowServerRayTaskRunner:
        self._api_url = flow_api_url()
        runtime_env = self.init_kwargs.setdefault("runtime_env", {})
        runtime_env.setdefault("env_vars", {})["PREFECT_API_URL"] = self._api_url
        return super().__enter__()

    def submit(self, task: Any, parameters: dict[str, Any], wait_for: Any = None, dependencies: Any = None) -> Any:
        # The remote task rebuilds its settings from the ones serialized here.
        with temporary_settings(updates={PREFECT_API_URL: self._api_url}):
            return super().submit(task, parameters, wait_for, dependencies)
