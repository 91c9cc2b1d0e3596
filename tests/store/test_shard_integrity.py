"""Corrupted and contested output folders: every reader checks each shard against its marker's checksum and
refuses a damaged one by name; a damaged manifest is rebuilt; counts come from the data; files are readable
by others (umask); two runs into one folder are not allowed at once; a row that cannot be stored is rejected."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from _dataset_fixture import PROBLEMS, ROWS_PER_PROBLEM, make_dataset
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.export.hub import export_to_dir
from prm_synth.records import RejectedRecord, ShardStats
from prm_synth.store.layout import CorruptShardError, DatasetError, OutputLockedError, OutputMismatchError
from prm_synth.store.readers import data_files, iter_records, iter_tables, read_manifest
from prm_synth.store.shards import ShardStore
from prm_synth.store.summary import summarize

ROOT = Path(__file__).resolve().parents[2]
ROWS = PROBLEMS * ROWS_PER_PROBLEM


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    make_dataset(root)
    return root


def _flip_byte(path: Path, offset: int = -40) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _one_line_error(result, code: int, *needles: str) -> None:
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_flipped_byte_is_refused_by_every_reader_naming_the_file(dataset: Path, tmp_path: Path) -> None:
    _flip_byte(dataset / "data" / "shard-00001.arrow")
    readers = {
        "iter_tables": lambda: list(iter_tables(dataset)),
        "iter_records": lambda: list(iter_records(dataset)),
        "data_files": lambda: data_files(dataset),
        "summarize": lambda: summarize(dataset),
        "export": lambda: export_to_dir(dataset, tmp_path / "export", ["trl"], 0.1, 0),
    }
    for name, read in readers.items():
        with pytest.raises(CorruptShardError, match="shard-00001.arrow") as info:
            read()
        assert "re-run" in str(info.value), name
    assert list(iter_records(dataset, "rejected"))  # the rejected files are intact and still readable
    runner = CliRunner()
    _one_line_error(runner.invoke(app, ["inspect", str(dataset)]), 2, "shard-00001.arrow", "checksum")
    out = tmp_path / "export-cli"
    # a damaged dataset is the input's fault, for every reader alike (DatasetError.exit_code)
    _one_line_error(runner.invoke(app, ["export", str(dataset), "--to-dir", str(out)]), 2, "shard-00001.arrow")
    # a re-run of the same config redoes exactly that shard
    assert sorted(ShardStore(dataset, "fixturefp").finished()) == [0, 2]


@pytest.mark.parametrize("damage", ["truncated", "empty", "missing"])
def test_a_truncated_empty_or_missing_shard_is_a_one_line_error(dataset: Path, damage: str) -> None:
    path = dataset / "rejected" / "shard-00002.arrow"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
    _one_line_error(CliRunner().invoke(app, ["inspect", str(dataset), "--json"]), 2, "shard-00002.arrow")


def test_a_marker_hand_edited_to_match_damaged_data_is_still_refused(dataset: Path) -> None:
    import hashlib

    data = dataset / "data" / "shard-00000.arrow"
    data.write_bytes(b"not arrow at all")
    marker = dataset / "shards" / "shard-00000.json"
    entry = json.loads(marker.read_text())
    entry["sha256"]["data/shard-00000.arrow"] = hashlib.sha256(b"not arrow at all").hexdigest()
    marker.write_text(json.dumps(entry))
    with pytest.raises(CorruptShardError, match="not a readable Arrow stream"):
        summarize(dataset)


def test_row_counts_come_from_the_data_not_from_a_hand_edited_marker(dataset: Path) -> None:
    honest = summarize(dataset)
    marker = dataset / "shards" / "shard-00000.json"
    entry = json.loads(marker.read_text())
    entry["rows"], entry["rejected"] = 999_999, 555
    marker.write_text(json.dumps(entry))
    summary = summarize(dataset)
    assert summary.rows == honest.rows == ROWS
    assert summary.rejected == honest.rejected == 4


def test_a_damaged_manifest_is_a_clear_error_and_the_next_run_rebuilds_it(dataset: Path) -> None:
    (dataset / "manifest.json").write_text('{"format": "prm-synth/1", "shards": [')
    with pytest.raises(DatasetError, match="re-run the same config"):
        read_manifest(dataset)
    _one_line_error(CliRunner().invoke(app, ["inspect", str(dataset)]), 2, "manifest.json", "damaged")
    dump = yaml.safe_load((dataset / "config.yaml").read_text())
    with pytest.raises(OutputMismatchError, match="another config"):  # the markers still say which config
        ShardStore(dataset, "otherfp").prepare(dump, yaml.safe_dump(dump))
    store = ShardStore(dataset, "fixturefp")
    store.prepare(dump, yaml.safe_dump(dump))  # the same config: not blocked, the manifest is rebuilt
    manifest = read_manifest(dataset)
    assert [s["shard"] for s in manifest["shards"]] == [0, 1, 2] and manifest["config"] == dump
    assert summarize(dataset).rows == ROWS


def test_output_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        make_dataset(tmp_path / "ds")
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "ds").rglob("*") if p.is_file()]
    assert len(files) >= 9
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


_HOLDER = """
import sys
from prm_synth.store.shards import ShardStore
store = ShardStore(sys.argv[1], "f")
store.prepare({}, "")
print("locked", flush=True)
sys.stdin.read()  # hold the lock until killed
"""


def test_a_second_run_into_the_same_folder_fails_at_once_and_a_crash_frees_the_lock(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        with pytest.raises(OutputLockedError, match=f"in use by another prm-synth run \\(pid {holder.pid}\\)"):
            ShardStore(out, "f").prepare({}, "")
        assert time.monotonic() - start < 5  # refused at once, not after waiting
    finally:
        holder.kill()  # a crash: no clean-up code runs; the kernel drops the lock with the descriptor
        holder.wait()
    store = ShardStore(out, "f")
    store.prepare({}, "")
    again = ShardStore(out, "f")
    again.prepare({}, "")  # the same process may go on (a re-run after an error), the lock is shared
    store.release()
    again.release()


def test_a_lone_surrogate_in_model_text_is_replaced_and_recorded_and_the_row_is_kept(tmp_path: Path) -> None:
    from _dataset_fixture import _record

    store = ShardStore(tmp_path, "fixturefp")
    store.prepare({}, "")
    good = [_record(p, 0).to_row() for p in range(3)]
    bad = _record(3, 0).to_row() | {"steps": ["fine\n", "model output \ud800 here\n"]}
    bad_rejection = RejectedRecord("r1", "p \udfff", "src", "load", "bad_text", "detail \ud800", "{}", "fixturefp")
    stats = ShardStats(rows=4, rejected=1, rejected_by_reason={"bad_text": 1})
    entry = store.write_shard(0, [*good, bad], [bad_rejection.to_row()], problems=4, stats=stats)
    store.write_manifest()
    assert entry.rows == 4 and entry.rejected == 1
    assert entry.stats.text_repaired == 1 and entry.stats.rejected_by_reason == {"bad_text": 1}
    assert (entry.stats.rows, entry.stats.rejected) == (4, 1)  # the counts agree with the files written
    rows = {r["id"]: r for r in iter_records(tmp_path)}
    assert list(rows) == [r["id"] for r in [*good, bad]]
    assert rows[bad["id"]]["steps"] == ["fine\n", "model output \ufffd here\n"]  # one character, not the row
    rejected = {r["id"]: r for r in iter_records(tmp_path, "rejected")}
    assert rejected["r1"]["problem_id"] == "p \\udfff" and rejected["r1"]["detail"] == "detail \\ud800"


@pytest.mark.usefixtures("prefect_harness")
def test_a_run_over_hostile_rows_and_a_damaged_shard_end_to_end(tmp_path: Path) -> None:
    """The issue's probes through the real flow: hostile rows are rejected and the run goes on; a flipped byte
    in a finished run stops `inspect`; a re-run redoes that shard alone and the folder reads again."""
    import random

    from flows.synthesize import synthesize
    from prm_synth.config import load_config
    from prm_synth.simulated import arithmetic

    def row(seed: int) -> str:
        chain = arithmetic.generate(random.Random(seed), 2, 3)
        return json.dumps({"question": chain.question(), "answer": f"work\n#### {chain.answer}"})

    lines = [
        row(0),
        "[" * 100_000 + "]" * 100_000,
        json.dumps({"question": "bad \ud800", "answer": "#### 1"}),
        json.dumps({"question": "What is 0/0?", "answer": float("nan")}),
        row(4),
        row(5),
    ]
    problems = tmp_path / "problems.jsonl"
    problems.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    data = yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text())
    data["problems"] = {"kind": "file", "path": str(problems), "preset": "gsm8k"}
    data["output"] = {"shard_size": 2}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    config = load_config(tmp_path / "p.yaml")
    out = tmp_path / "out"
    summary = synthesize(config=config, out_dir=str(out))
    assert summary.problems_in == 6 and summary.rows == 3 and summary.reconciles
    reasons = {r["id"]: r["reason"] for r in iter_records(out, "rejected")}
    assert reasons == {"problems:1": "broken_line", "problems:2": "bad_text", "problems:3": "unparseable_answer"}

    _flip_byte(out / "data" / "shard-00002.arrow")
    _one_line_error(CliRunner().invoke(app, ["inspect", str(out)]), 2, "shard-00002.arrow")
    again = synthesize(config=config, out_dir=str(out))
    assert again.run.shards_run == 1 and again.run.shards_skipped == 2
    assert CliRunner().invoke(app, ["inspect", str(out), "--json"]).exit_code == 0


def test_stats_go_to_the_marker_typed_and_come_back_equal(tmp_path: Path) -> None:
    from prm_synth.records import ConsensusStats

    stats = ShardStats(
        inputs=4, rows=2, rejected=1, rollout_tokens=70, judge_tokens=5, consensus=ConsensusStats(rows=2)
    )
    store = ShardStore(tmp_path, "fp")
    store.prepare({}, "")
    store.write_shard(0, [], [], problems=4, stats=stats)
    manifest = store.write_manifest()
    assert store.finished(verify=False)[0].stats == stats
    assert manifest["totals"]["stats"]["tokens"] == 75 and manifest["shards"][0]["stats"]["consensus"]["rows"] == 2


def test_a_marker_written_before_typed_stats_still_loads(tmp_path: Path) -> None:
    store = ShardStore(tmp_path, "fp")
    store.prepare({}, "")
    store.write_shard(0, [], [], problems=3, stats=ShardStats(rows=3))
    marker = tmp_path / "shards" / "shard-00000.json"
    old = json.loads(marker.read_text())
    # An older marker: a subset of today's keys, an unknown one, and a stage that did not run as {}.
    old["stats"] = {"rows": 3, "rollouts": 24, "tokens": 999, "judge": {}, "retired_counter": 7}
    marker.write_text(json.dumps(old))
    entry = store.finished()[0]
    assert entry.stats == ShardStats(rows=3, rollouts=24)
    assert store.write_manifest()["totals"]["stats"]["rollouts"] == 24
    marker.write_text(json.dumps(old | {"stats": ["not", "a", "dict"]}))
    assert store.finished() == {}  # not a marker: the shard is redone, as for any unreadable marker
