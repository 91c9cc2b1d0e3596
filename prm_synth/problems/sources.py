"""Problem sources: Hugging Face datasets, local files, and builtin arithmetic word problems.

`iter_problems` streams a source row by row, in a fixed order, and yields a `Problem` for every
usable row and a `RejectedRecord` (stage "load", with a reason code) for every other one, so the
count of input rows always reconciles with what comes out. Nothing reads a whole file at once
except a .json file, whose format leaves no other choice.

A row is rejected, never allowed to stop the run, when its line is longer than `MAX_LINE_BYTES`
("line_too_long": the line is skipped in bounded chunks, never held whole), when its line is not JSON (or is nested too deeply to
parse: "broken_line", with `file:line` in the detail), when its question, answer or id holds text that
cannot be stored as UTF-8 (a lone surrogate such as "\ud800", which JSON allows: "bad_text"), and when
its answer is not a finite number (JSON NaN or Infinity: "unparseable_answer"). A UTF-8 byte-order mark
at the start of a file is skipped. The payload of a rejected row is always storable: text that is not
valid Unicode is written with backslash escapes.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prm_synth.config import BuiltinSource, FieldMapping, FileSource, HFSource, SolutionsSource
from prm_synth.config.domain_sources import ChoiceFileSource, CodeFileSource, HumanEvalSource
from prm_synth.errors import PrmSynthInputError
from prm_synth.problems import given
from prm_synth.problems.choice_file import iter_choice_file
from prm_synth.problems.code_file import iter_code_file
from prm_synth.problems.humaneval import iter_humaneval
from prm_synth.problems.row_checks import PAYLOAD_CHARS, gold_from_field, question_fault
from prm_synth.problems.row_checks import bad_text as _bad_text
from prm_synth.problems.row_checks import load_rejection as _reject
from prm_synth.problems.row_checks import payload_of as _payload
from prm_synth.records import Item, Problem, RejectedRecord, RejectReason
from prm_synth.simulated import arithmetic

PARQUET_BATCH_ROWS = 1024
# A problem line longer than this is rejected ("line_too_long") without being held in memory: no
# question needs a mebibyte, and a file with no line break at all must not be read whole.
MAX_LINE_BYTES = 1 << 20
# A .json file is parsed whole (the standard library has no streaming JSON): larger ones are refused,
# with the advice to use .jsonl, which is read line by line.
MAX_JSON_FILE_BYTES = 256 << 20
READ_CHUNK_BYTES = 1 << 20


class ProblemSourceError(PrmSynthInputError):
    """A source that cannot be read at all (as opposed to a bad row, which is rejected)."""


__all__ = [
    "Item",
    "Problem",
    "ProblemSourceError",
    "count_hint",
    "file_rows",
    "gold_from_field",
    "hf_rows",
    "iter_problems",
]


def iter_problems(source: Any, gold_optional: bool = False) -> Iterator[Item]:
    """`gold_optional` (grader.kind majority): a row without an answer is a problem with an empty gold."""
    if isinstance(source, BuiltinSource):
        return _builtin(source)
    if isinstance(source, FileSource):
        return _from_file(source, gold_optional)
    if isinstance(source, HFSource):
        return _from_hf(source, gold_optional)
    if isinstance(source, HumanEvalSource):
        return iter_humaneval(source)
    if isinstance(source, ChoiceFileSource):
        return iter_choice_file(source, gold_optional)
    if isinstance(source, CodeFileSource):
        return iter_code_file(source)
    if isinstance(source, SolutionsSource):
        return given.iter_given(source, *_solution_rows(source))
    raise TypeError(f"unknown problem source {type(source).__name__}")


def _solution_rows(src: SolutionsSource) -> tuple[str, Iterator[tuple[int, Any]]]:
    """The name and the raw rows of a solutions source: its file, or its data set as `hf` reads one."""
    if src.path is not None and src.path.is_dir():  # a folder of dumps, in natural order: new ones come last
        return src.path.name, enumerate(row for f in given.solution_files(src.path) for _, row in file_rows(f))
    if src.path is not None:
        return src.path.stem, file_rows(src.path)
    assert src.dataset is not None  # the config holds one of the two
    hf = HFSource(path=src.dataset, name=src.name, data_files=src.data_files, split=src.split, streaming=src.streaming)
    return src.dataset + (f"/{src.name}" if src.name else ""), hf_rows(hf)


def count_hint(source: BuiltinSource | FileSource | HFSource) -> int | None:
    """How many items the source will yield, when that is known without reading it."""
    if isinstance(source, BuiltinSource):
        return source.count
    if isinstance(source, FileSource) and source.path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(source.path).metadata.num_rows  # from the footer, no rows read
        except Exception:
            return None
    return None


# ---------------------------------------------------------------- builtin
def _builtin(src: BuiltinSource) -> Iterator[Item]:
    for index in range(src.count):
        # One RNG per index: problem i is the same whatever the count.
        chain = arithmetic.generate(random.Random(f"{src.seed}:{index}"), src.min_ops, src.max_ops)
        yield Problem(
            id=f"builtin-{src.seed}-{index:06d}",
            question=chain.question(),
            gold_answer=str(chain.answer),
            source="builtin",
        )


# ---------------------------------------------------------------- rows -> problems
class _RowReader:
    """Turns raw rows into problems with one field mapping; remembers ids to reject duplicates."""

    def __init__(self, source: str, id_prefix: str, mapping: FieldMapping, gold_optional: bool = False) -> None:
        self.source, self.id_prefix, self.mapping = source, id_prefix, mapping
        self.gold_optional = gold_optional  # majority: no answer is an empty gold, not a rejection
        self.seen: set[str] = set()

    def read(self, index: int, row: Any) -> Item:
        m = self.mapping
        if not isinstance(row, dict):
            return _reject(self.source, index, "not_an_object", f"row {index} is a {type(row).__name__}", _payload(row))
        # An id column is optional per row too: a row without one gets the positional id.
        raw_id = row.get(m.id) if m.id else None
        pid = str(raw_id).strip() if raw_id is not None and str(raw_id).strip() else f"{self.id_prefix}-{index:06d}"

        def reject(reason: RejectReason, detail: str) -> RejectedRecord:
            return _reject(self.source, index, reason, detail, _payload(row), pid)

        if (fault := question_fault(row, m.question, index)) is not None:
            return reject(*fault)
        question = row[m.question]
        gold, reason = gold_from_field(row.get(m.answer), m.answer_format)
        if gold is None and self.gold_optional and reason in ("missing_answer", "empty_answer"):
            gold, reason = "", None
        if gold is None:
            details = {
                "missing_answer": f"row {index} has no {m.answer!r} field",
                "empty_answer": f"row {index}: the {m.answer_format} answer in {m.answer!r} is empty",
            }
            reason = reason or "unparseable_answer"
            return reject(reason, details.get(reason, f"row {index}: no {m.answer_format} answer in {m.answer!r}"))
        for name, value in (("id", pid), (m.question, question), (m.answer, gold)):
            if (why := _bad_text(value)) is not None:
                return reject("bad_text", f"row {index}: {name!r} cannot be stored as UTF-8: {why}")
        if pid in self.seen:
            return reject("duplicate_id", f"row {index}: id {pid!r} was already used by an earlier row")
        grading = None
        if m.aliases is not None and (aliases := row.get(m.aliases)) is not None:
            if not isinstance(aliases, list) or not all(isinstance(a, str) and _bad_text(a) is None for a in aliases):
                return reject("unparseable_answer", f"row {index}: {m.aliases!r} is not a list of strings")
            grading = json.dumps({"aliases": aliases}, ensure_ascii=False)
        self.seen.add(pid)
        return Problem(id=pid, question=question, gold_answer=gold, source=self.source, grading=grading)

    def read_all(self, rows: Iterable[tuple[int, Any]]) -> Iterator[Item]:
        for index, row in rows:
            yield row if isinstance(row, RejectedRecord) else self.read(index, row)


# ---------------------------------------------------------------- files
def _from_file(src: FileSource, gold_optional: bool = False) -> Iterator[Item]:
    stem = src.path.stem
    return _RowReader(stem, stem, src.mapping(), gold_optional).read_all(file_rows(src.path))


def file_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """The raw rows of a local problem file (.jsonl, .json, .parquet), numbered; a line that is no JSON
    object comes as its rejection. The file is opened here, not on the first next(), so a broken file
    fails at the call."""
    stem = path.stem
    openers = {".jsonl": _jsonl_rows, ".ndjson": _jsonl_rows, ".json": _json_rows, ".parquet": _parquet_rows}
    opener = openers.get(path.suffix.lower())
    if opener is None:
        raise ProblemSourceError(
            f"unsupported problem file type {path.suffix!r} ({path}); use .jsonl, .json or .parquet"
        )
    if not path.is_file():
        raise ProblemSourceError(f"problem file {path} is not a readable file")
    return opener(path, stem)


def _open_problem_file(path: Path) -> Any:
    try:
        return path.open("rb")
    except OSError as e:
        raise ProblemSourceError(f"cannot read problem file {path}: {e.strerror or e}") from None


def _skip_rest_of_line(f: Any) -> int:
    """Read past the end of the current line in bounded chunks; the bytes skipped."""
    skipped = 0
    while chunk := f.readline(READ_CHUNK_BYTES):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def _jsonl_rows(path: Path, source: str) -> Iterator[tuple[int, Any]]:
    f = _open_problem_file(path)  # here, so an unreadable file fails at the call

    def rows() -> Iterator[tuple[int, Any]]:
        # Bytes, decoded line by line: one bad line (even bad UTF-8) is rejected, the rest continue.
        # A line is read up to MAX_LINE_BYTES: a longer one is rejected and skipped, never held whole.
        with f:
            index = 0
            while True:
                try:
                    raw = f.readline(MAX_LINE_BYTES + 1)
                    cut = len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n")
                    size = len(raw) + (_skip_rest_of_line(f) if cut else 0)
                except OSError as e:  # a disk error mid-way: the source cannot be read, said in one line
                    raise ProblemSourceError(
                        f"cannot read problem file {path} at line {index + 1}: {e.strerror or e}"
                    ) from None
                if not raw:
                    return
                line, index = index, index + 1
                if line == 0:
                    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
                where = f"{path}:{line + 1}"
                if cut:
                    text = raw[:PAYLOAD_CHARS].decode("utf-8", errors="replace")
                    detail = f"{where}: a line of {size} bytes, over the bound of {MAX_LINE_BYTES} bytes; not read"
                    yield line, _reject(source, line, "line_too_long", detail, text)
                    continue
                if not raw.strip():
                    continue  # a blank line holds no row
                try:
                    row = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    text = raw[:PAYLOAD_CHARS].decode("utf-8", errors="replace")
                    yield line, _reject(source, line, "broken_line", f"{where}: not valid JSON: {e}", text)
                    continue
                except RecursionError:
                    text = raw[:PAYLOAD_CHARS].decode("utf-8", errors="replace")
                    detail = f"{where}: JSON nested too deeply to read ({len(raw)} bytes)"
                    yield line, _reject(source, line, "broken_line", detail, text)
                    continue
                if not isinstance(row, dict):
                    detail = f"{where}: a JSON {type(row).__name__}, not an object"
                    yield line, _reject(source, line, "broken_line", detail, _payload(row))
                    continue
                yield line, row

    return rows()


def _json_rows(path: Path, source: str) -> Iterator[tuple[int, Any]]:
    try:
        size = path.stat().st_size
        if size > MAX_JSON_FILE_BYTES:
            raise ProblemSourceError(
                f"problem file {path} is {size} bytes, over the {MAX_JSON_FILE_BYTES}-byte bound of a .json file "
                "(read whole); write it as .jsonl, one problem a line, which is read line by line"
            )
        with path.open("rb") as f:
            data = json.loads(f.read().decode("utf-8-sig"))  # no streaming JSON in the standard library
    except OSError as e:
        raise ProblemSourceError(f"cannot read problem file {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProblemSourceError(f"cannot read problem file {path}: {e}") from e
    except RecursionError:
        raise ProblemSourceError(f"cannot read problem file {path}: JSON nested too deeply") from None
    if isinstance(data, dict):
        data = next((data[k] for k in ("data", "rows") if isinstance(data.get(k), list)), None)
    if not isinstance(data, list):
        raise ProblemSourceError(
            f"problem file {path} must hold a list of objects, or an object with a 'data' or 'rows' list"
        )
    return enumerate(data)


def _parquet_rows(path: Path, source: str) -> Iterator[tuple[int, Any]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:
        raise ProblemSourceError(f"cannot read parquet problem file {path}: {e}") from e

    def rows() -> Iterator[tuple[int, Any]]:
        index = 0
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for row in batch.to_pylist():
                yield index, row
                index += 1

    return rows()


# ---------------------------------------------------------------- Hugging Face
# The builders whose local files prm-synth reads itself, with the bounds of a local problem file.
_OWN_BUILDERS = ("json", "parquet")


def _from_hf(src: HFSource, gold_optional: bool = False) -> Iterator[Item]:
    """A Hugging Face source. Local files (a folder, or the `json` / `parquet` builder over local
    data_files) are read by the readers of local problem files, with their bounds (a line over
    MAX_LINE_BYTES rejected unread, a .json list over MAX_JSON_FILE_BYTES refused, Parquet by batches);
    the rows and their ids are those `datasets` gives. Other sources stream through `datasets`, and a
    row over MAX_LINE_BYTES of text is rejected ("line_too_long") as a local line would be."""
    name = src.path + (f"/{src.name}" if src.name else "")
    reader = _RowReader(name, f"{name}-{src.split}", src.mapping(), gold_optional)
    return reader.read_all(hf_rows(src))


def hf_rows(src: HFSource) -> Iterator[tuple[int, Any]]:
    """The raw rows of a Hugging Face source, numbered as `datasets` numbers them (see `_from_hf`)."""
    name = src.path + (f"/{src.name}" if src.name else "")
    where = f"Hugging Face dataset {name!r} (split {src.split!r})"
    local = _local_files(src)
    if local is not None:
        builder, files = local
        return _local_hf_rows(builder, files, name)
    import datasets

    from prm_synth.engines.hub_reach import hub_unreachable, offline, offline_hint

    unreachable = hub_unreachable()  # offline: the cached copy at once, or the error at once (no retries)
    try:
        with offline() if unreachable else contextlib.nullcontext():
            ds = datasets.load_dataset(
                src.path, src.name, data_files=src.data_files, split=src.split, streaming=src.streaming
            )
    except Exception as e:
        if unreachable:
            raise ProblemSourceError(f"cannot load {where}: {offline_hint(unreachable, 'the dataset')}") from None
        raise ProblemSourceError(f"cannot load {where}: {type(e).__name__}: {e}") from e
    return _hf_rows(ds, where, name)


def _is_local(data_files: str | list[str] | dict[str, str | list[str]] | None) -> bool:
    values = data_files.values() if isinstance(data_files, dict) else [data_files]
    flat = [f for v in values for f in ([v] if isinstance(v, str) else (v or []))]
    return bool(flat) and not any("://" in f for f in flat)


def _local_files(src: HFSource) -> tuple[str, list[Path]] | None:
    """The builder and the files of the split when the source is local files prm-synth can read
    (as `datasets` resolves them: a folder's split files, globs, relative paths); else None."""
    if not (Path(src.path).is_dir() or (src.path in _OWN_BUILDERS and _is_local(src.data_files))):
        return None
    import datasets

    try:
        builder = datasets.load_dataset_builder(src.path, src.name, data_files=src.data_files)
        files = [Path(f) for f in builder.config.data_files[src.split]]
    except Exception:  # noqa: BLE001 - `datasets.load_dataset` then says what is wrong, as before
        return None
    if builder.name not in _OWN_BUILDERS or not files or not all(f.is_file() for f in files):
        return None
    return builder.name, files


def _local_hf_rows(builder: str, files: list[Path], source: str) -> Iterator[tuple[int, Any]]:
    """The rows of local files in order, numbered as `datasets` numbers them (blank lines hold none)."""
    index = 0
    for path in files:
        for _, row in _local_file_rows(builder, path, source):
            yield index, row
            index += 1


def _local_file_rows(builder: str, path: Path, source: str) -> Iterator[tuple[int, Any]]:
    if builder == "parquet":
        return _parquet_rows(path, source)
    # `json` reads JSON lines, or a file holding one JSON list; which one, the first character says.
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl_rows(path, source)
    with _open_problem_file(path) as f:
        head = f.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()
    return _json_rows(path, source) if head.startswith(b"[") else _jsonl_rows(path, source)


def _row_bytes(row: Any) -> int:
    """About the bytes of a row's text (its values as text), to hold a streamed row to MAX_LINE_BYTES."""
    if not isinstance(row, dict):
        return 0
    return sum(len(v) if isinstance(v, str | bytes) else len(str(v)) for v in row.values())


def _hf_rows(ds: Iterable[Any], where: str, source: str) -> Iterator[tuple[int, Any]]:
    # A streaming dataset fetches as it goes, so a network or format error can surface mid-way.
    rows = iter(ds)
    index = 0
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except Exception as e:
            raise ProblemSourceError(f"error reading row {index} of {where}: {type(e).__name__}: {e}") from e
        if (size := _row_bytes(row)) > MAX_LINE_BYTES:
            detail = f"row {index} of {where}: {size} bytes of text, over the bound of {MAX_LINE_BYTES} bytes"
            yield index, _reject(source, index, "line_too_long", detail, "")
        else:
            yield index, row
        index += 1
