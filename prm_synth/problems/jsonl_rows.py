"""The rows of a local JSONL problem file, line by line: each parsed row with its index, or the line's
rejection (too long, not JSON), never a crash halfway (choice_file.py and code_file.py read through it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prm_synth.records import RejectedRecord, reject

MAX_LINE_CHARS = 1 << 20


def jsonl_rows(path: Path, source: str) -> Iterator[tuple[int, Any] | RejectedRecord]:
    """(index, parsed row) per non-blank line of `path`, or the line's rejection (stage "load")."""
    with path.open(encoding="utf-8-sig", errors="surrogateescape") as f:
        for index, line in enumerate(f):
            if not line.strip():
                continue
            if len(line) > MAX_LINE_CHARS:
                yield reject(f"{source}:{index}", None, source, "load", "line_too_long", f"line {index + 1}")
                continue
            try:
                yield index, json.loads(line)
            except (ValueError, RecursionError):
                yield reject(
                    f"{source}:{index}", None, source, "load", "broken_line", f"{path}:{index + 1}", line[:2000]
                )


Rejecting = Callable[[Any, str], RejectedRecord]


def row_start(
    index: int, row: Any, id_column: str | None, text_column: str, prefix: str, source: str
) -> tuple[str, Rejecting, RejectedRecord | None]:
    """What every file source checks first: a parsed row's problem id (its `id_column`, else
    `prefix-INDEX`), the function that rejects it with a reason and a detail (stage "load", the row as
    payload), and its rejection already where it is no object or has no text in `text_column`."""
    pid = f"{prefix}-{index:06d}"
    if isinstance(row, dict) and id_column and row.get(id_column) is not None:
        pid = str(row[id_column])

    def no(reason: Any, detail: str) -> RejectedRecord:
        return reject(f"{source}:{index}", pid, source, "load", reason, detail, row)

    if not isinstance(row, dict):
        return pid, no, no("not_an_object", f"row {index} is a {type(row).__name__}")
    text = row.get(text_column)
    if not isinstance(text, str) or not text.strip():
        return pid, no, no("missing_question", f"row {index} has no text in {text_column!r}")
    return pid, no, None
