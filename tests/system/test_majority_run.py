"""A no-gold run end to end on the simulated policy: pseudo-gold rows marked, `no_majority` rejections,
counts that reconcile, and a card that states the pseudo-gold and its agreement-accuracy table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _simulated_run import openai_policy, pipeline_data, served_policy, small_pipeline, small_problems, write_run
from fault_proxy import SimulatedCompletionsServer
from typer.testing import CliRunner

import flows.synthesize  # noqa: F401 - Prefect sets its log handlers up at import: here, not inside CliRunner's capture
import prm_synth.pipeline as pipeline
from prm_synth.cli import app
from prm_synth.export.card import render_card
from prm_synth.export.grader_card import level_span, majority_counts
from prm_synth.store.readers import iter_records
from prm_synth.store.summary import summarize


def test_majority_run_marks_rows_rejects_and_states_it_on_the_card(tmp_path: Path) -> None:
    data = pipeline_data(
        "simulated",
        problems={"kind": "builtin", "count": 24, "seed": 3, "min_ops": 2, "max_ops": 4},
        policy={"kind": "simulated", "step_error": 0.2, "recover": 0.05, "seed": 1, "step_format": "line"},
        grader={"kind": "majority", "votes": 6, "min_agreement": 0.6},
        output={"shard_size": 8},
    )
    out = write_run(tmp_path / "run", data)
    rows = list(iter_records(out))
    rejected = list(iter_records(out, "rejected"))
    counts = majority_counts(out)
    assert rows and all(r["gold_origin"].startswith("majority ") for r in rows)
    assert all(float(r["gold_origin"].split()[1]) >= 0.6 for r in rows)
    no_majority = [r for r in rejected if r["reason"] == "no_majority"]
    assert len(no_majority) == counts["rejected"] and counts["kept"] + counts["rejected"] == 24
    summary = summarize(out)
    assert summary.reconciles
    total = sum(v for k, v in counts.items() if k.startswith("total@"))
    assert total == counts["kept"]  # every builtin problem has a gold, held out and audited
    card = render_card(out, [])
    assert "pseudo-gold" in card and "| agreement | majority right | problems | accuracy |" in card
    for key, value in counts.items():
        if key.startswith("total@"):
            level = key.split("@")[1]
            assert f"| {level_span(level)} | {counts['right@' + level]} | {value} |" in card


def test_a_judged_majority_run_reads_each_rows_doubt_and_reconciles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, tuple[float, float]]] = []
    real = pipeline.doubts_of

    def spy(*args: object, **kwargs: object) -> dict[str, tuple[float, float]]:
        seen.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return seen[-1]

    data = pipeline_data(
        "simulated",
        problems={"kind": "builtin", "count": 16, "seed": 3, "min_ops": 2, "max_ops": 4},
        policy={"kind": "simulated", "step_error": 0.2, "recover": 0.05, "seed": 1, "step_format": "line"},
        grader={"kind": "majority", "votes": 6, "min_agreement": 0.5},
        judge={"engine": {"kind": "simulated-judge", "accuracy": 0.8}, "samples": 3, "select": "all"},
        consensus={"policy": "soft"},
        output={"shard_size": 8},
    )
    monkeypatch.setattr(pipeline, "doubts_of", spy)
    out = write_run(tmp_path / "run", data)
    rows = list(iter_records(out))
    assert summarize(out).reconciles
    doubts = {k: v for shard in seen for k, v in shard.items()}
    assert doubts and all(0.0 <= q <= 1.0 and 0.0 <= r <= 1.0 for q, r in doubts.values())
    assert all(r["id"] in doubts for r in rows if r["final_correct"] is not None)  # every graded row had one
    assert all(r["judge_votes"] for r in rows)  # every row was judged (select: all)


@pytest.mark.usefixtures("prefect_harness")
def test_a_problem_the_server_refuses_is_rejected_and_the_rest_of_its_shard_is_kept(tmp_path: Path) -> None:
    victim = small_problems()[1]
    others = {p.id for p in small_problems()} - {victim.id}
    out = str(tmp_path / "out")
    with SimulatedCompletionsServer(refuse=victim.question, config=served_policy()) as server:
        grader = {"kind": "majority", "votes": 4, "min_agreement": 0.25}
        path = small_pipeline(tmp_path, "majority-refused", openai_policy(server.url, max_retries=0), grader=grader)
        result = CliRunner().invoke(app, ["run", path, "--out", out, "--json"])
        assert server.refused >= 1
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["reconciles"] is True
    rejected = list(iter_records(out, "rejected"))
    refused = [r for r in rejected if r["reason"] == "engine_refused"]
    assert {r["problem_id"] for r in refused} == {victim.id}
    assert "maximum context length" in refused[0]["detail"]
    # every other problem has its rows (or, without a majority, says so): none was lost with the victim
    rows = list(iter_records(out))
    accounted = {r["problem_id"] for r in rows} | {r["problem_id"] for r in rejected if r["reason"] == "no_majority"}
    assert accounted == others and rows
