"""Binary search for the first error (OmegaPRM's bisection), with a test per probe.

With `search_test: changepoint` (the default) the search is `changepoint.changepoint_search`: it
picks the most informative prefix to probe under a change-point posterior and pins the first error
to one step. The bisection below serves `fixed` and `sprt`.

Plain bisection decides each prefix with k rollouts and "MC > 0 means good"; one unlucky probe
sends it the wrong way for good. Here each prefix is decided by the test of `prefix_decision.py`
(by default a sequential test: rollouts come a few at a time, and sampling stops as soon as the
evidence is clear). The boundary found is then re-tested at half the error rate, and the search
resumes on the side that failed the re-test. The full solution's verdict is known and never
re-sampled.
"""

from __future__ import annotations

from collections.abc import Generator

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.changepoint import FirstPhasePool, changepoint_search
from prm_synth.annotate.mc import per_step_mc
from prm_synth.annotate.prefix_decision import (
    ChangepointTest,
    FixedTest,
    SearchTest,
    SequentialTest,
    decide,
    make_test,
)
from prm_synth.annotate.protocol import Annotator, Probe, ProbeResult
from prm_synth.config import BinaryConfig
from prm_synth.schema import VerdictStatus

BisectionTest = SequentialTest | FixedTest


def decide_step(
    steps: list[str], step: int, test: BisectionTest, ann: Annotation
) -> Generator[list[Probe], list[ProbeResult], bool]:
    """Sample the prefix ending at `step` until `test` reaches a verdict; record what was measured."""

    def measure(want: int) -> Generator[list[Probe], list[ProbeResult], ProbeResult]:
        (result,) = yield [Probe.of_steps(steps, step, want)]
        ann.record(result)
        return result

    # Always asked afresh: an earlier estimate of the same prefix (the scheduler's) may hold more.
    decision = yield from decide(test, None, measure)
    if decision is None:  # no budget here: only a prefix whose rollouts are mostly ungradable ends so
        return ann.mc_correct[step] > 0 if step >= 0 else True
    return decision[0]


def bisect(
    steps: list[str], lo: int, hi: int, test: BisectionTest, ann: Annotation, decisions: dict[int, bool]
) -> Generator[list[Probe], list[ProbeResult], tuple[int, int]]:
    """Narrow (lo good, hi bad) to adjacent indices; lo = −1 is the question alone (good)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        good = yield from decide_step(steps, mid, test, ann)
        decisions[mid] = good
        lo, hi = (mid, hi) if good else (lo, mid)
    return lo, hi


def binary_search(
    steps: list[str],
    final_status: VerdictStatus,
    config: BinaryConfig,
    verify: bool = False,
    check: bool = False,
    pool: FirstPhasePool | None = None,
    key: str = "",
    relabeled: bool = False,
) -> Annotator[Annotation]:
    """The binary method's annotator for one solution: `first_error_search` with the config's test.
    `check`: the changepoint search tests this correct-answer solution's early prefixes first;
    `pool`: its shard's `FirstPhasePool` (the solution's `key` in it); `relabeled`: the caller labels
    the changepoint search's annotation again (`changepoint.relabel`), so the search leaves it unlabeled."""
    return first_error_search(
        steps,
        final_status,
        make_test(config),
        recheck=config.recheck,
        verify_k=config.k if verify else None,
        check=check,
        pool=pool,
        key=key,
        relabeled=relabeled,
    )


def first_error_search(
    steps: list[str],
    final_status: VerdictStatus,
    test: SearchTest,
    *,
    recheck: bool,
    verify_k: int | None = None,
    check: bool = False,
    pool: FirstPhasePool | None = None,
    key: str = "",
    relabeled: bool = False,
) -> Annotator[Annotation]:
    """The first-error search for one solution, each prefix decided by `test`.

    verify_k: a correct solution is checked by per-step MC with this many rollouts instead of
    trusted. The row's method name is the labeler's to stamp (labeler._record), not the search's."""
    if isinstance(test, ChangepointTest):
        return (
            yield from changepoint_search(
                steps, final_status, test.settings, check=check, pool=pool, key=key, relabeled=relabeled
            )
        )
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
            if lo >= 0 and not (yield from decide_step(steps, lo, strict, ann)):
                decisions[lo] = False
                lo, hi = yield from bisect(steps, -1, lo, test, ann, decisions)
            elif hi < end and (yield from decide_step(steps, hi, strict, ann)):
                decisions[hi] = True
                lo, hi = yield from bisect(steps, hi, end, test, ann, decisions)
            else:
                break

    probed = test.source
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
    return ann
