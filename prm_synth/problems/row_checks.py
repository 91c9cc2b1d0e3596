"""What every loader of source rows shares: reading a gold answer cell, text that cannot be stored, a raw
row kept as a rejection's payload, and the rejection (stage "load") a bad row ends as."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from prm_synth.grading.math import last_boxed
from prm_synth.records import RejectedRecord, RejectReason, reject
from prm_synth.store.shards import storable

PAYLOAD_CHARS = 2000
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def gold_from_field(value: Any, answer_format: str) -> tuple[str | None, RejectReason | None]:
    """(gold answer, None) or (None, reason code) for one answer cell."""
    if value is None:
        return None, "missing_answer"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None, "unparseable_answer"
    if isinstance(value, float) and not math.isfinite(value):
        return None, "unparseable_answer"  # JSON NaN / Infinity: "nan" is no gold answer
    text = str(value)
    if answer_format == "gsm8k":
        if "####" not in text:
            return None, "unparseable_answer"
        text = _THOUSANDS_COMMA.sub("", text.rsplit("####", 1)[1])
    elif answer_format == "boxed":
        boxed = last_boxed(text)
        if boxed is None:
            return None, "unparseable_answer"
        text = boxed
    text = text.strip()
    return (text, None) if text else (None, "empty_answer")


def payload_of(row: Any) -> str:
    try:
        text = json.dumps(row, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):  # a circular or absurdly deep structure
        text = repr(type(row))
    return storable(text[:PAYLOAD_CHARS])


def load_rejection(
    source: str, index: int, reason: RejectReason, detail: str, payload: str, problem_id: str | None = None
) -> RejectedRecord:
    def text(value: str | None) -> str | None:
        return None if value is None else storable(value)

    return reject(
        storable(f"{source}:{index}"),
        text(problem_id),
        storable(source),
        "load",
        reason,
        storable(detail),
        text(payload),
    )


def bad_text(value: str) -> str | None:
    """Why `value` cannot be stored (a lone surrogate, at which position), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"character {e.start} is {value[e.start]!r} ({e.reason})"
    return None


def question_fault(row: Any, name: str, index: int) -> tuple[RejectReason, str] | None:
    """Why a source row's question field (`name`) cannot be a question (reason, detail), or None: every
    source that reads questions from rows words these rejections alike."""
    question = row.get(name)
    if question is None:
        return "missing_question", f"row {index} has no {name!r} field"
    if not isinstance(question, str):
        return "bad_question", f"row {index}: {name!r} is a {type(question).__name__}, not text"
    if not question.strip():
        return "empty_question", f"row {index}: {name!r} is empty"
    return None
