"""A verification chain read: one verdict per step (`Step N: ... \\boxed{correct}`), or the reason it
cannot be read (judge/verify.py says what a chain must look like and keeps the ones that agree with the
labels; the verifier view re-reads the chains it exports).

Model output is untrusted: a chain longer than MAX_CHAIN_CHARS is dropped unread, and the parser
makes a bounded number of linear passes over the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prm_synth.grading.math import last_boxed
from prm_synth.prompting.prompts import VERDICT_CORRECT, VERDICT_INCORRECT
from prm_synth.records import ChainDropReason

MAX_CHAIN_CHARS = 100_000

# A step header at the start of a line, markdown emphasis or a heading mark allowed: "Step 3:",
# "**Step 3:**", "### Step 3:". [ \t] rather than \s: no pattern here can scan across lines twice.
_STEP_HEADER = re.compile(r"^[ \t>#*]*Step[ \t]+(\d{1,6})[ \t*]*:", re.MULTILINE)
_VERDICT = re.compile(r"\s*(?:\\text\{\s*(\w+)\s*\}|(\w+))\s*")


@dataclass(frozen=True)
class ParsedChain:
    """A chain's verdicts (True: correct) for steps 0..len-1, or why it cannot be read."""

    verdicts: list[bool] | None
    reason: ChainDropReason | None = None
    detail: str | None = None


def _refused(reason: ChainDropReason, detail: str) -> ParsedChain:
    return ParsedChain(None, reason, detail)


def _verdict(segment: str) -> bool | None:
    """The verdict of one step's text: its last box, which must say correct or incorrect."""
    box = last_boxed(segment)
    m = _VERDICT.fullmatch(box) if box is not None else None
    word = (m[1] or m[2]).lower() if m else None
    return {VERDICT_CORRECT: True, VERDICT_INCORRECT: False}.get(word or "")


def parse_chain(text: str, n_steps: int, finish_reason: str | None = None) -> ParsedChain:
    """Read a verification chain of a solution with `n_steps` steps (see the module docstring)."""
    if finish_reason == "length":
        return _refused("truncated", "the chain ran out of tokens before its last verdict")
    if len(text) > MAX_CHAIN_CHARS:
        return _refused("too_long", f"{len(text)} characters, more than the {MAX_CHAIN_CHARS} read")
    headers = list(_STEP_HEADER.finditer(text))
    if not headers:
        return _refused("no_steps", "no line starts with `Step N:`")
    verdicts: list[bool] = []
    for j, m in enumerate(headers):
        number = int(m[1])
        if number != j + 1 or number > n_steps:
            return _refused("step_order", f"step {number} where step {j + 1} of {n_steps} was due")
        end = headers[j + 1].start() if j + 1 < len(headers) else len(text)
        verdict = _verdict(text[m.end() : end])
        if verdict is None:
            return _refused(
                "missing_verdict", f"step {number} does not end in \\boxed{{correct}} or \\boxed{{incorrect}}"
            )
        verdicts.append(verdict)
        if not verdict and j + 1 < len(headers):
            return _refused("continued_after_error", f"step {number} is incorrect, yet the chain goes on")
    if verdicts[-1] and len(verdicts) < n_steps:
        return _refused("stopped_early", f"stops after step {len(verdicts)} of {n_steps} without an incorrect step")
    return ParsedChain(verdicts)
