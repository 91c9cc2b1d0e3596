"""pipelines/processbench-gsm8k.yaml end to end: ProcessBench's GSM8K solutions labeled by the pipeline (the
demo model through vLLM on the CPU as the policy), reported against ProcessBench's human labels beside the
run's own `estimated_precision` (null here: the shipped pipeline has no judge, which the demo model cannot be,
its votes unreadable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _prm_helpers import PROCESSBENCH

from prm_synth.store.readers import iter_records

ROOT = Path(__file__).resolve().parents[2]
DATA = PROCESSBENCH.parent  # ../shared/data beside the checkout (or the machines' copy)
ROWS = 4


def _prm_synth(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect")}
    cmd = [sys.executable, "-m", "prm_synth.cli", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.vllm
def test_processbench_gsm8k_runs_end_to_end_and_reports_against_the_human_labels(tmp_path):
    if not (DATA / "gsm8k" / "test.jsonl").exists():
        pytest.skip("ProcessBench and GSM8K are not beside the checkout (../shared/data)")
    # the shipped pipeline, its data paths read from where the data is here
    text = (ROOT / "pipelines" / "processbench-gsm8k.yaml").read_text()
    assert "../../shared/data/" in text
    pipeline = tmp_path / "processbench-gsm8k.yaml"
    pipeline.write_text(text.replace("../../shared/data/", f"{DATA}/"))
    out = tmp_path / "out"

    done = _prm_synth(tmp_path, "run", str(pipeline), "--out", str(out), "--limit", str(ROWS))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = done.stdout
    assert "against given labels" in printed, printed[-3000:]
    lines = printed.splitlines()
    against = next(i for i, line in enumerate(lines) if "against given labels" in line)
    estimate = [i for i, line in enumerate(lines) if "estimated precision" in line]
    assert not estimate or estimate[0] == against - 1  # printed beside the run's own estimate

    summary = json.loads(_prm_synth(tmp_path, "inspect", str(out), "--json").stdout)
    assert summary["reconciles"] and summary["problems_in"] == ROWS
    assert summary["rows"] + summary["rejected"] == ROWS
    assert "estimated_precision" in summary
    rows = list(iter_records(out))
    bench = {b["id"]: b for b in json.loads((DATA / "processbench" / "gsm8k.json").read_text())[:ROWS]}
    assert all(r["given_first_error"] == bench[r["id"]]["label"] for r in rows)
    assert all("".join(r["steps"]) == "\n\n".join(bench[r["id"]]["steps"]) for r in rows)
    if rows:
        report = summary["against_given"]
        assert report["rows"] == len(rows) and report["processbench"]["n_error"] + report["processbench"]["n_correct"]
        firsts = [next((i for i, lab in enumerate(r["labels"]) if lab is False), -1) for r in rows]
        hits = sum(f == r["given_first_error"] for f, r in zip(firsts, rows, strict=True))
        assert report["first_error_accuracy"] == pytest.approx(hits / len(rows))
