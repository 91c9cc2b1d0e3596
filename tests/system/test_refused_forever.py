"""A problem the engine refuses run after run is rejected for good: after `run.refused_runs` (default 3)
consecutive runs it is `engine_refused_permanent`, said once in that run's summary, and later runs do
not ask it again, unless `--retry-refused`."""

from __future__ import annotations

import json

import pytest
from _simulated_run import openai_policy, served_policy, small_pipeline, small_problems
from fault_proxy import SimulatedCompletionsServer
from typer.testing import CliRunner

import flows.synthesize
from prm_synth.cli import app
from prm_synth.config import RunConfig, load_config
from prm_synth.store.readers import iter_records
from prm_synth.store.refusals import PERMANENT, REFUSED, count_refusals, make_permanent


def test_the_default_is_three_runs_and_the_field_says_why():
    field = RunConfig.model_fields["refused_runs"]
    assert field.default == 3 and field.description and "for good" in field.description


def _refused(pid: str, reason: str = REFUSED) -> dict:
    return {"problem_id": pid, "reason": reason}


def test_counts_go_up_only_for_problems_asked_and_refused_again():
    first = count_refusals([_refused("a"), _refused("b"), {"problem_id": "c", "reason": "disagree"}], None, {})
    assert first == {"a": 1, "b": 1}
    # the next run asks a and b again: a is refused again, b answered
    second = count_refusals([_refused("a")], {"a", "b"}, first)
    assert second == {"a": 2}
    # a problem the run did not ask keeps its count
    assert count_refusals([_refused("z", PERMANENT)], {"y"}, {"z": 3}) == {"z": 3}
    rejected, now = make_permanent([_refused("a"), _refused("q")], {"a": 3, "q": 2}, 3)
    assert [r["reason"] for r in rejected] == [PERMANENT, REFUSED] and now == {"a"}
    _, again = make_permanent([_refused("a")], {"a": 4}, 3)  # asked again on request, refused again
    assert again == set()


def _forever(summary) -> list[str]:
    return [w for w in summary.warnings if "rejected for good" in w]


@pytest.mark.usefixtures("prefect_harness")
def test_a_problem_refused_on_three_runs_is_rejected_for_good_and_not_asked_again(tmp_path):
    policy = served_policy()
    problems = small_problems()
    victim = problems[1]
    out = str(tmp_path / "out")
    with SimulatedCompletionsServer(refuse=victim.question, config=policy) as server:
        path = small_pipeline(tmp_path, "refused-forever", openai_policy(server.url, max_retries=0))

        def run(**kwargs):
            before = server.calls
            summary = flows.synthesize.synthesize(config=load_config(path), out_dir=out, **kwargs)
            reasons = {r["reason"] for r in iter_records(out, "rejected") if r["problem_id"] == victim.id}
            return summary, server.calls - before, reasons

        for attempt in (1, 2):
            summary, asked, reasons = run()
            assert asked > 0 and reasons == {REFUSED} and not _forever(summary), attempt
        summary, asked, reasons = run()  # the third run in a row that it is refused
        assert asked > 0 and reasons == {PERMANENT}
        (said,) = _forever(summary)  # said once, in one line
        assert said.startswith("1 problem(s)") and "--retry-refused" in said
        assert summary.rejected_by_reason.get(PERMANENT) and not summary.rejected_by_reason.get(REFUSED)

        summary, asked, reasons = run()  # not asked again, and not said again
        assert asked == 0 and reasons == {PERMANENT} and not _forever(summary)
        assert summary.run.shards_skipped == 2

        summary, asked, reasons = run(retry_refused=True)  # asked on request; still refused, still for good
        assert asked > 0 and reasons == {PERMANENT} and not _forever(summary)

        server.refuse = None  # the server is fixed; the user asks once more, from the command line
        result = CliRunner().invoke(app, ["run", path, "--out", out, "--retry-refused", "--json"])
        assert result.exit_code == 0, result.output
        final = json.loads(result.output.strip().splitlines()[-1])
        assert final["rejected"] == 0 and final["rows"] == 8 and final["reconciles"]
        assert {r["problem_id"] for r in iter_records(out)} == {p.id for p in problems}


@pytest.mark.usefixtures("prefect_harness")
def test_a_problem_refused_alone_in_its_shard_is_rejected_for_good_too(tmp_path):
    """Its shard makes nothing and is not written (a failure, not a result), so its marker cannot count
    the runs: the counts wait apart until the third run writes the shard with the problem for good."""
    policy = served_policy()
    victim = small_problems()[1]
    out = str(tmp_path / "out")
    with SimulatedCompletionsServer(refuse=victim.question, config=policy) as server:
        path = small_pipeline(
            tmp_path, "refused-alone", openai_policy(server.url, max_retries=0), output={"shard_size": 1}
        )

        def run():
            before = server.calls
            try:
                summary = flows.synthesize.synthesize(config=load_config(path), out_dir=out)
            except flows.synthesize.ShardsFailedError as e:
                assert "made nothing" in str(e)
                summary = None
            return summary, server.calls - before

        for attempt in (1, 2):
            summary, asked = run()
            assert summary is None and asked > 0, attempt  # the shard of the victim alone: not written
        summary, asked = run()
        assert summary is not None and asked > 0
        (said,) = _forever(summary)
        assert said.startswith("1 problem(s)")
        assert {r["reason"] for r in iter_records(out, "rejected") if r["problem_id"] == victim.id} == {PERMANENT}
        summary, asked = run()  # nothing left to do
        assert asked == 0 and summary.run.shards_skipped == 4 and not _forever(summary)
