"""Binary search for the first error (OmegaPRM's bisection), with a sequential test per probe.

Plain bisection decides each prefix with k rollouts and "MC > 0 means good"; one unlucky probe
sends it the wrong way for good. Here each prefix is decided by Wald's sequential probability
ratio test: rollouts come a few at a time, and sampling stops as soon as the evidence is clear
(a couple of successes settle a good prefix fast; a bad one needs a run of failures). The
boundary found is then re-tested at half the error rate, and the search resumes on the side that
failed the re-test. The full solution's verdict is known and never re-sampled.
"""

from __future__ import annotations

import math
from collections.abc import Generator

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.calibration import RunEstimates, SearchSettings, calibrated_search
from prm_synth.annotate.mc import per_step_mc
from prm_synth.annotate.scheduler import Annotator, Probe, ProbeResult
from prm_synth.config import BinaryConfig

Decision = Generator[list[Probe], list[ProbeResult], bool]


class SequentialTest:
    """Wald's SPRT of H_bad: p = bad_rate against H_good: p = good_rate on Bernoulli rollouts."""

    def __init__(self, bad_rate: float, good_rate: float, error: float, batch: int, max_rollouts: int) -> None:
        if not bad_rate < good_rate:
            raise ValueError("bad_rate must be below good_rate")
        self.upper = math.log((1 - error) / error)  # accept H_good above this
        self.lower = -self.upper  # accept H_bad below this
        self.success = math.log(good_rate / bad_rate)
        self.failure = math.log((1 - good_rate) / (1 - bad_rate))
        self.batch = batch
        self.max_rollouts = max_rollouts

    def stricter(self) -> SequentialTest:
        """The same test at half the error rate (and twice the sample cap), for re-checks."""
        t = SequentialTest.__new__(SequentialTest)
        t.__dict__ = self.__dict__ | {
            "upper": self.upper + math.log(2),
            "lower": self.lower - math.log(2),
            "max_rollouts": self.max_rollouts * 2,
        }
        return t

    def verdict(self, correct: int, total: int) -> bool | None:
        """True (good), False (bad), or None (keep sampling)."""
        llr = correct * self.success + (total - correct) * self.failure
        if llr >= self.upper:
            return True
        if llr <= self.lower:
            return False
        if total >= self.max_rollouts:
            return llr > 0
        return None


class FixedTest:
    """Plain rule: k rollouts, good when at least one reaches the gold answer."""

    def __init__(self, k: int) -> None:
        self.batch = self.max_rollouts = k

    def stricter(self) -> FixedTest:
        return FixedTest(self.max_rollouts * 2)

    def verdict(self, correct: int, total: int) -> bool | None:
        return correct > 0 if total >= self.max_rollouts else None


def decide(steps: list[str], step: int, test: SequentialTest | FixedTest, ann: Annotation) -> Decision:
    """Sample the prefix ending at `step` until `test` reaches a verdict; record what was measured."""
    total = 0
    while True:
        (result,) = yield [Probe.of_steps(steps, step, total + test.batch)]
        ann.record(result)
        total = result.total  # an earlier estimate of the same prefix may already hold more
        verdict = test.verdict(result.correct, result.total)
        if verdict is not None:
            return verdict


def bisect(
    steps: list[str], lo: int, hi: int, test: SequentialTest | FixedTest, ann: Annotation, decisions: dict[int, bool]
) -> Generator[list[Probe], list[ProbeResult], tuple[int, int]]:
    """Narrow (lo good, hi bad) to adjacent indices; lo = −1 is the question alone (good)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        good = yield from decide(steps, mid, test, ann)
        decisions[mid] = good
        lo, hi = (mid, hi) if good else (lo, mid)
    return lo, hi


def binary_search(
    steps: list[str],
    final_status: str,
    config: BinaryConfig,
    verify: bool = False,
    estimates: RunEstimates | None = None,
    key: str = "",
) -> Annotator[Annotation]:
    """The first-error search for one solution. search_test calibrated: `calibration.calibrated_search`
    with the run's shared `estimates` (pass one RunEstimates to every solution of a run or shard)."""
    if config.search_test == "calibrated":
        return (yield from calibrated_search(steps, final_status, SearchSettings.of(config), estimates, key))
    n = len(steps)
    if final_status == "correct":
        if verify:  # a sample of correct solutions is checked by rollouts instead of trusted
            ann = yield from per_step_mc(steps, final_status, config.k)
            ann.method = "binary"
            return ann
        ann = Annotation.empty("binary", n)
        for i in range(n - 1):
            ann.decide(i, True, "inferred")
        ann.record_verdict(n - 1, final_status)
        return ann

    ann = Annotation.empty("binary", n)
    test: SequentialTest | FixedTest
    if config.search_test == "sprt":
        test = SequentialTest(
            config.bad_rate, config.good_rate, config.sprt_error, config.probe_batch, config.probe_max_rollouts
        )
    else:
        test = FixedTest(config.k)
    # An incorrect solution's last prefix is known bad. With an ungradable answer nothing is known:
    # a virtual bad index past the end lets the search conclude "no error found".
    end = n - 1 if final_status == "incorrect" else n
    decisions: dict[int, bool] = {}
    lo, hi = yield from bisect(steps, -1, end, test, ann, decisions)
    if config.recheck:
        strict = test.stricter()
        for _ in range(3):
            if lo >= 0 and not (yield from decide(steps, lo, strict, ann)):
                decisions[lo] = False
                lo, hi = yield from bisect(steps, -1, lo, test, ann, decisions)
            elif hi < end and (yield from decide(steps, hi, strict, ann)):
                decisions[hi] = True
                lo, hi = yield from bisect(steps, hi, end, test, ann, decisions)
            else:
                break

    probed = "test" if config.search_test == "sprt" else "mc"
    for i in range(n):
        if i < hi:
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
        for i in range(min(hi, n)):
            if i not in decisions:
                ann.decide(i, True, "inferred")
    ann.extra["boundary"] = hi if hi < n else -1
    return ann
