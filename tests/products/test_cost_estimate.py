"""The cost estimate a user plans GPU hours with (issue 60 part 3): `prm-synth run --dry-run` measures its
own pipeline (per-problem tokens, prompt and generated apart, the judge apart, the engines' own tokens/s,
the start-up), prints a bootstrap range, yield columns and GPU hours; `--json` has it in a `cost` block;
`inspect --estimate` redoes it from a real run's finished shards. A 100-problem run's measured cost falls
inside the range its dry run gave."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.config import validate_config
from prm_synth.products.estimate import CostSample, EngineRate, ProblemCost, estimate, estimate_lines

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "pipelines" / "simulated-consensus.yaml"
SPANS = ("prompt_tokens", "generated_tokens", "judge_prompt_tokens", "judge_generated_tokens", "tokens")


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def _ordered(span: dict) -> bool:
    return span["low"] <= span["point"] <= span["high"]


@pytest.fixture(scope="module")
def dry_and_real(tmp_path_factory, prefect_harness):
    """The judged simulated pipeline: its dry run's JSON, and a 100-problem run of it (folder, JSON)."""
    out = tmp_path_factory.mktemp("cost") / "run"
    dry = _json(CliRunner().invoke(app, ["run", str(PIPELINE), "--dry-run", "--json"]))
    real = _json(CliRunner().invoke(app, ["run", str(PIPELINE), "--out", str(out), "--limit", "100", "--json"]))
    return dry, out, real


@pytest.mark.slow
def test_the_dry_runs_json_has_a_cost_block_with_prompt_and_generated_tokens_a_range_and_yield(dry_and_real):
    dry, _, _ = dry_and_real
    cost = dry["cost"]
    per = cost["per_problem"]
    for key in (*SPANS, "labeled_steps", "kept_rows", "rollouts"):
        assert _ordered(per[key]), key
    assert per["prompt_tokens"]["point"] > 0 and per["generated_tokens"]["point"] > 0
    assert per["judge_prompt_tokens"]["point"] > 0  # the judge apart
    assert per["labeled_steps"]["point"] > 0
    assert cost["rates_measured"] and cost["policy_tokens_per_s"] > 0 and cost["judge_tokens_per_s"] > 0
    assert cost["startup_measured"] and cost["startup_seconds"] > 0
    requested = cost["requested"]
    assert requested["problems"] == 400  # the source's size: no --limit
    hours = requested["gpu_hours"]
    assert _ordered(hours) and hours["low"] > 0
    assert cost["bootstrap"] == {"resamples": 2000, "seed": 0, "interval": 0.95}
    # the prompt/generated split is the engines' own: the parts add up to the run's tokens a problem
    parts = sum(per[k]["point"] for k in SPANS[:4])
    assert parts == pytest.approx(per["tokens"]["point"])
    assert per["tokens"]["point"] * dry["problems_loaded"] == pytest.approx(dry["tokens"])


@pytest.mark.slow
def test_a_100_problem_runs_measured_cost_falls_inside_the_dry_runs_range(dry_and_real):
    dry, _, real = dry_and_real
    per = dry["cost"]["per_problem"]
    n = real["problems_loaded"]
    assert n == 100
    measured = {"tokens": real["tokens"] / n, "rollouts": real["rollouts"] / n}
    for key, value in measured.items():
        assert per[key]["low"] <= value <= per[key]["high"], (key, value, per[key])


@pytest.mark.slow
def test_inspect_estimate_redoes_it_from_a_finished_runs_shards(dry_and_real):
    _, out, real = dry_and_real
    cost = _json(CliRunner().invoke(app, ["inspect", str(out), "--estimate", "--json"]))["cost"]
    assert cost["measured_on"] == "first 2 finished shard(s)" and cost["problems"] == 100
    assert cost["per_problem"]["tokens"]["point"] == pytest.approx(real["tokens"] / 100)
    assert cost["rates_measured"]  # from the run's telemetry/
    assert not cost["startup_measured"]
    text = CliRunner().invoke(app, ["inspect", str(out), "--estimate"], env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    assert "estimate from the first 2 finished shard(s): 100 problems" in text.stdout
    assert "a dry run's batch is small" not in text.stdout  # said after a dry run only
    assert "GPU hours (range)" in text.stdout


def _sample(tokens: list[float], steps: list[int]) -> CostSample:
    costs = [ProblemCost(t * 0.6, t * 0.4, 10.0, 2.0, 5.0, s, 1) for t, s in zip(tokens, steps, strict=True)]
    return CostSample(costs, EngineRate(600, 400, 1.0, None), EngineRate(100, 20, 0.5, None), 30.0)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0, 1e5), min_size=1, max_size=30).flatmap(
        lambda t: st.tuples(st.just(t), st.lists(st.integers(0, 40), min_size=len(t), max_size=len(t)))
    )
)
def test_every_range_holds_its_point_and_hours_grow_with_size(case):
    tokens, steps = case
    config = validate_config(yaml.safe_load(PIPELINE.read_text()))
    est = estimate(_sample(tokens, steps), config, requested=250)
    assert est is not None
    for span in [*est.per_problem.values(), est.gpu_seconds_per_problem]:
        assert span.low <= span.point <= span.high
    small, large = est.gpu_hours(1_000), est.gpu_hours(10_000)
    assert small.point <= large.point and est.gpu_hours(0).point == pytest.approx(30 / 3600)  # start-up once
    assert 250 in est.sizes and any(line.strip().startswith("250*") for line in estimate_lines(est))


def test_a_given_throughput_replaces_the_measured_one_and_the_table_says_so():
    config = validate_config(yaml.safe_load(PIPELINE.read_text()))
    sample = _sample([1000.0, 3000.0], [5, 7])
    measured, given_rate = estimate(sample, config), estimate(sample, config, tokens_per_s=100.0)
    assert measured is not None and given_rate is not None
    assert measured.rates_measured and not given_rate.rates_measured
    assert given_rate.gpu_seconds_per_problem.point == pytest.approx((2000 + 12) / 100)
    assert any("given (--gpu-tokens-per-s)" in line for line in estimate_lines(given_rate))
