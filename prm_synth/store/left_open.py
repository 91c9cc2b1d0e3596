"""Rows a stage left open because its engine's answers could not be read (the judge's or the verifier's):
rejected for now with the whole row as payload, which the next run finishes from. The detail quotes one of
the engine's answers (`answer_sample`); the readers quote it back (`sample_in`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from prm_synth.records import LabeledRecord, RejectedRecord, RejectReason, Stage, reject

# How much of an unreadable answer a rejection's detail (and the run's error line) shows.
SAMPLE_CHARS = 160


def answer_sample(texts: Sequence[str], limit: int = SAMPLE_CHARS) -> str:
    """One of a model's answers as a user may be shown it: the first non-empty one (else ''), on one
    line, cut to `limit`, control characters as escapes (model output must not drive a terminal; an
    engine already scrubbed its key out of it)."""
    text = next((t for t in texts if t.strip()), "")
    text = " ".join(text[: limit * 4].split())
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape", "backslashreplace").decode() for ch in text)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def sample_in(detail: str | None) -> str:
    """The answer a left-open row's detail quotes (`answer_sample`'s form), or '' where it quotes none."""
    return (detail or "").partition("e.g. ")[2].partition(": the ")[0]


def leave_open(record: LabeledRecord, stage: Stage, reason: RejectReason, detail: str) -> RejectedRecord:
    """A row a stage could not finish for a failure of its engine: rejected for now, its payload the
    whole row as it came in (never cut), which the next run finishes from."""
    row = record.to_row()
    return reject(record.id, record.problem_id, record.source, stage, reason, detail, row, payload_chars=sys.maxsize)


# Rows still unreadable on `run.refused_runs` runs in a row: recorded for good under these reasons,
# finished only on request (--retry-refused; prm_synth.store.refusals counts the runs).
OPEN_FOR_GOOD = {"judge_unreadable": "judge_unreadable_permanent", "verify_unreadable": "verify_unreadable_permanent"}
LEFT_OPEN_FOR_GOOD = frozenset(OPEN_FOR_GOOD.values())
