"""Arrow shards, written atomically, with a manifest that makes runs resumable.

Layout of an output folder:

    OUT/manifest.json            aggregate: config, fingerprint, every finished shard, totals
    OUT/config.yaml              the pipeline config that made it
    OUT/data/shard-00000.arrow   labeled rows (Arrow IPC stream, RECORD_SCHEMA)
    OUT/rejected/shard-00000.arrow  rejected rows with reasons (REJECTED_SCHEMA)
    OUT/shards/shard-00000.json  the shard's commit marker: counts, hashes, stats
    OUT/trees/shard-00000.json   OmegaPRM search trees of the shard (output.save_trees; hashed in its marker)

    OUT/.lock                    held (flock) by the run writing the folder

A shard is finished exactly when its marker exists and its files match the marker's hashes. The
marker is written last (temporary name, fsync, rename), so a run killed at any moment leaves either
a finished shard or one that the next run redoes from scratch. manifest.json is rebuilt from the
markers and is a convenience, never the source of truth: a damaged one is rebuilt by the next run.

Readers (`iter_tables`, `iter_records`, `data_files`, and so `summary`, the views and export) take
the shard list from the markers and check every file against its marker's sha256 before using it:
a damaged, truncated or replaced file raises `CorruptShardError` naming it (a re-run of the same
config redoes that shard). Counts of rows are taken from the checked data, never from a marker.

A run holds an advisory lock (`fcntl.flock` on OUT/.lock, taken by `ShardStore.prepare`), so a
second run into the same folder fails at once with `OutputLockedError`; the kernel releases the lock
with the file descriptor, so a crashed or killed run never leaves it behind. Within one process the
lock is shared (a re-run in the same process, e.g. after an error, is not refused). A command that
reads a finished folder (`export`, `inspect`, `show`, `eval dataset`) takes the same lock shared
(`reading`): it refuses a folder a run is writing, naming the run, instead of reading shards from
before and after some of the run's writes; and a run does not start on a folder being read.

Files are created with the usual umask-respecting mode (0644 under umask 022). Text of a labeled row
that cannot be stored as UTF-8 (a lone surrogate in model output) is stored with U+FFFD in its place
and the row is kept (counted in the shard's `text_repaired`); the text fields of rejected rows are
stored with such characters backslash-escaped.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from prm_synth.errors import PrmSynthError, PrmSynthInputError
from prm_synth.schema import LEFT_OPEN_FOR_GOOD, LEFT_OPEN_REASONS, RECORD_SCHEMA, REJECTED_SCHEMA, ShardStats

FORMAT = "prm-synth/1"
KEEP: Any = object()  # write_manifest: the value the manifest holds already
MANIFEST = "manifest.json"
LOCK = ".lock"

log = logging.getLogger(__name__)


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


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    # os.open with 0o666 lets the umask decide (0644 under 022), as for any file a tool writes;
    # mkstemp would make every output file 0600, unreadable to anyone else.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def storable(text: str) -> str:
    """`text` if it encodes as UTF-8, else the same text with the offending characters backslash-escaped."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _bad_text(value: Any, where: str) -> str | None:
    """The first place in a row's value holding text that cannot be stored as UTF-8, or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            return f"{where} (character {e.start}: {e.reason})"
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if (bad := _bad_text(item, f"{where}[{i}]")) is not None:
                return bad
    return None


def repaired(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (a pair split into two code points is joined)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _repaired_value(value: Any) -> Any:
    if isinstance(value, str):
        return repaired(value)
    if isinstance(value, list):
        return [_repaired_value(v) for v in value]
    return value


def _storable_rows(
    records: list[Mapping[str, Any]], rejected: list[Mapping[str, Any]]
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], list[str]]:
    """Labeled rows whose text cannot be stored are repaired; rejected rows get escaped text.

    A lone surrogate in model output (a server's JSON may carry one) is one bad character, not a bad
    row: it becomes U+FFFD, and the row is kept. Returns the rows to write and, per repaired row, where
    its first bad character was (for the shard's stats and the log)."""
    kept: list[Mapping[str, Any]] = []
    where: list[str] = []
    for row in records:
        bad = next((b for k, v in row.items() if (b := _bad_text(v, k)) is not None), None)
        if bad is None:
            kept.append(row)
            continue
        where.append(f"{row.get('id')}: {bad}")
        kept.append({k: _repaired_value(v) for k, v in row.items()})
    escaped = [{k: storable(v) if isinstance(v, str) else v for k, v in row.items()} for row in rejected]
    return kept, escaped, where


def _tree_bytes(trees: dict[str, Any]) -> bytes:
    try:
        return json.dumps(trees, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate in model text: JSON's \uXXXX escapes store it
        return json.dumps(trees).encode()


def _table_bytes(rows: list[Mapping[str, Any]], schema: pa.Schema) -> bytes:
    table = pa.Table.from_pylist(list(rows), schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ShardStore:
    """Reads and writes the shards of one output folder for one config fingerprint."""

    def __init__(
        self,
        root: str | Path,
        fingerprint: str,
        labeler_revision: str | None = None,
        rows_fingerprint: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.fingerprint = fingerprint
        self.labeler_revision = labeler_revision  # written to the manifest: why a folder is refused
        # The config's fingerprint under today's rule, where the folder is keyed by an earlier rule's
        # (prm_synth.store.resume): written to the manifest, so the next run knows the rows are its own.
        self.rows_fingerprint = rows_fingerprint
        self._lock: _OutputLock | None = None

    # ------------------------------------------------------------ set-up
    def prepare(self, config_dump: dict[str, Any], config_yaml: str, overwrite: bool = False) -> None:
        """Lock the folder, create it, refuse to mix configs, clear half-written temporaries.

        A damaged manifest.json does not block the run: the markers say which config made the folder,
        and the manifest is rebuilt from them."""
        self.lock()
        existing = self._existing_manifest()
        other = existing.get("config_fingerprint") if existing else self._marker_fingerprint()
        if other is not None and other != self.fingerprint:
            if not overwrite:
                raise OutputMismatchError(
                    f"{self.root} holds a dataset made with another config or labeler revision "
                    f"(fingerprint {other}, this config {self.fingerprint}); "
                    "use another --out folder, or --overwrite to replace it"
                )
            self._clear()
            existing = None
        for sub in ("data", "rejected", "shards"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
            for tmp in (self.root / sub).glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
        atomic_write_bytes(self.root / "config.yaml", config_yaml.encode())
        if not existing or existing.get("config_fingerprint") != self.fingerprint:
            self.write_manifest(config_dump)

    def lock(self) -> None:
        """Take the folder's run lock (see the module doc); OutputLockedError if another run holds it."""
        if self._lock is None:
            self._lock = _OutputLock.acquire(self.root)

    def release(self) -> None:
        """Let go of the run lock (it also goes when this store is garbage-collected or the process ends)."""
        self._lock = None

    def _existing_manifest(self) -> dict[str, Any] | None:
        if not (self.root / MANIFEST).exists():
            return None
        try:
            return read_manifest(self.root)
        except DatasetError as e:
            log.warning("%s; rebuilding it from the shard markers", e)
            return None

    def _marker_fingerprint(self) -> str | None:
        """The config fingerprint of the folder's shard markers, when a readable marker says one."""
        for marker in sorted((self.root / "shards").glob("shard-*.json")):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                return json.loads(marker.read_text()).get("config_fingerprint")
        return None

    def _clear(self) -> None:
        for sub in ("data", "rejected", "shards", "trees", "refusals"):
            for p in (self.root / sub).glob("*"):
                p.unlink()
        (self.root / MANIFEST).unlink(missing_ok=True)

    # ------------------------------------------------------------ writing
    def write_shard(
        self,
        index: int,
        records: list[Mapping[str, Any]],
        rejected: list[Mapping[str, Any]],
        problems: int,
        stats: ShardStats | None = None,
        trees: dict[str, Any] | None = None,
        servers: dict[str, str] | None = None,
        refusals: dict[str, int] | None = None,
        unreadable: dict[str, int] | None = None,
    ) -> ShardEntry:
        """Write the shard's files, then its marker. `trees` (problem id -> OmegaPRM tree as node-link
        JSON) go to trees/shard-NNNNN.json and are part of the shard (hashed in its marker)."""
        name = shard_name(index)
        extra_files = {f"trees/{name}.json": _tree_bytes(trees)} if trees else {}
        try:
            data_bytes = _table_bytes(records, RECORD_SCHEMA)
            rej_bytes = _table_bytes(rejected, REJECTED_SCHEMA)
        except UnicodeEncodeError:  # rare: find the rows at fault and repair their text
            records, rejected, repairs = _storable_rows(records, rejected)
            if repairs:
                log.warning(
                    "shard %d: %d row(s) held text that is not valid Unicode (a lone surrogate), replaced by "
                    "U+FFFD; first: %s",
                    index,
                    len(repairs),
                    repairs[0],
                )
                stats = stats or ShardStats()
                stats.text_repaired += len(repairs)
            data_bytes = _table_bytes(records, RECORD_SCHEMA)
            rej_bytes = _table_bytes(rejected, REJECTED_SCHEMA)
        data_rel, rej_rel = f"data/{name}.arrow", f"rejected/{name}.arrow"
        atomic_write_bytes(self.root / data_rel, data_bytes)
        atomic_write_bytes(self.root / rej_rel, rej_bytes)
        hashes = {data_rel: _sha256(data_bytes), rej_rel: _sha256(rej_bytes)}
        for rel, blob in extra_files.items():
            atomic_write_bytes(self.root / rel, blob)
            hashes[rel] = _sha256(blob)
        entry = ShardEntry(
            shard=index,
            problems=problems,
            rows=len(records),
            rejected=len(rejected),
            data=data_rel,
            rejected_file=rej_rel,
            sha256=hashes,
            config_fingerprint=self.fingerprint,
            stats=stats or ShardStats(),
            finished_at=time.time(),
            servers=dict(servers or {}),
            refusals=dict(refusals or {}),
            unreadable=dict(unreadable or {}),
        )
        # The commit point: once this marker exists, the shard is finished.
        atomic_write_json(self.root / "shards" / f"{name}.json", entry.to_json())
        return entry

    # ------------------------------------------------------------ reading
    def finished(self, verify: bool = True) -> dict[int, ShardEntry]:
        """Shards whose marker exists, matches this config, and (verify) whose files match their hashes."""
        out: dict[int, ShardEntry] = {}
        for marker in sorted((self.root / "shards").glob("shard-*.json")):
            entry = self._finished_entry(marker, verify)
            if entry is not None:
                out[entry.shard] = entry
        return out

    def finished_shard(self, index: int) -> ShardEntry | None:
        """One shard's entry when it is finished (as `finished` says, its files checked), else None."""
        return self._finished_entry(self.root / "shards" / f"{shard_name(index)}.json", verify=True)

    def _finished_entry(self, marker: Path, verify: bool) -> ShardEntry | None:
        try:
            entry = ShardEntry.from_json(json.loads(marker.read_text()))
        except (OSError, ValueError, TypeError):
            return None  # missing or unreadable marker: the shard is redone
        if entry.config_fingerprint != self.fingerprint:
            return None
        if verify and not self._files_match(entry):
            return None
        return entry

    def _files_match(self, entry: ShardEntry) -> bool:
        for rel, digest in entry.sha256.items():
            p = self.root / rel
            if not p.exists() or _sha256(p.read_bytes()) != digest:
                return False
        return True

    def read_rows(self, entry: ShardEntry, kind: str = "data") -> list[dict[str, Any]]:
        """The rows of one finished shard (kind "data" or "rejected"), checked against its marker."""
        rel = _shard_file(entry, kind)
        return _read_stream(_verified_buffer(self.root, entry, rel), self.root / rel).to_pylist()

    def read_trees(self, entry: ShardEntry) -> dict[str, Any]:
        """The OmegaPRM trees of one finished shard (problem id -> tree), {} when it saved none."""
        rel = f"trees/{shard_name(entry.shard)}.json"
        if rel not in entry.sha256:
            return {}
        return json.loads(_verified_buffer(self.root, entry, rel).to_pybytes())

    def refused_problems(self, entry: ShardEntry, permanent: bool = False) -> set[str]:
        """Problems of a finished shard that the engine refused (rejected `engine_refused`): not done.

        Rows rejected for their own content stay rejected; a refusal says nothing about the problem
        (a server down to a short context, a bad parameter), so the next run asks again, until it has
        been refused on `run.refused_runs` runs in a row (`engine_refused_permanent`): those only
        with `permanent` (`prm-synth run --retry-refused`)."""
        reasons = {"engine_refused", "engine_refused_permanent"} if permanent else {"engine_refused"}
        if not any(entry.stats.rejected_by_reason.get(reason) for reason in reasons):
            return set()  # the marker says none: the rejected file need not be read
        return {
            str(r["problem_id"])
            for r in self.read_rows(entry, "rejected")
            if r.get("reason") in reasons and r.get("problem_id") is not None
        }

    def open_rows(self, entry: ShardEntry, permanent: bool = False) -> set[str]:
        """Rows of a finished shard left open because its judge or verifier could not be read (a reason in
        LEFT_OPEN_REASONS): not done; the next run finishes them from their payload. Those left open on
        `run.refused_runs` runs in a row (LEFT_OPEN_FOR_GOOD) only with `permanent` (--retry-refused)."""
        reasons = LEFT_OPEN_REASONS | LEFT_OPEN_FOR_GOOD if permanent else LEFT_OPEN_REASONS
        if not reasons & set(entry.stats.rejected_by_reason):
            return set()  # the marker says none: the rejected file need not be read
        return {str(r["id"]) for r in self.read_rows(entry, "rejected") if r.get("reason") in reasons}

    def write_manifest(self, config_dump: dict[str, Any] | None = None, limit: Any = KEEP) -> dict[str, Any]:
        """Rebuild manifest.json from the shard markers. `limit`: the run's --limit (None: the whole
        source), so a reader can tell a run cut short on purpose from one that has not finished; kept
        as it was when not given."""
        old = self._existing_manifest() or {}
        entries = sorted(self.finished(verify=False).values(), key=lambda e: e.shard)
        manifest = {
            "format": FORMAT,
            "config_fingerprint": self.fingerprint,
            "config": config_dump if config_dump is not None else old.get("config", {}),
            "shards": [e.to_json() for e in entries],
            "totals": totals(entries).to_json(),
            "updated_at": time.time(),
        }
        if (revision := self.labeler_revision or old.get("labeler_revision")) is not None:
            manifest["labeler_revision"] = revision
        if (limit := old.get("limit") if limit is KEEP else limit) is not None:
            manifest["limit"] = limit
        rows = self.rows_fingerprint or old.get("rows_fingerprint")
        if rows is not None and rows != self.fingerprint:
            manifest["rows_fingerprint"] = rows
        atomic_write_json(self.root / MANIFEST, manifest)
        return manifest


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


def read_manifest(root: str | Path) -> dict[str, Any]:
    path = Path(root) / MANIFEST
    if not path.exists():
        raise NotAnOutputFolderError(f"no {MANIFEST} in {root}: not a prm-synth output folder")
    try:
        manifest = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        raise DatasetError(
            f"{path} is damaged ({type(e).__name__}: {e}); re-run the same config into {root} to rebuild it"
        ) from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config_fingerprint"), str):
        raise DatasetError(f"{path} is not a prm-synth manifest; re-run the same config into {root} to rebuild it")
    return manifest


def dataset_shards(root: str | Path) -> list[ShardEntry]:
    """The finished shards of a dataset, from their markers (the source of truth), in shard order.

    Only the markers of the manifest's config count; a marker that cannot be read raises DatasetError."""
    root = Path(root)
    fingerprint = read_manifest(root)["config_fingerprint"]
    entries = []
    for marker in sorted((root / "shards").glob("shard-*.json")):
        try:
            entry = ShardEntry.from_json(json.loads(marker.read_bytes()))
        except (OSError, ValueError, TypeError, RecursionError) as e:
            raise DatasetError(
                f"shard marker {marker} is damaged ({type(e).__name__}); re-run the same config into {root} "
                "to redo that shard"
            ) from None
        if entry.config_fingerprint == fingerprint:
            entries.append(entry)
    return sorted(entries, key=lambda e: e.shard)


def _verified_buffer(root: Path, entry: ShardEntry, rel: str) -> pa.Buffer:
    """The bytes of one shard file, checked against its marker's sha256 (memory-mapped, read once)."""
    path = root / rel
    marker = root / "shards" / f"{shard_name(entry.shard)}.json"
    redo = f"re-run the same config into {root} to redo the shard"
    expected = entry.sha256.get(rel) if isinstance(entry.sha256, dict) else None
    if expected is None:
        raise CorruptShardError(f"{marker} holds no checksum for {rel}; {redo}")
    try:
        buffer = pa.memory_map(str(path), "r").read_buffer()
    except (OSError, pa.ArrowException) as e:
        raise CorruptShardError(f"{path} cannot be read ({type(e).__name__}: {e}); {redo}") from None
    if hashlib.sha256(buffer).hexdigest() != expected:
        raise CorruptShardError(
            f"{path} does not match the checksum in its marker {marker} (damaged, truncated or changed "
            f"after it was written); {redo}"
        )
    return buffer


def _read_stream(buffer: pa.Buffer, path: Path) -> pa.Table:
    try:
        with pa.ipc.open_stream(buffer) as reader:
            return reader.read_all()
    except pa.ArrowException as e:  # checksum right, content not Arrow: the marker was made to match
        raise CorruptShardError(f"{path} is not a readable Arrow stream ({e})") from None


def _shard_file(entry: ShardEntry, kind: str) -> str:
    if kind not in ("data", "rejected"):
        raise ValueError(f"kind must be 'data' or 'rejected', not {kind!r}")
    return entry.data if kind == "data" else entry.rejected_file


def iter_tables(root: str | Path, kind: str = "data") -> Iterator[pa.Table]:
    """One table per finished shard, in shard order (kind: "data" or "rejected"), each checked first."""
    root = Path(root)
    for entry in dataset_shards(root):
        rel = _shard_file(entry, kind)
        yield _read_stream(_verified_buffer(root, entry, rel), root / rel)


def iter_records(root: str | Path, kind: str = "data") -> Iterator[dict[str, Any]]:
    """Rows of the finished shards as dicts, streaming shard by shard."""
    for table in iter_tables(root, kind):
        yield from table.to_pylist()


def data_files(root: str | Path, kind: str = "data") -> list[str]:
    """Paths to pass to `datasets.load_dataset("arrow", data_files=...)`, each checked first."""
    root = Path(root)
    out = []
    for entry in dataset_shards(root):
        rel = _shard_file(entry, kind)
        _verified_buffer(root, entry, rel)
        out.append(str(root / rel))
    return out


class _OutputLock:
    """An exclusive flock on OUT/.lock, shared by every store of this process that writes the folder."""

    _held: weakref.WeakValueDictionary[str, _OutputLock] = weakref.WeakValueDictionary()
    _guard = threading.Lock()
    # The pid a refused run is told holds the lock: the command the user started (`prm-synth run`'s
    # parent, which a user can stop), not its worker child; this process's own where not set.
    owner_pid: int | None = None

    def __init__(self, file: Any) -> None:
        self.file = file

    @classmethod
    def acquire(cls, root: Path) -> _OutputLock:
        root.mkdir(parents=True, exist_ok=True)
        path = root / LOCK
        key = str(path.resolve())
        with cls._guard:
            held = cls._held.get(key)
            if held is not None:
                return held
            file = open(path, "a+")  # noqa: SIM115 - the lock lives as long as this object
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                file.seek(0)
                holder = file.read().strip()[:40]
                read_only = _only_readers(file)
                file.close()
                if read_only:
                    raise OutputLockedError(
                        f"{root} is being read by another prm-synth command (export, inspect, show); "
                        "wait for it to finish, or use another --out folder"
                    ) from None
                raise OutputLockedError(
                    f"{root} is in use by another prm-synth run"
                    + (f" (pid {holder})" if holder else "")
                    + "; wait for it to finish, or use another --out folder"
                ) from None
            except OSError as e:  # a file system without flock: run unlocked rather than not at all
                log.warning("cannot lock %s (%s): running without the lock", path, e)
            file.seek(0)
            file.truncate()
            file.write(f"{cls.owner_pid or os.getpid()}\n")
            file.flush()
            lock = cls(file)
            cls._held[key] = lock
            return lock

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.file.close()  # closing the descriptor releases the flock


def name_lock_owner(pid: int | None) -> None:
    """The pid the run lock names from now on (a worker names the command that started it)."""
    _OutputLock.owner_pid = pid


def _only_readers(file: Any) -> bool:
    """Whether the folder's lock, which this process could not take alone, is held by readers only."""
    try:
        fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return False
    fcntl.flock(file, fcntl.LOCK_UN)
    return True


@contextlib.contextmanager
def reading(root: str | Path) -> Iterator[None]:
    """Hold a folder still while a command reads it: its lock taken shared, so no run writes it
    meanwhile, and OutputLockedError naming the run (its pid) when one is writing it now. A reader
    never creates the lock file: a folder without one (copied, or read-only) is read as it is. As for
    runs, the lock is shared within one process: the run that holds it reads its own folder."""
    path = Path(root) / LOCK
    with _OutputLock._guard:
        ours = path.exists() and _OutputLock._held.get(str(path.resolve())) is not None
    if ours:  # this process writes the folder: it reads as the writer
        yield
        return
    try:
        file = open(path)  # noqa: SIM115 - closed below, after the reading
    except OSError:
        yield
        return
    with file:
        try:
            fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = file.read().strip()[:40]
            raise OutputLockedError(
                f"{root} is being written by a prm-synth run"
                + (f" (pid {holder})" if holder else "")
                + ": wait for it to finish (or stop it), then run this again; read now, the folder would "
                "mix shards from before and after the run's writes"
            ) from None
        except OSError:  # a file system without flock: read unlocked, as runs write unlocked there
            pass
        yield
