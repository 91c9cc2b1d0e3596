"""Scrubbing a secret (an API key, a Hub token) out of text a server or a library wrote.

A server may echo the key it was sent: in an error message, a log line it returns, or as model
output. `scrub(text, key)` replaces with `***` every occurrence of the key, and of every piece of it
at least `PIECE_CHARS` long, where each character may be written

- as itself, or percent-encoded with upper- or lower-case hex (`%2D`, `%2d`), also where no encoding
  was needed (an over-encoded `-` or letter), or percent-encoded twice (`%252D`);

and where a line break may stand between any two characters (a key wrapped over lines): `\\n`,
`\\r\\n` or `\\r`, with spaces or tabs around it, or the same break written as a JSON escape (`\\n`).

So a key split in two at any point, with anything between the halves, loses every half of at least
`PIECE_CHARS` characters; of a key shorter than `2 * PIECE_CHARS`, a split can leave the shorter half
(under `PIECE_CHARS` characters) in the text. A key shorter than `PIECE_CHARS` is scrubbed only whole.
Other encodings (base64, HTML entities, `+` for a space, a reversed or re-cased key) are not found.
"""

from __future__ import annotations

import bisect
import functools
import re

PIECE_CHARS = 12  # shorter pieces of a key are too common in ordinary text to stand for it
MASK = "***"
# What is not a key's character as written: a percent-encoding (once or twice), or a line break a wrap
# put between two characters, with the indentation around it (also as a JSON escape).
# (Each branch starts with a character of its own, so that the scan skips ordinary text fast.)
_BREAK = r"(?:\r\n|\r|\n|\\r\\n|\\n|\\r)[ \t]*"
_SPECIAL = re.compile(rf"%(?:25)?[0-9a-fA-F]{{2}}|[ \t]+{_BREAK}|{_BREAK}")


class _View:
    """The text as a key in it reads (percent-encodings decoded, line breaks left out), with the map
    back: at view index `views[i]` starts text index `texts[i]` (between marks one character is one),
    and a decoded character's length in the text (`widths`)."""

    def __init__(self, text: str) -> None:
        self.text, self.views, self.texts, self.widths = _decoded(text)

    def start(self, i: int) -> int:
        """Where the view's character `i` starts in the text."""
        k = bisect.bisect_right(self.views, i) - 1
        return self.texts[k] + (i - self.views[k])

    def end(self, i: int) -> int:
        """Where the view's character `i` ends in the text."""
        return self.start(i) + self.widths.get(i, 1)


def _decoded(text: str) -> tuple[str, list[int], list[int], dict[int, int]]:
    parts: list[str] = []
    widths: dict[int, int] = {}
    views, texts = [0], [0]
    view_at, last = 0, 0
    for m in _SPECIAL.finditer(text):
        literal = text[last : m.start()]
        parts.append(literal)
        view_at += len(literal)
        token = m.group()
        if token[0] == "%":
            code = token[-2:]
            parts.append(chr(int(code, 16)))
            views.append(view_at)
            texts.append(m.start())
            widths[view_at] = len(token)
            view_at += 1
        # a break adds nothing to the view; the next character maps past it
        views.append(view_at)
        texts.append(m.end())
        last = m.end()
    parts.append(text[last:])
    return "".join(parts), views, texts, widths


@functools.lru_cache(maxsize=8)
def _grams(key: str) -> tuple[re.Pattern[str], dict[str, list[int]]]:
    """A pattern of the key's blocks, and where each block lies in the key. A key of PIECE_CHARS or
    more: its aligned blocks of PIECE_CHARS // 2 characters, one of which lies whole inside any piece
    of PIECE_CHARS or more (so few blocks are searched, not every piece); a shorter key: itself."""
    size = PIECE_CHARS // 2 if len(key) >= PIECE_CHARS else len(key)
    starts: dict[str, list[int]] = {}
    for j in range(0, len(key) - size + 1, size):
        starts.setdefault(key[j : j + size], []).append(j)
    return re.compile("|".join(map(re.escape, starts))), starts


def _matches(view: str, key: str) -> list[tuple[int, int]]:
    """(start, end) in `view` of the key and of its pieces of at least PIECE_CHARS characters: each
    block found is grown both ways as far as the view goes on spelling the key."""
    pattern, starts = _grams(key)
    need = min(len(key), PIECE_CHARS)
    found: list[tuple[int, int]] = []
    pos = floor = 0  # where to search on; how far left a match may grow (the last match's end)
    while (m := pattern.search(view, pos)) is not None:
        i, size = m.start(), len(m.group())
        best = (i, i)
        for j in starts[m.group()]:
            a = 0
            while i - a > floor and j - a > 0 and view[i - a - 1] == key[j - a - 1]:
                a += 1
            b = size
            while i + b < len(view) and j + b < len(key) and view[i + b] == key[j + b]:
                b += 1
            if a + b > best[1] - best[0]:
                best = (i - a, i + b)
        if best[1] - best[0] >= need:
            found.append(best)
            pos = floor = best[1]
        else:
            pos = i + 1
    return found


def scrub(text: str, key: str | None, mask: str = MASK) -> str:
    """`text` with `key` (and its pieces, encodings and wraps: see the module doc) replaced by `mask`."""
    if not key or not text:
        return text
    view = _View(text)
    found = _matches(view.text, key)
    if not found:
        return text
    out, last = [], 0
    for a, b in found:  # from the match's first character to the end of its last, breaks between included
        out += [text[last : view.start(a)], mask]
        last = view.end(b - 1)
    out.append(text[last:])
    return "".join(out)
