"""A judge (or verifier) whose answers cannot be read fails the run, not the rows.

A shard where more than half of the votes (or chains) that stand in it could not be read is written
(its unreadable rows left open, the rollouts' labels kept), then fails the run with one line naming
the engine and one of its answers; a run of several such shards says their sums, not one shard's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prm_synth.engines.base import Engine
from prm_synth.engines.stream import describe_engine
from prm_synth.errors import PrmSynthError
from prm_synth.records import RejectedRecord, ShardStats
from prm_synth.store.left_open import sample_in


@dataclass(frozen=True)
class Unreadable:
    """What a stage's engine left unread in a shard: the counts an `UnreadableJudgeError` reports."""

    who: str  # "judge" or "verifier"
    engine: str  # its model and server (describe_engine)
    unreadable: int
    asked: int
    what: str  # "votes" or "chains"
    open_rows: int
    said: str  # one of its answers, quoted ('' where none)

    def __add__(self, other: Unreadable) -> Unreadable:
        return replace(
            self,
            unreadable=self.unreadable + other.unreadable,
            asked=self.asked + other.asked,
            open_rows=self.open_rows + other.open_rows,
            said=self.said or other.said,
        )

    def message(self) -> str:
        return (
            f"the {self.who} ({self.engine}) gave {self.unreadable} of {self.asked} {self.what} that cannot be read"
            + (f", e.g. {self.said}" if self.said else "")
            + f"; {self.open_rows} row(s) are left open and the rest is kept: fix the {self.who} (its model name, "
            "chat template or answer format) and run the same command again: only the open rows are asked again"
        )


class UnreadableJudgeError(PrmSynthError, RuntimeError):
    """Most of a shard's judge votes (or verification chains) could not be read: the judge is broken (a
    wrong model, a chat template it does not follow, another answer format), not the rows. The shard is
    written first, its unreadable rows left open, so the rollouts' labels are kept and the next run of
    the same command asks the judge again for exactly those rows. `counts`: what it left unread (a run
    of several such shards says their sums, not one shard's)."""

    def __init__(self, message: str, counts: Unreadable | None = None) -> None:
        super().__init__(message)
        self.counts = counts

    def __reduce__(self) -> tuple[Any, ...]:  # kept when a task's exception is pickled (Ray)
        return (type(self), (str(self), self.counts))


def unreadable_message(errors: Iterable[UnreadableJudgeError]) -> str:
    """One line for the shards of a run that failed this way: per engine, the sums over its shards."""
    errors = list(errors)
    by_who: dict[str, Unreadable] = {}
    for e in errors:
        if e.counts is None:
            return str(e)
        by_who[e.counts.who] = by_who[e.counts.who] + e.counts if e.counts.who in by_who else e.counts
    return "; ".join(counts.message() for counts in by_who.values())


# More than this share of a shard's votes (or chains) unreadable: the judge is broken, and the run fails.
UNREADABLE_FAILS = 0.5


def check_readable(
    stats: ShardStats,
    rejected: Sequence[RejectedRecord],
    judge_engine: Engine | None,
    verify_engine: Engine | None,
    earlier: ShardStats | None = None,
) -> None:
    """Raise `UnreadableJudgeError` when more than half of the shard's judge votes, or verification
    chains, could not be read, naming the engine (its model and server) and one of its answers.

    The share is over the votes that stand in the shard: this attempt's, and the readable ones of the
    attempts before it (`earlier`: the shard as written before, when this attempt only finished some of
    its rows). Over a re-ask alone, one row's one unreadable vote would be "1 of 1", every run, forever."""
    checks = [
        ("judge", judge_engine, "judge", lambda j: (j.unparseable, j.samples), "votes", "judge_unreadable"),
        ("verifier", verify_engine, "verify", lambda v: (v.unreadable_chains, v.chains), "chains", "verify_unreadable"),
    ]
    for name, engine, section, count, what, reason in checks:
        now, before = getattr(stats, section), getattr(earlier, section) if earlier is not None else None
        unreadable, asked = count(now) if now else (0, 0)
        if before:  # the readable votes (or chains) of the attempts before this one still stand
            before_unreadable, before_asked = count(before)
            asked += before_asked - before_unreadable
        if not asked or unreadable <= asked * UNREADABLE_FAILS:
            continue
        open_rows = [r for r in rejected if r.reason == reason]
        said = sample_in(open_rows[0].detail) if open_rows else ""
        counts = Unreadable(name, describe_engine(engine), unreadable, asked, what, len(open_rows), said)
        raise UnreadableJudgeError(counts.message(), counts)
