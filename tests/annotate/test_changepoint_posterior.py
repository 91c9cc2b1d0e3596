"""The change-point posterior's fast sums against the plain definition: scoring a candidate probe and the
model check read every outcome of a probe from one sweep over the posterior's own pass (forward states,
a backward pass, shared reach tables); each must equal building the posterior of every outcome's
evidence from scratch, at any length, with runs of unprobed prefixes longer than the kernel tables."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.changepoint import ChangepointSettings, Evidence, Posterior, Priors, pool_priors
from prm_synth.annotate.changepoint.engine import probe_gains

SETTINGS = ChangepointSettings()
K_CHOICES = SETTINGS.k_choices


def entropy_bits(post: Posterior) -> float:
    """Bits of uncertainty about where the first error is: the entropy of the posterior's own
    P(first error at e), e = 0..n (n: none), summed out of its joint."""
    p = post.p_error[post.p_error > 0]
    return float(-(p * np.log2(p)).sum())


def gain_from_scratch(ev: Evidence, priors: Priors, j: int, b: int) -> float:
    """Bits of first-error uncertainty removed per rollout by b more rollouts at prefix j, by
    definition: the posterior after each outcome, weighted by its predictive probability."""
    base = Posterior(ev, priors)
    after = 0.0
    for k in range(b + 1):
        post = Posterior(ev.plus(j, k, b), priors)
        log_comb = math.lgamma(b + 1) - math.lgamma(k + 1) - math.lgamma(b - k + 1)
        after += math.exp(log_comb + post.log_evidence - base.log_evidence) * entropy_bits(post)
    return (entropy_bits(base) - after) / b


@st.composite
def evidence(draw: st.DrawFn) -> tuple[Evidence, Priors]:
    n = draw(st.sampled_from([1, 2, 3, 6, 12, 25, 60, 700]))  # 700: a run longer than the tables (512)
    verdict = draw(st.sampled_from(["correct", "incorrect", "unknown"]))
    ev = Evidence.empty(n, verdict)
    for j in draw(st.lists(st.integers(0, n - 1), max_size=6, unique=True)):
        ev.graded[j] = draw(st.sampled_from([1, 4, 8, 16]))
        ev.correct[j] = draw(st.integers(0, int(ev.graded[j])))
    return ev, Priors(k=draw(st.sampled_from(K_CHOICES)))


@settings(max_examples=25, deadline=None)
@given(evidence(), st.data())
def test_probe_gains_equal_each_outcomes_posterior_built_from_scratch(case, data):
    ev, priors = case
    chosen = sorted(data.draw(st.lists(st.integers(0, ev.n - 1), min_size=1, max_size=4, unique=True)))
    b = data.draw(st.sampled_from([1, 4]))
    post = Posterior(ev, priors)
    fast = probe_gains(post, priors, chosen, b)
    slow = [gain_from_scratch(ev, priors, j, b) for j in chosen]
    np.testing.assert_allclose(fast, slow, rtol=1e-7, atol=1e-9)
    # asked again (the search's second look), the posterior's kept gains come back unchanged
    np.testing.assert_array_equal(probe_gains(post, priors, chosen[::-1], b), fast[::-1])


def test_pooled_priors_equal_em_over_each_solutions_posterior():
    """pool_priors sums each solution's class-and-luck likelihood once per k; plain EM rebuilds every
    posterior each round. Both must reach the same priors."""
    rng = np.random.default_rng(3)
    evs = []
    for i in range(12):
        n = [3, 7, 7, 40][i % 4]
        ev = Evidence.empty(n, ["correct", "incorrect", "unknown"][i % 3])
        for j in rng.choice(n, size=min(n, 3), replace=False):
            ev.graded[j] = 4
            ev.correct[j] = rng.integers(0, 5)
        evs.append(ev)
    base = Priors()
    best = None
    price = 0.5 * math.log(len(evs))  # overdispersion pays BIC's price of one parameter
    for k in K_CHOICES:
        priors = Priors(base.q, base.p, k)
        for _ in range(8):
            posts = [Posterior(ev, priors) for ev in evs]
            q = 8 * base.q + sum(p.q_marginal for p in posts)
            p = 8 * base.p + sum(p.p_marginal() for p in posts)
            priors = Priors(q / q.sum(), p / p.sum(), k)
        fit = sum(Posterior(ev, priors).log_evidence for ev in evs) + (price if k == max(K_CHOICES) else 0.0)
        if best is None or fit > best[0]:
            best = (fit, priors)
    pooled = pool_priors(evs, SETTINGS, SETTINGS.recent_choices)
    assert pooled.k == best[1].k
    np.testing.assert_allclose(pooled.q, best[1].q, atol=1e-10)
    np.testing.assert_allclose(pooled.p, best[1].p, atol=1e-10)


def test_an_old_posterior_scores_probes_the_same_after_many_newer_ones():
    """Only recent posteriors keep their forward states (memory); an older one rebuilds them when asked."""
    ev = Evidence.empty(30, "incorrect")
    for j, c in ((2, 4), (10, 3), (20, 0)):
        ev.graded[j], ev.correct[j] = 4, c
    first = Posterior(ev, Priors())
    expected = probe_gains(Posterior(ev, Priors()), Priors(), [0, 5, 15, 29], 4)
    others = [Posterior(ev, Priors()) for _ in range(100)]  # a shard's relabeling holds them all
    assert len(others) == 100
    np.testing.assert_array_equal(probe_gains(first, first.priors, [0, 5, 15, 29], 4), expected)


def test_probe_gains_equal_from_scratch_when_evidence_drives_the_states_towards_underflow():
    """Contradicting counts of many rollouts at many prefixes shrink the candidates' states by many orders
    of magnitude a prefix (they are renormalised only when a sum nears underflow, not at every step):
    the sums still equal each outcome's posterior built from scratch."""
    for n, verdict in ((60, "incorrect"), (200, "correct")):
        ev = Evidence.empty(n, verdict)
        for i, j in enumerate(range(1, n, 5)):
            ev.graded[j] = 16
            ev.correct[j] = 16 if i % 2 else 0
        for k in K_CHOICES:
            priors = Priors(k=k)
            chosen = [0, 3, n // 2, n - 1]
            fast = probe_gains(Posterior(ev, priors), priors, chosen, 4)
            slow = [gain_from_scratch(ev, priors, j, 4) for j in chosen]
            np.testing.assert_allclose(fast, slow, rtol=1e-7, atol=1e-9)
