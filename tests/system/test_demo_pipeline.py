"""The README's main job: `prm-synth run pipelines/demo.yaml` with the real demo model through vLLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.store.readers import iter_records

ROOT = Path(__file__).resolve().parents[2]
# What the libraries printed on a demo run before the console was made quiet (issue 60): vLLM's warnings,
# torch's FutureWarnings and C++ warnings, tqdm bars, vLLM's shutdown, the resource tracker.
LIBRARY_NOISE = ("WARNING", "FutureWarning", "[W", "it/s]", "force killing", "leaked", "Triton")


@pytest.mark.slow
@pytest.mark.vllm
def test_prm_synth_run_demo_with_the_real_model(tmp_path):
    out = tmp_path / "demo"
    # as `make demo` runs it (the console a user reads), on 2 of its problems
    cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(ROOT / "pipelines" / "demo.yaml"), "--out", str(out)]
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect")}
    done = subprocess.run([*cmd, "--limit", "2"], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    console = (done.stdout + done.stderr).splitlines()
    # a quiet console (issue 60): no library's lines, and short; they are in the run's log file
    assert len(console) <= 60, "\n".join(console)
    for noise in LIBRARY_NOISE:
        assert not any(noise in line for line in console), (noise, "\n".join(console))
    log = (out / "logs" / "run.log").read_text()
    assert "WARNING" in log  # vLLM's, kept where a user can read them
    assert f"library messages (vLLM, torch, progress bars): {out / 'logs' / 'run.log'}" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("dataset: ")  # it ends on its summary
    if "could not be graded" in done.stdout:  # the demo's short rollout budget: said to be expected, in the line
        assert "Expected on the demo" in next(line for line in console if "could not be graded" in line)
    inspected = CliRunner().invoke(app, ["inspect", str(out), "--json"])
    assert inspected.exit_code == 0, inspected.output
    summary = json.loads(inspected.stdout)
    assert summary["problems_in"] == 2 and summary["reconciles"]
    rows = list(iter_records(out))
    assert rows and all(r["policy_model"] == "smollm2-135m-instruct" for r in rows)
    for r in rows:
        assert r["steps"] and r["tokens"] > 0
        probed = [t for t in r["mc_total"] if t]
        assert probed, "every row has at least one measured step"
    assert summary["rollouts"] > 0 and summary["tokens"] > 0
