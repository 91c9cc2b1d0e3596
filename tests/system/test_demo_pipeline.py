"""The README's main job: `prm-synth run pipelines/demo.yaml` with the real demo model through vLLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prm_synth.store.readers import iter_records

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.vllm
def test_prm_synth_run_demo_with_the_real_model(tmp_path):
    out = tmp_path / "demo"
    cmd = [
        sys.executable,
        "-m",
        "prm_synth.cli",
        "run",
        str(ROOT / "pipelines" / "demo.yaml"),
        "--out",
        str(out),
        "--limit",
        "2",
        "--json",
    ]
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect")}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["problems_in"] == 2 and summary["reconciles"]
    rows = list(iter_records(out))
    assert rows and all(r["policy_model"] == "smollm2-135m-instruct" for r in rows)
    for r in rows:
        assert r["steps"] and r["tokens"] > 0
        probed = [t for t in r["mc_total"] if t]
        assert probed, "every row has at least one measured step"
    assert summary["rollouts"] > 0 and summary["tokens"] > 0
