"""Scale-out: the shard tasks on a (local) Ray cluster make the same dataset as the thread pool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prm_synth.shards import iter_records

ROOT = Path(__file__).resolve().parents[1]


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
