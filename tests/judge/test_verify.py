"""Verification chains: the prompt and chain formats, the parser's refusals, the agreement filter, the
stage in the pipeline with the simulated judge, the verifier export view, and the demo model through vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from _prm_helpers import labeled_row
from _tokenizers import demo_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.config import SimulatedJudgeConfig, VerifyConfig, validate_config
from prm_synth.engines import build_engine
from prm_synth.engines.base import Completion, GenerationRequest, SamplingOptions
from prm_synth.grading.chain import MAX_CHAIN_CHARS, parse_chain
from prm_synth.judge.verify import compare, compared_labels, judge_chain, verify_records
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.prompting.prompts import (
    VERIFY_SYSTEM,
    parse_verify_prompt,
    render_chain_step,
    render_verify_prompt,
)
from prm_synth.records import CHAIN_DROP_REASONS, RECORD_SCHEMA, LabeledRecord, ShardStats, VerifyStats
from prm_synth.simulated import arithmetic
from prm_synth.simulated.engines import SimulatedJudge
from prm_synth.store.shards import ShardStore
from prm_synth.store.summary import summarize

ROOT = Path(__file__).resolve().parents[2]
SIMULATED_JUDGE = {"kind": "simulated-judge", "accuracy": 0.8}


def chain(verdicts: list[bool]) -> str:
    return "\n".join(render_chain_step(i + 1, f"checking step {i + 1}.", ok) for i, ok in enumerate(verdicts))


def record(
    labels: list[bool | None], p_good: list[float] | None = None, first_error: int | None = None
) -> LabeledRecord:
    if first_error is None:
        first_error = next((i for i, lab in enumerate(labels) if lab is False), -1)
    n = len(labels)
    return labeled_row(
        labels,
        id="r0",
        source="builtin",
        question="What is 1 + 1?",
        gold_answer="2",
        steps=[f"{i} + 1 = {i + 1}\n" for i in range(n)],
        final_answer="2",
        final_correct=first_error < 0,
        label_source=["mc"] * n,
        first_error_mc=first_error,
        annotator="mc",
        policy_model="m",
        config_fingerprint="f",
        rollouts=0,
        tokens=10,
        p_good=p_good,
    )


# ------------------------------------------------------------------ prompt and chain formats
@settings(max_examples=200, deadline=None)
@given(
    question=st.text(min_size=1, max_size=200).filter(lambda q: q.strip()),
    steps=st.lists(st.text(max_size=80), min_size=1, max_size=12),
)
def test_the_verify_prompt_reads_back_for_any_question_and_steps(question, steps):
    assert parse_verify_prompt(render_verify_prompt(question, steps)) == (
        question.strip(),
        [" ".join(s.split()) for s in steps],
    )


def test_foreign_text_is_not_a_verify_prompt():
    assert parse_verify_prompt("What is 2 + 2?") is None
    good = render_verify_prompt("q", ["a", "b"])
    assert parse_verify_prompt(good.replace("Step 2:", "Step 3:")) is None


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 30), data=st.data())
def test_a_well_formed_chain_parses_to_its_verdicts(n, data):
    first_error = data.draw(st.integers(-1, n - 1))
    verdicts = [True] * n if first_error < 0 else [True] * first_error + [False]
    assert parse_chain(chain(verdicts), n).verdicts == verdicts


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400), n=st.integers(1, 6), finish=st.sampled_from(["stop", "length", None]))
def test_any_text_parses_to_verdicts_or_a_known_reason(text, n, finish):
    parsed = parse_chain(text, n, finish)
    if parsed.verdicts is None:
        assert parsed.reason in CHAIN_DROP_REASONS and parsed.detail
    else:
        assert 1 <= len(parsed.verdicts) <= n and all(parsed.verdicts[:-1])
        assert len(parsed.verdicts) == n or parsed.verdicts[-1] is False


@pytest.mark.parametrize(
    ("text", "n", "finish", "reason"),
    [
        (chain([True, True]), 2, "length", "truncated"),
        ("x" * (MAX_CHAIN_CHARS + 1), 1, "stop", "too_long"),
        ("Every step looks fine. \\boxed{correct}", 2, "stop", "no_steps"),
        ("Step 1: ok \\boxed{correct}\nStep 3: ok \\boxed{correct}", 3, "stop", "step_order"),
        ("Step 1: ok \\boxed{correct}\nStep 1: ok \\boxed{correct}", 2, "stop", "step_order"),
        (chain([True, True, True]), 2, "stop", "step_order"),  # past the solution's last step
        ("Step 1: ok \\boxed{correct}\nStep 2: looks right", 2, "stop", "missing_verdict"),
        ("Step 1: ok \\boxed{maybe}", 1, "stop", "missing_verdict"),
        ("Step 1: ok \\boxed{correct}", 3, "stop", "stopped_early"),
        (chain([True, False]) + "\nStep 3: ok \\boxed{correct}", 3, "stop", "continued_after_error"),
    ],
)
def test_a_chain_that_is_not_complete_is_dropped_with_its_reason(text, n, finish, reason):
    parsed = parse_chain(text, n, finish)
    assert parsed.verdicts is None and parsed.reason == reason


def test_common_markdown_around_steps_and_verdicts_is_read():
    text = (
        "Let me check.\n**Step 1:** 2 + 2 = 4, so \\boxed{4} is fine: \\boxed{\\text{correct}}\n"
        "### Step 2: wrong sum \\boxed{ Incorrect }\nIs the solution correct? No"
    )
    assert parse_chain(text, 3).verdicts == [True, False]


# ------------------------------------------------------------------ the agreement filter
def test_every_step_rule_keeps_only_chains_that_agree_on_every_labeled_step():
    labels = compared_labels(record([True, True, False, True]), 0.0)  # labels after the first error: not compared
    assert labels == {0: True, 1: True, 2: False}
    assert compare([True, True, False], labels, "every-step", 0).keep
    late = compare([True, True, True, False], labels, "every-step", 0)
    assert not late.keep and late.reason == "disagree" and late.compared == 3 and late.agreed == 2
    # step 2 disagrees, and step 3's error is one the labels never measured: two disagreements
    assert not compare([True, True, True, False], labels, "every-step", 1).keep
    assert compare([True, True, True, False], labels, "every-step", 2).keep
    early = compare([True, False], labels, "every-step", 0)
    assert not early.keep and "1" in (early.detail or "")


def test_an_error_on_a_step_the_labels_do_not_show_bad_is_a_disagreement():
    labels = compared_labels(record([True, None, None]), 0.0)
    assert labels == {0: True}
    assert compare([True, True, True], labels, "every-step", 0).keep  # verdicts "correct" past the labels
    assert not compare([True, False], labels, "every-step", 0).keep  # an error nobody measured


def test_min_confidence_compares_only_confident_labels():
    row = record([True, True, False], p_good=[0.99, 0.6, 0.02])
    assert compared_labels(row, 0.0) == {0: True, 1: True, 2: False}
    assert compared_labels(row, 0.9) == {0: True, 2: False}
    assert compare([True, False], compared_labels(row, 0.9), "every-step", 0).keep is False
    assert compare([True, True, False], compared_labels(row, 0.9), "every-step", 0).keep


def test_first_error_rule_compares_first_errors_within_the_tolerance():
    labels = compared_labels(record([True, True, True, False]), 0.0)
    assert compare([True, True, True, False], labels, "first-error", 0).keep
    assert not compare([True, True, False], labels, "first-error", 0).keep
    assert compare([True, True, False], labels, "first-error", 1).keep
    no_error = compared_labels(record([True, True]), 0.0)
    assert not compare([False], no_error, "first-error", 5).keep  # -1 agrees only with -1


def test_a_row_without_labels_keeps_no_chain():
    verdict = compare([True, True], compared_labels(record([None, True]), 0.0), "every-step", 0)
    # the first step is unlabeled but the second is: it is compared
    assert verdict.keep and verdict.compared == 1
    nothing = compare([True], compared_labels(record([None, None]), 0.0), "every-step", 3)
    assert not nothing.keep and nothing.reason == "no_labels"


def test_an_unreadable_chain_compares_on_nothing():
    config = VerifyConfig(engine=SIMULATED_JUDGE)
    parsed, agreement = judge_chain(Completion("no idea", 2, "stop"), record([True, False]), config)
    assert parsed.reason == agreement.reason == "no_steps" and agreement.compared == 0


# ------------------------------------------------------------------ the simulated judge writes chains
def test_the_simulated_judge_writes_chains_with_its_error_model():
    steps = ["3 + 4 = 7\n", "7 × 2 = 15\n", "15 - 1 = 14. The answer is 14."]
    assert arithmetic.true_first_error(steps) == 1
    request = GenerationRequest(user=render_verify_prompt("q", steps), n=400)
    exact = SimulatedJudge(SimulatedJudgeConfig(accuracy=1.0)).generate([request])[0]
    assert {parse_chain(c.text, 3, c.finish_reason).verdicts == [True, False] for c in exact.completions} == {True}
    noisy = SimulatedJudge(SimulatedJudgeConfig(accuracy=0.5)).generate([request])[0]
    right = sum(parse_chain(c.text, 3).verdicts == [True, False] for c in noisy.completions)
    assert 150 < right < 250  # about half name the true first error
    short = GenerationRequest(user=request.user, n=2, sampling=SamplingOptions(max_tokens=5))
    cut = SimulatedJudge().generate([short])[0].completions
    assert {c.finish_reason for c in cut} == {"length"} and all(c.generated_tokens == 5 for c in cut)


# ------------------------------------------------------------------ the stage in the pipeline
def verifier_config(**verify):
    base = yaml.safe_load((ROOT / "pipelines" / "simulated-verifier.yaml").read_text())
    return validate_config(base | {"verify": base["verify"] | verify})


def run_shard(config, limit=16):
    shard = next(iter_shards(config, limit=limit))
    verify_engine = build_engine(config.verify.engine) if config.verify else None
    return process_shard(build_engine(config.policy), config, shard, config.fingerprint(), verify_engine=verify_engine)


def test_rows_keep_the_chains_that_agree_and_say_why_the_others_went():
    config = verifier_config()
    out = run_shard(config)
    stats = out.stats.verify
    assert stats.rows == len(out.records) and stats.chains == 4 * len(out.records)
    assert stats.kept + sum(stats.dropped_by_reason.values()) == stats.chains
    assert 0 < stats.kept < stats.chains and stats.tokens > 0 and stats.engine_calls == 1
    for r in out.records:
        assert len(r.verify_chains) + len(r.verify_dropped) == 4
        assert r.verify_model == "simulated-judge" and r.verify_prompt_version == "verify-v1"
        labels = compared_labels(r, 0.0)
        for text in r.verify_chains:
            assert compare(parse_chain(text, len(r.steps)).verdicts, labels, "every-step", 0).keep
        assert all(d["reason"] in CHAIN_DROP_REASONS and d["detail"] for d in r.verify_dropped)
    assert "verify" in out.stats.seconds
    assert out.stats.tokens == (
        out.stats.sampling_tokens + out.stats.rollout_tokens + out.stats.judge_tokens + stats.tokens
    )


def test_a_refused_verify_request_costs_its_row_the_chains_only():
    from prm_synth.engines.base import RequestRefused

    config = verifier_config(votes=3)
    rows = run_shard(validate_config(config.model_dump() | {"verify": None}), limit=6).records
    victim = render_verify_prompt(rows[1].question, rows[1].steps)
    hit = [r for r in rows if render_verify_prompt(r.question, r.steps) == victim]  # twin solutions share it

    class RefusingJudge(SimulatedJudge):
        def generate(self, requests):
            if any(r.user == victim for r in requests):
                raise RequestRefused("HTTP 400: verify prompt too long")
            return super().generate(requests)

    before = [r.to_row() for r in rows]
    out, rejected, stats = verify_records(
        RefusingJudge(config.verify.engine), rows, config.verify, max_batch_requests=4
    )
    assert [r.to_row() for r in rows] == before and rejected == []  # the stage contract: inputs unchanged
    hit = [r for r in out if render_verify_prompt(r.question, r.steps) == victim]
    rows = out
    for r in hit:
        assert r.verify_chains == [] and [d["reason"] for d in r.verify_dropped] == ["engine_refused"] * 3
    assert stats.dropped_by_reason["engine_refused"] == 3 * len(hit) and stats.refused == len(hit)
    assert stats.rows == len(rows)
    assert stats.kept + sum(stats.dropped_by_reason.values()) == stats.chains == 3 * len(rows)
    assert all(len(r.verify_chains) + len(r.verify_dropped) == 3 for r in rows)


def test_chains_cut_by_max_tokens_are_dropped_as_truncated():
    out = run_shard(verifier_config(max_tokens=12), limit=4)
    assert out.stats.verify.dropped_by_reason.get("truncated", 0) > 0
    assert out.stats.verify.kept == 0  # every chain of a 2-8 step solution is longer than 12 words


def test_without_a_verify_section_rows_and_fingerprint_are_as_before():
    base = yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text())
    plain, explicit_none = validate_config(base), validate_config(base | {"verify": None})
    assert plain.fingerprint() == explicit_none.fingerprint()
    with_verify = validate_config(base | {"verify": {"engine": SIMULATED_JUDGE}})
    assert with_verify.fingerprint() != plain.fingerprint()
    out = run_shard(plain, limit=8)
    assert all(r.verify_chains is None and r.verify_dropped is None for r in out.records)
    assert out.stats.verify is None and "verify" not in out.stats.seconds


def test_a_judge_or_verify_section_without_its_engine_is_a_config_error_for_both():
    from prm_synth.config import ConfigError

    config = verifier_config()
    shard = next(iter_shards(config, limit=2))
    with pytest.raises(ConfigError, match="verify engine"):
        process_shard(build_engine(config.policy), config, shard, config.fingerprint())
    judged = validate_config(
        config.model_dump(mode="json") | {"verify": None, "judge": {"engine": {"kind": "simulated-judge"}}}
    )
    with pytest.raises(ConfigError, match="judge engine"):  # never a silently skipped judge
        process_shard(build_engine(judged.policy), judged, shard, judged.fingerprint())


def test_verify_stats_sum_and_read_back_from_older_markers():
    a = VerifyStats(rows=2, chains=8, kept=5, dropped_by_reason={"disagree": 3}, tokens=10)
    b = VerifyStats(rows=1, chains=4, kept=1, dropped_by_reason={"disagree": 1, "no_steps": 2}, tokens=4)
    total = ShardStats(verify=a) + ShardStats(verify=b)
    assert total.verify.kept == 6 and total.verify.dropped_by_reason == {"disagree": 4, "no_steps": 2}
    assert ShardStats.from_dict(total.to_dict()) == total
    assert ShardStats.from_dict({"rows": 3}).verify is None  # a marker written before the stage
    assert (ShardStats() + ShardStats(verify=a)).tokens == 10  # the verifier's tokens are the run's too


# ------------------------------------------------------------------ shards and the verifier view
def write_run(root: Path, config, out) -> None:
    dump = config.model_dump(mode="json")
    store = ShardStore(root, config.fingerprint())
    store.prepare(dump, yaml.safe_dump(dump))
    store.write_shard(
        0,
        [r.to_row() for r in out.records],
        [r.to_row() for r in out.rejected],
        problems=out.stats.inputs,
        stats=out.stats,
    )
    store.write_manifest(dump)


@pytest.fixture(scope="module")
def verified_run(tmp_path_factory):
    config = verifier_config()
    root = tmp_path_factory.mktemp("verified") / "run"
    write_run(root, config, run_shard(config, limit=24))
    return root


def test_chains_survive_the_shard_and_the_summary(verified_run):
    from prm_synth.store.readers import iter_records

    rows = list(iter_records(verified_run))
    assert rows and all(isinstance(r["verify_chains"], list) for r in rows)
    assert any(r["verify_dropped"] for r in rows) and any(r["verify_chains"] for r in rows)
    summary = summarize(verified_run).to_dict()["verify"]
    assert summary["kept"] == sum(len(r["verify_chains"]) for r in rows)
    assert summary["kept_fraction"] == summary["kept"] / summary["chains"]
    assert 0 < summary["step_agreement"] <= 1 and summary["tokens_per_kept_chain"] > 0


def test_the_verifier_view_loads_with_datasets_and_tokenizes_with_the_demo_chat_template(
    verified_run, tmp_path, request
):
    from datasets import load_dataset

    from prm_synth.export.hub import export_to_dir

    result = export_to_dir(verified_run, tmp_path / "out", formats=["verifier"], tokenizer=None)
    view = result.views["verifier"]
    ds = load_dataset(str(tmp_path / "out"), "verifier")
    rows = [*ds["train"], *ds.get("test", [])]
    assert len(rows) == view.rows > 0
    tokenizer = demo_tokenizer(request.config.cache)
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["system", "user", "assistant"]
        assert row["messages"][0]["content"] == VERIFY_SYSTEM
        assert parse_verify_prompt(row["messages"][1]["content"]) is not None
        ids = tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=True)["input_ids"]
        text = tokenizer.decode(ids)
        assert row["messages"][2]["content"] in text and len(ids) > 20
    card = (tmp_path / "out" / "README.md").read_text()
    assert "## Verification chains" in card and "khalifa2025thinkprm" in card and "zhao2025genprm" in card
    assert "per-step agreement" in card


def test_export_with_a_tokenizer_checks_every_verifier_row_through_the_chat_template(verified_run, request):
    from prm_synth.export.consumers import TokenizationError
    from prm_synth.export.hub import plan_export

    tokenizer = demo_tokenizer(request.config.cache)
    plan = plan_export(verified_run, ["verifier"], tokenizer)
    check = plan.checks["verifier"]
    assert check["ok"] and check["rows"] == check["labels_found"] > 0
    without_template = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    without_template.chat_template = None
    with pytest.raises(TokenizationError, match="chat template"):
        plan_export(verified_run, ["verifier"], without_template)


def test_default_export_adds_the_verifier_view_only_for_runs_with_chains(verified_run, tmp_path):
    from _dataset_fixture import make_dataset

    from prm_synth.export.hub import plan_export

    assert "verifier" in plan_export(verified_run).formats
    plain = tmp_path / "plain"
    make_dataset(plain)
    assert "verifier" not in plan_export(plain).formats


def test_shards_written_before_the_verify_columns_still_read(tmp_path, monkeypatch):
    import prm_synth.store.shards as shards_module
    from prm_synth.export.writing import export_view

    old_schema = pa.schema([f for f in RECORD_SCHEMA if not f.name.startswith("verify_")])
    monkeypatch.setattr(shards_module, "RECORD_SCHEMA", old_schema)
    config = validate_config(yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text()))
    out = run_shard(config, limit=6)
    rows = [{k: v for k, v in r.to_row().items() if not k.startswith("verify_")} for r in out.records]
    store = ShardStore(tmp_path, config.fingerprint())
    dump = config.model_dump(mode="json")
    store.prepare(dump, yaml.safe_dump(dump))
    store.write_shard(0, rows, [], problems=6, stats=ShardStats(rows=len(rows)))
    store.write_manifest(dump)
    monkeypatch.undo()
    assert summarize(tmp_path).verify is None and summarize(tmp_path).to_dict()["verify"] == {}
    export = export_view(tmp_path, "verifier", tmp_path / "views", test_fraction=0.0)
    assert export.rows == 0 and export.skipped == {"not_verified": len(rows)}
    assert export_view(tmp_path, "trl", tmp_path / "views").rows > 0


# ------------------------------------------------------------------ the demo model through vLLM
@pytest.mark.slow
def test_the_demo_model_writes_chains_that_are_kept_or_dropped_with_reasons(demo_vllm_engine):
    config = VerifyConfig(engine={"kind": "vllm", "model": "demo"}, votes=2, max_tokens=96, temperature=0.7)
    records = [record([True, True, False]), record([True, True])]
    for r in records:
        r.question = "Tom has 3 apples and buys 4 more. How many apples does he have?"
    records[0].steps = ["Tom starts with 3 apples.\n", "He buys 4 more: 3 + 4 = 7.\n", "So he has 8 apples."]
    records[1].steps = ["3 + 4 = 7.\n", "The answer is 7."]
    records, _, stats = verify_records(demo_vllm_engine, records, config, max_batch_requests=8)  # shared engine
    assert stats.rows == 2 and stats.chains == 4 and stats.engine_calls == 1 and stats.tokens > 0
    assert stats.kept + sum(stats.dropped_by_reason.values()) == 4
    assert set(stats.dropped_by_reason) <= set(CHAIN_DROP_REASONS)
    for r in records:
        assert r.verify_model == "smollm2-135m-instruct"
        assert len(r.verify_chains) + len(r.verify_dropped) == 2
        assert all(d["reason"] in CHAIN_DROP_REASONS and d["detail"] for d in r.verify_dropped)
    json.dumps([r.to_row() for r in records])  # the rows stay plain data


# ------------------------------------------------------------------ scoring a verifier on ProcessBench
def test_eval_judge_scores_a_generative_verifier_by_its_chains(tmp_path):
    from _eval_cli import BENCH, cli
    from typer.testing import CliRunner

    from prm_synth.config import JudgeConfig
    from prm_synth.judge.ask import UNPARSEABLE
    from prm_synth.judge.verify import chain_first_error
    from prm_synth.products.evaluate import evaluate_judge, load_processbench

    samples = load_processbench(BENCH)
    config = JudgeConfig(engine=SimulatedJudgeConfig(accuracy=1.0), samples=3)
    metric, preds = evaluate_judge(SimulatedJudge(config.engine), samples, config, 4, verifier=True)
    assert metric["f1"] == 1.0 and [p["prediction"] for p in preds] == [s.label for s in samples]
    assert all(a.startswith("Step 1:") for p in preds for a in p["answers"])
    assert {p["prompt_version"] for p in preds} == {"verify-v1"}
    assert chain_first_error("The arithmetic in paragraph 1 is wrong.\n\n\\boxed{1}", 3) == UNPARSEABLE

    judge_yaml = tmp_path / "judge.yaml"
    judge_yaml.write_text(yaml.safe_dump({"judge": {"engine": {"kind": "simulated-judge", "accuracy": 1.0}}}))
    out = tmp_path / "preds.jsonl"
    args = ["eval", "judge", str(BENCH), "--judge", str(judge_yaml), "--verifier", "--out", str(out)]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["f1"] == 1.0
