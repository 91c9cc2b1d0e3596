"""The test that decides one prefix good or bad from its rollouts: the only place that knows the
`search_test` choices (`fixed`, `sprt`, `changepoint`). Named for what it does (decide a prefix), not a test module.

Both first-error searches (binary search in `search.py`, OmegaPRM's bisection in `omega.py`) ask
`make_test(config)` for their test and run `decide` with it. A test answers two questions:
- `want(total)`: how many rollouts in total to ask for next, given `total` measured (None: give up,
  the prefix stays undecided);
- `verdict(correct, total, final)`: good (True), bad (False), or not yet (None); `final` says no
  more rollouts will come (a search budget cut the last measurement short).

The choices:
- `fixed`: k rollouts, good when at least one reaches the gold answer (plain bisection, the OmegaPRM
  paper's rule). The hard labeling rule on the counts gives the same label, so the label is "mc".
- `sprt`: Wald's sequential probability ratio test: rollouts come a few at a time and sampling stops
  as soon as the evidence is clear. Its decision is the label ("test"): MC alone would call a lucky
  wrong prefix good.
- `changepoint` (the default of the binary method): a change-point posterior over the whole solution
  in which its first error and its prefixes' chances come from the same per-step hazards (no curve
  shape assumed), each solution has its own luck, and rollouts may share their fortune
  (`changepoint_posterior.py`). For a sampled solution it is a search of its own (it picks the prefix to probe
  and pins the first error to one step: `changepoint.changepoint_search`, priors pooled per shard once
  every search is done); inside OmegaPRM's bisection it decides one prefix at a time (`PosteriorTest`).
  `calibrated` named an older posterior with a fixed curve shape; config_upgrade maps it here.

Rollouts that could not be graded are not evidence: a test sees the graded ones only, and asks for
more samples until it has what it wants (giving up on a prefix whose rollouts are mostly ungradable).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Protocol

from prm_synth.annotate.changepoint import ChangepointSettings
from prm_synth.annotate.changepoint_posterior import Posterior
from prm_synth.annotate.protocol import Probe, ProbeResult
from prm_synth.config import BinaryConfig, OmegaConfig
from prm_synth.schema import LabelSource


class PrefixTest(Protocol):
    # The label source of a prefix this test decided: "test" (the decision is the label) or "mc"
    # (the hard rule on the counts gives the same label).
    source: LabelSource

    def want(self, total: int) -> int | None: ...

    def verdict(self, correct: int, total: int, final: bool = False) -> bool | None: ...


@dataclass(frozen=True)
class SequentialTest:
    """Wald's SPRT of H_bad: p = bad_rate against H_good: p = good_rate on Bernoulli rollouts."""

    bad_rate: float
    good_rate: float
    upper: float  # accept H_good above this log-likelihood ratio
    lower: float  # accept H_bad below this
    batch: int
    max_rollouts: int
    source: LabelSource = "test"

    @classmethod
    def of(cls, bad_rate: float, good_rate: float, error: float, batch: int, max_rollouts: int) -> SequentialTest:
        if not bad_rate < good_rate:
            raise ValueError("bad_rate must be below good_rate")
        upper = math.log((1 - error) / error)
        return cls(bad_rate, good_rate, upper=upper, lower=-upper, batch=batch, max_rollouts=max_rollouts)

    @property
    def success(self) -> float:
        """The log-likelihood ratio's step for a rollout that reaches the gold answer."""
        return math.log(self.good_rate / self.bad_rate)

    @property
    def failure(self) -> float:
        """And for one that does not."""
        return math.log((1 - self.good_rate) / (1 - self.bad_rate))

    def stricter(self) -> SequentialTest:
        """The same test at half the error rate (and twice the sample cap), for re-checks."""
        return replace(
            self, upper=self.upper + math.log(2), lower=self.lower - math.log(2), max_rollouts=self.max_rollouts * 2
        )

    def want(self, total: int) -> int:
        return total + self.batch

    def verdict(self, correct: int, total: int, final: bool = False) -> bool | None:
        """True (good), False (bad), or None (keep sampling); a cut measurement decides only when clear."""
        llr = correct * self.success + (total - correct) * self.failure
        if llr >= self.upper:
            return True
        if llr <= self.lower:
            return False
        if total >= self.max_rollouts:
            return llr > 0
        return None

    def describe(self) -> str:
        return (
            f"a sequential test ({self.batch} rollouts at a time, at most {self.max_rollouts} a prefix; "
            f"bad_rate {self.bad_rate}, good_rate {self.good_rate})"
        )

    def card_text(self) -> str:
        return _bisection_text(self)


@dataclass(frozen=True)
class FixedTest:
    """Plain rule: k rollouts, good when at least one reaches the gold answer."""

    k: int
    source: LabelSource = "mc"

    def stricter(self) -> FixedTest:
        return FixedTest(self.k * 2)

    def want(self, total: int) -> int:
        return self.k

    def verdict(self, correct: int, total: int, final: bool = False) -> bool | None:
        """After k rollouts (or fewer, when a budget cut them short): good when MC > 0."""
        return correct > 0 if total >= self.k or (final and total > 0) else None

    def describe(self) -> str:
        return f"k = {self.k} rollouts a prefix, good when MC > 0"

    def card_text(self) -> str:
        return _bisection_text(self)


@dataclass(frozen=True)
class PosteriorTest:
    """One prefix (`step`) of a solution decided by the change-point posterior of all of it.

    `posterior()` is recomputed on every verdict (it reads everything measured so far); the prefix is decided when its P(good) or P(bad) reaches
    `confidence`, given up at `max_rollouts`."""

    posterior: Callable[[], Posterior]
    step: int
    confidence: float
    batch: int
    max_rollouts: int
    source: LabelSource = "test"

    def want(self, total: int) -> int | None:
        return None if total >= self.max_rollouts else total + self.batch

    def verdict(self, correct: int, total: int, final: bool = False) -> bool | None:
        p_good = float(self.posterior().p_good[self.step])
        if total > 0 and max(p_good, 1.0 - p_good) >= self.confidence:
            return p_good >= self.confidence
        return None


@dataclass(frozen=True)
class ChangepointTest:
    """search_test changepoint: the change-point posterior decides (see the module docstring)."""

    settings: ChangepointSettings
    batch: int = 3  # rollouts a prefix probe of OmegaPRM's bisection asks at a time
    max_rollouts: int = 32  # and at most, per prefix
    source: LabelSource = "test"

    def for_prefix(self, posterior: Callable[[], Posterior], step: int) -> PosteriorTest:
        return PosteriorTest(posterior, step, self.settings.confidence, self.batch, self.max_rollouts)

    def describe(self) -> str:
        s = self.settings
        return (
            f"a change-point posterior with per-step hazards and per-solution luck (labels at confidence "
            f"{s.confidence}; at most {s.max_rollouts} rollouts a solution; priors pooled per shard)"
        )

    def card_text(self) -> str:
        s = self.settings
        return (
            "First-error search under a change-point model of how the policy writes: every step has a hazard (the "
            "chance the policy gets it wrong), which sets both where the sampled solution's first error is likely "
            "and how often a clean prefix's rollouts finish without one (no curve shape assumed: hard steps and "
            "uneven difficulty fit), a prefix holding the error reaches the answer at the solution's own luck rate "
            "(a shard-wide prior, up to 0.94), and rollouts of one prefix may share their fortune (beta-binomial "
            "counts, their spread chosen per shard). Every step gets its posterior probability of being "
            "still correct (p_good); the search probes the prefix whose rollouts most reduce the label "
            f"uncertainty and labels a step at confidence {s.confidence}, within {s.max_rollouts} rollouts a "
            "solution. Steps it cannot decide stay unlabeled with the reason; a solution whose rollouts contradict "
            "the model is left unlabeled (`undecided_misfit`); ungradable rollouts are not evidence."
        )


SearchTest = FixedTest | SequentialTest | ChangepointTest


def _bisection_text(test: FixedTest | SequentialTest) -> str:
    return (
        "Binary search for the first error (OmegaPRM's bisection): prefixes of a sampled solution are "
        f"continued by the policy, each decided good or bad by {test.describe()}, and the search narrows to "
        "the first bad step; steps before it are good, steps after "
        "it unlabeled."
    )


def make_test(config: BinaryConfig | OmegaConfig) -> SearchTest:
    """The test `config.search_test` names, with the config's knobs: the one place that reads it."""
    if config.search_test == "fixed":
        return FixedTest(config.k)
    if config.search_test == "sprt":
        return SequentialTest.of(
            config.bad_rate, config.good_rate, config.sprt_error, config.probe_batch, config.probe_max_rollouts
        )
    if config.search_test == "changepoint":
        settings = (
            ChangepointSettings.of(config)
            if isinstance(config, BinaryConfig)
            else ChangepointSettings(confidence=config.confidence)
        )
        return ChangepointTest(settings, batch=max(config.probe_batch, 3), max_rollouts=config.probe_max_rollouts)
    raise ValueError(f"unknown search_test {config.search_test!r}")


UNGRADABLE_GIVE_UP = 16  # ungradable rollouts of one prefix (and twice its graded ones) end its test
Measure = Callable[[int], Generator[list[Probe], list[ProbeResult], ProbeResult | None]]


def decide(
    test: PrefixTest, have: ProbeResult | None, measure: Measure
) -> Generator[list[Probe], list[ProbeResult], tuple[bool, ProbeResult] | None]:
    """Sample one prefix until `test` reaches a verdict: (good, the measurement behind it), or None
    when the test gives up or the budget runs out first.

    `have`: what is already measured of the prefix (None: nothing). `measure(want)` yields the probe
    for `want` rollouts in total and returns the new measurement: fewer than `want` when a budget
    cut it short, None when no rollout fits."""
    while True:
        total = have.total if have else 0  # samples, graded or not
        graded = have.graded if have else 0
        verdict = test.verdict(have.correct if have else 0, graded)
        if verdict is not None and have is not None:
            return verdict, have
        want = test.want(graded)
        if want is None or (have is not None and have.unknown >= UNGRADABLE_GIVE_UP and have.unknown > 2 * graded):
            return None  # the test gives up, or the prefix's rollouts are mostly ungradable
        have = yield from measure(total + want - graded)  # ungradable ones are sampled again
        if have is None or have.total == total:
            return None
        if have.total < total + want - graded:  # cut by the budget: no more rollouts will come
            verdict = test.verdict(have.correct, have.graded, final=True)
            return None if verdict is None else (verdict, have)
