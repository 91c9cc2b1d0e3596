"""Rows the judge cannot read are not asked forever.

A judge that honours seeds (vLLM's server, any judge at temperature 0, the simulated judge) answers a
row asked again with the seed it had the same unreadable answer. A re-asked row gets sample indices no
earlier run used; the "more than half unreadable" rule counts over the shard's votes, not over the re-ask
alone; and after `run.refused_runs` runs a row still unreadable is `judge_unreadable_permanent`, said
once, asked again only with `--retry-refused`.
"""

from __future__ import annotations

import pytest
import yaml
from _simulated_run import small_pipeline
from test_unreadable_judge import ROWS, UnreadableJudge

import flows.synthesize
from prm_synth.config import load_config
from prm_synth.problems.sources import iter_problems
from prm_synth.store.readers import iter_records
from prm_synth.store.refusals import count_open, make_open_permanent

OPEN, PERMANENT = "judge_unreadable", "judge_unreadable_permanent"


def _pipeline(tmp_path, format_failure: float, refused_runs: int = 3) -> str:
    data = {
        "name": "unreadable-forever",
        "problems": {"kind": "builtin", "count": 24, "seed": 0, "min_ops": 2, "max_ops": 4},
        "policy": {"kind": "simulated", "step_error": 0.2, "seed": 0, "step_format": "line"},
        "sampling": {"samples_per_problem": 2},
        "steps": {"strategy": "line"},
        "annotate": {"method": "mc", "k": 4},
        "judge": {
            "engine": {"kind": "simulated-judge", "seed": 3, "errors": {"format_failure": format_failure}},
            "samples": 3,
        },
        "consensus": {"policy": "soft"},
        "output": {"shard_size": 8},
        "run": {"refused_runs": refused_runs},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def served_judge_pipeline(tmp_path, url: str) -> str:
    """The small run (8 rows in 2 shards) judged by the OpenAI-compatible judge at `url`, 3 votes a row."""
    return small_pipeline(
        tmp_path,
        "unreadable-rows",
        {"kind": "simulated", "step_error": 0.2, "seed": 0, "step_format": "line"},
        judge={
            "engine": {"kind": "openai", "model": "judge", "base_url": f"{url}/v1", "max_retries": 0},
            "samples": 3,
            "select": "all",
        },
        consensus={"policy": "agree"},
        canaries={"enabled": False},  # their judge requests are not the rows' (counted here request by request)
    )


def _reasons(out: str) -> dict[str, str]:
    return {r["id"]: r["reason"] for r in iter_records(out, "rejected") if r["reason"] in (OPEN, PERMANENT)}


@pytest.mark.usefixtures("prefect_harness")
def test_three_runs_against_a_seeded_judge_with_five_percent_unreadable_answers_end_with_nothing_to_do(tmp_path):
    out = str(tmp_path / "out")
    path = _pipeline(tmp_path, 0.05)
    first = flows.synthesize.synthesize(config=load_config(path), out_dir=out)
    left = _reasons(out)
    assert left and set(left.values()) == {OPEN}, first.rejected_by_reason  # the seed leaves some rows open
    second = flows.synthesize.synthesize(config=load_config(path), out_dir=out)  # no error
    assert second.reconciles
    third = flows.synthesize.synthesize(config=load_config(path), out_dir=out)
    assert third.run.shards_run == 0 and third.run.shards_skipped == third.shards
    assert OPEN not in third.rejected_by_reason
    # the second run asked the open rows again with samples no earlier run drew, and they were read
    assert not _reasons(out) or set(_reasons(out).values()) == {PERMANENT}


class SeedJudge(UnreadableJudge):
    """UnreadableJudge that keeps, per request, the seed it was asked with."""

    def __init__(self, answer: str = "\\boxed{-1}") -> None:
        super().__init__(answer)
        self.seeds: list[int | None] = []

    async def _completions(self, request):
        body = await request.json()
        self.seeds.append(body.get("seed"))
        return await super()._completions(request)


@pytest.mark.usefixtures("prefect_harness")
def test_a_row_left_unreadable_on_three_runs_is_recorded_for_good_and_asked_again_only_on_request(tmp_path):
    out = str(tmp_path / "out")
    with SeedJudge() as judge:
        path = served_judge_pipeline(tmp_path, judge.url)
        victim = next(iter_problems(load_config(path).problems))
        judge.unreadable_for = victim.question  # its 2 rows, a quarter of the votes: the run is a success

        def run(**kwargs):
            before = len(judge.prompts)
            summary = flows.synthesize.synthesize(config=load_config(path), out_dir=out, **kwargs)
            asked = judge.prompts[before:]
            assert all(victim.question in p for p in asked) or before == 0
            return summary, len(asked), judge.seeds[before:], set(_reasons(out).values())

        summary, asked, first_seeds, reasons = run()
        assert asked == ROWS and reasons == {OPEN} and not _for_good(summary)
        summary, asked, seeds, reasons = run()
        assert asked == 2 and reasons == {OPEN} and not _for_good(summary)
        assert not set(seeds) & set(first_seeds)  # samples no earlier run drew
        summary, asked, third_seeds, reasons = run()  # the third run in a row they are unreadable
        assert asked == 2 and reasons == {PERMANENT} and not set(third_seeds) & set(seeds + first_seeds)
        (said,) = _for_good(summary)  # said once, in one line
        assert said.startswith("2 row(s)") and "--retry-refused" in said
        assert summary.rejected_by_reason.get(PERMANENT) == 2 and OPEN not in summary.rejected_by_reason

        summary, asked, _, reasons = run()  # not asked again, not said again: nothing to do
        assert asked == 0 and reasons == {PERMANENT} and not _for_good(summary)
        assert summary.run.shards_skipped == 2 and summary.run.shards_run == 0

        summary, asked, _, reasons = run(retry_refused=True)  # asked on request; still unreadable, still for good
        assert asked == 2 and reasons == {PERMANENT} and not _for_good(summary)

        judge.unreadable_for = None  # the judge is fixed; asked once more on request, the rows are done
        summary, asked, _, reasons = run(retry_refused=True)
        assert asked == 2 and reasons == set() and summary.reconciles
        summary, asked, _, _ = run()
        assert asked == 0


def _for_good(summary) -> list[str]:
    return [w for w in summary.warnings if "recorded for good" in w]


def test_open_counts_go_up_only_for_rows_asked_and_left_open_again():
    rows = [{"id": "a", "reason": OPEN}, {"id": "b", "reason": OPEN}, {"id": "c", "reason": "disagree"}]
    assert count_open(rows, {"a", "b", "c"}, {}) == {"a": 1, "b": 1}
    assert count_open([{"id": "a", "reason": OPEN}], {"a"}, {"a": 1, "b": 1}) == {"a": 2}  # b finished
    assert count_open([{"id": "z", "reason": PERMANENT}], {"y"}, {"z": 3}) == {"z": 3}  # not asked: kept
    assert count_open([{"id": "q", "reason": OPEN}], set(), {}) == {"q": 1}  # an old marker's open row
    out, now = make_open_permanent([{"id": "a", "reason": OPEN}, {"id": "q", "reason": OPEN}], {"a": 3, "q": 2}, 3)
    assert [r["reason"] for r in out] == [PERMANENT, OPEN] and now == {"a"}
    out, _ = make_open_permanent([{"id": "v", "reason": "verify_unreadable"}], {"v": 3}, 3)
    assert out[0]["reason"] == "verify_unreadable_permanent"
