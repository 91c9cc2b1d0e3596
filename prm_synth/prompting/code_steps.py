"""Steps of a solution that mixes reasoning and code (strategy `code` / `code-whole`), losslessly.

Prose is split into paragraphs (as strategy `paragraph`). A fenced block (```...```, its fences included)
is one step under `code-whole`; under `code` it is cut at the first line of each top-level statement
(decorators and the comments and blank lines just above a statement go with it), so a cut never falls
inside a line or inside a statement. The block's statements are found with `ast.parse`, which parses and
never runs; a block that does not parse, or is longer than `MAX_PARSED_CHARS`, stays one step.
Whitespace-only pieces join the step before them, as in every strategy; joining the steps gives the text.
"""

from __future__ import annotations

import ast
import re
import warnings

MAX_PARSED_CHARS = 50_000  # ast.parse's cost grows with the block; longer blocks stay whole
_OPEN = re.compile(r"(?m)^[ \t]*```[^\n`]*(?:\n|\Z)")
_CLOSE = re.compile(r"(?m)^[ \t]*```[ \t]*(?:\n|\Z)")
_PARAGRAPH = re.compile(r"\n\s*\n")


def _cut_at(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(text)}), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def _paragraphs(text: str) -> list[str]:
    return _cut_at(text, [m.end() for m in _PARAGRAPH.finditer(text)])


def _statement_cuts(body: str) -> list[int]:
    """Offsets in `body` where a top-level statement other than the first begins (its leading comments with it)."""
    if len(body) > MAX_PARSED_CHARS:
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning on odd escapes in model text
            tree = ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    line_starts = [0] + [m.end() for m in re.finditer(r"\n", body)]
    cuts = []
    for before in tree.body[:-1]:
        end_line = before.end_lineno or before.lineno  # 1-based; the next statement starts after it
        if end_line < len(line_starts):
            cuts.append(line_starts[end_line])
    return cuts


def _block_pieces(block: str, body_start: int, body_end: int, whole: bool) -> list[str]:
    if whole:
        return [block]
    cuts = [body_start + c for c in _statement_cuts(block[body_start:body_end])]
    return _cut_at(block, cuts)


def split_code(text: str, whole: bool = False) -> list[str]:
    """Prose paragraphs and code blocks (whole or at top-level statements); `"".join(...) == text`."""
    pieces: list[str] = []
    pos = 0
    while pos < len(text):
        opening = _OPEN.search(text, pos)
        if opening is None:
            pieces += _paragraphs(text[pos:])
            break
        if opening.start() > pos:
            pieces += _paragraphs(text[pos : opening.start()])
        closing = _CLOSE.search(text, opening.end())
        end = closing.end() if closing else len(text)
        body_end = closing.start() if closing else len(text)
        block = text[opening.start() : end]
        pieces += _block_pieces(block, opening.end() - opening.start(), body_end - opening.start(), whole)
        pos = end
    return _glue_whitespace(pieces)


def _glue_whitespace(pieces: list[str]) -> list[str]:
    steps: list[str] = []
    for piece in pieces:
        if steps and not piece.strip():
            steps[-1] += piece
        elif steps and not steps[-1].strip():
            steps[-1] += piece  # leading whitespace joins the first real step
        else:
            steps.append(piece)
    return steps
