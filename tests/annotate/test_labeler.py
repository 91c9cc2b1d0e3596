"""One labeler interface for every annotate method: rows, budget lines, reconcile rules, evaluation."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from prm_synth.annotate.labeler import LABELERS, OmegaLabeler, SolutionLabeler, make_labeler
from prm_synth.cli import app
from prm_synth.config import AnnotateConfig, validate_config
from prm_synth.engines import build_engine
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.records import JudgeStats, ShardStats

FIXTURES = Path(__file__).parents[1] / "fixtures"
BENCH, GOLD = FIXTURES / "processbench_small.json", FIXTURES / "processbench_gold.jsonl"
NOISE_FREE = {
    "problems": {"kind": "builtin", "count": 20, "min_ops": 4, "max_ops": 8},
    "policy": {"kind": "simulated", "step_error": 0.0, "recover": 0.0},
}

SIM = {
    "problems": {"kind": "builtin", "count": 12, "min_ops": 3, "max_ops": 6},
    "policy": {"kind": "simulated", "recover": 0.1},
    "sampling": {"samples_per_problem": 2},
    "output": {"shard_size": 12},
}
METHODS = {
    "mc": {"method": "mc", "k": 4},
    "binary": {"method": "binary"},
    "omegaprm": {"method": "omegaprm", "k": 4, "rollout_budget": 40},
}


@pytest.mark.parametrize("method", METHODS)
def test_every_method_labels_a_shard_whose_counts_reconcile(method):
    config = validate_config(SIM | {"annotate": METHODS[method]})
    labeler = make_labeler(config)
    assert labeler.method == method
    shard = next(iter_shards(config))
    out = process_shard(build_engine(config.policy), config, shard, config.fingerprint())
    assert out.records and all(r.annotator == method for r in out.records)
    assert labeler.reconciles(out.stats, len(out.records), len(out.rejected), 2)
    assert out.stats.rollouts == sum(r.rollouts for r in out.records)
    assert out.stats.solutions_sampled == (0 if method == "omegaprm" else 24)


def test_per_question_and_per_solution_labelers():
    assert isinstance(make_labeler(validate_config(SIM | {"annotate": METHODS["binary"]})), SolutionLabeler)
    tree = make_labeler(validate_config(SIM | {"annotate": METHODS["omegaprm"]}))
    assert isinstance(tree, OmegaLabeler)
    config = validate_config(SIM | {"annotate": METHODS["omegaprm"]})
    result = tree.label(build_engine(config.policy), [p for p in next(iter_shards(config)).items])
    assert result.sampled.completions == 0 and result.records  # a tree labeler samples no solutions


def test_the_omegaprm_budget_line_names_its_own_k():
    """Regression: the card printed the other methods' k for an OmegaPRM run."""
    line = make_labeler(validate_config(SIM | {"annotate": {"method": "omegaprm", "k": 5}})).budget_line()
    assert "k = 5 rollouts a state" in line and "at most 400 rollouts" in line
    assert (
        "k = 8"
        in make_labeler(
            validate_config(SIM | {"annotate": {"method": "binary", "k": 8, "search_test": "fixed"}})
        ).budget_line()
    )


def test_every_annotate_config_has_one_labeler_of_its_method():
    configs = typing.get_args(typing.get_args(AnnotateConfig)[0])
    assert set(LABELERS) == set(configs)
    for config_class, labeler in LABELERS.items():  # the labeler's method is the config's Literal
        assert (labeler.method,) == typing.get_args(config_class.model_fields["method"].annotation)


def test_the_default_card_text_describes_the_changepoint_search():
    labeler = make_labeler(validate_config(SIM))  # binary + changepoint
    assert "change-point" in labeler.card_text() and "p_good" in labeler.card_text()
    assert "change-point posterior" in labeler.budget_line()
    sprt = make_labeler(validate_config(SIM | {"annotate": {"method": "binary", "search_test": "sprt"}}))
    assert "Binary search" in sprt.card_text() and "sequential test" in sprt.budget_line()


@pytest.mark.parametrize(
    ("test", "words"),
    [("fixed", "good when MC > 0"), ("sprt", "sequential test"), ("changepoint", "change-point posterior")],
)
def test_the_omegaprm_budget_line_names_its_actual_test(test, words):
    line = make_labeler(validate_config(SIM | {"annotate": {"method": "omegaprm", "search_test": test}})).budget_line()
    assert words in line


def test_eval_labels_works_with_omegaprm(tmp_path):
    """Regression: `prm-synth eval labels` with an OmegaPRM pipeline ended in a traceback."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(yaml.safe_dump(NOISE_FREE | {"annotate": {"method": "omegaprm", "k": 4}}))
    out = tmp_path / "labels.jsonl"
    args = ["eval", "labels", str(BENCH), "--gold-answers", str(GOLD), "--pipeline", str(pipeline), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    # the noise-free policy: OmegaPRM's bisection finds every first error, as MC does
    assert report["annotator"] == "omegaprm" and report["f1"] == 1.0 and report["rollouts_per_sample"] > 0


counts = st.integers(min_value=0, max_value=10**6)
stats = st.builds(
    ShardStats,
    inputs=counts,
    rows=counts,
    rollouts=counts,
    sampling_tokens=counts,
    rollout_tokens=counts,
    rejected_by_reason=st.dictionaries(st.sampled_from(["a", "b", "c"]), counts, max_size=3),
    judge=st.none() | st.builds(JudgeStats, tokens=counts, samples=counts),
)


@settings(deadline=None)  # a busy machine: no per-example time limit
@given(st.lists(stats, min_size=1, max_size=5))
def test_run_stats_are_the_field_wise_sum_of_shard_stats(shards):
    total = sum(shards, start=ShardStats())
    assert total.rows == sum(s.rows for s in shards) and total.tokens == sum(s.tokens for s in shards)
    for reason in "abc":
        assert total.rejected_by_reason.get(reason, 0) == sum(s.rejected_by_reason.get(reason, 0) for s in shards)
    judged = [s.judge for s in shards if s.judge is not None]
    assert (total.judge is None) == (not judged)  # a stage that ran in no shard stays absent
    if judged:
        assert total.judge.samples == sum(j.samples for j in judged)
    assert ShardStats.from_dict(total.to_dict()) == total  # what the marker stores reads back


def test_run_and_eval_label_the_same_solutions_through_one_path(monkeypatch):
    """`prm-synth run` (`label`: sampling and annotation in one stream) and `prm-synth eval labels`
    (`label_solutions`: solutions given) give the same rows for the same solutions, shard pooling
    included: the default search labels again under the priors pooled from the whole set."""
    from prm_synth.annotate import labeler as labeler_module
    from prm_synth.problems.gold_answers import load_gold_answers
    from prm_synth.problems.sources import iter_problems
    from prm_synth.products import evaluate
    from prm_synth.records import Problem

    config = validate_config(SIM | {"policy": {"kind": "simulated", "recover": 0.2, "step_error": 0.15}})
    problems = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    engine = build_engine(config.policy)
    run = make_labeler(config).label(engine, problems)
    given_ = make_labeler(config).label_solutions(build_engine(config.policy), run.sampled.solutions)

    def row(r):  # every column but `tokens`: how a prefix's samples were split into requests may differ
        return r.to_row() | {"tokens": None}

    assert [row(r) for r in given_.records] == [row(r) for r in run.records]
    assert any(r.p_good is not None for r in run.records)
    assert {r.annotator for r in run.records} == {"binary"}  # the labeler stamps its method name
    # ... and `eval labels` labels through that same method (it is the only path there)
    calls: list[int] = []
    original = labeler_module.BinaryLabeler.label_solutions

    def spy(self, engine, solutions, progress=labeler_module.quiet):
        calls.append(len(solutions))
        return original(self, engine, solutions, progress)

    monkeypatch.setattr(labeler_module.BinaryLabeler, "label_solutions", spy)
    samples = evaluate.load_processbench(BENCH)
    bench_config = validate_config(NOISE_FREE | {"annotate": {"method": "binary"}})
    metric, _ = evaluate.evaluate_labels(
        build_engine(bench_config.policy), samples, load_gold_answers(GOLD), bench_config
    )
    assert calls == [metric["labeled"]] and metric["labeled"] == 5
