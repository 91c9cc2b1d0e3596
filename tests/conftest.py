"""Shared fixtures, the session's test order, and the guard that keeps vLLM out of the fast tests.

Fixtures any test file may use (ask for them by name; none needs an import):

- `prefect_harness` (session): one ephemeral Prefect API for the whole session; entering it costs ~11 s,
  so every in-process flow test shares it (`@pytest.mark.usefixtures("prefect_harness")`).
- `demo_vllm_engine`: the demo model (SmolLM2-135M) in ONE in-process `VLLMEngine` built from
  `VLLMConfig(model="demo")` (the defaults: max_model_len 2048, seed 0), shared by every test that only
  generates with it. Starting vLLM costs 30-90 s on two cores and a quarter of the machine's RAM, so:
    * the tests that ask for it run together, at the end of the session (see `pytest_collection_modifyitems`),
      so it starts once;
    * it is closed as soon as the next test does not ask for it, so it never shares the machine with a
      `vllm serve`, a `prm-synth run` subprocess on the demo model, or a test's own engine;
    * it is handed over idle: a test that leaves requests running in it (a failure half-way) gets it closed,
      and the next test a fresh one.
  To adopt it: add `demo_vllm_engine` as an argument (or make a module fixture of yours return it) and do
  not close it. It is slow: mark the test `@pytest.mark.slow`. A test that needs its own seed or config
  builds its own engine and does not ask for this one (the shared one is closed before that test starts);
  a test must not assume the shared engine's random state (other tests sampled from it before).

Markers (pyproject.toml): `slow` = needs vLLM (even only its import), Ray, a model server, the demo model
through vLLM, or whole `prm-synth` processes that take minutes. `make test-fast` (`-m "not slow"`) runs the
rest; when slow tests are deselected, importing `vllm` in the pytest process fails the test that did it (a
test that needs vLLM must be marked slow instead of silently costing the fast run half a minute). Asking
whether it is installed (`importlib.util.find_spec`, TRL's checks) is not importing it and still works.
Ray is not guarded: every in-process flow run imports prefect_ray (flows/synthesize.py `_ray_options`),
whose lazy `ray` module loads for real when something walks sys.modules (torch's `inspect.getmodule`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import tempfile

import pytest

# No network: keep Prefect from phoning home, and keep its state out of ~/.prefect.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="prm-synth-prefect-"))

DEMO_ENGINE = "demo_vllm_engine"
# Imported only by slow tests: 10-30 s of import on two cores.
HEAVY_MODULES = ("vllm",)


@pytest.fixture(scope="session")
def prefect_harness():
    """One ephemeral Prefect API for the whole session (entering it costs ~11 s)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness():
        yield


# ---------------------------------------------------------------- the shared demo-model engine
class _SharedDemoEngine:
    """The one in-process demo engine: built on first use, closed when the next test does not use it."""

    def __init__(self) -> None:
        self.engine = None

    def get(self):
        if self.engine is None:
            pytest.importorskip("vllm")
            from prm_synth.config import VLLMConfig
            from prm_synth.engines.vllm import VLLMEngine

            self.engine = VLLMEngine(VLLMConfig(model="demo"))
        return self.engine

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()


_shared_demo_engine = _SharedDemoEngine()


@pytest.fixture
def demo_vllm_engine():
    """The demo model in the session's one in-process `VLLMEngine` (see the module docstring). Do not close it."""
    return _shared_demo_engine.get()


def _uses_demo_engine(item) -> bool:
    return DEMO_ENGINE in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(session, config, items):
    # The demo engine's users last, in their collected order: the engine starts once, and nothing that
    # starts a vLLM of its own (a `vllm serve`, a demo `prm-synth run`) runs while it is up.
    users = [item for item in items if _uses_demo_engine(item)]
    if users:
        items[:] = [item for item in items if not _uses_demo_engine(item)] + users


def pytest_runtest_teardown(item, nextitem):
    engine = _shared_demo_engine.engine
    if engine is None:
        return
    if nextitem is None or not _uses_demo_engine(nextitem) or engine.running():
        _shared_demo_engine.close()


def pytest_sessionfinish(session, exitstatus):
    _shared_demo_engine.close()  # a session stopped early (-x) ends with the engine still up


# ---------------------------------------------------------------- no vLLM in the fast tests
class HeavyImportInFastTests(RuntimeError):
    """Not an ImportError on purpose: `pytest.importorskip` must not turn it into a quiet skip."""


class _RefusingLoader(importlib.abc.Loader):
    """Runs no code of the module: executing it (importing it for real) is the error. Finding it is not:
    libraries ask whether vLLM is installed (`find_spec`) without loading it."""

    def __init__(self, fullname: str) -> None:
        self.fullname = fullname

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        top = self.fullname.partition(".")[0]
        raise HeavyImportInFastTests(
            f"`import {self.fullname}` in the fast tests (-m 'not slow'): a test that needs {top} must be "
            "marked @pytest.mark.slow"
        )


class _RefuseHeavyImports(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in HEAVY_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None:
            spec.loader = _RefusingLoader(fullname)
        return spec


def _deselects_slow(config) -> bool:
    expression = " ".join((config.getoption("markexpr", "") or "").split())
    return "not slow" in expression


def pytest_configure(config):
    if _deselects_slow(config) and not any(name in sys.modules for name in HEAVY_MODULES):
        sys.meta_path.insert(0, _RefuseHeavyImports())
