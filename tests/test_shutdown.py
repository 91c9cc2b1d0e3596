"""Stopping `prm-synth run` with the real demo engine: SIGINT, SIGTERM and SIGKILL each stop the run,
no process of it survives (vLLM's EngineCore and Worker, Prefect's temporary server), and the next run
resumes where it stopped."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from prm_synth.shards import iter_records

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = 8


def small_demo(tmp_path: Path) -> Path:
    """pipelines/demo.yaml, cut so that a shard (one problem) takes seconds after the engine is up."""
    data = yaml.safe_load((ROOT / "pipelines" / "demo.yaml").read_text())
    data["problems"]["count"] = PROBLEMS
    data["sampling"] |= {"samples_per_problem": 1, "max_tokens": 48}
    data["annotate"] |= {"k": 2}
    data["rollouts"] = {"max_tokens": 24}
    data["output"] = {"shard_size": 1}
    path = tmp_path / "demo-small.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def tree(pid: int) -> dict[int, str]:
    """The process and its descendants now, with their command lines."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    out = {}
    for p in procs:
        with contextlib.suppress(psutil.Error):
            out[p.pid] = " ".join(p.cmdline()) or p.name()
    return out


def alive(pids) -> list[int]:
    living = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                living.append(pid)
        except psutil.NoSuchProcess:
            pass
    return living


def wait_for(condition, deadline_s: float, what: str, poll_s: float = 0.2):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(poll_s)
    raise AssertionError(f"{what}: not within {deadline_s} s")


@pytest.mark.slow
def test_sigint_sigterm_and_sigkill_stop_everything_and_the_next_run_resumes(tmp_path):
    pipeline = small_demo(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(pipeline), "--out", str(out), "--json"]
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONPATH": str(ROOT)}
    env.pop("PRM_SYNTH_IN_PROCESS", None)

    def markers() -> int:
        return len(list((out / "shards").glob("*.json")))

    engine_seen = False
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        before = markers()
        log = tmp_path / f"{sig.name}.log"
        with log.open("w") as sink:
            proc = subprocess.Popen(
                cmd, env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        seen: dict[int, str] = {}

        def one_more_shard() -> bool:
            seen.update(tree(proc.pid))  # noqa: B023 - this iteration's process
            if proc.poll() is not None:  # noqa: B023
                raise AssertionError(f"the run ended before {sig.name}:\n{log.read_text()[-3000:]}")  # noqa: B023
            return markers() > before  # noqa: B023

        # The engine is up once a shard is finished: stop the run while it works on the next one.
        wait_for(one_more_shard, 900, f"a finished shard before {sig.name}")
        seen.update(tree(proc.pid))
        engine_seen |= any("EngineCore" in c or "VLLM" in c for c in seen.values())
        os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait(timeout=60)
        else:
            deadline = time.monotonic() + 300
            while proc.poll() is None and time.monotonic() < deadline:
                seen.update(tree(proc.pid))
                time.sleep(0.2)
            assert proc.poll() == 130, log.read_text()[-3000:]
            said = log.read_text()
            assert "interrupted; finished shards are kept" in said
            assert f"stopping ({'Ctrl-C' if sig == signal.SIGINT else 'SIGTERM'})..." in said
            assert "Crash detected" not in said  # our own stop is not logged as a crash
        try:
            wait_for(lambda: not alive(seen), 120, f"every process of the run ends after {sig.name}")  # noqa: B023
        except AssertionError as e:
            raise AssertionError(f"{e}; alive: {[seen[pid][:120] for pid in alive(seen)]}") from None
    assert engine_seen, "the run never started vLLM's processes, so the test showed nothing"

    finished = markers()
    assert 3 <= finished < PROBLEMS
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["shards_skipped"] >= finished - 1  # a marker written as it was killed may be torn
    assert summary["problems_in"] == PROBLEMS and summary["reconciles"]
    ids = [r["id"] for r in iter_records(out)] + [r["id"] for r in iter_records(out, "rejected")]
    assert len(ids) == len(set(ids)) == PROBLEMS
