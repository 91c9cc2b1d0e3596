"""Problems the engine refuses run after run are rejected for good.

A refusal (`engine_refused`: the server said no to the request, e.g. a prompt over its context) says
nothing about the problem the first time: the next run asks again. A problem refused on
`run.refused_runs` consecutive runs is rejected for good (`engine_refused_permanent`) and left alone
by later runs, unless the user asks for it (`prm-synth run --retry-refused`). Each shard's marker
counts, per refused problem, the runs in a row that refused it (`ShardEntry.refusals`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prm_synth.store.left_open import OPEN_FOR_GOOD
from prm_synth.store.shards import atomic_write_json

REFUSED = "engine_refused"
PERMANENT = "engine_refused_permanent"


def count_refusals(
    rejected: Iterable[dict[str, Any]], asked: set[str] | None, previous: dict[str, int]
) -> dict[str, int]:
    """Consecutive runs each problem was refused on, after this run: one more for a problem this run
    asked (`asked`; None: the whole shard) and the engine refused again, none for one it answered; the
    count of a problem this run did not ask stays."""
    refused_now = {str(r["problem_id"]) for r in rejected if r.get("reason") == REFUSED and r.get("problem_id")}
    counts = {pid: n for pid, n in previous.items() if asked is not None and pid not in asked}
    for pid in refused_now:
        counts[pid] = previous.get(pid, 0) + 1 if asked is None or pid in asked else previous.get(pid, 1)
    return counts


def make_permanent(
    rejected: list[dict[str, Any]], counts: dict[str, int], limit: int
) -> tuple[list[dict[str, Any]], set[str]]:
    """`rejected` with the refusals of problems refused on `limit` runs in a row turned permanent, and
    the problems that turned so now (refused exactly `limit` times; more: asked again on request)."""
    over = {pid for pid, n in counts.items() if n >= limit}
    out = [
        r | {"reason": PERMANENT} if r.get("reason") == REFUSED and str(r.get("problem_id")) in over else r
        for r in rejected
    ]
    return out, {pid for pid in over if counts[pid] == limit}


def reasons_of(rejected: Iterable[dict[str, Any]]) -> dict[str, int]:
    return dict(Counter(r["reason"] for r in rejected))


# Rows left open because their judge (or verifier) could not be read, the same way: a row still
# unreadable after `run.refused_runs` runs in a row is recorded for good under its permanent reason.
OPEN_PERMANENT = OPEN_FOR_GOOD
PERMANENT_OPEN = {v: k for k, v in OPEN_PERMANENT.items()}


def count_open(rejected: Iterable[dict[str, Any]], asked: set[str], previous: dict[str, int]) -> dict[str, int]:
    """Runs in a row each open row (by row id) was left unreadable, after this run: one more for a row
    this run asked (`asked`: the ids of the rows it made or finished) and left open again; the count of
    one it did not ask stays (at least 1); a row finished drops out."""
    counts: dict[str, int] = {}
    for r in rejected:
        reason, row_id = r.get("reason"), str(r.get("id"))
        if reason in OPEN_PERMANENT:
            counts[row_id] = previous.get(row_id, 0) + 1 if row_id in asked else previous.get(row_id, 1)
        elif reason in PERMANENT_OPEN:
            counts[row_id] = previous.get(row_id, 1)
    return counts


def make_open_permanent(
    rejected: list[dict[str, Any]], counts: dict[str, int], limit: int
) -> tuple[list[dict[str, Any]], set[str]]:
    """`rejected` with the rows left open on `limit` runs in a row recorded for good (their permanent
    reason), and the rows that turned so now (open exactly `limit` times; more: asked again on request)."""
    over = {row_id for row_id, n in counts.items() if n >= limit}
    out = [
        r | {"reason": OPEN_PERMANENT[r["reason"]]}
        if r.get("reason") in OPEN_PERMANENT and str(r.get("id")) in over
        else r
        for r in rejected
    ]
    return out, {row_id for row_id in over if counts[row_id] == limit}


# A shard whose every problem the engine refused is not written (it made nothing: a failure, not a
# result), so its marker cannot count the runs that refused it: the counts wait here until it is.
PENDING = "refusals"


def pending_refusals(root: Path, shard: int) -> dict[str, int]:
    """The refusal counts of a shard not written yet (`save_pending`), {} when none."""
    try:
        data = json.loads((root / PENDING / f"shard-{shard:05d}.json").read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def save_pending(root: Path, shard: int, counts: dict[str, int]) -> None:
    atomic_write_json(root / PENDING / f"shard-{shard:05d}.json", counts)


def clear_pending(root: Path, shard: int) -> None:
    (root / PENDING / f"shard-{shard:05d}.json").unlink(missing_ok=True)
