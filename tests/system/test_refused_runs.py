"""A run that makes nothing is a failure, and what the engine refused is not done.

Against an OpenAI-compatible server that refuses every request, `prm-synth run` exits non-zero with
one line naming the server's reason and writes no shard; once the server is fixed, the same command
makes the rows. Problems the engine refused in a shard that was written are asked again by the next
run (only they: the rest of the shard is kept), while rows rejected for their own content stay.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from _simulated_run import openai_policy, run_again, served_policy, small_pipeline, small_problems
from fault_proxy import SimulatedCompletionsServer
from typer.testing import CliRunner

import flows.synthesize  # noqa: F401 - Prefect sets its log handlers up at import: here, not inside CliRunner's capture
from prm_synth.cli import app
from prm_synth.pipeline import ShardOutput
from prm_synth.records import ShardStats, reject
from prm_synth.shard.rewrite import ShardRefusedError, ShardRows, check_not_all_refused, merge_redo
from prm_synth.store.readers import iter_records


def refused(problem_id: str, row: str = "s0", stage: str = "sample") -> Any:
    return reject(f"{problem_id}-{row}", problem_id, "builtin", stage, "engine_refused", "HTTP 400: too long")  # type: ignore[arg-type]


# ---------------------------------------------------------------- the rules, without a server
def test_a_shard_of_refusals_only_is_a_failure_naming_the_servers_words():
    with pytest.raises(ShardRefusedError, match="HTTP 400: too long"):
        check_not_all_refused([], [refused("p0"), refused("p1")])
    load = reject("bad-row", None, "file", "load", "missing_field", "no question")
    with pytest.raises(ShardRefusedError, match="1 problem"):
        check_not_all_refused([], [load, refused("p0"), refused("p0", "s1")])  # what the loader rejects is no work


def test_a_shard_with_a_row_or_a_rejection_for_content_is_a_result():
    check_not_all_refused([{"id": "p1-s0"}], [refused("p0")])
    check_not_all_refused([], [refused("p0"), reject("p1-s0", "p1", "builtin", "split", "empty_solution", "none")])
    check_not_all_refused([], [reject("bad", None, "file", "load", "missing_field", "no question")])
    check_not_all_refused([], [])


def _row(problem_id: str, final_correct: bool | None = True) -> dict[str, Any]:
    return {"id": f"{problem_id}-s0", "problem_id": problem_id, "final_correct": final_correct}


def test_a_redo_replaces_only_the_refused_problems_and_counts_what_was_spent_twice():
    previous = ShardRows(
        [_row("p0"), _row("p2", None)],
        [refused("p1").to_row(), reject("p3-s0", "p3", "builtin", "split", "empty_solution", "no text").to_row()],
        ShardStats(inputs=4, problems_loaded=4, problems_labeled=2, rows=2, rejected=2, rollouts=10, engine_calls=5),
        {"p0": {"tree": 0}, "p1": {"tree": "old"}},
    )
    record = SimpleNamespace(to_row=lambda: _row("p1", False))  # what a labeled record writes
    out = ShardOutput([record], [], ShardStats(inputs=1, problems_loaded=1, rows=1, rollouts=3, engine_calls=2))  # type: ignore[list-item]
    out.trees = {"p1": {"tree": "new"}}
    merged = merge_redo(previous, {"p1"}, out)
    assert [r["id"] for r in merged.records] == ["p0-s0", "p2-s0", "p1-s0"]
    assert [r["reason"] for r in merged.rejected] == ["empty_solution"]  # rejected for its content: kept
    s = merged.stats
    assert (s.inputs, s.problems_loaded, s.problems_labeled, s.rows, s.rejected) == (4, 4, 3, 3, 1)
    assert s.rejected_by_reason == {"empty_solution": 1} and (s.final_correct, s.final_unknown) == (1, 1)
    assert (s.rollouts, s.engine_calls) == (13, 7)  # both attempts were paid for
    assert merged.trees == {"p0": {"tree": 0}, "p1": {"tree": "new"}}


# ---------------------------------------------------------------- `prm-synth run` against a refusing server
def _pipeline(tmp_path, url: str) -> str:
    return small_pipeline(tmp_path, "refusing", openai_policy(url, max_retries=0))


@pytest.mark.usefixtures("prefect_harness")
def test_a_server_that_refuses_everything_fails_the_run_and_the_fixed_server_makes_the_rows(tmp_path):
    policy = served_policy()
    out = str(tmp_path / "out")
    with SimulatedCompletionsServer(refuse="", config=policy) as server:  # "" is in every prompt
        path = _pipeline(tmp_path, server.url)
        result = CliRunner().invoke(app, ["run", path, "--out", out, "--json"])
        assert result.exit_code == 1, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and result.output.strip().splitlines()[-1] == errors[0], result.output
        assert "2 shard(s) made nothing" in errors[0] and "refused every request" in errors[0]
        assert "maximum context length is 2048 tokens" in errors[0] and server.url in errors[0]
        assert "Traceback" not in result.output
        assert list(iter_records(out)) == [] and list(iter_records(out, "rejected")) == []  # nothing is "done"
        assert server.calls == server.refused == 4  # one sampling request a problem, no shard retried at once

        server.refuse = None  # the server is fixed: the same command makes the rows
        summary = run_again(path, out)
        assert summary.rows == 8 and summary.requests_refused == 0 and summary.reconciles


@pytest.mark.usefixtures("prefect_harness")
def test_problems_the_server_refused_are_asked_again_and_only_they(tmp_path):
    policy = served_policy()
    problems = small_problems()
    victim = problems[1]
    out = str(tmp_path / "out")
    with SimulatedCompletionsServer(refuse=victim.question, config=policy) as server:
        path = _pipeline(tmp_path, server.url)
        summary = run_again(path, out)  # the shard made rows for its other problem: a result
        rejected = list(iter_records(out, "rejected"))
        assert {r["problem_id"] for r in rejected} == {victim.id}
        assert {r["reason"] for r in rejected} == {"engine_refused"}
        kept = {r["id"]: r for r in iter_records(out)}
        assert {r["problem_id"] for r in kept.values()} == {p.id for p in problems} - {victim.id}
        assert any("refused by the engine" in w for w in summary.warnings)

        server.refuse, before = None, server.calls
        summary = run_again(path, out)
        rows = {r["id"]: r for r in iter_records(out)}
        assert {r["problem_id"] for r in rows.values()} == {p.id for p in problems}
        assert list(iter_records(out, "rejected")) == []
        assert {k: rows[k] for k in kept} == kept  # the other problems' rows are those of the first run
        asked_again = server.calls - before
        assert 0 < asked_again < before  # only the refused problem was asked again
        assert summary.reconciles and summary.rows == 8 and summary.requests_refused == 1
        assert not any("refused by the engine" in w for w in summary.warnings)

        run_again(path, out)  # nothing left to do
        assert server.calls - before == asked_again


@pytest.mark.slow
def test_the_real_command_against_a_refusing_server_ends_with_one_error_line_then_resumes(tmp_path):
    """As a user runs it (a worker process, Prefect's temporary server): the error line is the last line
    of stderr (after Prefect's "Stopping temporary server"), with no traceback; the same command after
    the server is fixed makes the rows."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    policy = served_policy()
    out = str(tmp_path / "out")
    env = os.environ | {"PYTHONPATH": str(root), "PREFECT_HOME": str(tmp_path / "prefect")}
    with SimulatedCompletionsServer(refuse="", config=policy) as server:
        cmd = [sys.executable, "-m", "prm_synth.cli", "run", _pipeline(tmp_path, server.url), "--out", out]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 1, done.stdout + done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert lines[-1].startswith("error: 2 shard(s) made nothing"), done.stderr
        assert "maximum context length is 2048 tokens" in lines[-1]
        assert sum(line.startswith("error:") for line in lines) == 1 and "Traceback" not in done.stderr

        server.refuse = None
        done = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert '"rows": 8' in done.stdout.strip().splitlines()[-1]
