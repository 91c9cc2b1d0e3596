"""Lossless step segmentation: `"".join(split_steps(text)) == text` for every string.

Every strategy is one regex whose matches mark step boundaries; a boundary sits at the END of each
match, so a separator (newline, blank lines) stays on the step it closes and step i+1 starts with
its own text. That is what makes a continuation prompt for prefix i exactly "the text so far".

Then one rule for whitespace, the same for all strategies: a piece that is only whitespace is not a
step of its own; it is glued to the step before it (or, at the very start, to the first step). So
no step is empty, and no step is whitespace-only unless the whole text is.
"""

from __future__ import annotations

import functools
import re

STRATEGIES = ("paragraph", "line", "step-marker", "regex")

_LINE = re.compile(r"\r\n|\n|\r")
# A blank-line run: from one newline through the last newline of the whitespace that follows.
# Linear: a failed attempt only scans whitespace that holds no second newline.
_PARAGRAPH = re.compile(r"\n\s*\n")
# Zero-width: a boundary just before a line that opens with "Step 3:", "Step 3.", "**Step 3",
# optionally after indentation or a Markdown heading ("### Step 3:").
_STEP_MARKER = re.compile(r"(?m)(?=^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*[ \t]*[Ss]tep[ \t]+\d+|[Ss]tep[ \t]+\d+[ \t]*[:.]))")
_BUILTIN = {"line": _LINE, "paragraph": _PARAGRAPH, "step-marker": _STEP_MARKER}


@functools.lru_cache(maxsize=64)
def _compile_user_pattern(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"invalid steps pattern {pattern!r}: {e}") from None


def check_pattern(pattern: str) -> None:
    """Raise ValueError naming the problem if `pattern` is not a usable steps regex."""
    _compile_user_pattern(pattern)


def _boundary_regex(strategy: str, pattern: str | None) -> re.Pattern[str]:
    if strategy == "regex":
        if not pattern:
            raise ValueError("strategy 'regex' needs a pattern")
        # The pattern comes from the pipeline config (trusted); Python's re has no time limit, so a
        # catastrophic pattern is the config author's to avoid.
        return _compile_user_pattern(pattern)
    try:
        return _BUILTIN[strategy]
    except KeyError:
        raise ValueError(f"unknown steps strategy {strategy!r}; expected one of {STRATEGIES}") from None


def split_steps(text: str, strategy: str = "line", pattern: str | None = None) -> list[str]:
    """Split `text` into steps; joining them gives back `text` exactly. Empty text gives []."""
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
