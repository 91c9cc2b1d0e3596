"""First-error search: which prefix to roll out next, when to stop, and how the labels are read
from the change-point posterior (`changepoint_posterior.py`, the model and its exact sums).

The search asks for the probe that most reduces the uncertainty about where the first error is, per
rollout, among a few candidates (prefixes around the posterior's quartiles of the error, ambiguous
probed prefixes, the question alone, the last prefix), scored by `probe_gains`. Under the labeler a
shard's searches run in two phases (`FirstPhasePool`): `pool_after` rollouts each under the weak
default priors, then on under priors pooled from the first phases of the shard's first half of
problems. It goes on until the first error is pinned to one step (bad label on it, good on the step
before) or `localize_max_rollouts` is spent, probing inside the open interval between the last good
and the first bad label when no other probe is worth its rollouts (`open_interval`). A good label needs p_good >= `confidence`, a bad one
P(bad) >= `bad_confidence`, or `confidence` right after a good label (`first_bad_step`: the pair pins
the first error), and rollouts of its own prefix (`unbacked_bad`: the search measures that prefix
before it labels; a label from the prior alone is wrong at any length). A lone bad label must
also hold under a luck prior without the shard's second modes (`lone_bad_stands_from`: on a right answer
the default luck prior, on a wrong one the pooled prior's main mode and each other large one), and a good label past
a tested right answer's test that only its verdict backs needs `bad_confidence` too
(`verdict_only_steps`). A posterior predictive check (leave one probed prefix out, how surprising is
its count?) leaves a solution unlabeled with reason `undecided_misfit` when its data contradict the
model.

A right answer after a wrong step: a stable share of the correct-answer solutions (`check_correct`)
has its early prefixes tested first (at most `check_prefixes`, spread: `early_prefixes`); a dip
below the later prefixes, beyond the rise a clean solution of its difficulty shows, is a slip the
policy repaired (`repaired_slip`: the row says `undecided_unlocated` from there on), and `relabel`
measures on them the shard's rate of process errors among correct answers (`process_error_rate`)
and where they sit (`hidden_error_positions`), which cap how far the untested correct-answer
solutions' steps are trusted (`hidden_error_p_good`); the share of errors the model does not describe
(`unmodelled_error_rate`) caps the tested ones, whose test misses some of them.

A decision (`decide`: stop, wait for the pooled priors, or which prefix to probe) depends on the priors,
the counts and the rollouts asked alone: the search remembers it (`decision_memo.py`), so the states
every search's first phase passes through under the default priors are decided once.

Measured across a suite of simulated worlds that each break one assumption of the older models
(benchmarks/fidelity.py): see the README's "Which annotate method" for what holds where.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.budget_interval import mark_open_interval
from prm_synth.annotate.changepoint_posterior import (
    DEFAULT_PRIORS,
    K_CHOICES,
    P_GRID,
    Q_GRID,
    Evidence,
    Posterior,
    Priors,
    luck_loglik,
    pool_priors,
    probe_gains,
)
from prm_synth.annotate.decision_memo import DECISIONS, Decision, DecisionMemo, state_key
from prm_synth.annotate.labels import (
    AFTER_ERROR,
    UNDECIDED_BUDGET,
    UNDECIDED_UNINFORMATIVE,
    UNDECIDED_UNLOCATED,
    UNDECIDED_VERDICT,
    binomial_cdf,
    first_bad_step,
    labels_from_posterior,
)
from prm_synth.annotate.protocol import Annotator, Probe, Wait
from prm_synth.annotate.token_cost import per_expected_token

UNDECIDED_MISFIT = "undecided_misfit"  # the solution's evidence contradicts the model: no label is trusted
__all__ = [
    "AFTER_ERROR",
    "K_CHOICES",
    "UNDECIDED_MISFIT",
    "Evidence",
    "Posterior",
    "Priors",
    "changepoint_search",
    "pool_priors",
    "relabel",
]


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


def _spread(prefixes: range, most: int = 5) -> list[int]:
    """At most `most` prefixes of an interval, its ends included and the rest evenly between."""
    if len(prefixes) <= most:
        return list(prefixes)
    return sorted({prefixes[round(i * (len(prefixes) - 1) / (most - 1))] for i in range(most)})


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
    put an error near step 37 of a solution never probed), not from evidence against the step."""
    first_bad = first_bad_step(p_good, confidence, bad_confidence)
    return None if first_bad is None else unmeasured_bad(ev, first_bad)


def unmeasured_bad(ev: Evidence, first_bad: int) -> int | None:
    """The prefix a bad label on step `first_bad` rests on (prefix first_bad + 1, or the verdict of an
    incorrect answer for the last step) when it was not measured, else None."""
    j = first_bad + 1
    if j == ev.n:
        return None if ev.verdict == "incorrect" or ev.graded[j - 1] > 0 else j - 1
    return None if ev.graded[j] > 0 else j


def best_probe(
    post: Posterior,
    priors: Priors,
    batch: int,
    room: int,
    cap: int,
    extra: Sequence[int] = (),
    token_weighted: bool = False,
) -> tuple[int, float]:
    """(prefix j, expected bits of first-error uncertainty removed per rollout) of the best candidate probe
    (`probe_gains` scores them). `extra`: more candidate prefixes (the open interval the search is
    pinning the first error in)."""
    ev = post.evidence
    n = ev.n
    b = min(batch, room)
    if b <= 0:
        return -1, 0.0
    p_clean = np.concatenate([[1.0], post.p_good[: n - 1]])  # P(prefix j clean) = P(e >= j)
    candidates = {0, n - 1, *extra}
    for level in (0.8, 0.5, 0.2):  # around the posterior's quartiles and median of the error
        first_below = int(np.searchsorted(-p_clean, -level))  # first prefix with P(clean) < level
        candidates |= {first_below - 1, first_below}
    candidates |= {j for j in range(n) if ev.graded[j] and 0.05 < p_clean[j] < 0.95}
    chosen = [j for j in sorted(candidates) if 0 <= j < n and ev.graded[j] + b <= cap]
    if not chosen:
        return -1, 0.0
    gains = per_expected_token(probe_gains(post, priors, chosen, b), chosen, n, token_weighted)
    best = int(np.argmax(gains))
    return (chosen[best], float(gains[best])) if gains[best] > 0 else (-1, 0.0)


@dataclass(frozen=True)
class ChangepointSettings:
    """The search's knobs; `of(config)` reads them from a binary annotate config."""

    confidence: float = 0.9
    # P(bad) a bad label needs. A posterior labels right about as often as it says; the step a bad
    # label pins sits near the threshold more than good labels do (those are mostly at 0.99), so bad
    # labels at 0.9 were right 0.88-0.91 of the time where a hard step and luck meet (fidelity suite).
    # Right after a good label `confidence` is enough (`first_bad_step`): the good step before rules
    # out the earlier placements those lone labels got wrong.
    bad_confidence: float = 0.95
    max_rollouts: int = 56  # per solution: with the sampled solution, under 60 samples a question
    batch: int = 4  # rollouts a probe asks for
    prefix_cap: int = 16  # graded rollouts one prefix may take
    min_gain: float = 0.01  # bits of first-error uncertainty a rollout must be expected to remove
    misfit_level: float = 0.01  # the predictive check's false-alarm rate for a solution the model fits
    # while the first error is not pinned to one step: graded rollouts one prefix may take
    localize_cap: int = 32
    # the budget while the first error is not pinned (else max_rollouts), with the second phase's
    # threshold below: a larger budget lets a search that is getting somewhere go on, a higher threshold
    # stops those that are not. 128 with 0.0085 against 80 with 0.007 (17 worlds x 18 seeds): mean
    # first-error accuracy 0.365 -> 0.375 at 35.6 -> 35.4 rollouts a question, `luck_30` 0.291 ->
    # 0.316, `luck_05` .. `luck_30` 38.4-39.4 -> 37.0-38.6 rollouts a question, about as many
    # world-seeds under 0.95 precision (36 -> 37 of 306)
    localize_max_rollouts: int = 128
    # Share of correct-answer solutions whose early prefixes (`early_prefixes`) are each tested with
    # `batch` rollouts before the search: the shard's rate of process errors among correct-answer
    # solutions is measured on them (`relabel`), and sets how far the others' early steps are trusted.
    check_correct: float = 0.25
    # the bits a rollout must still be expected to remove while the first error is not pinned. At
    # 0.001 a solution whose error sits early, where clean prefixes finish about as rarely as luck
    # allows, took the whole budget (80 then) and was rarely pinned (fidelity `in_model`: 28 of 60 rows
    # with an error); at 0.005 those stop sooner and the same rows are pinned. At 0.006 the searches
    # that end unpinned stop a few probes sooner: 2-4 fewer rollouts a question (fidelity luck_05 ..
    # luck_30, in_model, three seeds), fewer rollouts per located error, first-error accuracy within
    # 0.00-0.03 (0.007: 0.04 lower at luck 0.05). Under the default priors a probe that would pin a
    # clear error can look nearly worthless: at 0.007 a clear error at step 1 of 20 was left unpinned
    # (24 rollouts of 0s read as a hopeless problem, the prefix that would have shown it clean worth
    # 0.0062 bits a rollout: test_the_search_pins_a_clear_error_to_one_step).
    localize_min_gain: float = 0.006
    # the same once the search goes on under the shard's pooled priors (`second_phase`), which weigh a
    # hopeless problem as often as the shard holds one, so a probe's worth is the shard's own reading.
    # At the budget of 80 it was 0.007 (17 worlds x 9 seeds: 1.7 fewer rollouts a question than 0.006,
    # the luck_05 .. luck_30 worlds, the outside measurement's, under the 40 rollouts a question issue
    # 29 allows); at 128, 0.0085 (`localize_max_rollouts`)
    second_phase_localize_min_gain: float = 0.0085
    check_prefixes: int = 8  # at most this many early prefixes tested on a checked solution (any length)
    # rollouts a solution's search spends under the default priors before it goes on under the shard's
    # pooled ones (`FirstPhasePool`): enough for a first look at every solution, a check's early
    # prefixes included
    pool_after: int = 16
    # the default priors' weight while the second phase chooses the rollouts' overdispersion k, in
    # solutions per solution of the shard (`second_phase_priors`)
    k_choice_default_weight: float = 0.5
    # a token budget is set (`max_rollout_tokens`): probes are ranked per expected token (`token_cost.py`)
    token_weighted: bool = False

    @classmethod
    def of(cls, config: Any) -> ChangepointSettings:
        return cls(
            confidence=config.confidence,
            bad_confidence=max(config.confidence, cls.bad_confidence),
            max_rollouts=config.changepoint_max_rollouts,
            token_weighted=getattr(config, "max_rollout_tokens", None) is not None,
        )

    def second_phase(self) -> ChangepointSettings:
        """The settings a search goes on under once it has the shard's pooled priors."""
        return replace(self, localize_min_gain=self.second_phase_localize_min_gain)


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
    remembered (`decision_memo.py`; None: every decision computed)."""
    n = len(steps)
    ann = Annotation.empty("binary", n)
    ev = Evidence.empty(n, final_status)
    samples = np.zeros(n, dtype=np.int64)  # rollouts asked per prefix, graded or not
    spent = 0
    if check and final_status == "correct" and n > 1:
        # a slip the policy repaired shows as a dip at the prefix that ends on it: test the early ones
        early = early_prefixes(n, settings.check_prefixes)
        results = yield [Probe.of_steps(steps, j - 1, settings.batch) for j in early]
        for j, result in zip(early, results, strict=True):
            spent += result.total
            samples[j] = result.total
            ev.correct[j], ev.graded[j] = result.correct, result.total - result.unknown
            if j >= 1:
                ann.record(result)
        ev.checked = True
    priors = priors or DEFAULT_PRIORS
    return (yield from _search(steps, ann, ev, samples, spent, settings, priors, pool, key, relabeled, memo))


def second_phase_priors(first_phase: Sequence[Evidence], settings: ChangepointSettings) -> Priors:
    """The priors the searches go on under after their first phase: the shard's luck and difficulty
    classes pooled from first phases as `relabel` pools them (8 solutions' worth of the default), the
    rollouts' overdispersion k chosen with the default weighing half as much as the shard's solutions
    (`k_choice_default_weight`).

    Luck and classes pooled at that half weight left the second phase's luck prior about as wide as
    the default's: a clean prefix that finishes about half the time could still be an error behind it
    with luck near 0.5, and the search paid rollouts to rule out what the shard had ruled out already
    (fidelity, 17 worlds x 9 seeds: mean first-error accuracy 0.359 -> 0.373, 37.2 -> 37.8 rollouts a
    question; `luck_05` 0.574 -> 0.638, `hard_step` 0.904 -> 0.952). Pooled with k as fully as well, the
    searches took the k the thin first phases barely prefer and stopped on wrong bad labels where a hard
    step breaks the classes' smooth curve (fidelity `hard_step`, 300 problems: bad precision 0.977 ->
    0.944)."""
    # the search's probe scoring assumes no fresh-error luck (`probe_gains`); `relabel` pools it. The
    # first phases barely tell the k apart (`probe_value_priors`): with overdispersion paying its price
    # the searches took the largest k and stopped on evidence their relabeling read more cautiously
    # (fidelity `hard_step` seed 0: bad precision 0.977 -> 0.944, 7.5 fewer rollouts a question)
    return pool_priors(
        first_phase,
        recents=(),
        dispersion_price=False,
        k_strength=settings.k_choice_default_weight * len(first_phase),
    )


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


def probe_value_priors(priors: Priors) -> Priors:
    """The priors a probe's worth is judged under: the search's, with no more overdispersion than the
    default's. The second phase's priors choose k from first phases of about 16 rollouts a solution,
    which barely tell the k apart (the winner's fit ahead of the runner-up's by under 2 nats in all 24
    shards measured, 8 fidelity worlds x 3 seeds, the winner changing with the seed), and at k 12
    every batch of rollouts looks nearly worthless: the searches gave up unpinned
    (`undecided_uninformative`) where the same world under another seed pinned the error (fidelity
    `luck_05`, first-error accuracy 0.39 and 0.51 on seeds 1 and 2 against 0.66 on seed 0). Whether a
    solution is decided is still read under the shard's k, the cautious one."""
    if priors.k >= DEFAULT_PRIORS.k:
        return priors
    return replace(priors, k=DEFAULT_PRIORS.k)


def decide(post: Posterior, samples: np.ndarray, spent: int, settings: ChangepointSettings, may_wait: bool) -> Decision:
    """The search's next step from its posterior, the rollouts asked per prefix (`samples`) and in all
    (`spent`): stop, wait for the pooled priors (`may_wait`: its first phase is over), or probe. A pure
    function of its inputs, so the search remembers it (`decision_memo.py`)."""
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
    if spent < settings.max_rollouts:
        j, gain = best_probe(post, value, settings.batch, room, settings.prefix_cap, (), settings.token_weighted)
    if (j < 0 or gain < settings.min_gain) and interval:
        j, gain = best_probe(
            post, value, settings.batch, room, settings.localize_cap, _spread(interval), settings.token_weighted
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
        decision = memo.get(priors, settings, state) if memo is not None else None
        post: Posterior | None = None
        if decision is None:
            post = Posterior(ev, priors)
            decision = decide(post, samples, spent, settings, may_wait)
            if memo is not None:
                memo.put(priors, settings, state, decision)
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


def hidden_error_p_good(post: Posterior, rate: float, positions: Sequence[float] = ()) -> np.ndarray:
    """The posterior's p_good under the cap `hidden_error_cap` puts on it."""
    return np.minimum(post.p_good, hidden_error_cap(post, rate, positions))


def hidden_error_cap(post: Posterior, rate: float, positions: Sequence[float] = ()) -> np.ndarray:
    """The most p_good of a correct-answer solution whose early steps were not tested may be, when a
    share `rate` of the shard's correct-answer solutions hold a process error: the error, if any, placed where the
    tested ones held theirs (`positions`, each a share of its solution's length: `hidden_error_positions`),
    each spread evenly over the steps up to it (`found_error_spread`), with the posterior's own
    placement counted as one more; never more trusting than the posterior. The posterior's placement
    alone is a prior: in a world whose policy slips early and repairs (the fidelity suite's `repair`)
    it put the error late and labeled the slipped steps good."""
    n = post.evidence.n
    p_error = post.p_error[:n]
    total = p_error.sum()
    shape = np.cumsum(p_error) / total if total > 0 else np.linspace(1.0 / n, 1.0, n)
    placed = (found_error_spread(positions, n) + shape) / (len(positions) + 1.0)
    return 1.0 - rate * placed


def found_error_spread(positions: Sequence[float], n: int) -> np.ndarray:
    """[step i]: how many of the errors the tested solutions' tests found (`positions`, shares of their
    length) an n-step solution holds at step i or before, each found at share x standing for one
    placed evenly over steps 0 .. floor(x n). A test of 4 rollouts a prefix finds a repaired slip the
    more easily the later it sits (a later clean prefix finishes more often, so its dip is deeper):
    where the found ones sit, the missed ones sit earlier. Counted where found (fidelity `repair` seed
    5), the shard's slips read 0.15-0.25 of the way in while 9 of the 49 true ones were at step 0, and
    the untested right answers' first steps kept good labels at p_good 0.95-0.998. Spread (18 seeds):
    `repair` good precision 0.873 -> 0.932 at worst, 10 -> 7 seeds under 0.95 (good or bad), for
    0.06-0.10 less coverage there and up to 0.04 in the other worlds."""
    last = np.floor(np.asarray(positions, dtype=float) * n + 1e-9)  # the step each one falls on here
    steps = np.arange(n, dtype=float)[:, None]
    return np.minimum(1.0, (steps + 1.0) / (last[None, :] + 1.0)).sum(axis=1)


def unmodelled_error_position(post: Posterior, settings: ChangepointSettings) -> float | None:
    """Where a tested correct-answer solution holds a process error the model does not describe, as a
    share of its length (step / n): the slipped step of a repaired slip, or the likeliest first error
    of a solution the model fails (`misfit`); None otherwise. An error the model does describe (a
    wrong step and a lucky answer) is already in every solution's posterior, so only these place the
    hidden errors of the untested ones (`hidden_error_p_good`)."""
    ev = post.evidence
    slip = repaired_slip(ev, hazard=typical_hazard(post))
    if slip is not None:
        return max(slip - 1, 0) / ev.n  # the dip's prefix ends on the slipped step
    if post.misfit(settings.misfit_level):
        return int(np.searchsorted(np.cumsum(post.p_error), 0.5)) / ev.n
    return None


def typical_hazard(post: Posterior) -> float:
    """The solution's typical per-step hazard: its difficulty classes' hazards under its posterior."""
    return float(post.p_marginal() @ P_GRID)


def repaired_slip(ev: Evidence, significance: float = 0.05, hazard: float = 0.0) -> int | None:
    """The first prefix of a correct-answer solution whose rollouts fall clearly below those of the
    prefixes after it (one-sided binomial test against their pooled rate, Bonferroni over the probed
    prefixes), or None. A correct answer after such a dip: the policy slipped at the dip's last step
    and repaired it later, so the later prefixes look clean again.

    A clean prefix's rollouts finish less often the more steps are left (each step has its hazard),
    so a later prefix k's rate is discounted by (1 - hazard)^(k - j), the rise a clean solution of
    this difficulty shows between them (`typical_hazard`): without it the slow natural rise of a long
    solution read as a slip (a correct 400-step solution had step 36 labeled bad). A steep rise after
    a hard step still reads as a dip: that costs coverage of such solutions, never a wrong label.
    Tried and dropped: a fall below the prefix before (too weak on 4 rollouts a prefix: good
    precision 0.62 in the fidelity suite's `repair` world, against 0.94 here)."""
    probed = [j for j in range(ev.n) if ev.graded[j] > 0]
    for j in probed:
        later = [k for k in probed if k > j]
        total = sum(int(ev.graded[k]) for k in later)
        if total < 8:
            break
        hits = sum(int(ev.correct[k]) * (1.0 - hazard) ** (k - j) for k in later)
        if binomial_cdf(int(ev.correct[j]), int(ev.graded[j]), hits / total) < significance / len(probed):
            return j
    return None


def label(
    ann: Annotation,
    post: Posterior,
    settings: ChangepointSettings,
    stop: str,
    final_status: str,
    process_error_rate: float = 0.0,
    error_positions: Sequence[float] = (),
    unmodelled_rate: float = 0.0,
) -> None:
    """Labels, sources, reasons and p_good from a posterior (again after pooling: `relabel`).
    `process_error_rate`, `error_positions`, `unmodelled_rate`: what the shard measured of the errors a
    right answer may hide (`relabel`); a right answer's steps are trusted no further than they allow
    (`right_answer_cap`), and the steps that leaves undecided say so (`undecided_unlocated`)."""
    n = len(ann.label_source)
    p_good, belief = post.p_good, post.belief
    cap = right_answer_cap(post, final_status, process_error_rate, error_positions, unmodelled_rate)
    hidden = cap is not None
    if cap is not None:
        p_good, belief = np.minimum(p_good, cap), np.minimum(belief, cap)
    slip = repaired_slip(post.evidence, hazard=typical_hazard(post)) if final_status == "correct" else None
    if post.misfit(settings.misfit_level):
        # a correct answer whose rollouts contradict the model: most often a repaired slip, not located
        reason = UNDECIDED_UNLOCATED if final_status == "correct" else UNDECIDED_MISFIT
        lab_labels: list[bool | None] = [None] * n
        reasons: list[str | None] = [reason] * n
    elif slip is not None:
        # the prefix of steps 0..slip-1 dipped: the error is there or before, and the steps from the
        # first that may hold it on are not labeled good
        lab = labels_from_posterior(
            p_good[: max(slip - 1, 0)].tolist(), settings.confidence, UNDECIDED_UNLOCATED, settings.bad_confidence
        )
        rest = n - len(lab.labels)
        lab_labels = list(lab.labels) + [None] * rest
        reasons = list(lab.reasons) + [UNDECIDED_UNLOCATED] * rest
    else:
        undecided = UNDECIDED_VERDICT if stop == "decided" else stop
        if hidden and (p_good < post.p_good).any():
            undecided = UNDECIDED_UNLOCATED
        lab = labels_from_posterior(p_good.tolist(), settings.confidence, undecided, settings.bad_confidence)
        lab_labels, reasons = list(lab.labels), list(lab.reasons)
    right_answer = final_status != "incorrect"
    if right_answer and post.evidence.checked:
        # past a tested solution's test a right answer may rest on its verdict alone, which says little
        # where luck is high: such a good label sits near the threshold, as a lone bad label does, and
        # needs `bad_confidence` too (fidelity `high_luck` seed 2: 13 of 107 good labels past the test
        # wrong, at p_good 0.90-0.97). An untested one's steps are capped by the shard's measured rate
        # instead (`right_answer_cap`); for them too the rule left a small shard no row fully labeled
        # clean, on which the judge's -1 rate is measured (tests/test_consensus.py)
        for i in verdict_only_steps(post.evidence):
            if lab_labels[i] is True and p_good[i] < settings.bad_confidence:
                lab_labels[i], reasons[i] = None, UNDECIDED_VERDICT
    first_bad = next((i for i, x in enumerate(lab_labels) if x is False), None)
    if first_bad is not None:
        stands = lone_bad_stands_from(post, lab_labels, first_bad, settings.bad_confidence, right_answer)
        lab_labels[first_bad:stands] = [None] * (stands - first_bad)
        reasons[first_bad:stands] = [UNDECIDED_UNLOCATED] * (stands - first_bad)
        first_bad = stands if stands < n else None
        if first_bad is not None:
            lab_labels[first_bad], reasons[first_bad] = False, None  # the first that holds both ways
    # (the first bad label as it now stands: a wrong answer's may have moved on to a measured prefix)
    unbacked = unmeasured_bad(post.evidence, first_bad) if first_bad is not None else None
    if first_bad is not None and unbacked is not None:
        # no measurement of the first bad step's own prefix: from it on nothing is labeled
        why = UNDECIDED_BUDGET if stop == UNDECIDED_BUDGET else UNDECIDED_UNINFORMATIVE
        lab_labels[first_bad:] = [None] * (n - first_bad)
        reasons[first_bad:] = [why] * (n - first_bad)
    mark_open_interval(lab_labels, reasons, p_good.tolist(), settings.confidence)  # where the error lies
    ann.p_good = [float(p) for p in belief]
    ann.unlabeled_reason = reasons
    ann.decided.clear()
    ann.record_verdict(n - 1, final_status)
    for i, lbl in enumerate(lab_labels):
        measured = ann.mc_total[i] > 0
        if lbl is None:
            ann.label_source[i] = "none"  # counts stay; no rule may turn them into a label
        elif i == n - 1 and ann.label_source[i] == "verdict":
            ann.decide(i, lbl, "verdict")
        else:
            ann.decide(i, lbl, "test" if measured else "inferred")


def verdict_only_steps(ev: Evidence) -> range:
    """The steps no probed prefix covers (those from the last probed prefix's end on): only the
    solution's own verdict speaks of them."""
    probed = np.flatnonzero(ev.graded > 0)
    return range(int(probed[-1]) if len(probed) else 0, ev.n)


def right_answer_cap(
    post: Posterior,
    final_status: str,
    rate: float,
    positions: Sequence[float],
    unmodelled_rate: float,
) -> np.ndarray | None:
    """The most p_good each step of a solution whose answer may be right can have, given what the shard
    measured of the errors right answers hide (None: no cap; a wrong answer, or no measurement yet).
    A step's p_good comes from evidence about it or from that measurement, never from the prior alone:
    - untested (and every ungradable answer, which is never tested): the shard's rate of process errors
      among correct answers, `rate` (`hidden_error_cap`). An ungradable answer whose rollouts say it is
      right hides errors as a right one does (fidelity `mixed`, 10 % of answers ungradable: their
      good labels were wrong 38 times in 78 on seed 1, every step labeled good after 4 rollouts of the
      last prefix);
    - tested (`check_correct`): the share of errors the model does not describe, which its test may
      have missed (`unmodelled_error_rate`).
    Tried and not kept: the steps after the test (it covers the first half) capped as an untested
    solution's. Lucky answers hid errors there (fidelity `high_luck` seed 2: good precision 0.91 ->
    0.99), but where luck is 0.2 the same cap left the second half of most right answers unlabeled
    (benchmarks/consensus_quality.py: rows fully labeled 0.52 -> 0.42, their labels right 0.997 before)."""
    if final_status == "incorrect":
        return None
    if not post.evidence.checked:
        return hidden_error_cap(post, rate, positions) if rate > 0 else None
    return hidden_error_cap(post, unmodelled_rate, positions) if unmodelled_rate > 0 else None


def lone_bad_stands_from(
    post: Posterior, labels: Sequence[bool | None], first_bad: int, bad_confidence: float, right_answer: bool = True
) -> int:
    """The step from which a solution's bad labels stand (n: none does), its first bad label at
    `first_bad`. Paired with a good label right before it, the first one does. Alone, it must also hold
    under a luck prior without the luck a shard's pooling may have learned from rows that are not luck:
    a solution that reaches the answer about half the time from every prefix before a hard last step
    reads as an early error and a lucky answer, and a shard with such rows teaches its pooled luck a
    mode near 0.5 (fidelity `hard_step`, whose luck is 0: 12 % of the pooled prior there).
    - A right (or ungradable) answer: the default luck prior (little luck, room for a lot), the shard's
      difficulty and overdispersion kept; none stands unless the first does. Its error needs luck for
      the right answer, so the mode decides (`mixed`, `hard_step_luck`: such labels right 0.80 and 0.85
      of the time over three seeds; against a flat 0.99 for them: bad precision as good or better,
      `mixed` seed 1 0.955 -> 0.968, and first-error accuracy higher, `luck_30` 0.24 -> 0.28 on seed 0).
    - A wrong answer: the shard's luck prior's main mode alone, and each other mode
      with `MODE_SHARE` of the prior or more, one by one (`luck_modes`); the labels stand from the
      first step bad under each of them too (at the latest the last step, which the wrong answer puts
      the error in or before). Where every problem's luck is high (`high_luck`, one mode at 0.6)
      nothing changes. The default prior here removed right labels where luck really is 0.6 and left
      the paired ones, fewer and less often right (`high_luck` seed 2: bad precision 0.973 -> 0.833).
      Where the shard's problems really come in two luck populations (`two_lucks`: half at luck 0,
      half at 0.6) the main mode alone was the lucky one on some draws, and a row reaching the answer
      half the time from every prefix kept its lone bad label where it was an unlucky problem's hard
      last step (nine seeds: bad precision under 0.95 on three, 0.905 at worst; each mode of a quarter
      or more: 0.967 at worst, and no other world's rows changed)."""
    n = post.evidence.n
    if first_bad > 0 and labels[first_bad - 1] is True:
        return first_bad
    if right_answer:
        # none: labeled under it already
        priors = [] if post.priors.q is DEFAULT_PRIORS.q else [DEFAULT_PRIORS.q]
    else:
        priors = luck_modes(post.priors.q)  # none: one mode, the prior it was labeled under
    if not priors:
        return first_bad
    p_bad = np.min([1.0 - Posterior(post.evidence, replace(post.priors, q=q)).p_good for q in priors], axis=0)
    last = first_bad + 1 if right_answer else n  # a right answer's labels stand with its first or not at all
    return next((i for i in range(first_bad, last) if p_bad[i] >= bad_confidence), n)


MODE_RISE = 1.5  # a luck weight this many times its neighbour's, walking away from the peak, starts another mode


MODE_SHARE = 0.25  # a luck mode with this much of the prior is one a lone bad label must hold under


def luck_modes(q: np.ndarray) -> list[np.ndarray]:
    """The luck prior's modes a lone bad label must hold under, each alone (`_alone`): its main mode
    (the grid points reached from its peak while the weights do not rise again, `_mode_span`) and each
    other mode with at least `MODE_SHARE` of the weight, peeled off the prior peak by peak; none when
    the main mode is all of it (one mode: a broad or flat prior included)."""
    rest = np.array(q, dtype=float)
    parts = []
    while rest.sum() > 0:
        span = _mode_span(rest)
        part = np.zeros(len(q))
        part[span] = rest[span]
        parts.append(part)
        rest[span] = 0.0
    if len(parts) == 1:
        return []
    return [_alone(part) for i, part in enumerate(parts) if i == 0 or part.sum() >= MODE_SHARE]


def _mode_span(q: np.ndarray) -> slice:
    """The grid points reached from the peak of `q` while the weights do not rise again by more than
    `MODE_RISE` from one point to the next."""
    peak = int(np.argmax(q))
    lo, hi = peak, peak
    while lo > 0 and q[lo - 1] <= MODE_RISE * q[lo]:
        lo -= 1
    while hi < len(q) - 1 and q[hi + 1] <= MODE_RISE * q[hi]:
        hi += 1
    return slice(lo, hi + 1)


def _alone(part: np.ndarray) -> np.ndarray:
    """A mode's weights as a prior of their own: almost nothing elsewhere (never zero: a log prior)."""
    alone = np.maximum(part, 1e-9)
    return alone / alone.sum()


def _shared_prefixes(a: Sequence[str], b: Sequence[str]) -> int:
    """The last prefix two solutions share: prefixes 0..m (m steps each) are the same text, so the
    scheduler answered both from the same rollouts."""
    m = 0
    while m < min(len(a), len(b)) and a[m] == b[m]:
        m += 1
    return m


def _without(ev: Evidence, upto: int) -> Evidence:
    """The evidence with prefixes 0..upto left out (measured for another solution already)."""
    correct, graded = ev.correct.copy(), ev.graded.copy()
    correct[: upto + 1] = 0
    graded[: upto + 1] = 0
    return Evidence(ev.n, correct, graded, ev.verdict, ev.stop, ev.checked)


def _siblings_loglik(
    i: int, group: list[int], evidence: list[Evidence], steps: list[list[str]], priors: Priors
) -> np.ndarray:
    """[luck]: what the other solutions of solution i's problem say about its luck, every prefix
    counted once: a sibling's prefixes that solution i, or a sibling before it, also has are left
    out (they hold the same rollouts)."""
    total = np.zeros(len(Q_GRID))
    seen = [i]
    for j in group:
        if j == i:
            continue
        if any(steps[j] == steps[k] for k in seen):
            continue  # the same text again: its rollouts and its verdict are already counted
        shared = max(_shared_prefixes(steps[j], steps[k]) for k in seen)
        total += luck_loglik(_without(evidence[j], shared), priors)
        seen.append(j)
    return total


def relabel(
    anns: Sequence[Annotation],
    settings: ChangepointSettings,
    problems: Sequence[tuple[str, list[str]]] | None = None,
) -> Priors:
    """Label every annotation again under the priors pooled from all of them (the shard's). Solutions
    of one problem (`problems`: each annotation's problem id and steps) share its luck: each is
    labeled under the shard's prior times what its siblings' evidence says about it."""
    keys = list(problems) if problems is not None else [(str(i), []) for i in range(len(anns))]
    kept = [(a, key) for a, key in zip(anns, keys, strict=True) if isinstance(a.evidence, Evidence)]
    evidence = [a.evidence for a, _ in kept]
    steps = [key[1] for _, key in kept]
    priors = pool_priors(evidence)
    by_problem: dict[str, list[int]] = {}
    for i, (_, (problem, _)) in enumerate(kept):
        by_problem.setdefault(problem, []).append(i)
    owns = []
    for i, (_, (problem, _)) in enumerate(kept):
        group = by_problem[problem]
        owns.append(
            priors if len(group) == 1 else replace(priors, siblings=_siblings_loglik(i, group, evidence, steps, priors))
        )
    # Solutions whose searches measured the same counts under the same priors (a third of a shard of
    # short ones: correct answers the first probes decided) share one posterior, and its model check
    built: dict[tuple[object, ...], Posterior] = {}
    posts = []
    for ev, own in zip(evidence, owns, strict=True):
        same = (own.token, ev.n, ev.verdict, ev.checked, ev.correct.tobytes(), ev.graded.tobytes())
        if same not in built:
            built[same] = post = Posterior(ev, own)
            # every label asks its model check (`label`), which reads the forward states: asked now,
            # while they are held, not after the shard's later posteriors pushed them out and the
            # pass had to run again (`_hold_states`; a tenth of the passes at 3-12 steps)
            post.misfit(settings.misfit_level)
        posts.append(built[same])
    checked = [p for p in posts if p.evidence.checked]
    rate = process_error_rate(checked, settings)
    positions = hidden_error_positions(checked, settings)
    unmodelled = unmodelled_error_rate(len(checked), len(positions))
    for (ann, _), ev, post in zip(kept, evidence, posts, strict=True):
        label(ann, post, settings, ev.stop, ev.verdict, rate, positions, unmodelled)
    return priors


def process_error_rate(checked: Sequence[Posterior], settings: ChangepointSettings) -> float:
    """The shard's share of correct-answer solutions that hold a process error, measured on those whose
    early prefixes were tested: one counts when its posterior puts an error in it at least as likely
    as not, or when its rollouts dip and rise again (a repaired slip, or the model's misfit)."""
    found = sum(1 for p in checked if 1.0 - p.p_good[-1] >= 0.5 or unmodelled_error_position(p, settings) is not None)
    return _tested_share(found, len(checked))


def _tested_share(found: int, tested: int) -> float:
    """The share of the shard's tested solutions in which their test found something, under a
    Beta(0.5, 4.5) prior that keeps a shard with few tested solutions from trusting them blindly."""
    return (found + 0.5) / (tested + 5.0)


def unmodelled_error_rate(checked: int, found: int) -> float:
    """The chance that a tested correct-answer solution whose test found nothing still holds an error
    the model does not describe (a slip the policy repaired), from the shard's tested ones (`checked`)
    and those whose test found such an error (`found`, `unmodelled_error_position`). Of a true rate r
    a test of power w finds r w, and leaves r (1 - w) / (1 - r w) in the rest: about the found share
    itself where w is near one half, as it was in the fidelity suite's `repair` world (a slip the
    policy repairs on the next step with chance 0.5; 4 rollouts a tested prefix): there, about half
    of the tested solutions that held an error showed it. Trusting the test fully labeled their
    slipped steps good (`repair` seed 2: good precision 0.79, 125 of 271 good labels on tested
    solutions wrong). A test of more power only makes this cautious: coverage, never a wrong label."""
    return _tested_share(found, checked)


def hidden_error_positions(checked: Sequence[Posterior], settings: ChangepointSettings) -> list[float]:
    """Where the tested correct-answer solutions hold the errors the model does not describe."""
    return [x for p in checked if (x := unmodelled_error_position(p, settings)) is not None]
