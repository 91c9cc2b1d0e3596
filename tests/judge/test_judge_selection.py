"""Judge calls only where they can change a label: which rows are sent, when voting stops, and the judge's
accuracy per answer class with its stated prior where a class has too few pinned rows."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from _prm_helpers import labeled_row
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.config import ConsensusConfig, JudgeConfig, SimulatedJudgeConfig
from prm_synth.engines.base import Completion, GenerationRequest, GenerationResult
from prm_synth.judge.accuracy import JudgeCounts, accuracy_by_class, class_accuracy
from prm_synth.judge.estimate import rates_by_class
from prm_synth.judge.selection import judge_selected, needs_judge, selected, settled
from prm_synth.prompting.prompts import parse_judge_prompt
from prm_synth.records import LabeledRecord

T, F, N = True, False, None
SOFT = ConsensusConfig(policy="soft", confidence=0.9)


def row(rid: str, right: bool, labels: list[bool | None], p_good: list[float]) -> LabeledRecord:
    steps = [f"step {i} of {rid}\n" for i in range(len(labels))]
    return labeled_row(
        labels, id=rid, problem_id=rid, question=f"question {rid}", steps=steps, final_correct=right, p_good=p_good
    )


PINNED = row("pinned", False, [T, F, N], [0.999, 0.001, 0.0])  # wrong answer, first error pinned
OPEN = row("open", False, [T, N, F], [0.999, 0.5, 0.0])  # wrong answer, step 1 or 2
RIGHT = row("right", True, [T, T, T], [0.99, 0.95, 0.9])  # right answer: the rollouts' blind spot


class Voter:
    """A judge that answers each row with a fixed sequence of votes (sample index r gets votes[r]) and
    records what it was asked."""

    model_name = "voter"

    def __init__(self, votes: dict[str, Sequence[int]]) -> None:
        self.votes = votes
        self.asked: list[tuple[str, int, int]] = []  # (row id, first sample index, n)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        out = []
        for req in requests:
            parsed = parse_judge_prompt(req.user)
            assert parsed is not None
            rid = parsed[0].split()[-1]
            self.asked.append((rid, req.first_sample_index, req.n))
            texts = []
            for i in range(req.n):
                vote = self.votes[rid][req.first_sample_index + i]
                texts.append("no box here" if vote == -2 else f"\\boxed{{{vote}}}")
            out.append(GenerationResult(tuple(Completion(t, 5) for t in texts), 50))
        return out

    def close(self) -> None:
        pass


def judge(votes: dict[str, Sequence[int]], rows: list[LabeledRecord], **knobs):
    engine = Voter(votes)
    config = JudgeConfig(engine=SimulatedJudgeConfig(), samples=3, calibrate=0.0, **knobs)
    kept, rejected, stats = judge_selected(engine, rows, config, SOFT, max_batch_requests=64)
    return engine, kept, stats


def test_a_pinned_wrong_answer_is_not_sent_but_right_answers_and_open_rows_are():
    assert not needs_judge(PINNED, 0.99)
    assert needs_judge(OPEN, 0.99) and needs_judge(RIGHT, 0.99)
    config = JudgeConfig(engine=SimulatedJudgeConfig(), samples=3, calibrate=0.0)
    assert selected([PINNED, OPEN, RIGHT], config, SOFT) == [False, True, True]
    # calibration: a share of pinned wrong-answer rows is sent to measure the judge on wrong answers
    assert selected([PINNED], config.model_copy(update={"calibrate": 1.0}), SOFT) == [True]
    engine, kept, stats = judge({"open": [1, 1, 1], "right": [-1, -1, -1]}, [PINNED, OPEN, RIGHT])
    assert {rid for rid, _, _ in engine.asked} == {"open", "right"}
    assert stats.rows_skipped == 1 and stats.solutions == 2
    assert kept[0].judge_votes == [] and kept[0].judge_model is None  # kept as labeled, not judged
    # `select: all` asks every row `samples` votes in one request
    engine, _, stats = judge(
        {"pinned": [1] * 3, "open": [1] * 3, "right": [-1] * 3}, [PINNED, OPEN, RIGHT], select="all"
    )
    assert sorted(engine.asked) == [("open", 0, 3), ("pinned", 0, 3), ("right", 0, 3)] and stats.samples == 9


def test_votes_are_asked_in_rounds_until_the_posterior_settles():
    engine, kept, stats = judge({"open": [1, 1, 1], "right": [2, -2, 2]}, [OPEN, RIGHT])
    asked = {}
    for rid, index, n in engine.asked:
        assert n == 1
        asked.setdefault(rid, []).append(index)
    assert asked["right"] == [0, 1, 2]  # a step vote against the rollouts: more votes; an unreadable one counts
    assert len(asked["open"]) < 3  # one vote into a two-step interval settles it
    by_id = {r.id: r for r in kept}
    assert by_id["right"].judge_votes == [2, -2, 2]
    assert stats.requests == len(engine.asked) == stats.samples
    # rounds batch across rows: one engine request list per round, every open row in it
    assert [i for _, i, _ in engine.asked] == sorted(i for _, i, _ in engine.asked)


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6),
    st.lists(st.integers(-2, 5), min_size=3, max_size=3),
    st.booleans(),
    st.integers(1, 3),
)
@settings(max_examples=60, deadline=None)
def test_the_stopping_rule_stops_exactly_when_settled_or_out_of_votes(p_good, script, right, samples):
    """For every row and vote script: a row gets another vote only while soft would not keep it yet and
    the votes left can still take it there (`settled`), and never more than `samples`."""
    n = len(p_good)
    record = row("r", right, [N] * n, sorted(p_good, reverse=True))
    votes = [v if v < n else -1 for v in script]
    engine = Voter({"r": votes})
    config = JudgeConfig(engine=SimulatedJudgeConfig(), samples=samples, calibrate=0.0, skip_confidence=1.0)
    kept_rows, left_open, _ = judge_selected(engine, [record], config, SOFT, 64)
    if left_open:  # every vote it was asked was unreadable: the row is left open for the next run, whole
        (opened,) = left_open
        assert opened.reason == "judge_unreadable" and not kept_rows and votes[0] == -2
        return
    (kept,) = kept_rows
    asked = len(kept.judge_votes)
    if not needs_judge(record, 1.0):  # a wrong answer the rollouts pinned for certain: never sent
        assert asked == 0
        return
    assert 1 <= asked <= samples and kept.judge_votes == votes[:asked]

    def settled_after(k: int) -> bool:  # the rule, under the accuracy measured on the votes so far
        so_far = _with_votes(record, votes[:k])
        return settled(so_far, rates_by_class([so_far], SOFT)["right" if right else "wrong"], SOFT, samples - k)

    for k in range(1, asked):
        assert not settled_after(k)
    if asked < samples:
        assert settled_after(asked)


def _with_votes(record: LabeledRecord, votes: list[int]) -> LabeledRecord:
    from dataclasses import replace

    return replace(record, judge_votes=votes)


def test_each_answer_class_reads_its_own_accuracy_or_the_stated_prior():
    config = ConsensusConfig(policy="soft", class_min_votes=5)
    few = class_accuracy(JudgeCounts(pinned_votes=4, pinned_named=4, clean_votes=4, clean_said_clean=4), config)
    prior = class_accuracy(JudgeCounts(), config)
    assert few.errors_from == few.clean_from == "prior" and few.accuracy == prior.accuracy
    assert prior.accuracy.recall == pytest.approx(config.prior_accuracy)
    many = class_accuracy(JudgeCounts(pinned_votes=50, pinned_named=10, pinned_missed=35), config)
    assert many.errors_from == "measured" and many.clean_from == "prior" and many.accuracy.recall < 0.3
    # right answers and wrong answers are measured apart
    wrong = [row(f"w{i}", False, [T, F], [0.999, 0.001]) for i in range(6)]
    right = [row(f"r{i}", True, [T, F], [0.999, 0.001]) for i in range(6)]
    for r in wrong:
        r.judge_votes = [1]
    for r in right:
        r.judge_votes = [-1]  # misses every error a right answer holds
    by_class = accuracy_by_class(wrong + right, config)
    assert by_class["wrong"].accuracy.recall > 0.8 > by_class["right"].accuracy.recall
    assert by_class["right"].accuracy.miss > 0.5
