"""Readers see a consistent folder, and hostile input ends in one line: `export`, `inspect`, `show` and
`eval dataset` refuse a folder a run is writing (naming the run), and a run does not start on a folder
being read; a pipeline file nested 100,000 deep is one `error:` line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _dataset_fixture import make_dataset
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.store.layout import OutputLockedError
from prm_synth.store.lock import reading
from prm_synth.store.shards import ShardStore

ROOT = Path(__file__).resolve().parents[2]

# A run holding the folder (its lock, as `ShardStore.prepare` takes it), until killed.
_RUN = """
import sys
from prm_synth.store.shards import ShardStore
store = ShardStore(sys.argv[1], "fixturefp")
store.lock()
print("locked", flush=True)
sys.stdin.read()
"""


def _one_line(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.fixture
def held(tmp_path: Path):
    """A dataset, and a run (another process) that holds it."""
    root = tmp_path / "ds"
    make_dataset(root)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.Popen(
        [sys.executable, "-c", _RUN, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert run.stdout is not None and run.stdout.readline().strip() == "locked"
        yield root, run.pid
    finally:
        run.kill()
        run.wait()


@pytest.mark.parametrize(
    "args",
    [["inspect"], ["inspect", "--json"], ["show"], ["eval", "dataset"], ["export", "--to-dir", "OUT"]],
)
def test_a_reader_refuses_a_folder_a_run_is_writing_naming_the_run(held, tmp_path, args):
    root, pid = held
    args = [str(tmp_path / "export") if a == "OUT" else a for a in args]
    start = time.monotonic()
    words = 2 if args[0] == "eval" else 1  # the command's own words, then the folder, then its options
    line = _one_line(CliRunner().invoke(app, [*args[:words], str(root), *args[words:]]), 1)
    assert time.monotonic() - start < 30  # at once, not after the run
    assert f"being written by a prm-synth run (pid {pid})" in line, line
    assert not (tmp_path / "export").exists()  # nothing half-exported


def test_a_run_does_not_start_on_a_folder_being_read(tmp_path):
    root = tmp_path / "ds"
    make_dataset(root)
    import gc

    gc.collect()  # the fixture's store (and its lock) is gone
    with reading(root), pytest.raises(OutputLockedError, match="being read by another prm-synth command"):
        ShardStore(root, "fixturefp").prepare({}, "")
    ShardStore(root, "fixturefp").prepare({}, "")  # the reader is done: the run goes on


def test_a_folder_without_a_lock_file_is_read_as_it_is(tmp_path):
    root = tmp_path / "ds"
    make_dataset(root)
    import gc

    gc.collect()
    (root / ".lock").unlink()
    result = CliRunner().invoke(app, ["inspect", str(root), "--json"])
    assert result.exit_code == 0, result.output
    assert not (root / ".lock").exists()  # a reader never creates it


def test_a_pipeline_nested_100000_deep_is_one_error_line(tmp_path):
    for name, text in {
        "lists.yaml": "name: x\nproblems: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "maps.yaml": "name: x\nproblems: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n",
    }.items():
        path = tmp_path / name
        path.write_text(text)
        env = os.environ | {"PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-m", "prm_synth.cli", "run", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2, done.stderr[-2000:]
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        assert len(lines) == 1 and "nested too deeply" in lines[0] and lines[0].startswith("error: "), lines[:3]
