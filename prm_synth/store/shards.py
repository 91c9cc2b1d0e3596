"""Arrow shards, written atomically, with a manifest that makes runs resumable (the folder's layout:
prm_synth/store/layout.py; reading it: readers.py; its lock: lock.py).

A shard is finished exactly when its marker exists and its files match the marker's hashes. The
marker is written last (temporary name, fsync, rename), so a run killed at any moment leaves either
a finished shard or one that the next run redoes from scratch. manifest.json is rebuilt from the
markers and is a convenience, never the source of truth: a damaged one is rebuilt by the next run.

Files are created with the usual umask-respecting mode (0644 under umask 022). Text of a labeled row
that cannot be stored as UTF-8 (a lone surrogate in model output) is stored with U+FFFD in its place
and the row is kept (counted in the shard's `text_repaired`); the text fields of rejected rows are
stored with such characters backslash-escaped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from prm_synth.records import LEFT_OPEN_REASONS, RECORD_SCHEMA, REJECTED_SCHEMA, ShardStats
from prm_synth.store.layout import (
    CANARIES,
    FORMAT,
    MANIFEST,
    DatasetError,
    OutputMismatchError,
    ShardEntry,
    sha256_of,
    shard_name,
    totals,
)
from prm_synth.store.left_open import LEFT_OPEN_FOR_GOOD
from prm_synth.store.lock import OutputLock
from prm_synth.store.readers import read_manifest, read_stream, shard_file, verified_buffer

log = logging.getLogger(__name__)
KEEP: Any = object()  # write_manifest: the value the manifest holds already


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
        self._lock: OutputLock | None = None

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
            self._lock = OutputLock.acquire(self.root)

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
        for sub in ("data", "rejected", "shards", "trees", "refusals", CANARIES):
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
        canaries: list[Mapping[str, Any]] | None = None,
        unreadable: dict[str, int] | None = None,
    ) -> ShardEntry:
        """Write the shard's files, then its marker. `trees` (problem id -> OmegaPRM tree as node-link
        JSON) go to trees/shard-NNNNN.json and are part of the shard (hashed in its marker)."""
        name = shard_name(index)
        extra_files = {f"trees/{name}.json": _tree_bytes(trees)} if trees else {}
        if canaries:  # planted errors: part of the shard (hashed), never read as data (CANARIES)
            extra_files[f"{CANARIES}/{name}.json"] = json.dumps(list(canaries), ensure_ascii=False).encode()
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
        hashes = {data_rel: sha256_of(data_bytes), rej_rel: sha256_of(rej_bytes)}
        for rel, blob in extra_files.items():
            atomic_write_bytes(self.root / rel, blob)
            hashes[rel] = sha256_of(blob)
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
            if not p.exists() or sha256_of(p.read_bytes()) != digest:
                return False
        return True

    def read_rows(self, entry: ShardEntry, kind: str = "data") -> list[dict[str, Any]]:
        """The rows of one finished shard (kind "data" or "rejected"), checked against its marker."""
        rel = shard_file(entry, kind)
        return read_stream(verified_buffer(self.root, entry, rel), self.root / rel).to_pylist()

    def read_canaries(self, entry: ShardEntry) -> list[dict[str, Any]]:
        """The canaries of one finished shard (checked against its marker), [] when it planted none."""
        rel = f"{CANARIES}/{shard_name(entry.shard)}.json"
        if rel not in entry.sha256:
            return []
        return list(json.loads(verified_buffer(self.root, entry, rel).to_pybytes()))

    def read_trees(self, entry: ShardEntry) -> dict[str, Any]:
        """The OmegaPRM trees of one finished shard (problem id -> tree), {} when it saved none."""
        rel = f"trees/{shard_name(entry.shard)}.json"
        if rel not in entry.sha256:
            return {}
        return json.loads(verified_buffer(self.root, entry, rel).to_pybytes())

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
