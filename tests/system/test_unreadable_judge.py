"""A judge whose answers cannot be read fails the run, not the rows.

Against an OpenAI-compatible judge that answers text without a readable step index: the run writes its
shards (the rollouts' labels kept, each unread row left open as `judge_unreadable` with the labeled row
as its payload), ends with one `error:` line naming the judge's model and server and one of its replies,
and exits 1. The same command against the fixed judge asks it again for exactly those rows, and every
row is done. A few unreadable rows (not most) leave the run a success that names them in its summary.
The same holds for verification chains (`verify_unreadable`).
"""

from __future__ import annotations

import json

import pytest
from _simulated_run import SMALL_PROBLEMS, run_again, small_pipeline
from fault_proxy import JudgeServer
from typer.testing import CliRunner

import flows.synthesize  # noqa: F401 - Prefect sets its log handlers up at import: here, not inside CliRunner's capture
from prm_synth.cli import app
from prm_synth.config import load_config, validate_config
from prm_synth.engines import build_engine
from prm_synth.engines.base import Completion, GenerationResult
from prm_synth.pipeline import (
    ShardInput,
    UnreadableJudgeError,
    check_judges_readable,
    process_shard,
)
from prm_synth.problems.sources import iter_problems
from prm_synth.shard.open_rows import finish_open_rows
from prm_synth.shard.rewrite import ShardRows, merge_redo
from prm_synth.simulated.engines import SimulatedJudge
from prm_synth.store.readers import iter_records

ROWS = 8  # 4 problems x 2 samples
UNREADABLE = "I have looked at every paragraph\x1b[31m carefully and I believe it is fine."


class UnreadableJudge(JudgeServer):
    """A judge whose every choice answers `answer` (unreadable by default); with `unreadable_for` set,
    only prompts holding it get UNREADABLE and the others `answer`."""

    def __init__(self, answer: str = UNREADABLE) -> None:
        super().__init__(answer)
        self.unreadable_for: str | None = None

    def text_for(self, prompt: str) -> str:
        return UNREADABLE if self.unreadable_for and self.unreadable_for in prompt else self.answer


def _pipeline(tmp_path, url: str, policy: str = "agree") -> str:
    return small_pipeline(
        tmp_path,
        "unreadable-judge",
        {"kind": "simulated", "step_error": 0.2, "seed": 0, "step_format": "line"},
        judge={
            "engine": {"kind": "openai", "model": "judge-typo", "base_url": f"{url}/v1", "max_retries": 0},
            "samples": 3,
            "select": "all",  # every row asked, one request (n=3) a row; `needed`: the stage-level test
        },
        consensus={"policy": policy},
        canaries={"enabled": False},  # the prompts counted here are the rows' own
    )


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("policy", ["agree", "soft"])
def test_an_unreadable_judge_fails_the_run_keeps_the_rows_and_the_fixed_judge_finishes_exactly_them(tmp_path, policy):
    out = str(tmp_path / "out")
    with UnreadableJudge() as judge:
        path = _pipeline(tmp_path, judge.url, policy)
        result = CliRunner().invoke(app, ["run", path, "--out", out, "--json"])
        assert result.exit_code == 1, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and result.output.strip().splitlines()[-1] == errors[0], result.output
        error = errors[0]
        assert (
            "judge-typo" in error and judge.url in error and "24 of 24 votes" in error
        )  # the run's sums, not one shard's
        assert "cannot be read" in error and "I have looked at every paragraph" in error
        assert "\x1b" not in error and "\\x1b" in error  # the model's text cannot drive the terminal
        assert "Traceback" not in result.output
        assert len(judge.prompts) == ROWS  # one request (n=3) a row, no shard retried at once

        # Nothing lost: every row is written, left open with its labeled row as its payload.
        assert list(iter_records(out)) == []
        open_rows = list(iter_records(out, "rejected"))
        assert len(open_rows) == ROWS and {r["reason"] for r in open_rows} == {"judge_unreadable"}
        assert {r["stage"] for r in open_rows} == {"judge"}
        for r in open_rows:
            row = json.loads(r["payload"])
            assert row["id"] == r["id"] and row["labels"] and row["judge_votes"] == []
        opened = {r["id"]: json.loads(r["payload"]) for r in open_rows}

        judge.answer, asked_before = "\\boxed{-1}", len(judge.prompts)  # the judge is fixed
        summary = run_again(path, out)
        asked = judge.prompts[asked_before:]
        assert len(asked) == ROWS and sorted(asked) == sorted(judge.prompts[:asked_before])  # exactly those rows
        assert summary.reconciles and summary.rows + summary.rejected == ROWS
        assert "judge_unreadable" not in summary.rejected_by_reason
        assert summary.run.shards_skipped == 0 and summary.run.shards_failed == []
        rows = {r["id"]: r for r in iter_records(out)} | {
            r["id"]: json.loads(r["payload"]) for r in iter_records(out, "rejected")
        }
        assert rows.keys() == opened.keys()
        # the re-judged rows are kept where their labels hold (a run that rejected every one would pass
        # the checks above): the judge now says "no error", and most rows here are clean
        kept = list(iter_records(out))
        assert kept and {r["id"] for r in kept} <= opened.keys()
        for row_id, before in opened.items():  # judged now, on the rollouts' labels of the first run
            assert rows[row_id]["judge_votes"] == [-1, -1, -1]
            assert rows[row_id]["p_good"] == before["p_good"] and rows[row_id]["steps"] == before["steps"]

        run_again(path, out)  # nothing left to do
        assert len(judge.prompts) == asked_before + ROWS


@pytest.mark.usefixtures("prefect_harness")
def test_a_few_unreadable_rows_are_named_in_the_summary_and_judged_again_alone(tmp_path):
    out = str(tmp_path / "out")
    with UnreadableJudge(answer="\\boxed{-1}") as judge:
        path = _pipeline(tmp_path, judge.url)
        victim = next(iter_problems(load_config(path).problems))
        judge.unreadable_for = victim.question  # its 2 rows: a quarter of the votes
        summary = run_again(path, out)  # a result, not a failure
        left = [r for r in iter_records(out, "rejected") if r["reason"] == "judge_unreadable"]
        assert {r["problem_id"] for r in left} == {victim.id} and len(left) == 2
        assert summary.rejected_by_reason.get("judge_unreadable") == 2 and summary.reconciles
        (warning,) = [w for w in summary.warnings if "left open" in w]
        assert "2 row(s)" in warning and "I have looked at every paragraph" in warning

        judge.unreadable_for, before = None, len(judge.prompts)
        summary = run_again(path, out)
        asked = judge.prompts[before:]
        assert len(asked) == 2 and all(victim.question in p for p in asked)
        assert "judge_unreadable" not in summary.rejected_by_reason and summary.reconciles
        assert not any("left open" in w for w in summary.warnings)


# ---------------------------------------------------------------- the stages alone, on the simulated judge
def test_rows_without_a_readable_vote_or_chain_are_left_open_with_their_row_as_payload():
    config = validate_config(
        {
            "problems": SMALL_PROBLEMS,
            "policy": {"kind": "simulated", "step_error": 0.2, "seed": 0, "step_format": "line"},
            "sampling": {"samples_per_problem": 2},
            "steps": {"strategy": "line"},
            "annotate": {"method": "mc", "k": 2},
            "judge": {"engine": {"kind": "simulated-judge"}, "samples": 3},
            "verify": {"engine": {"kind": "simulated-judge"}, "votes": 2},
            "canaries": {"enabled": False},  # the votes counted here are the rows' own
        }
    )

    class Mumbling(SimulatedJudge):
        def generate(self, requests):
            results = super().generate(requests)
            return [
                GenerationResult(tuple(Completion("no idea", 3) for _ in r.completions), r.prompt_tokens)
                for r in results
            ]

    policy = build_engine(config.policy)
    items = list(iter_problems(config.problems))
    fine = build_engine(config.judge.engine)
    # under `select: needed` (the default) the rows the rollouts pinned are not sent: they stay labeled
    needed = process_shard(
        policy, config, ShardInput(0, items), "fp", Mumbling(config.judge.engine), verify_engine=fine
    )
    sent = ROWS - needed.stats.judge.rows_skipped
    assert sent > 0 and needed.stats.judge.unreadable_rows == sent
    assert needed.stats.judge.unparseable == needed.stats.judge.samples >= sent  # every vote asked unreadable
    assert {r.reason for r in needed.rejected} == {"judge_unreadable"} and len(needed.rejected) == sent

    config = config.model_copy(update={"judge": config.judge.model_copy(update={"select": "all"})})
    out = process_shard(policy, config, ShardInput(0, items), "fp", Mumbling(config.judge.engine), verify_engine=fine)
    assert out.records == [] and len(out.rejected) == ROWS
    assert {r.reason for r in out.rejected} == {"judge_unreadable"}
    assert out.stats.judge.unreadable_rows == ROWS and out.stats.judge.unparseable == 3 * ROWS
    assert "'no idea'" in out.rejected[0].detail

    # the verifier's twin: rows judged fine, chains all unreadable
    out = process_shard(policy, config, ShardInput(0, items), "fp", fine, verify_engine=Mumbling(config.verify.engine))
    left = [r for r in out.rejected if r.reason == "verify_unreadable"]
    assert left and out.stats.verify.unreadable_rows == len(left) and {r.stage for r in left} == {"verify"}
    assert len(out.records) + len(out.rejected) == ROWS  # nothing lost
    with pytest.raises(UnreadableJudgeError, match=r"the verifier \(simulated-judge[^)]*\) gave \d+ of \d+ chains"):
        check_judges_readable(out, fine, fine)

    # the next run: the open rows are verified again from their payloads (nothing sampled or judged again)
    rows = [r.to_row() for r in left]
    again = finish_open_rows(config, rows, "fp", judge_engine=None, verify_engine=fine)
    assert sorted(r.id for r in again.records) == sorted(r["id"] for r in rows) and again.rejected == []
    assert again.stats.judge is None and again.stats.verify.rows == len(rows)
    assert all(r.verify_model == fine.model_name for r in again.records)
    merged = merge_redo(
        ShardRows([r.to_row() for r in out.records], [r.to_row() for r in out.rejected], out.stats),
        set(),
        again,
        frozenset(r["id"] for r in rows),
    )
    # every row verified again; consensus's own rejections (a shard of 8 rows holds few labels to pool
    # at consensus.target_precision) stay as they were
    assert merged.stats.rejected_by_reason.get("verify_unreadable") is None
    assert len(merged.records) + len(merged.rejected) == ROWS
    assert {r["reason"] for r in merged.rejected} <= {"low_confidence"}


@pytest.mark.slow
def test_the_real_command_against_an_unreadable_judge_ends_with_one_error_line_then_resumes(tmp_path):
    """As a user runs it (a worker process, Prefect's temporary server): exit 1, the error line naming the
    judge is the last line of stderr, no traceback; the same command after the fix judges the open rows."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = str(tmp_path / "out")
    env = os.environ | {"PYTHONPATH": str(root), "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PRM_SYNTH_IN_PROCESS", None)
    with UnreadableJudge() as judge:
        cmd = [sys.executable, "-m", "prm_synth.cli", "run", _pipeline(tmp_path, judge.url), "--out", out]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 1, done.stdout + done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert lines[-1].startswith("error: 2 shard(s) written with rows left open: the judge (judge-typo at "), lines[
            -1
        ]
        assert judge.url in lines[-1] and "I have looked at every paragraph" in lines[-1]
        assert sum(line.startswith("error:") for line in lines) == 1 and "Traceback" not in done.stderr
        assert len(judge.prompts) == ROWS

        judge.answer = "\\boxed{-1}"
        done = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["rows"] + summary["rejected"] == ROWS and summary["reconciles"]
        assert "judge_unreadable" not in summary["rejected_by_reason"] and len(judge.prompts) == 2 * ROWS
