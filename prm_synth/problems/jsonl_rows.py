"""The rows of a local JSONL problem file, line by line: each parsed row with its index, or the line's
rejection (too long, not JSON), never a crash halfway (choice_file.py and code_file.py read through it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prm_synth.schema import RejectedRecord, reject

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
