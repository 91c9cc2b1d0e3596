"""Per-step Monte Carlo estimation (Math-Shepherd): k rollouts from every step prefix."""

from __future__ import annotations

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.protocol import Annotator, Probe
from prm_synth.records import VerdictStatus


def per_step_mc(
    steps: list[str], final_status: VerdictStatus, k: int, stop_at_first_zero: bool = False, in_order: bool = False
) -> Annotator[Annotation]:
    """Probe every prefix but the last (the full solution is already graded: its verdict is used).

    With `stop_at_first_zero`, prefixes are probed in order and probing stops at the first prefix
    from which no rollout reached the gold answer; the steps after it stay unlabeled. `in_order`:
    one prefix at a time from the first (a token budget, enforced by the scheduler between probes,
    then stops a solution's probing where it runs out, not after every prefix was asked at once).
    """
    n_steps = len(steps)
    ann = Annotation.empty("mc", n_steps)
    probed = range(n_steps - 1)
    if stop_at_first_zero or in_order:
        for step in probed:
            (result,) = yield [Probe.of_steps(steps, step, k)]
            ann.record(result)
            if stop_at_first_zero and result.correct == 0:
                break
        else:
            ann.record_verdict(n_steps - 1, final_status)
    else:
        results = yield [Probe.of_steps(steps, step, k) for step in probed]
        for result in results:
            ann.record(result)
        ann.record_verdict(n_steps - 1, final_status)
    return ann
