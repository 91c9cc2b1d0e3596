"""Hugging Face problem sources hold the bounds of local problem files: local data (a folder, or the
`json` / `parquet` builder over local files) is read by prm-synth's own readers, a line over
MAX_LINE_BYTES is rejected unread, a .json list over MAX_JSON_FILE_BYTES is refused; a streamed row
over MAX_LINE_BYTES of text is rejected too. Rows and ids are those `datasets` gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prm_synth.config import HFSource
from prm_synth.problems import sources as problems
from prm_synth.problems.sources import MAX_LINE_BYTES, ProblemSourceError, iter_problems
from prm_synth.records import Problem, RejectedRecord

ROOT = Path(__file__).resolve().parents[2]
HUGE = 96 << 20  # bytes on one line: 96 times the line bound


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _row(i: int) -> str:
    return json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)})


def _write_large_dataset(folder: Path) -> None:
    """data/test.jsonl: 2,000 rows, one line of HUGE bytes among them, and a last line as long with no
    line break at all."""
    (folder / "data").mkdir(parents=True)
    chunk = b"x" * (1 << 20)
    with (folder / "data" / "test.jsonl").open("wb") as f:
        for i in range(1000):
            f.write(_row(i).encode() + b"\n")
        f.write(b'{"question": "')
        for _ in range(HUGE >> 20):
            f.write(chunk)
        f.write(b'", "answer": "1"}\n')
        for i in range(1000, 2000):
            f.write(_row(i).encode() + b"\n")
        for _ in range(HUGE >> 20):
            f.write(chunk)


_MEASURE = """
import json, resource, sys
import datasets
from prm_synth.config import HFSource
from prm_synth.problems.sources import iter_problems
from prm_synth.records import Problem
datasets.load_dataset_builder("json", data_files=sys.argv[2])  # what datasets costs itself, before
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
items = list(iter_problems(HFSource(path=sys.argv[1], split="test")))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rejected = [(r.reason, r.id) for r in items if not isinstance(r, Problem)]
print(json.dumps({"grew_kib": peak - before, "problems": sum(isinstance(r, Problem) for r in items), "rejected": rejected}))
"""


def test_a_large_local_dataset_through_the_hf_source_is_read_within_the_line_bound(tmp_path):
    folder = tmp_path / "big"
    _write_large_dataset(folder)
    small = tmp_path / "small.jsonl"
    small.write_text(_row(0) + "\n")
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(folder), str(small)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["problems"] == 2000
    assert [reason for reason, _ in out["rejected"]] == ["line_too_long", "line_too_long"]
    # 192 MiB of lines over the bound, read in bounded chunks: memory grows by a few MiB, not by a line
    assert out["grew_kib"] < 48 * 1024, out["grew_kib"]


def test_rows_and_ids_are_those_datasets_gives(tmp_path):
    import datasets

    folder = tmp_path / "set"
    (folder / "data").mkdir(parents=True)
    lines = [_row(0), "", _row(1), json.dumps({"question": "ünïcode ∑", "answer": "3"}), "  ", _row(4)]
    (folder / "data" / "test.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ours = list(iter_problems(HFSource(path=str(folder))))
    theirs = list(datasets.load_dataset(str(folder), split="test", streaming=True))
    assert [(p.question, p.gold_answer) for p in ours] == [(r["question"], r["answer"]) for r in theirs]
    assert [p.id for p in ours] == [f"{folder}-test-{i:06d}" for i in range(4)]

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([json.loads(_row(i)) for i in range(3)]), tmp_path / "p.parquet")
    source = HFSource(path="parquet", data_files={"test": str(tmp_path / "p.parquet")})
    assert [p.gold_answer for p in iter_problems(source)] == ["1", "2", "3"]


def test_a_json_list_over_the_file_bound_is_refused_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([json.loads(_row(i)) for i in range(100)]))
    monkeypatch.setattr(problems, "MAX_JSON_FILE_BYTES", 1000)
    with pytest.raises(ProblemSourceError, match="over the 1000-byte bound"):
        list(iter_problems(HFSource(path="json", data_files=str(path), split="train")))
    monkeypatch.setattr(problems, "MAX_JSON_FILE_BYTES", 1 << 20)
    assert len(list(iter_problems(HFSource(path="json", data_files=str(path), split="train")))) == 100


def test_a_streamed_row_over_the_line_bound_is_rejected():
    rows = [{"question": "q", "answer": "1"}, {"question": "x" * (MAX_LINE_BYTES + 1), "answer": "2"}]
    out = list(
        problems._RowReader("remote", "remote-test", HFSource(path="p").mapping()).read_all(
            problems._hf_rows(rows, "Hugging Face dataset 'p'", "remote")
        )
    )
    assert isinstance(out[0], Problem)
    assert isinstance(out[1], RejectedRecord) and out[1].reason == "line_too_long" and out[1].id == "remote:1"
