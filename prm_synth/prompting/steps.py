"""Lossless step segmentation: `"".join(split_steps(text)) == text` for every string.

Every strategy is one regex whose matches mark step boundaries; a boundary sits at the END of each
match, so a separator (newline, blank lines) stays on the step it closes and step i+1 starts with
its own text. That is what makes a continuation prompt for prefix i exactly "the text so far".

Then one rule for whitespace, the same for all strategies: a piece that is only whitespace is not a
step of its own; it is glued to the step before it (or, at the very start, to the first step). So
no step is empty, and no step is whitespace-only unless the whole text is.

Strategy `thinking` is for reasoning models (prm_synth/prompting/thinking.py): the paragraphs of the thinking
trace, each shorter than `min_chars` merged into the next, then everything from the close marker on
(the answer) as the last step; a trace that never closes is all trace. `max_steps` (any strategy)
merges neighbouring steps evenly so no solution has more, a thinking solution's answer kept apart.
Merging only joins neighbours, so every strategy stays lossless.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from prm_synth.config.sampling import compile_steps_pattern
from prm_synth.prompting.code_steps import split_code
from prm_synth.prompting.thinking import DEFAULT_MARKERS, ThinkingMarkers

STRATEGIES = ("paragraph", "line", "step-marker", "regex", "thinking", "code", "code-whole")

_LINE = re.compile(r"\r\n|\n|\r")
# A blank-line run: from one newline through the last newline of the whitespace that follows.
# Linear: a failed attempt only scans whitespace that holds no second newline.
_PARAGRAPH = re.compile(r"\n\s*\n")
# Zero-width: a boundary just before a line that opens with "Step 3:", "Step 3.", "**Step 3",
# optionally after indentation or a Markdown heading ("### Step 3:").
_STEP_MARKER = re.compile(r"(?m)(?=^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*[ \t]*[Ss]tep[ \t]+\d+|[Ss]tep[ \t]+\d+[ \t]*[:.]))")
_BUILTIN = {"line": _LINE, "paragraph": _PARAGRAPH, "step-marker": _STEP_MARKER}


@functools.lru_cache(maxsize=64)
def _boundary_regex(strategy: str, pattern: str | None) -> re.Pattern[str]:
    if strategy == "regex":
        if not pattern:
            raise ValueError("strategy 'regex' needs a pattern")
        # The pattern comes from the pipeline config (trusted); Python's re has no time limit, so a
        # catastrophic pattern is the config author's to avoid.
        return compile_steps_pattern(pattern)
    try:
        return _BUILTIN[strategy]
    except KeyError:
        raise ValueError(f"unknown steps strategy {strategy!r}; expected one of {STRATEGIES}") from None


def split_steps(text: str, strategy: str = "line", pattern: str | None = None) -> list[str]:
    """Split `text` into steps; joining them gives back `text` exactly. Empty text gives []."""
    if strategy == "thinking":
        return split_thinking(text, ThinkingMarkers(*DEFAULT_MARKERS))
    if strategy in ("code", "code-whole"):
        return split_code(text, whole=strategy == "code-whole")
    regex = _boundary_regex(strategy, pattern)
    if not text:
        return []
    n = len(text)
    cuts = sorted({m.end() for m in regex.finditer(text)} - {0, n})
    starts = [0, *cuts]
    ends = [*cuts, n]
    # A whitespace-only piece starts no step: it stays glued to the step before it.
    kept = [s for s, e in zip(starts, ends, strict=True) if not text[s:e].isspace()]
    if not kept:
        return [text]  # all whitespace: one step, still lossless
    kept[0] = 0  # leading whitespace belongs to the first step
    return [text[a:b] for a, b in zip(kept, [*kept[1:], n], strict=True)]


def merge_evenly(steps: list[str], most: int) -> list[str]:
    """`steps` joined into at most `most` groups of neighbours, as even in count as they divide."""
    if most < 1 or len(steps) <= most:
        return list(steps)
    share, extra = divmod(len(steps), most)
    out, at = [], 0
    for i in range(most):
        size = share + (i < extra)
        out.append("".join(steps[at : at + size]))
        at += size
    return out


def merge_short(pieces: list[str], min_chars: int) -> list[str]:
    """Each piece shorter than `min_chars` (its text, whitespace aside) merged into the next; a short
    last piece into the one before it."""
    if min_chars <= 0:
        return list(pieces)
    out: list[str] = []
    held = ""
    for piece in pieces:
        held += piece
        if len(held.strip()) >= min_chars:
            out.append(held)
            held = ""
    if held:
        if out:
            out[-1] += held
        else:
            out.append(held)
    return out


def split_thinking(text: str, markers: ThinkingMarkers, min_chars: int = 0, max_steps: int | None = None) -> list[str]:
    """The steps of a thinking model's solution (module doc): the trace's paragraphs (short ones merged
    into the next, at most `max_steps - 1` of them), then the answer from the close marker on."""
    if not text:
        return []
    close = markers.close_at(text)
    trace, answer = (text, "") if close is None else (text[:close], text[close:])
    if trace and trace.isspace() and answer:  # nothing before the close marker but layout
        trace, answer = "", text
    pieces = merge_short(split_steps(trace, "paragraph"), min_chars)
    if max_steps is not None:
        pieces = merge_evenly(pieces, max(1, max_steps - (1 if answer else 0)))
    return [*pieces, answer] if answer else pieces


def splitter(config: Any, markers: ThinkingMarkers | None = None) -> Callable[[str], list[str]]:
    """The step splitter a `StepsConfig` describes (`markers`: the policy's, for strategy thinking)."""
    if config.strategy == "thinking":
        marks = markers or ThinkingMarkers(*DEFAULT_MARKERS)
        return functools.partial(split_thinking, markers=marks, min_chars=config.min_chars, max_steps=config.max_steps)

    def split(text: str) -> list[str]:
        steps = split_steps(text, config.strategy, config.pattern)
        return merge_evenly(steps, config.max_steps) if config.max_steps is not None else steps

    return split
