"""The judge: prompt rendering and reading back, answer parsing, voting, batching, the simulated judge."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.config import JudgeConfig, JudgeErrorProfile, SimulatedJudgeConfig, VLLMConfig
from prm_synth.engines import build_engine
from prm_synth.engines.base import Completion, Engine, GenerationRequest, GenerationResult
from prm_synth.judge.ask import UNPARSEABLE, judge_records, judge_solutions, majority_vote, parse_judge_answer
from prm_synth.prompting.prompts import JUDGE_PROMPT_VERSION, parse_judge_prompt, render_judge_prompt
from prm_synth.records import LabeledRecord
from prm_synth.simulated import arithmetic
from prm_synth.simulated.engines import SimulatedJudge

FIXTURE = Path(__file__).parents[1] / "fixtures" / "processbench_small.json"
QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"
STEPS = ["Tom starts with 3 apples.\n", "He buys 4 more: 3 + 4 = 7.\n", "The answer is \\boxed{7}."]


def make_record(rid: str, question: str, steps: list[str], first_error_mc: int = -1) -> LabeledRecord:
    n = len(steps)
    return LabeledRecord(
        id=rid,
        problem_id=rid.split("-s")[0],
        source="test",
        question=question,
        gold_answer="7",
        steps=steps,
        final_answer="7",
        final_correct=True,
        mc_values=[1.0] * n,
        mc_correct=[8] * n,
        mc_total=[8] * n,
        labels=[True] * n,
        label_source=["mc"] * n,
        label_rule="hard",
        first_error_mc=first_error_mc,
        annotator="mc",
        policy_model="sim",
        config_fingerprint="fp",
        rollouts=8 * n,
        tokens=100,
    )


class ScriptedEngine:
    """Answers every request with the given texts (cycled) and records the calls it got."""

    def __init__(self, answers: Sequence[str], model_name: str = "scripted") -> None:
        self.answers = list(answers)
        self.calls: list[list[GenerationRequest]] = []
        self._name = model_name
        self._next = 0

    @property
    def model_name(self) -> str:
        return self._name

    def close(self) -> None:
        pass

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.calls.append(list(requests))
        out = []
        for req in requests:
            texts = []
            for _ in range(req.n):
                texts.append(self.answers[self._next % len(self.answers)])
                self._next += 1
            out.append(GenerationResult(tuple(Completion(t, 5) for t in texts), prompt_tokens=10))
        return out


# ------------------------------------------------------------------ prompt
def test_prompt_is_processbench_critique_style():
    prompt = render_judge_prompt(QUESTION, STEPS)
    assert prompt.startswith("The following is a math problem and a solution")
    assert (
        f"[Math Problem]\n\n{QUESTION}\n\n[Solution]\n\n<paragraph_0>\nTom starts with 3 apples.\n</paragraph_0>"
        in prompt
    )
    assert "<paragraph_1>\nHe buys 4 more: 3 + 4 = 7.\n</paragraph_1>\n\n<paragraph_2>\n" in prompt
    assert "<paragraph_3>" not in prompt
    assert "earliest error" in prompt and "-1" in prompt and prompt.endswith("in \\boxed{}.")
    with pytest.raises(ValueError):
        render_judge_prompt(QUESTION, [])


def test_prompt_reads_back():
    assert parse_judge_prompt(render_judge_prompt(QUESTION, STEPS)) == (QUESTION, [s.strip() for s in STEPS])
    assert parse_judge_prompt("Solve: 1 + 1") is None
    tampered = render_judge_prompt(QUESTION, STEPS).replace("paragraph_1>", "paragraph_5>")
    assert parse_judge_prompt(tampered) is None


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<>"), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(question=_text, steps=st.lists(_text, min_size=1, max_size=6))
def test_prompt_round_trip_property(question, steps):
    parsed = parse_judge_prompt(render_judge_prompt(question, steps))
    assert parsed == (question.strip(), [s.strip() for s in steps])


# ------------------------------------------------------------------ answers
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paragraph 1 is wrong.\n\n\\boxed{1}", 1),
        ("All good. \\boxed{-1}", -1),
        ("$\\boxed{ 2 }$", 2),
        ("\\boxed{−1}", -1),  # unicode minus
        ("\\fbox{0}", 0),
        ("first \\boxed{0}, on reflection \\boxed{2}", 2),  # several boxes: the last wins
        ("\\boxed{1} ... no wait \\boxed{paragraph two}", UNPARSEABLE),  # last box is garbage: never guessed
        ("\\boxed{1} and then \\boxed{2", 1),  # a cut-off box is not a box
        ("\\boxed{\\text{2}}", UNPARSEABLE),
        ("\\boxed{\\{1\\}}", UNPARSEABLE),  # escaped braces are not the box's braces
        ("\\boxed{1}}}}", 1),
        ("\\boxed{3}", UNPARSEABLE),  # out of range for 3 steps
        ("\\boxed{-2}", UNPARSEABLE),
        ("\\boxed{1.5}", UNPARSEABLE),
        ("The earliest error is in paragraph 1.", UNPARSEABLE),  # no box
        ("", UNPARSEABLE),
    ],
)
def test_parse_judge_answer(text, expected):
    assert parse_judge_answer(text, n_steps=3) == expected


def test_parse_judge_answer_is_bounded():
    nasty = "\\boxed{" * 300_000 + "1" + "}" * 10
    assert parse_judge_answer(nasty, 3) in (1, UNPARSEABLE)
    assert parse_judge_answer("x" * 5_000_000 + "\\boxed{2}", 3) == 2


# ------------------------------------------------------------------ voting
@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        ([1, 1, 2], (1, False)),
        ([-1, -1, 2], (-1, False)),
        ([2], (2, False)),
        ([1, 2], (None, True)),  # tie: no verdict
        ([1, 1, 2, 2, 0], (None, True)),
        ([UNPARSEABLE, 3], (3, False)),  # unreadable samples abstain
        ([UNPARSEABLE, UNPARSEABLE], (None, False)),
        ([], (None, False)),
        ([0, 1, 2, 0], (0, False)),  # plurality, not strict majority
    ],
)
def test_majority_vote(votes, expected):
    assert majority_vote(votes) == expected


# ------------------------------------------------------------------ judging records
def test_judge_records_fills_fields_and_batches():
    records = [make_record(f"p{i}-s0", QUESTION, list(STEPS)) for i in range(5)]
    # 3 samples each, cycled: record 0 gets [1, 1, garbage], record 1 [-1, 1, 1], ...
    engine = ScriptedEngine(["\\boxed{1}", "\\boxed{1}", "no idea", "\\boxed{-1}"])
    config = JudgeConfig(engine=SimulatedJudgeConfig(), samples=3, temperature=0.3, max_tokens=77)
    before = [r.to_row() for r in records]
    kept, rejected, stats = judge_records(engine, records, config, max_batch_requests=2)
    assert [r.to_row() for r in records] == before  # the stage contract: its input rows are not changed
    assert [r.id for r in kept] == [r.id for r in records] and rejected == []
    records = kept
    assert [len(c) for c in engine.calls] == [2, 2, 1]  # all records, in chunks of the batch size
    req = engine.calls[0][0]
    assert req.n == 3 and req.sampling.temperature == 0.3 and req.sampling.max_tokens == 77
    assert req.user == render_judge_prompt(QUESTION, STEPS)
    assert records[0].judge_votes == [1, 1, UNPARSEABLE] and records[0].judge_first_error == 1
    assert records[1].judge_votes == [-1, 1, 1] and records[1].judge_first_error == 1
    assert records[2].judge_votes == [UNPARSEABLE, -1, 1] and records[2].judge_first_error is None  # tie
    for r in records:
        assert r.judge_model == "scripted" and r.judge_prompt_version == JUDGE_PROMPT_VERSION
        assert r.tokens == 100 + 10 + 15  # the judge's prompt and sampled tokens are part of the row's cost
    assert stats.samples == 15 and stats.solutions == 5 and stats.engine_calls == 3
    assert stats.unparseable == sum(r.judge_votes.count(UNPARSEABLE) for r in records)
    assert stats.ties == sum(r.judge_first_error is None for r in records) == stats.undecided
    assert stats.tokens == 5 * 25
    assert all(isinstance(v, int | dict) for v in stats.as_dict().values())


def test_unknown_prompt_version_is_refused_when_the_config_loads():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="v1"):
        JudgeConfig(engine=SimulatedJudgeConfig(), prompt_version="v9")


# ------------------------------------------------------------------ simulated judge
def _chain_solutions(count: int, seed: int = 0) -> list[tuple[str, list[str], int]]:
    """Builtin problems with a wrong step planted at a random place (or none): (question, steps, truth)."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        problem = arithmetic.generate(rng, 3, 8)
        err = rng.choice([-1, *range(len(problem.ops))])
        v, steps = problem.start, []
        for j, (op, b) in enumerate(problem.ops):
            c = arithmetic.apply(v, op, b) if op != "÷" else v // b
            c += 1 if j == err else 0
            steps.append(arithmetic.equation_text(v, op, b, c) + "\n")
            v = c
        out.append((problem.question(), steps, arithmetic.true_first_error(steps)))
    return out


def test_simulated_judge_is_an_engine_and_built_from_config():
    engine = build_engine(SimulatedJudgeConfig(model_name="oracle-ish"))
    assert isinstance(engine, SimulatedJudge) and isinstance(engine, Engine)
    assert engine.model_name == "oracle-ish"


@pytest.mark.parametrize("accuracy", [0.0, 0.7, 1.0])
def test_simulated_judge_accuracy_matches_its_setting(accuracy):
    items = _chain_solutions(1500)
    judge = SimulatedJudge(SimulatedJudgeConfig(accuracy=accuracy, seed=3))
    config = JudgeConfig(engine=judge.config, samples=2)
    verdicts, stats = judge_solutions(judge, [(q, s) for q, s, _ in items], config, max_batch_requests=500)
    votes = [
        (v, truth, len(steps))
        for (_, steps, truth), verdict in zip(items, verdicts, strict=True)
        for v in verdict.votes
    ]
    assert stats.unparseable == 0 and stats.samples == 3000
    hit = sum(v == truth for v, truth, _ in votes) / len(votes)
    assert abs(hit - accuracy) < 0.03
    assert all(-1 <= v < n for v, _, n in votes)  # wrong answers are still valid indices


def test_simulated_judge_is_deterministic_and_batch_independent():
    items = _chain_solutions(20, seed=1)
    judge = SimulatedJudge(SimulatedJudgeConfig(accuracy=0.5, seed=7))
    config = JudgeConfig(engine=judge.config, samples=4)
    a, _ = judge_solutions(judge, [(q, s) for q, s, _ in items], config, max_batch_requests=3)
    b, _ = judge_solutions(judge, [(q, s) for q, s, _ in reversed(items)], config, max_batch_requests=50)
    assert [v.votes for v in a] == [v.votes for v in reversed(b)]
    # first_sample_index continues the sample sequence instead of repeating it
    prompt = render_judge_prompt(items[0][0], items[0][1])
    (four,) = judge.generate([GenerationRequest(user=prompt, n=4)])
    (last_two,) = judge.generate([GenerationRequest(user=prompt, n=2, first_sample_index=2)])
    assert four.completions[2:] == last_two.completions


def _lucky_solutions(count: int, seed: int = 0) -> list[tuple[str, list[str], int]]:
    """Solutions with a wrong step whose last (false) equation still lands on the gold answer."""
    import random

    rng = random.Random(seed)
    out = []
    while len(out) < count:
        problem = arithmetic.generate(rng, 3, 8)
        err = rng.randrange(len(problem.ops) - 1)
        v, steps = problem.start, []
        for j, (op, b) in enumerate(problem.ops):
            c = arithmetic.apply(v, op, b) if op != "÷" else v // b
            c += 1 if j == err else 0
            c = problem.values()[-1] if j == len(problem.ops) - 1 else c
            steps.append(arithmetic.equation_text(v, op, b, c) + "\n")
            v = c
        out.append((problem.question(), steps, arithmetic.true_first_error(steps)))
    return out


def _right_answer(question: str, steps: list[str]) -> bool:
    problem = arithmetic.parse_question(question)
    assert problem is not None
    return arithmetic.last_value("".join(steps)) == problem.values()[-1]


def _votes(profile: JudgeErrorProfile, items: list[tuple[str, list[str], int]]) -> list[tuple[int, int, int]]:
    judge = SimulatedJudge(SimulatedJudgeConfig(errors=profile, seed=5))
    config = JudgeConfig(engine=judge.config, samples=2)
    verdicts, _ = judge_solutions(judge, [(q, s) for q, s, _ in items], config, max_batch_requests=500)
    return [(v, t, len(s)) for (_, s, t), verdict in zip(items, verdicts, strict=True) for v in verdict.votes]


def test_an_error_profile_misses_the_errors_a_right_answer_hides():
    profile = JudgeErrorProfile(recall_wrong_answer=1.0, recall_right_answer=0.0)
    wrong = [it for it in _chain_solutions(300) if it[2] >= 0 and not _right_answer(it[0], it[1])]
    assert len(wrong) > 100
    assert all(v == t for v, t, _ in _votes(profile, wrong))  # wrong answers: every error named
    lucky = _lucky_solutions(100)
    assert all(t >= 0 and _right_answer(q, s) for q, s, t in lucky)
    assert all(v == -1 for v, _, _ in _votes(profile, lucky))  # right answers: every error missed


def test_an_error_profile_errs_at_its_rates():
    items = _chain_solutions(1500, seed=2)
    votes = _votes(JudgeErrorProfile(recall_wrong_answer=0.7, recall_right_answer=0.7, false_alarm=0.2), items)
    on_errors = [v for v, t, _ in votes if t >= 0]
    on_clean = [v for v, t, _ in votes if t == -1]
    assert abs(sum(v != -1 for v in on_errors) / len(on_errors) - 0.7) < 0.04
    assert all(v in (-1, t) for v, t, _ in votes if t >= 0)  # no off-by: a flag is the true step
    assert abs(sum(v != -1 for v in on_clean) / len(on_clean) - 0.2) < 0.05
    assert all(-1 <= v < n for v, _, n in votes)


def test_an_error_profile_names_steps_off_by_at_most_its_offset_and_garbles_answers():
    items = [it for it in _chain_solutions(300, seed=4) if it[2] >= 0]
    votes = _votes(JudgeErrorProfile(recall_wrong_answer=1.0, recall_right_answer=1.0, off_by=1.0, max_offset=1), items)
    assert all(abs(v - t) == 1 for v, t, n in votes if n > 1)
    garbled = _votes(JudgeErrorProfile(format_failure=1.0), items)
    assert {v for v, _, _ in garbled} == {UNPARSEABLE}


def test_a_simulated_judge_takes_accuracy_or_an_error_profile_not_both():
    with pytest.raises(ValueError, match="not both"):
        SimulatedJudgeConfig(accuracy=0.9, errors=JudgeErrorProfile())
    assert SimulatedJudgeConfig(errors={"off_by": 0.1}).errors.off_by == 0.1


def test_simulated_judge_cannot_read_foreign_prompts():
    (result,) = SimulatedJudge().generate([GenerationRequest(user="What is 2 + 2?", n=2)])
    assert all(parse_judge_answer(c.text, 5) == UNPARSEABLE for c in result.completions)


# ------------------------------------------------------------------ a real model as judge
@pytest.fixture
def demo_judge_engine(demo_vllm_engine):
    return demo_vllm_engine  # the session's shared demo engine (tests/conftest.py)


@pytest.mark.slow
def test_demo_model_judges_fixture_samples_end_to_end(demo_judge_engine):
    from prm_synth.products.evaluate import evaluate_judge, load_processbench

    samples = load_processbench(FIXTURE, limit=3)
    config = JudgeConfig(engine=VLLMConfig(model="demo"), samples=2, max_tokens=32, temperature=0.7)
    metric, predictions = evaluate_judge(demo_judge_engine, samples, config, max_batch_requests=2)
    assert len(predictions) == 3 and metric["n_error"] + metric["n_correct"] == 3
    assert metric["judge"]["samples"] == 6 and metric["judge"]["engine_calls"] == 2
    assert metric["judge"]["tokens"] > 0
    for s, p in zip(samples, predictions, strict=True):
        assert p["id"] == s.id and len(p["votes"]) == 2
        assert all(v == UNPARSEABLE or -1 <= v < len(s.steps) for v in p["votes"])
        assert p["judge_model"] == "smollm2-135m-instruct"
    json.dumps(predictions)  # the prediction file is plain JSON
    # and through judge_records, as the pipeline calls it
    record = make_record("q0-s0", samples[0].problem, samples[0].steps)
    kept, left_open, stats = judge_records(demo_judge_engine, [record], config, max_batch_requests=8)
    assert stats.samples == 2 and len(kept) + len(left_open) == 1
    if left_open:  # the 135M model wrote no readable index in either vote: the row waits for the next run
        assert left_open[0].reason == "judge_unreadable" and stats.unparseable == 2
    else:
        assert kept[0].judge_model == "smollm2-135m-instruct" and len(kept[0].judge_votes) == 2


def test_an_error_profile_is_hashed_and_its_absence_is_not():
    from prm_synth.config import validate_config

    base = {
        "problems": {"kind": "builtin", "count": 2},
        "policy": {"kind": "simulated"},
        "judge": {"engine": {"kind": "simulated-judge"}},
    }
    plain = validate_config(base).fingerprint()
    assert (
        validate_config(base | {"judge": {"engine": {"kind": "simulated-judge", "errors": None}}}).fingerprint()
        == plain
    )
    profiled = base | {"judge": {"engine": {"kind": "simulated-judge", "errors": {"off_by": 0.1}}}}
    assert validate_config(profiled).fingerprint() != plain


def test_samples_already_drawn_are_served_not_asked_and_equal_what_the_judge_would_answer():
    """`known`: a pair's samples drawn before for the same prompt, by index. Served where every index a
    request wants is known (a request of n=samples; one vote a round under `settled`); the votes and
    tokens equal those of asking; only the pairs left are sent."""
    judge = SimulatedJudge(SimulatedJudgeConfig(accuracy=0.6, seed=5))
    sent: list[int] = []

    class Counting(SimulatedJudge):
        def generate(self, requests):  # noqa: ANN001, ANN201
            sent.extend(r.first_sample_index for r in requests)
            return judge.generate(requests)

    counting = Counting(SimulatedJudgeConfig(accuracy=0.6, seed=5))
    items = [("q", ["1 + 1 = 2", "2 * 3 = 6"]), ("r", ["2 + 2 = 5", "5 * 2 = 10", "10 - 1 = 9"])]
    config = JudgeConfig(engine=SimulatedJudgeConfig(), samples=3)
    first, _ = judge_solutions(judge, items, config, 8)
    assert all(v is not None and sorted(v.drawn) == [0, 1, 2] for v in first)
    # every index known for the second pair: only the first is asked
    again, stats = judge_solutions(counting, items, config, 8, known=[None, first[1].drawn])
    assert len(sent) == 1 and stats.reused == 3 and stats.requests == 1
    assert [(v.votes, v.tokens) for v in again] == [(v.votes, v.tokens) for v in first]
    # one vote a round: indices 0 and 1 known, index 2 asked where the row is still open
    sent.clear()
    partial = {k: first[1].drawn[k] for k in (0, 1)}
    never = lambda votes, rows: [False] * len(rows)  # noqa: E731 - every row stays open
    rounds, stats = judge_solutions(counting, items, config, 8, settled=never, known=[None, partial])
    assert stats.reused == 2 and sent.count(2) == 2 and len(sent) == 4  # pair 0 three times, pair 1 once
    assert (
        rounds[1].votes == first[1].votes
        and rounds[1].tokens == judge_solutions(judge, items, config, 8, settled=never)[0][1].tokens
    )
