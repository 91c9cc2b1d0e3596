"""A full disk, an unreadable or huge problem file, an empty one: one `error:` line (or a warning), never a
traceback, nothing lost; problem lines over a bound are rejected with a reason, not read whole."""

from __future__ import annotations

import errno
import json
import random
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import flows.synthesize  # noqa: F401 - Prefect sets its log handlers up at import: here, not inside CliRunner's capture
from prm_synth.cli import app
from prm_synth.config import FileSource, load_config
from prm_synth.problems import sources as problems
from prm_synth.problems.sources import ProblemSourceError, iter_problems
from prm_synth.records import Problem, RejectedRecord
from prm_synth.simulated import arithmetic
from prm_synth.store.readers import iter_records
from prm_synth.store.shards import ShardStore

ROOT = Path(__file__).resolve().parents[2]


def problem_line(seed: int) -> str:
    chain = arithmetic.generate(random.Random(seed), 2, 3)  # text the simulated policy solves
    return json.dumps({"question": chain.question(), "answer": str(chain.answer)})


def write_pipeline(tmp_path: Path, problems_file: Path) -> Path:
    data = yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text())
    data["problems"] = {"kind": "file", "path": str(problems_file)}
    data["annotate"] = {"method": "mc", "k": 2}
    data["output"] = {"shard_size": 2}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def last_line(output: str) -> str:
    return [line for line in output.splitlines() if line.strip()][-1]


# ---------------------------------------------------------------- problem lines over a bound
@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(0, 300), min_size=1, max_size=8), bound=st.integers(40, 200))
def test_a_line_over_the_bound_is_rejected_with_a_reason_and_the_others_are_read(tmp_path_factory, lengths, bound):
    path = tmp_path_factory.mktemp("lines") / "p.jsonl"
    lines = [json.dumps({"question": "q" + "x" * n, "answer": "1", "id": f"i{i}"}) for i, n in enumerate(lengths)]
    path.write_text("\n".join(lines))  # the last line has no line break
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(problems, "MAX_LINE_BYTES", bound)
        mp.setattr(problems, "READ_CHUNK_BYTES", 16)  # a long line is skipped in small pieces
        items = list(iter_problems(FileSource(path=path)))
    assert len(items) == len(lines)
    for line, item in zip(lines, items, strict=True):
        if len(line.encode()) > bound:
            assert isinstance(item, RejectedRecord) and item.reason == "line_too_long"
            assert f"a line of {len(line.encode()) + (line is not lines[-1])} bytes" in item.detail
        else:
            assert isinstance(item, Problem) and item.question == json.loads(line)["question"]


def test_a_file_with_no_line_break_is_not_read_whole(tmp_path, monkeypatch):
    path = tmp_path / "one-line.jsonl"
    with path.open("wb") as f:  # 8 MiB of one line, read with a 64 KiB bound
        for _ in range(128):
            f.write(b"x" * 65536)
    monkeypatch.setattr(problems, "MAX_LINE_BYTES", 65536)
    monkeypatch.setattr(problems, "READ_CHUNK_BYTES", 65536)
    reads: list[int] = []
    real_open = Path.open

    def counting_open(self, *args, **kwargs):
        f = real_open(self, *args, **kwargs)
        readline = f.readline

        class Counting:
            def __getattr__(self, name):
                return getattr(f, name)

            def readline(self, size=-1):
                line = readline(size)
                reads.append(len(line))
                return line

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

        return Counting()

    monkeypatch.setattr(Path, "open", counting_open)
    (item,) = list(iter_problems(FileSource(path=path)))
    assert item.reason == "line_too_long" and f"a line of {128 * 65536} bytes" in item.detail
    assert max(reads) <= 65536 + 1  # never more than the bound at once


def test_a_json_file_over_its_bound_is_refused_with_advice(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(json.dumps([{"question": "q", "answer": "1"}] * 100))
    monkeypatch.setattr(problems, "MAX_JSON_FILE_BYTES", 1000)
    with pytest.raises(ProblemSourceError, match="over the 1000-byte bound of a .json file.*as .jsonl"):
        list(iter_problems(FileSource(path=path)))


def test_a_disk_error_mid_way_through_a_problem_file_is_a_source_error_naming_the_line(tmp_path, monkeypatch):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(problem_line(i) + "\n" for i in range(3)))
    real_open = Path.open

    def failing_open(self, *args, **kwargs):
        f = real_open(self, *args, **kwargs)
        calls = {"n": 0}

        class FailsOnSecondLine:
            def readline(self, size=-1):
                calls["n"] += 1
                if calls["n"] == 2:
                    raise OSError(errno.EIO, "Input/output error")
                return f.readline(size)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

        return FailsOnSecondLine()

    monkeypatch.setattr(Path, "open", failing_open)
    items = iter_problems(FileSource(path=path))
    assert isinstance(next(items), Problem)
    with pytest.raises(ProblemSourceError, match=r"problems.jsonl at line 2: Input/output error"):
        next(items)


def test_an_unreadable_problem_file_is_one_line_exit_2(tmp_path, monkeypatch):
    path = tmp_path / "problems.jsonl"
    path.write_text(problem_line(0) + "\n")
    pipeline = write_pipeline(tmp_path, path)
    real_open = Path.open

    def refuse(self, *args, **kwargs):
        if self == path:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    result = CliRunner().invoke(app, ["run", str(pipeline), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert last_line(result.output).startswith("error: ") and "Permission denied" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the disk fills
@pytest.mark.usefixtures("prefect_harness")
def test_a_full_disk_is_one_error_line_nothing_lost_and_the_resume_is_identical(tmp_path, monkeypatch):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(problem_line(i) + "\n" for i in range(4)))
    pipeline, out = write_pipeline(tmp_path, path), tmp_path / "out"
    real = ShardStore.write_manifest

    def full_at_the_end(self, *args, **kwargs):  # the manifest after the shards: the disk is full by then
        if list((self.root / "shards").glob("shard-*.json")):
            raise OSError(errno.ENOSPC, "No space left on device", str(self.root / "manifest.json"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ShardStore, "write_manifest", full_at_the_end)
    result = CliRunner().invoke(app, ["run", str(pipeline), "--out", str(out)])
    assert result.exit_code == 1, result.output
    line = last_line(result.output)
    assert line.startswith("error: No space left on device") and "run the same command again" in line
    assert "Traceback" not in result.output
    data = {p.name: p.read_bytes() for p in sorted((out / "data").glob("*.arrow"))}
    assert len(data) == 2  # both shards were written whole before the disk filled

    monkeypatch.setattr(ShardStore, "write_manifest", real)  # room again: the same command resumes
    summary = flows.synthesize.synthesize(config=load_config(pipeline), out_dir=str(out))
    assert summary.run is not None and summary.run.shards_skipped == 2 and summary.run.shards_run == 0
    assert {p.name: p.read_bytes() for p in sorted((out / "data").glob("*.arrow"))} == data
    assert summary.rows + summary.rejected == 4 and summary.reconciles


@pytest.mark.usefixtures("prefect_harness")
def test_a_disk_that_fills_at_the_telemetry_picture_does_not_fail_a_complete_run(tmp_path, monkeypatch):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(problem_line(i) + "\n" for i in range(2)))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(flows.synthesize, "publish_engine_pictures", full)
    out = tmp_path / "out"
    summary = flows.synthesize.synthesize(config=load_config(write_pipeline(tmp_path, path)), out_dir=str(out))
    assert summary.rows + summary.rejected == 2 and len(list(iter_records(out))) == summary.rows


# ---------------------------------------------------------------- an empty source
@pytest.mark.usefixtures("prefect_harness")
def test_an_empty_problem_file_says_so_and_exits_0(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text("\n\n  \n")
    result = CliRunner().invoke(app, ["run", str(write_pipeline(tmp_path, path)), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "warning: the problem source holds no problems" in result.output
