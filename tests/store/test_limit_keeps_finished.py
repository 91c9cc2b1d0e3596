"""A smaller --limit never discards finished work (issue 60, part 1): a user who peeks at the first 20
problems of a finished 200-problem folder gets every finished shard kept byte for byte, counts that
reconcile, exit 0 and a summary line that says what was kept; a limit that cuts a shard in the middle
keeps that shard whole too. New work a limit asks for is still done."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from _simulated_run import pipeline_data, write_run
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.config import load_config
from prm_synth.store.layout import ShardEntry
from prm_synth.store.limit import kept_past_limit, recorded_limit
from prm_synth.store.readers import read_manifest

PROBLEMS = 200  # four shards of 50 (pipelines/simulated.yaml)


def _hashes(folder: Path) -> dict[str, str]:
    """Every file of the folder's shards (data, rejected, markers), by path, with its sha256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for sub in ("data", "rejected", "shards")
        for p in sorted((folder / sub).glob("shard-*"))
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """A finished 200-problem simulated folder (as `run --limit 200` writes it) and its pipeline file."""
    folder = tmp_path_factory.mktemp("limit")
    data = pipeline_data()
    pipeline = folder / "simulated.yaml"
    pipeline.write_text(yaml.safe_dump(data))
    write_run(folder / "run", data, PROBLEMS)
    return folder / "run", pipeline


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(("limit", "kept"), [(20, [0, 1, 2, 3]), (70, [1, 2, 3]), (150, [3])])
def test_run_with_a_smaller_limit_keeps_every_finished_shard(finished, tmp_path, limit, kept):
    run, pipeline = finished
    out = _copy(run, tmp_path / "out")
    before = _hashes(out)
    result = CliRunner().invoke(app, ["run", str(pipeline), "--out", str(out), "--limit", str(limit), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert _hashes(out) == before  # every finished shard, byte for byte
    assert summary["problems_in"] == PROBLEMS and summary["rows"] + summary["rejected"] == PROBLEMS
    assert summary["reconciles"] and summary["shards"] == 4 and summary["shards_run"] == 0
    assert summary["kept_past_limit"]["shards"] == kept
    assert summary["kept_past_limit"]["problems"] == PROBLEMS - limit
    text = CliRunner().invoke(app, ["run", str(pipeline), "--out", str(out), "--limit", str(limit)])
    assert text.exit_code == 0 and _hashes(out) == before
    assert f"finished shard(s) {', '.join(map(str, kept))} ({PROBLEMS - limit} problems past --limit" in text.output


@pytest.mark.usefixtures("prefect_harness")
def test_the_flow_keeps_a_shard_its_limit_cuts_and_does_the_new_work(finished, tmp_path):
    """Through the flow itself (the command's fast path, which answers without Prefect, is bypassed): a
    limit cutting a finished shard in the middle keeps it; a missing shard within the limit is labeled."""
    from flows.synthesize import synthesize

    run, pipeline = finished
    out = _copy(run, tmp_path / "out")
    config = load_config(pipeline)
    (out / "shards" / "shard-00001.json").unlink()  # shard 1 not finished: the limit asks 20 of its problems
    (out / "data" / "shard-00001.arrow").unlink()
    (out / "rejected" / "shard-00001.arrow").unlink()
    before = _hashes(out)

    summary = synthesize(config=config, out_dir=str(out), limit=70)
    after = _hashes(out)
    assert {k: v for k, v in after.items() if "00001" not in k} == before  # shards 0, 2, 3: their bytes
    assert summary.run.shards_run == 1 and summary.run.shards_skipped == 1
    assert json.loads((out / "shards" / "shard-00001.json").read_text())["problems"] == 20
    assert summary.problems_in == 170 and summary.reconciles  # 50 + 20 + 50 + 50
    assert summary.run.kept_past_limit.shards == [2, 3]
    assert read_manifest(out)["limit"] == 170  # the folder holds 170 problems of the source, not 70

    # A limit that cuts shard 2 in the middle and shard 1 (cut short above) short of it: shard 2 is
    # kept, shard 1 (20 of the 50 asked) is labeled whole, as a growing limit always did.
    cut = _hashes(out)
    again = synthesize(config=config, out_dir=str(out), limit=120)
    assert again.run.shards_run == 1 and again.run.shards_skipped == 2
    assert {k: v for k, v in _hashes(out).items() if "00001" not in k} == {
        k: v for k, v in cut.items() if "00001" not in k
    }
    assert again.problems_in == PROBLEMS and again.reconciles
    assert again.run.kept_past_limit.shards == [2, 3] and again.run.kept_past_limit.problems == 80
    assert "limit" not in read_manifest(out) or read_manifest(out)["limit"] == PROBLEMS


def _entry(shard: int, problems: int) -> ShardEntry:
    return ShardEntry(shard, problems, problems, 0, "", "", {}, "f")


def test_what_a_limit_keeps_is_counted_shard_by_shard():
    entries = [_entry(0, 50), _entry(1, 50), _entry(2, 30)]  # shard 2 cut short by an earlier limit of 130
    assert kept_past_limit(entries, None, 50) is None
    assert kept_past_limit(entries, 130, 50) is None  # nothing past it
    assert kept_past_limit(entries, 200, 50) is None
    cut = kept_past_limit(entries, 60, 50)
    assert cut.shards == [1, 2] and cut.problems == 40 + 30
    assert recorded_limit(None, entries, 400) is None
    assert recorded_limit(20, entries, 400) == 130  # the folder is as big as it was
    assert recorded_limit(200, entries, 400) == 200
    assert recorded_limit(20, entries, 130) is None  # the whole source is held
