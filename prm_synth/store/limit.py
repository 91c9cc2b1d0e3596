"""What a run's `--limit` does to a folder that already holds finished shards: nothing.

A limit bounds the new work a run does (the first N problems of the source), never what is kept. A
finished shard is labeling that was paid for: a run with a smaller limit than the one that made the
folder (a user peeking at the first 20 problems of a finished 200-problem run) keeps every finished
shard byte for byte, the ones past the limit and the one the limit cuts in the middle alike, and says
so in its summary. A shard cut short by an earlier, smaller limit holds fewer problems than a larger
limit asks for: that one is still relabeled whole (the flow's resume rule), since the labeler pools
what it learns over a shard's problems and consensus holds a shard's labels to its target together, so
a shard labeled in two parts would hold other rows than the same shard labeled at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prm_synth.store.layout import ShardEntry


@dataclass(frozen=True)
class KeptPastLimit:
    """Finished shards holding problems past a run's --limit, kept as they are."""

    limit: int
    shards: list[int]  # the finished shards holding problems past the limit (cut by it, or wholly past it)
    problems: int  # how many of their problems lie past the limit

    def text(self) -> str:
        """One line for the run summary."""
        named = ", ".join(str(s) for s in self.shards)
        return (
            f"finished shard(s) {named} ({self.problems} problems past --limit {self.limit}) are kept as they "
            "are: a limit only bounds new work"
        )


def kept_past_limit(entries: Iterable[ShardEntry], limit: int | None, shard_size: int) -> KeptPastLimit | None:
    """The finished shards (`entries`) holding problems past `limit`, where shard i holds the source rows
    from i * `shard_size` on (prm_synth.pipeline.iter_shards); None when no limit or none does."""
    if limit is None:
        return None
    shards, past = [], 0
    for entry in sorted(entries, key=lambda e: e.shard):
        within = max(0, min(entry.problems, limit - entry.shard * shard_size))
        if entry.problems > within:
            shards.append(entry.shard)
            past += entry.problems - within
    return KeptPastLimit(limit, shards, past) if shards else None


def keeps_finished(entry: ShardEntry, asked: int) -> bool:
    """Whether a finished shard stands for a run that asks `asked` problems of it: it holds at least as
    many (a shard cut short by an earlier, smaller limit holds fewer, and is redone whole)."""
    return entry.problems >= asked


def recorded_limit(limit: int | None, entries: Iterable[ShardEntry], source_size: int | None) -> int | None:
    """The limit the manifest records (how many problems of the source the folder is meant to hold):
    None for the whole source; else the larger of the run's limit and the problems its finished shards
    hold (a peek with a smaller limit leaves the folder as big as it was), None again where those cover
    the whole source."""
    if limit is None:
        return None
    held = sum(e.problems for e in entries)
    if source_size is not None and held >= source_size:
        return None
    return max(limit, held)
