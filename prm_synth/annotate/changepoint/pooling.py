"""Pooling: the shard's priors on luck, difficulty and overdispersion, from its solutions' evidence.

Under the labeler a shard's searches run in two phases: `pool_after` rollouts each under the weak
default priors, then on under priors pooled from the first phases of the shard's first half of problems
(`FirstPhasePool`, `second_phase_priors`). Once every search is done, `relabel` (relabel.py) pools from
all the evidence at once (`pool_priors`) and labels every solution again. Pooling over a fixed set,
never online, keeps rows independent of the order the searches finished in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace

import numpy as np

from prm_synth.annotate.changepoint.engine import P_GRID, Q_GRID, Evidence, Priors, logsumexp, mixed_log_joint
from prm_synth.annotate.changepoint.settings import ChangepointSettings


def _class_luck_loglik(evidence: Sequence[Evidence], k: float, recent: float = 0.0) -> np.ndarray:
    """[solution, d, q]: log P(data | class d, luck q) of each solution (the first error summed out),
    under overdispersion k. Solutions of one length and verdict go through one batched pass."""
    out = np.empty((len(evidence), len(P_GRID), len(Q_GRID)))
    # log prior 0: the likelihood alone, every error read with extra luck `recent` (or none)
    flat = Priors(np.ones(len(Q_GRID)), np.ones(len(P_GRID)), k, recent=recent, recent_share=1.0)
    groups: dict[tuple[int, str], list[int]] = {}
    for i, ev in enumerate(evidence):
        groups.setdefault((ev.n, ev.verdict), []).append(i)
    for (_, verdict), members in groups.items():
        correct = np.stack([evidence[i].correct for i in members])
        graded = np.stack([evidence[i].graded for i in members])
        out[members] = logsumexp(mixed_log_joint(correct, graded, verdict, flat), axis=1)
    return out


def pool_priors(
    evidence: Sequence[Evidence],
    settings: ChangepointSettings,
    recents: Sequence[float],
    base: Priors | None = None,
    k_strength: float | None = None,
) -> Priors:
    """The shard's priors on luck and the difficulty classes, estimated from every solution's evidence
    at once (EM on the grid weights, `pool_rounds` rounds; `pool_strength` solutions' worth of the base
    prior keep a small shard from collapsing onto a few grid points), under each overdispersion k in
    the settings' `k_choices`; the k under
    which the shard's evidence is likeliest wins. Depends on the set of evidence only, not on the
    order the searches finished in. The prior only reweights each solution's likelihood of (class,
    luck), so that is computed once per k (`_class_luck_loglik`) and the EM rounds are sums over it.

    `k_strength`: the base prior's weight while the k is chosen, where it differs from
    the weight the luck and class weights are pooled with (`second_phase_priors`).

    Then, under the chosen k, each r in `recents` (a fresh error's extra luck): every error read both
    ways, the share read with r (`recent_share_prior` before the shard speaks) pooled by EM too; kept where
    its fit beats the plain one's by ln(solutions) (at least ln(strength)), else the plain priors.
    `recents=()` for priors the search scores probes under (`probe_gains` reads no extra luck).
    Tuning: docs/design/changepoint-tuning.md."""
    rounds, strength, share_prior = settings.pool_rounds, settings.pool_strength, settings.recent_share_prior
    base = base or Priors()
    if not evidence:
        return base
    fits: list[tuple[float, Priors, np.ndarray]] = []
    choosing = strength if k_strength is None else k_strength
    for k in settings.k_choices:
        loglik = _class_luck_loglik(evidence, k)  # [solution, d, q]
        fit, priors = _em(loglik[:, None], Priors(base.q, base.p, k), base, rounds, choosing)
        fits.append((fit, priors, loglik))
    plain_fit, plain, plain_loglik = max(fits, key=lambda f: f[0])
    if choosing != strength:  # the weights at `strength`, under the k chosen at `k_strength`
        plain_fit, plain = _em(plain_loglik[:, None], Priors(base.q, base.p, plain.k), base, rounds, strength)
    # a second reading must pay for itself (BIC-like), and a shard smaller than the base prior's weight
    # cannot show one
    chosen = (plain_fit + math.log(max(len(evidence), strength)), plain)
    for recent in recents:
        raised = _class_luck_loglik(evidence, plain.k, recent)
        start = replace(plain, q=base.q, p=base.p, recent=recent, recent_share=share_prior)
        fit, priors = _em(np.stack([plain_loglik, raised], axis=1), start, base, rounds, strength, share_prior)
        if fit > chosen[0]:
            chosen = (fit, priors)
    return chosen[1]


def _em(
    loglik: np.ndarray, priors: Priors, base: Priors, rounds: int, strength: float, share_prior: float = 0.0
) -> tuple[float, Priors]:
    """EM on the luck and class weights (and the share of the second reading, where loglik has two:
    [solution, reading, d, q]) from `priors`, `strength` solutions' worth of `base`; (fit, priors)."""

    def log_prior(pr: Priors) -> np.ndarray:  # [reading, d, q]
        share = np.array([1.0 - pr.recent_share, pr.recent_share])[: loglik.shape[1]]
        with np.errstate(divide="ignore"):
            return np.log(share)[:, None, None] + pr.log_prior()[None]

    for _ in range(rounds):
        joint = loglik + log_prior(priors)[None]
        post = np.exp(joint - logsumexp(joint, axis=(1, 2, 3))[:, None, None, None])
        q = strength * base.q + post.sum(axis=(0, 1, 2))
        p = strength * base.p + post.sum(axis=(0, 1, 3))
        share = priors.recent_share
        if loglik.shape[1] > 1:
            share = (strength * share_prior + post[:, 1].sum()) / (strength + len(loglik))
        priors = replace(priors, q=q / q.sum(), p=p / p.sum(), recent_share=float(share))
    return float(logsumexp(loglik + log_prior(priors)[None], axis=(1, 2, 3)).sum()), priors


def luck_loglik(ev: Evidence, priors: Priors) -> np.ndarray:
    """[luck]: what one solution's evidence says about its problem's luck (its log-likelihood, the
    first error and the difficulty class summed out under the shard's prior, up to a constant).
    Only luck is shared between siblings: difficulty is poorly told apart from luck where luck is
    high (docs/design/changepoint-tuning.md)."""
    joint = mixed_log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors)[0]  # [e, d, q]
    top = joint.max()
    loglik = np.log(np.exp(joint - top).sum(axis=(0, 1))) - np.log(priors.q)
    return loglik - loglik.max()


def second_phase_priors(first_phase: Sequence[Evidence], settings: ChangepointSettings) -> Priors:
    """The priors the searches go on under after their first phase: the shard's luck and difficulty
    classes pooled from first phases as `relabel` pools them, the rollouts' overdispersion k chosen
    with the default weighing one solution per solution of the shard, and no fresh-error luck (the
    search's probe scoring reads none; `relabel` pools it)."""
    return pool_priors(first_phase, settings, (), k_strength=float(len(first_phase)))


class FirstPhasePool:
    """The first phases of a shard's searches, pooled into the priors they go on under.

    Which first phases count is fixed before the run, so no row depends on timing or knobs: every
    solution of the shard's first `members` problems (input order; a problem whose sampling is
    refused counts with none). Those are admitted first whatever `run.max_in_flight` is, so the pool
    is ready while the rest of the shard still runs its first phases and the engine does not drain
    to wait for it (waiting for every search of the shard took the modelled GPU's occupancy from
    0.97 to 0.87); a search that reaches the end of its first phase later finds it ready. Pooled
    when the last member's evidence is in (a member the engine refused: `deposit(key, None)`), in
    key order (`second_phase_priors`)."""

    def __init__(self, settings: ChangepointSettings, members: Sequence[str]) -> None:
        self.settings = settings
        self.future: Future[Priors] = Future()
        self._unknown = set(members)  # member problems whose solutions are not known yet
        self._members: set[str] = set()  # their solutions
        self._missing: set[str] = set()  # members whose first phase is not in yet
        self._in: dict[str, Evidence | None] = {}  # every first phase handed in so far, by key
        self._ready_if_complete()

    def solutions(self, problem: str, keys: Sequence[str]) -> None:
        """A problem's solutions are known (sampled; none if its sampling was refused)."""
        if problem in self._unknown:
            self._unknown.discard(problem)
            self._members |= set(keys)
            self._missing |= {key for key in keys if key not in self._in}
            self._ready_if_complete()

    def deposit(self, key: str, ev: Evidence | None) -> None:
        """A search's first phase is over (None: the engine refused it); only members' are pooled."""
        if key not in self._in:
            self._in[key] = ev
            self._missing.discard(key)
            self._ready_if_complete()

    def _ready_if_complete(self) -> None:
        if self._unknown or self._missing or self.future.done():
            return
        evidence = [ev for key, ev in sorted(self._in.items()) if key in self._members and ev is not None]
        self.future.set_result(second_phase_priors(evidence, self.settings))
