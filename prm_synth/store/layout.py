"""An output folder's layout, what a shard's commit marker records (`ShardEntry`), and the errors a
folder can raise.

    OUT/manifest.json            aggregate: config, fingerprint, every finished shard, totals
    OUT/config.yaml              the pipeline config that made it
    OUT/data/shard-00000.arrow   labeled rows (Arrow IPC stream, RECORD_SCHEMA)
    OUT/rejected/shard-00000.arrow  rejected rows with reasons (REJECTED_SCHEMA)
    OUT/shards/shard-00000.json  the shard's commit marker: counts, hashes, stats
    OUT/trees/shard-00000.json   OmegaPRM search trees of the shard (output.save_trees; hashed in its marker)
    OUT/canaries/shard-00000.json  the shard's planted-error canaries (shard/canaries.py; hashed, never data)

    OUT/.lock                    held (flock) by the run writing the folder (prm_synth/store/lock.py)

The writer is prm_synth/store/shards.py, the readers prm_synth/store/readers.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prm_synth.errors import PrmSynthError, PrmSynthInputError
from prm_synth.records import ShardStats

FORMAT = "prm-synth/1"


MANIFEST = "manifest.json"
CANARIES = "canaries"  # the canaries' folder: no reader of data, rejected rows or views looks in it


LOCK = ".lock"


class OutputFolderError(PrmSynthError, RuntimeError):
    """The output folder cannot be used as asked."""


class OutputMismatchError(OutputFolderError):
    """The output folder holds a dataset made with a different config."""


class OutputLockedError(OutputFolderError):
    """Another run is writing into the output folder."""


class DatasetError(PrmSynthInputError):
    """An output folder that cannot be read as a dataset: not one, or damaged."""


class NotAnOutputFolderError(DatasetError, FileNotFoundError):
    """The folder holds no manifest: it is not an output folder of `prm-synth run` (exit 2)."""


class CorruptShardError(DatasetError):
    """A shard file does not match its marker's checksum (damaged, truncated or replaced)."""


@dataclass
class ShardEntry:
    shard: int
    problems: int
    rows: int
    rejected: int
    data: str
    rejected_file: str
    sha256: dict[str, str]
    config_fingerprint: str
    stats: ShardStats = field(default_factory=ShardStats)
    finished_at: float = 0.0
    # The server each engine was asked through, by role (policy, judge, verify): an OpenAI-compatible
    # engine's address without user, password or query (prm_synth.store.resume.servers); {} for others.
    servers: dict[str, str] = field(default_factory=dict)
    # Problems the engine refused, by id: on how many consecutive runs (prm_synth.store.refusals).
    refusals: dict[str, int] = field(default_factory=dict)
    # Rows left open (judge or verifier unreadable), by row id: on how many consecutive runs.
    unreadable: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = self.__dict__ | {"stats": self.stats.to_dict()}
        if not self.unreadable:  # a marker without open rows is written as before
            del out["unreadable"]
        return out

    @classmethod
    def from_json(cls, data: Any) -> ShardEntry:
        """A marker as written by any version (ShardStats.from_dict reads older stats); TypeError when
        it is not a marker."""
        if not isinstance(data, dict) or not isinstance(data.get("stats", {}), dict):
            raise TypeError("not a shard marker")
        return cls(**(data | {"stats": ShardStats.from_dict(data.get("stats"))}))


@dataclass(frozen=True)
class ShardTotals:
    """The manifest's sums over the finished shards."""

    shards: int = 0
    problems: int = 0
    rows: int = 0
    rejected: int = 0
    stats: ShardStats = field(default_factory=ShardStats)

    def to_json(self) -> dict[str, Any]:
        counts = {"shards": self.shards, "problems": self.problems, "rows": self.rows, "rejected": self.rejected}
        return counts | {"stats": self.stats.to_dict()} if self.shards else counts


def shard_name(index: int) -> str:
    return f"shard-{index:05d}"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def totals(entries: Iterable[ShardEntry]) -> ShardTotals:
    """Sum counts over shards; the stats are `ShardStats` summed field by field (schema.py)."""
    entries = list(entries)
    return ShardTotals(
        shards=len(entries),
        problems=sum(e.problems for e in entries),
        rows=sum(e.rows for e in entries),
        rejected=sum(e.rejected for e in entries),
        stats=sum((e.stats for e in entries), start=ShardStats()),
    )
