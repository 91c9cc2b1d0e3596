"""A pseudo-gold's doubt reaches soft consensus (grading/majority.row_doubts, posterior.posterior): a row
matching a pseudo-gold that may be wrong can hide an error no rollout sees, a row disagreeing with it can
be right, and the doubt is the run's own estimate (held-out audit, else the votes), never the world's."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from prm_synth.grading.majority import MIN_AUDITED, MajorityAudit, pseudo_gold_doubt, row_doubts
from prm_synth.judge.accuracy import JudgeAccuracy
from prm_synth.judge.posterior import posterior
from prm_synth.records import LabeledRecord, Problem

RATES = JudgeAccuracy(recall=0.6, clean=0.9, miss=0.3)


def row(rid: str, final_correct: bool, n: int = 5, first_error: int = -1, votes: list[int] | None = None):
    labels = [True] * n if first_error == -1 else [True] * first_error + [False] * (n - first_error)
    p_good = [0.999] * n if first_error == -1 else [0.999] * first_error + [0.001] * (n - first_error)
    steps = [f"{i} + 1 = {i + 1}.\n" for i in range(n - 1)] + [f"The answer is {'12' if final_correct else '13'}."]
    return LabeledRecord(
        id=rid, problem_id="p", source="s", question="q", gold_answer="12", steps=steps, final_answer=None,
        final_correct=final_correct, mc_values=[None] * n, mc_correct=[0] * n, mc_total=[0] * n, labels=labels,
        label_source=["mc"] * n, label_rule="r", first_error_mc=first_error, annotator="a", policy_model="m",
        config_fingerprint="f", rollouts=0, tokens=0, judge_votes=votes or [], p_good=p_good,
    )  # fmt: skip


def test_the_doubt_is_the_audits_where_it_measured_the_level_else_the_votes() -> None:
    assert pseudo_gold_doubt(0.625) == 0.375  # no audit: the votes' own
    audit = MajorityAudit()
    for right in [True] * 9 + [False] * 9:
        audit.add(0.625, right)
    assert abs(pseudo_gold_doubt(0.625, audit.to_counts()) - 0.5) < 1e-9  # (9 + 1) / (18 + 2) right
    few = MajorityAudit()
    for _ in range(MIN_AUDITED - 1):
        few.add(0.9, True)
    assert abs(pseudo_gold_doubt(0.9, few.to_counts()) - 0.1) < 1e-9  # too few measured: the votes again


def test_row_doubts_read_the_votes_the_pseudo_gold_did_not_get() -> None:
    grading = json.dumps({"pseudo_gold_share": 0.5, "pseudo_gold_votes": {"12": 4, "13": 3, "9": 1}})
    problem = Problem("p", "q", "12", "s", grading)
    right, wrong = row("a", True), row("b", False, first_error=4)
    other = Problem("x", "q", "1", "s", None)  # a problem with its own gold: no doubt
    own = row("c", True)
    own.problem_id = "x"
    doubts = row_doubts([right, wrong, own], [problem, other], lambda text, p: "12" if text.endswith("12.") else "13")
    assert doubts["a"] == (0.5, 0.0)  # matches the pseudo-gold: wrong whenever it is
    assert doubts["b"] == (0.5, 0.75)  # its answer drew 3 of the 4 other votes
    assert "c" not in doubts  # graded against its problem's own gold


def test_a_row_disagreeing_with_a_doubtful_pseudo_gold_is_right_when_the_judge_says_so() -> None:
    wrong = row("b", False, first_error=3, votes=[-1] * 6)
    sure = posterior(wrong, RATES)
    doubtful = posterior(wrong, JudgeAccuracy(0.6, 0.9, 0.3, doubt=0.5, doubt_clean=0.75))
    assert max(range(len(sure)), key=sure.__getitem__) == 3  # without doubt the rollouts' pin stands
    assert doubtful[-1] > 0.9  # with it, six clean votes make the row right


def test_a_row_matching_a_doubtful_pseudo_gold_can_hide_an_error_the_judge_names() -> None:
    right = row("a", True, votes=[2, 2, 2, -1])
    plain = posterior(right, RATES)
    doubtful = posterior(right, JudgeAccuracy(0.6, 0.9, 0.3, doubt=0.5))
    assert doubtful[2] > plain[2] and doubtful[2] > 0.9


@given(
    st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.lists(st.integers(-2, 4), max_size=6), st.booleans(),
)  # fmt: skip
def test_the_posterior_with_doubt_is_a_distribution_and_no_doubt_changes_nothing(
    doubt: float, clean: float, votes: list[int], final: bool
) -> None:
    r = row("a", final, first_error=-1 if final else 2, votes=votes)
    post = posterior(r, JudgeAccuracy(0.6, 0.9, 0.3, doubt=doubt, doubt_clean=clean))
    assert abs(sum(post) - 1.0) < 1e-9 and all(p >= 0 for p in post)
    assert posterior(r, JudgeAccuracy(0.6, 0.9, 0.3, doubt=0.0, doubt_clean=clean)) == posterior(r, RATES)


def test_a_row_with_doubt_is_always_sent_to_the_judge_even_when_its_rollouts_pinned_it() -> None:
    from prm_synth.config import ConsensusConfig, JudgeConfig
    from prm_synth.judge.selection import selected

    pinned = row("b", False, first_error=3)
    pinned.p_good = [1.0, 1.0, 1.0, 0.0, 0.0]  # the rollouts pinned step 3 (against the pseudo-gold)
    config = JudgeConfig(engine={"kind": "simulated-judge"}, calibrate=0.0)
    assert selected([pinned], config, ConsensusConfig()) == [False]  # against a real gold: no vote needed
    assert selected([pinned], config, ConsensusConfig(), {"b": (0.3, 0.5)}) == [True]
