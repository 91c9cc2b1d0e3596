"""HumanEval end to end on the CPU: `prm-synth run pipelines/humaneval-demo.yaml` with the demo model
through vLLM and the sandbox on. The demo model's programs mostly fail; the rows, the rejections, the
counts and the card must still be right."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prm_synth.export.card import render_card
from prm_synth.grading import sandbox
from prm_synth.store.readers import iter_records

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed")
def test_humaneval_with_the_demo_model_in_the_sandbox(tmp_path: Path) -> None:
    out = tmp_path / "humaneval"
    cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(ROOT / "pipelines" / "humaneval-demo.yaml")]
    cmd += ["--out", str(out), "--limit", "2", "--json"]
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect")}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["problems_in"] == 2 and summary["reconciles"]
    rows = list(iter_records(out))
    rejected = list(iter_records(out, "rejected"))
    assert len(rows) + len(rejected) >= 2
    for r in rows:
        assert r["source"] == "humaneval" and r["problem_id"].startswith("HumanEval/")
        assert r["steps"] and "".join(r["steps"])
        assert r["final_correct"] in (True, False, None)
        assert len(r["labels"]) == len(r["steps"])
    assert "sandbox_unavailable" not in done.stderr  # the sandbox was on
    card = render_card(out, [])
    assert "bubblewrap sandbox" in card
