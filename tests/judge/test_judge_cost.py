"""What the judge cost is in the open: the run summary (and its JSON), `inspect` and the card report
judge requests, judge tokens, rows judged and judge tokens per kept row."""

from __future__ import annotations

import json

from _simulated_run import write_run
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.store.summary import summarize
from prm_synth.store.summary_text import judge_cost_text

DATA = {
    "name": "judged",
    "problems": {"kind": "builtin", "count": 12, "min_ops": 4, "max_ops": 8},
    "policy": {"kind": "simulated", "step_error": 0.15, "recover": 0.2, "recover_in_sample": True},
    "sampling": {"samples_per_problem": 2},
    "judge": {"engine": {"kind": "simulated-judge", "accuracy": 0.8}, "samples": 3},
    "consensus": {},  # the defaults: soft, judge.select needed
    # in-place canaries measure no late placement, so the rollouts' pins stand and some rows go unasked;
    # the few canaries the policy continues in a 6-row shard leave enough doubt of a late change-point that
    # every wrong-answer row may be asked (posterior.late_prior)
    "canaries": {"planter": "in_place"},
    "output": {"shard_size": 6},
}


def test_the_summary_inspect_and_the_card_report_what_the_judge_cost(tmp_path):
    from prm_synth.export.hub import export_to_dir

    root = write_run(tmp_path / "run", DATA)
    summary = summarize(root)
    judge = summary.judge
    assert judge is not None and summary.consensus is not None
    rows = summary.consensus.rows
    # needed: some rows were not sent, the rest got 1..3 votes each; every vote is a request
    assert summary.judge_requests == judge.samples == judge.requests
    assert summary.rows_judged + summary.rows_not_judged == rows and summary.rows_not_judged > 0
    assert summary.rows_judged <= summary.judge_requests <= 3 * summary.rows_judged
    assert summary.judge_tokens > 0 and summary.judge_tokens_per_kept_row == round(
        summary.judge_tokens / summary.rows, 2
    )
    out = json.loads(json.dumps(summary.to_dict()))
    assert out["judge_requests"] == summary.judge_requests and out["judge_tokens"] == summary.judge_tokens
    assert out["rows_judged"] == summary.rows_judged and out["judge"]["rows_skipped"] == summary.rows_not_judged
    text = judge_cost_text(summary)
    assert text is not None and f"{summary.judge_requests} requests" in text
    shown = " ".join(CliRunner().invoke(app, ["inspect", str(root)], env={"COLUMNS": "250"}).output.split())
    assert "judge cost" in shown and f"{summary.judge_requests} requests (votes asked)" in shown
    assert "right-answer rows:" in shown and "wrong-answer rows:" in shown  # accuracy per answer class
    export_to_dir(root, tmp_path / "out", ["trl"])
    card = " ".join((tmp_path / "out" / "README.md").read_text(encoding="utf-8").split())
    assert f"| judge cost | {text} |" in card
    assert "right-answer rows:" in card


def test_without_a_judge_the_summary_says_nothing_of_one(tmp_path):
    data = {k: v for k, v in DATA.items() if k not in ("judge", "consensus")}
    summary = summarize(write_run(tmp_path / "run", data, limit=2))
    assert summary.judge is None and judge_cost_text(summary) is None
    out = summary.to_dict()
    assert out["judge_requests"] == 0 and out["judge_tokens"] == 0 and out["judge"] == {}
