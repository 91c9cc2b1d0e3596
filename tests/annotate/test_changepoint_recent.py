"""A fresh error's extra luck: a policy may notice an error it has just written, so the first prefixes
that hold it reach the answer more often than the luck rate. The posterior reads a solution's error
both ways where the shard shows it (`Priors.recent`, `Priors.recent_share`, pooled by `pool_priors`),
and labels only what holds under either reading."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.changepoint import ChangepointSettings, Evidence, Posterior, Priors, pool_priors
from prm_synth.annotate.changepoint.engine import Q_GRID, RECENT_STEPS, probe_gains

SETTINGS = ChangepointSettings()
K_CHOICES, RECENT_CHOICES = SETTINGS.k_choices, SETTINGS.recent_choices


def beta_binomial(c: int, f: int, rate: float, k: float) -> float:
    """log P(c hits, f misses) under Beta(k rate, k (1 - rate)), without the binomial coefficient."""
    rate = min(max(rate, 0.001), 0.995)
    a, b = k * rate, k * (1 - rate)
    return (
        math.lgamma(c + a)
        - math.lgamma(a)
        + math.lgamma(f + b)
        - math.lgamma(b)
        - math.lgamma(c + f + k)
        + math.lgamma(k)
    )


@st.composite
def evidence(draw: st.DrawFn) -> Evidence:
    n = draw(st.sampled_from([1, 2, 5, 9, 20]))
    ev = Evidence.empty(n, draw(st.sampled_from(["correct", "incorrect", "unknown"])))
    for j in draw(st.lists(st.integers(0, n - 1), max_size=6, unique=True)):
        ev.graded[j] = draw(st.sampled_from([1, 4, 8, 16]))
        ev.correct[j] = draw(st.integers(0, int(ev.graded[j])))
    return ev


@settings(max_examples=30, deadline=None)
@given(evidence(), st.sampled_from(K_CHOICES), st.sampled_from(RECENT_CHOICES))
def test_the_fresh_error_reading_raises_the_rate_of_the_first_bad_prefixes_only(ev, k, r):
    """Read with extra luck r, P(first error e, luck q, data) differs from the plain reading by the
    rollouts of prefixes e + 1 .. e + RECENT_STEPS alone: each at q + (1 - q) r / 2^m instead of q."""
    plain = Posterior(ev, Priors(k=k))
    raised = Posterior(ev, Priors(k=k, recent=r, recent_share=1.0))
    for e in range(ev.n + 1):
        expected = np.zeros(len(Q_GRID))
        for m in range(RECENT_STEPS):
            j = e + 1 + m
            if j < ev.n and ev.graded[j]:
                c, f = int(ev.correct[j]), int(ev.graded[j] - ev.correct[j])
                expected += [beta_binomial(c, f, q + (1 - q) * r / 2**m, k) - beta_binomial(c, f, q, k) for q in Q_GRID]
        seen = (plain.joint[e] > 1e-200) & (raised.joint[e] > 1e-200)
        got = np.log(raised.joint[e][seen]) + raised.log_evidence - np.log(plain.joint[e][seen]) - plain.log_evidence
        np.testing.assert_allclose(got, expected[seen], rtol=1e-7, atol=1e-7)


@settings(max_examples=30, deadline=None)
@given(evidence(), st.sampled_from(RECENT_CHOICES), st.floats(0.05, 0.95))
def test_a_label_read_both_ways_holds_under_the_plain_reading(ev, r, share):
    """Under a shard's mixed reading a step leans good (or bad) only as far as the plain reading lets
    it; p_good still falls along the solution. The search never scores probes under a mixed reading."""
    mixed_priors = Priors(recent=r, recent_share=share)
    mixed, plain = Posterior(ev, mixed_priors), Posterior(ev, Priors())
    good, bad = mixed.p_good > 0.5, mixed.p_good < 0.5
    assert (mixed.p_good[good] <= plain.p_good[good] + 1e-12).all()
    assert (mixed.p_good[bad] >= plain.p_good[bad] - 1e-12).all()
    assert (np.diff(mixed.p_good) <= 1e-12).all()
    # the row keeps the mixed reading's p_good, at least as sure as what the labels go by
    assert (np.diff(mixed.belief) <= 1e-12).all()
    assert (mixed.belief[good] >= mixed.p_good[good] - 1e-12).all()
    assert (mixed.belief[bad] <= mixed.p_good[bad] + 1e-12).all()
    with pytest.raises(ValueError, match="extra luck"):
        probe_gains(mixed, mixed_priors, [0], 4)


def _shard(raised: float, seed: int = 5) -> list[Evidence]:
    """60 solutions of 12 steps, each with one error at step 2..8, every prefix measured with 8
    rollouts: clean prefixes finish at 0.85, prefixes holding the error at luck 0.05, or, `raised`,
    at 0.05 + 0.95 raised / 2^m m steps past the error's own prefix."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(60):
        e = int(rng.integers(2, 9))
        ev = Evidence.empty(12, "incorrect")
        for j in range(12):
            m = j - e - 1
            rate = 0.85 if j <= e else 0.05 + 0.95 * raised / 2**m
            ev.correct[j], ev.graded[j] = rng.binomial(8, rate), 8
        out.append(ev)
    return out


def test_a_shard_reads_errors_with_fresh_luck_only_where_its_rollouts_show_it():
    noticed = pool_priors(_shard(0.5), SETTINGS, RECENT_CHOICES)
    assert noticed.recent > 0 and noticed.recent_share > 0.5
    plain = pool_priors(_shard(0.0), SETTINGS, RECENT_CHOICES)
    assert plain.recent_share == 0.0
    assert pool_priors(_shard(0.5), SETTINGS, ()).recent_share == 0.0  # the search's pooling never reads it


def test_a_shard_of_a_few_solutions_with_random_counts_is_read_plainly():
    """A second reading is a shard's feature: one to three solutions with random counts gain up to
    about 2 nats from it, less than it must pay (ln 8, the base prior's weight). Under ln(solutions)
    alone a quarter of these shards read it."""
    rng = np.random.default_rng(0)
    for t in range(60):
        n = int(rng.integers(3, 15))
        ev = Evidence.empty(n, ["correct", "incorrect", "unknown"][t % 3])
        for j in rng.choice(n, size=min(n, 4), replace=False):
            ev.graded[j] = 4
            ev.correct[j] = rng.integers(0, 5)
        assert pool_priors([ev] * int(rng.integers(1, 4)), SETTINGS, RECENT_CHOICES).recent_share == 0.0


def test_the_fresh_error_reading_keeps_the_error_step_unlabeled_where_a_plain_one_would_call_it_good():
    """Prefix 6 (holding an error at step 5) reaches the answer half the time, later ones rarely: the
    plain reading calls step 5 good; read both ways, step 5 is not labeled either way."""
    ev = Evidence.empty(12, "incorrect")
    for j, (c, g) in {4: (7, 8), 5: (7, 8), 6: (8, 16), 7: (2, 16), 8: (0, 8), 10: (0, 8)}.items():
        ev.correct[j], ev.graded[j] = c, g
    plain = Posterior(ev, Priors())
    mixed = Posterior(ev, Priors(recent=0.5, recent_share=0.7))
    assert plain.p_good[5] >= 0.9
    assert 0.1 < mixed.p_good[5] < 0.9
    assert mixed.p_good[7] <= 0.1  # prefix 8 holds the error under either reading


def test_a_lone_bad_label_on_a_right_answer_must_hold_without_the_shards_luck():
    """A right-answer solution that reaches the answer half the time from every prefix: under a shard's
    pooled luck with a mode near 0.5 its late steps read as bad (P(bad) >= 0.95), under the default
    luck prior they do not. The lone bad label is withheld and the steps say why; the same evidence
    with a wrong answer, or a bad label right after a good one, keeps its label."""
    from dataclasses import replace

    from prm_synth.annotate.annotation import Annotation
    from prm_synth.annotate.changepoint import ChangepointSettings, label
    from prm_synth.annotate.changepoint.rules import lone_bad_stands_from
    from prm_synth.records.labels import UNDECIDED_UNLOCATED

    ev = Evidence.empty(12, "correct")
    for j in (2, 4, 6, 8, 10, 11):
        ev.correct[j], ev.graded[j] = 2, 4
    q = np.where(np.abs(Q_GRID - 0.5) < 0.08, 1.0, 0.02)
    post = Posterior(ev, Priors(q=q / q.sum()))
    settings = ChangepointSettings()
    first_bad = int(np.flatnonzero(1.0 - post.p_good >= settings.bad_confidence)[0])
    assert (
        lone_bad_stands_from(post, [None] * 12, first_bad, settings.bad_confidence, True, settings) == 12
    )  # none stands
    paired = [True] * first_bad + [None] * (12 - first_bad)
    assert lone_bad_stands_from(post, paired, first_bad, settings.bad_confidence, True, settings) == first_bad
    ann = Annotation.empty("binary", 12)
    label(ann, post, settings, "undecided_uninformative", "correct")
    assert False not in ann.decided.values()
    assert all(r == UNDECIDED_UNLOCATED for r in ann.unlabeled_reason[first_bad:])
    wrong = replace(ev, verdict="incorrect")
    ann = Annotation.empty("binary", 12)
    label(ann, Posterior(wrong, post.priors), settings, "undecided_uninformative", "incorrect")
    assert any(ann.decided.get(i) is False for i in range(11))  # a bad label before the verdict's own step


def test_a_lone_bad_label_on_a_wrong_answer_must_hold_under_the_main_mode_of_the_shards_luck():
    """A wrong answer that reaches the answer half the time from every probed prefix: clean up to a hard
    last step, or an early error and a lucky answer. Under a shard's luck with a second mode near 0.5
    beside its main one at 0.15 (what such rows teach the pooling), step 10 reads as bad; under the main
    mode alone it does not, so only the last step keeps its bad label (the wrong answer puts the error
    there or before). Where the shard's luck has one mode (every problem lucky) the label stands."""
    from prm_synth.annotate.annotation import Annotation
    from prm_synth.annotate.changepoint import ChangepointSettings, label
    from prm_synth.annotate.changepoint.rules import luck_modes
    from prm_synth.records.labels import UNDECIDED_UNLOCATED

    main = np.exp(-0.5 * ((Q_GRID - 0.15) / 0.05) ** 2)
    second = np.exp(-0.5 * ((Q_GRID - 0.5) / 0.04) ** 2)
    bimodal = main / main.sum() + 0.15 * second / second.sum()
    bimodal /= bimodal.sum()
    (core,) = luck_modes(bimodal, SETTINGS.mode_rise)  # the main mode alone
    assert core[np.abs(Q_GRID - 0.5) < 0.1].sum() < 1e-6
    assert np.allclose(
        core[Q_GRID < 0.3] / core[Q_GRID < 0.3].sum(), bimodal[Q_GRID < 0.3] / bimodal[Q_GRID < 0.3].sum()
    )
    for one_mode in (main / main.sum(), second / second.sum(), np.full(len(Q_GRID), 1 / len(Q_GRID))):
        assert luck_modes(one_mode, SETTINGS.mode_rise) == []

    ev = Evidence.empty(12, "incorrect")
    for j in (2, 4, 6, 8, 10, 11):
        ev.correct[j], ev.graded[j] = 2, 4
    settings = ChangepointSettings()
    post = Posterior(ev, Priors(q=bimodal))
    assert 1.0 - post.p_good[10] >= settings.bad_confidence > 1.0 - post.p_good[9]  # a lone bad label at 10
    ann = Annotation.empty("binary", 12)
    label(ann, post, settings, "undecided_uninformative", "incorrect")
    assert [i for i in range(12) if ann.decided.get(i) is False] == [11]
    assert ann.unlabeled_reason[10] == UNDECIDED_UNLOCATED
    # moved on to the last step, the bad label rests on the wrong answer, not on the prefix the lone
    # label at step 10 would have needed measured (prefix 11: not probed here)
    unprobed = Evidence.empty(12, "incorrect")
    for j in (2, 4, 6, 8, 10):
        unprobed.correct[j], unprobed.graded[j] = 4, 8
    post = Posterior(unprobed, Priors(q=bimodal))
    assert 1.0 - post.p_good[10] >= settings.bad_confidence and unprobed.graded[11] == 0
    ann = Annotation.empty("binary", 12)
    label(ann, post, settings, "undecided_uninformative", "incorrect")
    assert [i for i in range(12) if ann.decided.get(i) is False] == [11]
    lucky = second / second.sum()  # every problem's luck near 0.5: the same evidence, one mode
    post = Posterior(ev, Priors(q=lucky))
    first = int(np.flatnonzero(1.0 - post.p_good >= settings.bad_confidence)[0])
    assert first < 11
    ann = Annotation.empty("binary", 12)
    label(ann, post, settings, "undecided_uninformative", "incorrect")
    assert ann.decided.get(first) is False
