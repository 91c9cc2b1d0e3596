"""Stopping `prm-synth run`: SIGINT, SIGTERM and SIGKILL each stop the run, no process of it survives
(vLLM's EngineCore and Worker, Prefect's temporary server), and the next run resumes where it stopped.

Each real process starts as little as it needs: the signals, the calm stop and the resume are shown on the
simulated policy (the same worker, signal handling and shard markers as with any engine); the real demo
engine through vLLM is started once for a graceful stop (SIGTERM: the engine is shut down) and once for
SIGKILL (the command dies at once; its worker and vLLM's processes must not outlive it)."""

from __future__ import annotations

import asyncio
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
from _simulated_run import openai_policy, small_pipeline
from aiohttp import web
from fault_proxy import SimulatedCompletionsServer

from prm_synth.store.readers import iter_records

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = 8
# The simulated runs: far more problems than a run gets through before its signal, one problem a shard
# and one shard at a time, so the markers are the shards 0..N-1 in order.
SIMULATED_PROBLEMS = 5000


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


def endless_simulated(tmp_path: Path) -> Path:
    """pipelines/simulated.yaml with more problems than a signalled run reaches (the resume takes --limit)."""
    data = yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text())
    data["problems"]["count"] = SIMULATED_PROBLEMS
    data["output"] = {"shard_size": 1}
    data["run"] = {"max_parallel_shards": 1}
    path = tmp_path / "simulated-long.yaml"
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


def markers(out: Path) -> int:
    return len(list((out / "shards").glob("*.json")))


def run_command(pipeline: Path, out: Path, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(pipeline), "--out", str(out), "--json"]
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONPATH": str(ROOT)}
    env.pop("PRM_SYNTH_IN_PROCESS", None)  # the real command: a parent over a worker child
    return cmd, env


def stop_mid_run(cmd, env, out: Path, sig: signal.Signals, log: Path) -> dict[int, str]:
    """Start the command, send `sig` once it has finished one more shard (its engine is up and working
    on the next), check how it ended, and wait until none of its processes is alive. Returns every
    process of the run that was seen (pid: command line)."""
    before = markers(out)
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    seen: dict[int, str] = {}

    def one_more_shard() -> bool:
        seen.update(tree(proc.pid))
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {sig.name}:\n{log.read_text()[-3000:]}")
        return markers(out) > before

    try:
        wait_for(one_more_shard, 900, f"a finished shard before {sig.name}")
        seen.update(tree(proc.pid))
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
            wait_for(lambda: not alive(seen), 120, f"every process of the run ends after {sig.name}")
        except AssertionError as e:
            raise AssertionError(f"{e}; alive: {[seen[pid][:120] for pid in alive(seen)]}") from None
    finally:
        if proc.poll() is None:  # a failed check above: leave no process behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    return seen


@pytest.mark.slow
def test_sigint_sigterm_and_sigkill_stop_a_run_and_the_next_run_resumes(tmp_path):
    """On the simulated policy: each signal stops the run part-way and leaves no process (the worker, its
    watchdog, Prefect's temporary server); then the same command resumes, redoing no finished shard."""
    out = tmp_path / "out"
    cmd, env = run_command(endless_simulated(tmp_path), out, tmp_path)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        seen = stop_mid_run(cmd, env, out, sig, tmp_path / f"{sig.name}.log")
        assert any("prefect.server" in c for c in seen.values()), "no temporary Prefect server was seen"

    finished = markers(out)
    assert 3 <= finished < SIMULATED_PROBLEMS
    shards = sorted(int(p.stem.split("-")[-1]) for p in (out / "shards").glob("*.json"))
    # Through the last finished shard and a few more: the resume skips the finished ones and does the rest.
    limit = shards[-1] + 1 + 3
    done = subprocess.run([*cmd, "--limit", str(limit)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["shards_skipped"] >= finished - 1  # a marker written as it was killed may be torn
    assert summary["shards_run"] == limit - summary["shards_skipped"]
    assert summary["problems_in"] == limit and summary["reconciles"]
    ids = [r["id"] for r in iter_records(out)] + [r["id"] for r in iter_records(out, "rejected")]
    assert len(ids) == len(set(ids)) == limit


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_run_on_the_real_demo_engine_stopped_by_a_signal_leaves_no_vllm_process(tmp_path, sig):
    """SIGTERM: the worker shuts vLLM down within its deadline and the command exits 130. SIGKILL: the
    command dies at once; its worker (parent-death signal, watchdog) stops and takes vLLM's EngineCore
    and Worker with it. Either way no process of the run survives, and the finished shards are kept."""
    out = tmp_path / "out"
    cmd, env = run_command(small_demo(tmp_path), out, tmp_path)
    seen = stop_mid_run(cmd, env, out, sig, tmp_path / f"{sig.name}.log")
    assert any("EngineCore" in c or "VLLM" in c for c in seen.values()), (
        "the run never started vLLM's processes, so the test showed nothing"
    )
    assert 1 <= markers(out) < PROBLEMS


class SilentThenSimulated(SimulatedCompletionsServer):
    """An OpenAI-compatible server that accepts every request and never answers while `silent`, counting
    the requests it gets (`asked`); once not silent, it answers as the simulated policy."""

    def __init__(self) -> None:
        from prm_synth.config import SimulatedPolicyConfig

        super().__init__(config=SimulatedPolicyConfig(step_error=0.2, seed=0))
        self.silent = True
        self.asked = 0

    async def _completions(self, request: web.Request) -> web.Response:
        if self.silent:
            self.asked += 1
            while self.silent:  # no answer while silent (a held request ends only when silence does)
                await asyncio.sleep(0.05)
            raise web.HTTPServiceUnavailable()  # to a client long gone
        return await super()._completions(request)

    def __exit__(self, *exc: object) -> None:
        self.silent = False
        super().__exit__(*exc)


@pytest.mark.slow
def test_sigterm_against_a_server_that_never_answers_stops_within_seconds_and_sends_nothing_after(tmp_path):
    """With the default timeout (120 s) and retries (6), a stop used to wait for every attempt (minutes):
    now SIGTERM cancels the requests in flight and the retries, the command exits 130 within 10 s, says
    "stopping..." as it starts, and no request reaches the server after the signal. The same command
    against the server once it answers makes every row."""
    out = tmp_path / "out"
    with SilentThenSimulated() as server:
        policy = openai_policy(server.url)  # the default timeout and retries
        pipeline = Path(small_pipeline(tmp_path, "silent-server", policy))
        cmd, env = run_command(pipeline, out, tmp_path)
        log = tmp_path / "stop.log"
        with log.open("w") as sink:
            proc = subprocess.Popen(
                cmd, env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            # every sampling request of the first shard (one per problem) is held by the server
            wait_for(lambda: server.asked >= 2 or proc.poll() is not None, 600, "the requests reach the server")
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(1.0)  # lets requests already on the wire arrive: only those after the signal count
            asked_at_signal = server.asked
            signalled = time.monotonic()
            os.kill(proc.pid, signal.SIGTERM)
            wait_for(lambda: proc.poll() is not None, 60, "the command ends after SIGTERM", poll_s=0.05)
            took = time.monotonic() - signalled
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)
        said = log.read_text()
        assert proc.returncode == 130, said[-3000:]
        assert took < 10, f"{took:.1f} s after SIGTERM:\n{said[-3000:]}"
        assert server.asked == asked_at_signal, "a request was sent after the signal"
        assert "stopping (SIGTERM)..." in said and "interrupted; finished shards are kept" in said
        assert said.index("stopping (SIGTERM)...") < said.index("interrupted; finished shards are kept")

        server.silent = False  # the same command against a server that answers: every row is made
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["rows"] == 8 and summary["reconciles"]
