"""Scale-out: the shard tasks on a (local) Ray cluster make the same dataset as the thread pool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prm_synth.store.readers import iter_records

ROOT = Path(__file__).resolve().parents[2]


def _run(out: Path, *extra: str, tmp: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "prm_synth.cli",
        "run",
        str(ROOT / "pipelines" / "simulated.yaml"),
        "--out",
        str(out),
        "--limit",
        "90",
        "--json",
        *extra,
    ]
    env = os.environ | {"PREFECT_HOME": str(tmp / "prefect"), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_ray_runner_makes_the_same_rows_as_the_thread_pool(tmp_path):
    threads = _run(tmp_path / "threads", tmp=tmp_path)
    ray = _run(tmp_path / "ray", "--runner", "ray", tmp=tmp_path)
    assert ray["shards_run"] == threads["shards_run"] == 2
    assert list(iter_records(tmp_path / "ray")) == list(iter_records(tmp_path / "threads"))
    assert list(iter_records(tmp_path / "ray", "rejected")) == list(iter_records(tmp_path / "threads", "rejected"))


# Runs in a fresh interpreter: the flow on Prefect's temporary server (no PREFECT_API_URL), its shard
# tasks on a local Ray that stays up afterwards so the workers' log lines reach the server; then the
# flow's server is asked what it recorded. The workers get a Prefect home of their own, as on another
# machine: a temporary server of theirs would not share the flow's database.
_ON_THE_FLOWS_SERVER = """
import json, os, re, sys, time
import ray
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterTaskRunId
from flows.synthesize import synthesize_with_runner
from prm_synth.config import load_config

if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PREFECT_HOME": sys.argv[2]}})
    flow = synthesize_with_runner("ray")
    state = flow(config=load_config("pipelines/simulated.yaml"), out_dir=sys.argv[1], limit=60, return_state=True)
    assert state.is_completed(), state
    runs = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
    # the workers' task runs and logs reach the server as events, in batches every few seconds, and
    # one shard's may be there before the other's task run is: wait for both shards (60 problems, 50
    # a shard), each finished and with its log line, or for the deadline
    shards = {"shard-0", "shard-1"}
    deadline = time.monotonic() + 120
    with get_client(sync_client=True) as client:
        while True:
            tasks = [t for t in client.read_task_runs(flow_run_filter=runs) if t.name.startswith("shard-")]
            pids = {}
            for t in tasks:
                logs = client.read_logs(log_filter=LogFilter(task_run_id=LogFilterTaskRunId(any_=[t.id])))
                found = [int(m.group(1)) for log in logs if (m := re.search(r"[(]pid (\\d+)[)]", log.message))]
                if found:
                    pids[t.name] = found[0]
            finished = {t.name for t in tasks if t.state is not None and t.state.is_completed()}
            if (finished == set(pids) == shards) or time.monotonic() > deadline:
                break
            time.sleep(1)
    print(json.dumps({"flow_pid": os.getpid(), "tasks": {t.name: t.state.type.value for t in tasks}, "pids": pids}))
"""


@pytest.mark.slow
def test_shard_tasks_run_on_ray_workers_and_report_to_the_flows_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")} | {
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "RAY_USAGE_STATS_ENABLED": "0",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "300",  # a busy machine
        "RAY_DEDUP_LOGS": "0",  # every worker's lines, so a second "Starting temporary server" shows
        "PREFECT_LOGGING_LEVEL": "INFO",  # the shard tasks' "(pid N)" lines are INFO (the CLI's default is WARNING)
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", _ON_THE_FLOWS_SERVER, str(tmp_path / "out"), str(tmp_path / "worker-prefect")],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["tasks"] == {"shard-0": "COMPLETED", "shard-1": "COMPLETED"}, output[-3000:]
    assert set(seen["pids"]) == {"shard-0", "shard-1"}, output[-3000:]
    assert seen["flow_pid"] not in seen["pids"].values()  # they ran in Ray worker processes
    assert output.count("Starting temporary server") == 1  # the flow's; no worker starts its own
