"""Bisection for the first error (OmegaPRM's), each prefix decided by a test: `search_test` fixed or sprt.

A test answers two questions:
- `want(total)`: how many rollouts in total to ask for next, given `total` measured (None: give up,
  the prefix stays undecided);
- `verdict(correct, total, final)`: good (True), bad (False), or not yet (None); `final` says no
  more rollouts will come (a search budget cut the last measurement short).

The tests:
- `fixed` (`FixedTest`): k rollouts, good when at least one reaches the gold answer (plain bisection,
  the OmegaPRM paper's rule). The hard labeling rule on the counts gives the same label, so the label
  is "mc". One unlucky probe sends the search the wrong way for good.
- `sprt` (`SequentialTest`): Wald's sequential probability ratio test: rollouts come a few at a time
  and sampling stops as soon as the evidence is clear. Its decision is the label ("test"): MC alone
  would call a lucky wrong prefix good.
The boundary found is re-tested at half the error rate (`recheck`), and the search resumes on the side
that failed the re-test. The full solution's verdict is known and never re-sampled. `decide` samples one
prefix until a test (this module's, or OmegaPRM's per-prefix change-point test) reaches a verdict.

Rollouts that could not be graded are not evidence: a test sees the graded ones only, and asks for
more samples until it has what it wants (giving up on a prefix whose rollouts are mostly ungradable).
This module knows nothing of the change-point search (prm_synth/annotate/changepoint/).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Protocol

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.mc import per_step_mc
from prm_synth.annotate.protocol import Annotator, Probe, ProbeResult
from prm_synth.records import LabelSource, VerdictStatus
from prm_synth.records.labels import UNDECIDED_BUDGET


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


def _bisection_text(test: FixedTest | SequentialTest) -> str:
    return (
        "Binary search for the first error (OmegaPRM's bisection): prefixes of a sampled solution are "
        f"continued by the policy, each decided good or bad by {test.describe()}, and the search narrows to "
        "the first bad step; steps before it are good, steps after "
        "it unlabeled."
    )


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


BisectionTest = SequentialTest | FixedTest


def decide_step(
    steps: list[str], step: int, test: BisectionTest, ann: Annotation
) -> Generator[list[Probe], list[ProbeResult], bool | None]:
    """Sample the prefix ending at `step` until `test` reaches a verdict; record what was measured.
    None: the budget (rollouts or tokens) could not pay for a verdict, and the prefix stays undecided."""

    def measure(want: int) -> Generator[list[Probe], list[ProbeResult], ProbeResult]:
        (result,) = yield [Probe.of_steps(steps, step, want)]
        ann.record(result)
        return result

    # Always asked afresh: an earlier estimate of the same prefix (the scheduler's) may hold more.
    decision = yield from decide(test, None, measure)
    if decision is not None:
        return decision[0]
    if step < 0:
        return True
    unknown = ann.mc_unknown[step] if ann.mc_unknown is not None else 0
    if unknown >= UNGRADABLE_GIVE_UP and unknown > 2 * ann.mc_total[step]:
        return ann.mc_correct[step] > 0  # mostly ungradable: what was graded decides, as the hard rule would
    # The budget ran out before the test could decide: "0 of 0 reached the answer" is no evidence of an
    # error, so the prefix is undecided (bad here would pin every wrong answer's error at the first
    # prefix the budget could not pay for).
    return None


def bisect(
    steps: list[str], lo: int, hi: int, test: BisectionTest, ann: Annotation, decisions: dict[int, bool]
) -> Generator[list[Probe], list[ProbeResult], tuple[int, int]]:
    """Narrow (lo good, hi bad) to adjacent indices; lo = −1 is the question alone (good). A prefix the
    budget cannot decide stops the search: (lo, hi) is then returned wider than one step (open)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        good = yield from decide_step(steps, mid, test, ann)
        if good is None:
            return lo, hi
        decisions[mid] = good
        lo, hi = (mid, hi) if good else (lo, mid)
    return lo, hi


def bisection_search(
    steps: list[str],
    final_status: VerdictStatus,
    test: BisectionTest,
    *,
    recheck: bool,
    verify_k: int | None = None,
) -> Annotator[Annotation]:
    """The first-error bisection for one solution, each prefix decided by `test`.

    verify_k: a correct solution is checked by per-step MC with this many rollouts instead of
    trusted. The row's method name is the labeler's to stamp (labeler._record), not the search's."""
    n = len(steps)
    if final_status == "correct":
        if verify_k is not None:
            return (yield from per_step_mc(steps, final_status, verify_k))
        ann = Annotation.empty("binary", n)
        for i in range(n - 1):
            ann.decide(i, True, "inferred")
        ann.record_verdict(n - 1, final_status)
        return ann

    ann = Annotation.empty("binary", n)
    # An incorrect solution's last prefix is known bad. With an ungradable answer nothing is known:
    # a virtual bad index past the end lets the search conclude "no error found".
    end = n - 1 if final_status == "incorrect" else n
    decisions: dict[int, bool] = {}
    lo, hi = yield from bisect(steps, -1, end, test, ann, decisions)
    if recheck:
        strict = test.stricter()
        for _ in range(3):
            if hi - lo > 1:
                break  # the budget stopped the search: nothing is left to re-check with
            if lo >= 0 and (yield from decide_step(steps, lo, strict, ann)) is False:
                decisions[lo] = False
                lo, hi = yield from bisect(steps, -1, lo, test, ann, decisions)
            elif hi < end and (yield from decide_step(steps, hi, strict, ann)):
                decisions[hi] = True
                lo, hi = yield from bisect(steps, hi, end, test, ann, decisions)
            else:
                break

    probed = test.source
    # Steps between the last good prefix and the first bad one that the budget left open are undecided.
    good_until = lo if hi - lo > 1 else hi - 1
    if hi - lo > 1:
        ann.unlabeled_reason = [UNDECIDED_BUDGET if lo < i < hi else None for i in range(n)]
    for i in range(n):
        if good_until < i < hi:
            ann.label_source[i] = "none"  # undecided: unlabeled, whatever rollouts it got (counts kept)
        elif i < hi:
            ann.decide(i, True, probed if i in decisions else "inferred")
        elif i == hi:
            if i == n - 1 and final_status == "incorrect":
                ann.record_verdict(i, final_status)
                ann.label_source[i] = "verdict"
            else:
                ann.decide(i, False, probed)
        else:
            ann.label_source[i] = "none"  # after the first error: unlabeled (counts kept)
    if probed == "mc":
        ann.decided.clear()  # fixed test: the hard rule on the counts gives the same labels
        for i in range(min(good_until + 1, n)):
            if i not in decisions:
                ann.decide(i, True, "inferred")
    return ann
