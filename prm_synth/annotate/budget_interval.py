"""Where the first error lies when a search stops before pinning it.

A search that runs out of rollouts or tokens (or of probes worth them) before the first error is
pinned to one step leaves the steps from the first undecided one on unlabeled. The posterior still
says where the error lies: the steps whose prefix holds it with probability `confidence` or more
(1 - p_good >= confidence) are past it, and their reason becomes `after_error`; the steps between the
last good label and them keep the search's own reason. So the row reports the open interval the error
lies in, [first undecided step, first step past it with `confidence`], not the whole rest of the
solution.
"""

from __future__ import annotations

from collections.abc import Sequence

from prm_synth.records.labels import (
    AFTER_ERROR,
    TOKEN_BUDGET,
    TRUNCATED_THINKING,
    UNDECIDED_BUDGET,
    UNDECIDED_UNINFORMATIVE,
    UNDECIDED_VERDICT,
)

# The reasons of a search that stopped early; the steps past the interval are re-read.
STOPPED_EARLY = frozenset({UNDECIDED_BUDGET, UNDECIDED_UNINFORMATIVE, TOKEN_BUDGET})


def token_budget_reasons(
    reasons: Sequence[str | None], measured: Sequence[int], unknown: Sequence[int] | None
) -> list[str | None]:
    """A row whose token budget ran out: its stopped-early steps, and the unlabeled steps no rollout
    ever reached (per-step MC's prefixes left unprobed), say `token_budget`."""
    out = list(reasons)
    for i, why in enumerate(out):
        unprobed = measured[i] == 0 and (unknown is None or unknown[i] == 0)
        if why in STOPPED_EARLY or (why == UNDECIDED_VERDICT and unprobed):
            out[i] = TOKEN_BUDGET
    return out


def truncated_trace_reasons(reasons: Sequence[str | None], final_reason: str | None) -> list[str | None]:
    """A solution whose thinking trace never closes has no answer to grade (its verdict's reason is
    `truncated_thinking`): its last step, left unlabeled for want of one, says so, not a budget's or a
    search's reason (`after_error` stays: an error found earlier is what that step holds)."""
    out = list(reasons)
    if final_reason == TRUNCATED_THINKING and out and out[-1] is not None and out[-1] != AFTER_ERROR:
        out[-1] = TRUNCATED_THINKING
    return out


def mark_open_interval(
    labels: Sequence[bool | None], reasons: list[str | None], p_good: Sequence[float], confidence: float
) -> None:
    """Set `after_error` on the stopped-early steps past the interval the first error lies in (module doc)."""
    if False in labels:
        return  # a bad label pins the error already: the steps after it say so
    start = next((i for i, why in enumerate(reasons) if why in STOPPED_EARLY), None)
    if start is None:
        return
    end = next((i for i in range(start, len(p_good)) if 1.0 - p_good[i] >= confidence), None)
    if end is None:
        return
    for i in range(end + 1, len(reasons)):
        if reasons[i] in STOPPED_EARLY:
            reasons[i] = AFTER_ERROR


def interval_of(reasons: Sequence[str | None]) -> range | None:
    """The open interval a row reports (the stopped-early steps before the first `after_error`), or None."""
    start = next((i for i, why in enumerate(reasons) if why in STOPPED_EARLY), None)
    if start is None:
        return None
    end = start
    while end + 1 < len(reasons) and reasons[end + 1] in STOPPED_EARLY:
        end += 1
    return range(start, end + 1)
