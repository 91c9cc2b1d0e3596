"""The run summary in words a reader can act on (issue 60, item 7): a majority run whose problems reach
no majority says why none was labeled, and a judge with no kept row says so instead of `None`."""

from __future__ import annotations

from _simulated_run import pipeline_data, write_run

from prm_synth.store.summary import summarize
from prm_synth.store.summary_text import summary_lines


def test_a_majority_run_that_labels_nothing_says_why_in_words(tmp_path):
    data = pipeline_data(
        "simulated-consensus",
        problems={"kind": "builtin", "count": 4, "seed": 3, "min_ops": 6, "max_ops": 8},
        # every answer its own: no answer reaches the majority a pseudo-gold needs
        policy={"kind": "simulated", "step_error": 0.9, "seed": 1},
        grader={"kind": "majority", "votes": 4, "min_agreement": 1.0},
    )
    summary = summarize(write_run(tmp_path / "run", data))
    assert summary.problems_loaded == 0 and summary.rows == 0
    lines = dict(summary_lines(summary))
    no_majority = summary.rejected_by_reason["no_majority"]
    assert lines["problems in"] == f"4 (0 loaded; 4 rejected before labeling: no_majority {no_majority})"
    assert "None" not in " ".join(lines.values())
    assert lines["judge cost"].endswith("0 tokens, no row kept")


def test_a_run_that_loads_every_problem_says_it_as_before(tmp_path):
    summary = summarize(write_run(tmp_path / "run", pipeline_data(), 6))
    assert dict(summary_lines(summary))["problems in"] == "6 (6 loaded)"
