"""The search: which prefix to roll out next, and when to stop (`changepoint_search`).

The search asks for the probe that most reduces the uncertainty about where the first error is, per
rollout, among a few candidates (`best_probe`: prefixes around the posterior's quartiles of the error,
ambiguous probed prefixes, the question alone, the last prefix), scored by `probe_gains` (gains.py).
Under the labeler a shard's searches run in two phases (pooling.py). A search goes on until the first
error is pinned to one step (bad label on it, good on the step before) or `localize_max_rollouts` is
spent, probing inside the open interval between the last good and the first bad label when no other
probe is worth its rollouts (`open_interval`). A bad label needs a measurement of its own prefix
(`unbacked_bad`): the search measures that prefix before it stops. A checked correct-answer solution
(`check`) has its early prefixes tested first (right_answers.py reads them). The labels are read by
rules.py. A decision (`decide`) depends on the priors, the counts and the rollouts asked alone: the
search remembers it (memo.py). Tuning: docs/design/changepoint-tuning.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.changepoint.engine import DEFAULT_PRIORS, Evidence, Posterior, Priors, probe_gains
from prm_synth.annotate.changepoint.memo import DECISIONS, Decision, DecisionMemo, state_key
from prm_synth.annotate.changepoint.pooling import FirstPhasePool
from prm_synth.annotate.changepoint.rules import label, unmeasured_bad
from prm_synth.annotate.changepoint.settings import ChangepointSettings
from prm_synth.annotate.protocol import Annotator, Probe, Wait
from prm_synth.annotate.token_cost import NO_TOKEN_BUDGET, TokenBudget, per_expected_token
from prm_synth.records.labels import UNDECIDED_BUDGET, UNDECIDED_UNINFORMATIVE, first_bad_step


def open_interval(p_good: np.ndarray, confidence: float, bad_confidence: float | None = None) -> range:
    """The prefixes whose probing can pin the first error to one step: those between the last step
    labeled good and the first labeled bad (prefix j is clean iff the first error is at step j or
    later). Empty when there is no bad label, or when the step before it is labeled good already."""
    first_bad = first_bad_step(p_good, confidence, bad_confidence)
    if first_bad is None or first_bad == 0 or p_good[first_bad - 1] >= confidence:
        return range(0)
    good = np.flatnonzero(p_good[:first_bad] >= confidence)
    last_good = int(good[-1]) if len(good) else -1
    return range(last_good + 1, first_bad + 1)  # prefixes last_good+1 (clean-ish) .. first_bad


def _spread(prefixes: range, most: int) -> list[int]:
    """At most `most` prefixes of an interval, its ends included and the rest evenly between."""
    if len(prefixes) <= most:
        return list(prefixes)
    return sorted({prefixes[round(i * (len(prefixes) - 1) / (most - 1))] for i in range(most)})


def _ends(prefixes: range) -> list[int]:
    """The two ends of an interval of prefixes: the candidates it adds to a decision (five spread over
    it, `interval_probes`, were removed in revision 2026-12-06.1: within noise)."""
    return sorted({prefixes[0], prefixes[-1]}) if prefixes else []


def early_prefixes(n: int, most: int) -> list[int]:
    """The early prefixes a checked correct-answer solution has tested first: every one of its first
    half, or `most` of them spread evenly over it (its first and last included) on a long solution, so
    the check costs at most `most` probes at any length."""
    return _spread(range(1, (n + 1) // 2 + 1), most)


def unbacked_bad(
    p_good: np.ndarray, ev: Evidence, confidence: float, bad_confidence: float | None = None
) -> int | None:
    """The prefix whose measurement the first bad label still lacks, or None. Step i is bad when
    prefix i + 1 (steps 0..i) holds the error; the label is backed when that prefix was measured
    (graded rollouts, or the solution's own incorrect verdict for the last step). Without it the
    label would come from the prior and the steps around it (at hundreds of steps the prior alone
    put an error far into a long solution never probed), not from evidence against the step."""
    first_bad = first_bad_step(p_good, confidence, bad_confidence)
    return None if first_bad is None else unmeasured_bad(ev, first_bad)


def best_probe(
    post: Posterior,
    priors: Priors,
    batch: int,
    room: int,
    cap: int,
    extra: Sequence[int],
    levels: Sequence[float],
    ambiguous: tuple[float, float],
    token_weighted: bool,
) -> tuple[int, float]:
    """(prefix j, expected bits of first-error uncertainty removed per rollout) of the best candidate probe
    (`probe_gains` scores them): the question alone, the last prefix, the prefixes around each of the
    posterior's P(clean) `levels`, probed prefixes still `ambiguous`, and `extra` (the open interval the
    search is pinning the first error in); per expected token where `token_weighted` (a token budget)."""
    ev = post.evidence
    n = ev.n
    b = min(batch, room)
    if b <= 0:
        return -1, 0.0
    p_clean = np.concatenate([[1.0], post.p_good[: n - 1]])  # P(prefix j clean) = P(e >= j)
    candidates = {0, n - 1, *extra}
    for level in levels:  # around the posterior's quartiles and median of the error
        first_below = int(np.searchsorted(-p_clean, -level))  # first prefix with P(clean) < level
        candidates |= {first_below - 1, first_below}
    low, high = ambiguous
    candidates |= {j for j in range(n) if ev.graded[j] and low < p_clean[j] < high}
    chosen = [j for j in sorted(candidates) if 0 <= j < n and ev.graded[j] + b <= cap]
    if not chosen:
        return -1, 0.0
    gains = per_expected_token(probe_gains(post, priors, chosen, b), chosen, n, token_weighted)
    best = int(np.argmax(gains))
    return (chosen[best], float(gains[best])) if gains[best] > 0 else (-1, 0.0)


def changepoint_search(
    steps: list[str],
    final_status: str,
    settings: ChangepointSettings,
    priors: Priors | None = None,
    check: bool = False,
    pool: FirstPhasePool | None = None,
    key: str = "",
    relabeled: bool = False,
    memo: DecisionMemo | None = DECISIONS,
    budget: TokenBudget = NO_TOKEN_BUDGET,
) -> Annotator[Annotation]:
    """Probe the most informative prefix until every step is decided and the first error is pinned,
    the budget is spent, or no probe is worth its rollouts; the evidence goes into `ann.evidence` so
    the labeler can label again under the shard's pooled priors (`relabel`). `check`: a correct-answer
    solution drawn for the shard's process-error measurement: its early prefixes are tested first.
    `pool`: the shard's `FirstPhasePool`: once `pool_after` rollouts are spent and the solution is not
    decided, the search hands its evidence (as `key`) to the pool and waits (`Wait`) for the priors
    pooled from the shard's first phases, then goes on under them and its second phase's settings
    (`ChangepointSettings.second_phase`). `relabeled`: the caller labels the annotation again
    (`relabel`, which sets every label, reason and p_good anew), so the search returns
    the counts and the evidence without labeling them first. `memo`: where the search's decisions are
    remembered (memo.py; None: every decision computed). `budget`: the labeler's token budget (probes
    ranked per expected token when it is set; the scheduler enforces it)."""
    n = len(steps)
    ann = Annotation.empty("binary", n)
    ev = Evidence.empty(n, final_status)
    samples = np.zeros(n, dtype=np.int64)  # rollouts asked per prefix, graded or not
    spent = 0
    # the check's probes fit in the solution's budget (at least two of them, or none)
    most = min(settings.check_prefixes, settings.localize_max_rollouts // settings.batch)
    if check and final_status == "correct" and n > 1 and most >= 2:
        # a slip the policy repaired shows as a dip at the prefix that ends on it: test the early ones
        early = early_prefixes(n, most)
        results = yield [Probe.of_steps(steps, j - 1, settings.batch) for j in early]
        for j, result in zip(early, results, strict=True):
            spent += result.total
            samples[j] = result.total
            ev.correct[j], ev.graded[j] = result.correct, result.total - result.unknown
            if j >= 1:
                ann.record(result)
        ev.checked = True
    priors = priors or DEFAULT_PRIORS
    weighted = budget.limited
    return (yield from _search(steps, ann, ev, samples, spent, settings, weighted, priors, pool, key, relabeled, memo))


def probe_value_priors(priors: Priors) -> Priors:
    """The priors a probe's worth is judged under: the search's, with no more overdispersion than the
    default's. The second phase's priors choose k from thin first phases, which barely tell the k apart,
    and under a small k every batch of rollouts looks nearly worthless (the searches gave up unpinned).
    Whether a solution is decided is still read under the shard's k, the cautious one."""
    if priors.k >= DEFAULT_PRIORS.k:
        return priors
    return replace(priors, k=DEFAULT_PRIORS.k)


def decide(
    post: Posterior,
    samples: np.ndarray,
    spent: int,
    settings: ChangepointSettings,
    may_wait: bool,
    token_weighted: bool = False,
) -> Decision:
    """The search's next step from its posterior, the rollouts asked per prefix (`samples`) and in all
    (`spent`): stop, wait for the pooled priors (`may_wait`: its first phase is over), or probe (ranked
    per expected token where `token_weighted`). A pure function of its inputs, so the search remembers
    it (memo.py)."""
    ev, priors = post.evidence, post.priors
    first_bad = first_bad_step(post.p_good, settings.confidence, settings.bad_confidence)
    before = post.p_good[: ev.n if first_bad is None else first_bad]
    unbacked = unbacked_bad(post.p_good, ev, settings.confidence, settings.bad_confidence)
    if (before >= settings.confidence).all() and unbacked is None:
        return Decision(stop="decided")
    if may_wait:
        return Decision(wait=True)  # the first phase is over: go on under the shard's pooled priors
    # Pinning the first error to one step is worth more than the gain threshold says: the step
    # where the error happens is the one a PRM most needs. While it is not pinned, the search
    # probes inside the open interval too, with a higher cap a prefix, on any positive gain.
    interval = open_interval(post.p_good, settings.confidence, settings.bad_confidence)
    localizing = bool(interval) or unbacked is not None
    room = (settings.localize_max_rollouts if localizing else settings.max_rollouts) - spent
    if room <= 0:
        return Decision(stop=UNDECIDED_BUDGET)
    j, gain = -1, 0.0
    value = probe_value_priors(priors)
    candidates = (settings.probe_levels, settings.ambiguous_clean)
    if spent < settings.max_rollouts:
        # no cap a prefix but the budget outside pinning (a cap of 16 was removed in revision 2026-12-06.1)
        j, gain = best_probe(post, value, settings.batch, room, settings.max_rollouts, (), *candidates, token_weighted)
    if (j < 0 or gain < settings.min_gain) and interval:
        extra = _ends(interval)
        j, gain = best_probe(
            post, value, settings.batch, room, settings.localize_cap, extra, *candidates, token_weighted
        )
        gain = gain if gain >= settings.localize_min_gain else 0.0
    # the first bad label lacks a measurement of its own prefix: measure it, whatever the
    # posterior expects (a confident prior is what the rule distrusts)
    if (
        (j < 0 or gain < settings.min_gain)
        and unbacked is not None
        and ev.graded[unbacked] + min(settings.batch, room) <= settings.localize_cap
    ):
        j, gain = unbacked, settings.min_gain
    if j < 0 or gain <= 0.0 or (gain < settings.min_gain and not interval):
        return Decision(stop=UNDECIDED_UNINFORMATIVE)
    return Decision(prefix=j, want=int(samples[j]) + min(settings.batch, room))


def _search(
    steps: list[str],
    ann: Annotation,
    ev: Evidence,
    samples: np.ndarray,
    spent: int,
    settings: ChangepointSettings,
    weighted: bool,
    priors: Priors,
    pool: FirstPhasePool | None,
    key: str,
    relabeled: bool,
    memo: DecisionMemo | None,
) -> Annotator[Annotation]:
    """The search loop (see `changepoint_search`)."""
    final_status = ev.verdict
    first_phase = pool is not None
    while True:
        may_wait = pool is not None and first_phase and spent >= settings.pool_after
        state = state_key(ev, samples, spent, may_wait) if memo is not None else b""
        # the memo's key: the settings and whether probes are ranked per token (a decision depends on both)
        decision = memo.get(priors, (settings, weighted), state) if memo is not None else None
        post: Posterior | None = None
        if decision is None:
            post = Posterior(ev, priors)
            decision = decide(post, samples, spent, settings, may_wait, weighted)
            if memo is not None:
                memo.put(priors, (settings, weighted), state, decision)
        if decision.stop:
            stop = decision.stop
            break
        if decision.wait:
            assert pool is not None
            pool.deposit(key, ev)
            del post  # a waiting search holds its evidence only
            priors = yield Wait(pool.future)
            settings = settings.second_phase()
            first_phase = False
            continue
        j = decision.prefix
        (result,) = yield [Probe.of_steps(steps, j - 1, decision.want)]
        if result.total <= samples[j]:
            # nothing new came back: asking again would ask for the same forever
            stop = UNDECIDED_UNINFORMATIVE
            break
        spent += result.total - int(samples[j])
        samples[j] = result.total
        ev.correct[j] = result.correct
        ev.graded[j] = result.total - result.unknown
        if j >= 1:
            ann.record(result)
    if pool is not None and first_phase:
        pool.deposit(key, ev)  # done within its first phase: its evidence is part of the pooling
    ev.stop = stop
    ann.evidence = ev
    if not relabeled:
        # (a labeler that labels the shard again under its pooled priors overwrites all of this)
        label(ann, post if post is not None else Posterior(ev, priors), settings, stop, final_status)
    return ann
