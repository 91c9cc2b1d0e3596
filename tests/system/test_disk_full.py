"""The disk fills for real: a run into a small tmpfs that runs out of space mid-way.

A tmpfs is mounted on a temporary folder (this needs root and the right to mount; elsewhere the test is
skipped and says why) and filled with a filler file so that only part of the run fits. The run ends
with one `error:` line, every shard it finished reads back whole (nothing half-written counts as done),
and the same command once space is freed (the filler deleted) finishes the run with shards
byte-identical to those of a run that never hit the limit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import flows.synthesize  # noqa: F401 - Prefect sets its log handlers up at import: here, not inside CliRunner's capture
from prm_synth.cli import app
from prm_synth.store.readers import iter_records
from prm_synth.store.summary import summarize

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = 24
MOUNT_BYTES = 8 << 20


def _pipeline(tmp_path: Path) -> Path:
    data = yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text())
    data["problems"] = {"kind": "builtin", "count": PROBLEMS, "seed": 0, "min_ops": 2, "max_ops": 4}
    data["annotate"] = {"method": "mc", "k": 2}
    data["output"] = {"shard_size": 2}
    data["run"] = {"max_parallel_shards": 1, "shard_retry_delays_s": [0.0, 0.0]}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh tmpfs of MOUNT_BYTES on a temporary folder, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the test runs as an ordinary user)")
    mount = tmp_path / "disk"
    mount.mkdir()
    tried = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={MOUNT_BYTES}", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if tried.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): {tried.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _files(out: Path) -> dict[str, bytes]:
    """The shard files (rows and rejections) by name: what byte-identical is checked on."""
    return {
        str(p.relative_to(out)): p.read_bytes() for kind in ("data", "rejected") for p in sorted((out / kind).glob("*"))
    }


def _fill(mount: Path, leave: int) -> Path:
    """A filler file that leaves about `leave` bytes free on the mount."""
    filler = mount / "filler"
    free = shutil.disk_usage(mount).free
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


@pytest.mark.usefixtures("prefect_harness")
def test_a_disk_that_fills_mid_run_is_one_error_line_nothing_lost_and_the_resume_is_byte_identical(
    tmp_path, small_disk, monkeypatch
):
    pipeline = _pipeline(tmp_path)
    reference = tmp_path / "reference"
    done = CliRunner().invoke(app, ["run", str(pipeline), "--out", str(reference), "--json"])
    assert done.exit_code == 0, done.output
    expected = _files(reference)
    needed = sum(p.stat().st_size for p in reference.rglob("*") if p.is_file())
    assert needed < MOUNT_BYTES // 2, f"the run needs {needed} bytes: raise MOUNT_BYTES"

    out = small_disk / "out"
    filler = _fill(small_disk, needed // 2)  # room for about half of the run
    labeled: list[int] = []
    real = flows.synthesize.process_shard

    def counted(engine, config, shard, *args, **kwargs):
        labeled.append(shard.index)
        return real(engine, config, shard, *args, **kwargs)

    monkeypatch.setattr(flows.synthesize, "process_shard", counted)
    result = CliRunner().invoke(app, ["run", str(pipeline), "--out", str(out), "--json"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.output
    assert "No space left on device" in errors[0] and "run the same command again" in errors[0]
    assert "Traceback" not in result.output

    # Nothing lost: what the run calls finished reads back whole, and is what the reference run made.
    written = _files(out)
    assert 0 < len(written) < len(expected), "the disk should fill part-way through the run"
    finished = len(list((out / "shards").glob("*.json")))
    # The shard that met the full disk is the last one labeled: not retried, no later shard started.
    assert labeled == list(range(finished + 1)), labeled
    assert all(expected[name] == data for name, data in written.items())
    with contextlib.suppress(FileNotFoundError):  # a run that filled before its first manifest has none
        assert summarize(out).shards == finished
    assert len(list(iter_records(out))) > 0  # every finished shard reads back, checked against its marker

    filler.unlink()  # room again: the same command resumes and finishes
    result = CliRunner().invoke(app, ["run", str(pipeline), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert _files(out) == expected
    summary = summarize(out)
    assert summary.reconciles and summary.problems_in == PROBLEMS
