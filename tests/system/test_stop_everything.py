"""A stop of every process of a run at once (systemd, a container runtime, `kill -TERM -- -PGID`), or the
loss of Prefect's temporary server alone, in the middle of a judge's vote rounds: a stop, not a crash.

The command exits within 10 s with the interrupt code (130) and one `error:` line, no traceback, no
request reaches the judge after the signal, finished shards are kept, and the same command then makes a
dataset byte-identical to an uninterrupted run's."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _simulated_run import small_pipeline
from aiohttp import web
from fault_proxy import JudgeServer
from test_shutdown import ROOT, alive, run_command, tree, wait_for


class HoldingJudge(JudgeServer):
    """A judge that answers by the prompt (a step, or -1), until `hold_after` requests: later ones are
    held unanswered while `hold_after` is set (as a judge that stalls mid-round)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold_after: int | None = None
        self.asked = 0
        self.held = 0

    def text_for(self, prompt: str) -> str:
        return "\\boxed{-1}" if hashlib.sha256(prompt.encode()).digest()[0] % 3 else "\\boxed{1}"

    async def _completions(self, request: web.Request) -> web.Response:
        self.asked += 1
        if self.hold_after is not None and self.asked > self.hold_after:
            self.held += 1
            while self.hold_after is not None:
                await asyncio.sleep(0.05)
            raise web.HTTPServiceUnavailable()  # to a client long gone
        return await super()._completions(request)


def _pipeline(tmp_path: Path, url: str) -> Path:
    return Path(
        small_pipeline(
            tmp_path,
            "stop-everything",
            {"kind": "simulated", "step_error": 0.3, "seed": 0, "step_format": "line"},
            judge={"engine": {"kind": "openai", "model": "judge", "base_url": f"{url}/v1"}, "samples": 5},
            consensus={"policy": "soft"},
        )
    )


def _dataset(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes() for sub in ("data", "rejected") for p in (out / sub).glob("*.arrow")
    }


def _stop(cmd, env, judge: HoldingJudge, hold_after: int, pick, log: Path) -> tuple[int | None, float, str]:
    """Run the command until the judge holds a request, SIGTERM the processes `pick` chooses from the
    run's (pid: command line), and return (exit code, seconds from the signal to the exit, output)."""
    judge.hold_after, judge.asked, judge.held = hold_after, 0, 0
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    seen: dict[int, str] = {}
    try:
        wait_for(lambda: judge.held or proc.poll() is not None, 600, "a judge request held")
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(1.0)  # requests already on the wire arrive: only those after the signal count
        seen = tree(proc.pid)
        asked_at_signal = judge.asked
        targets = pick(seen)
        assert targets, seen
        signalled = time.monotonic()
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        wait_for(lambda: proc.poll() is not None, 120, "the command ends", poll_s=0.05)
        took = time.monotonic() - signalled
        assert judge.asked == asked_at_signal, "a request reached the judge after the signal"
        wait_for(lambda: not alive(seen), 60, "every process of the run ends")
    finally:
        judge.hold_after = None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    return proc.returncode, took, log.read_text()


def _one_error_line(said: str) -> str:
    errors = [line for line in said.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, said[-3000:]
    assert "Traceback" not in said and "internal error" not in said, said[-3000:]
    return errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("who", ["every-process", "prefect-server", "worker"])
def test_a_stop_of_every_process_or_of_the_prefect_server_mid_vote_is_a_clean_quick_stop(tmp_path, who):
    with HoldingJudge() as judge:
        pipeline = _pipeline(tmp_path, judge.url)
        reference = tmp_path / "reference"
        cmd, env = run_command(pipeline, reference, tmp_path)
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        total = judge.asked

        out = tmp_path / "out"
        cmd, env = run_command(pipeline, out, tmp_path)
        if who == "every-process":
            pick = list  # the command, its worker, the watchdog, Prefect's temporary server: all at once
        elif who == "worker":  # the worker alone: no judge request and no shard gets through after it
            pick = lambda seen: [pid for pid, c in seen.items() if "prm_synth.cli" in c and pid != next(iter(seen))]  # noqa: E731
        else:
            pick = lambda seen: [pid for pid, c in seen.items() if "prefect" in c and "server" in c]  # noqa: E731
        code, took, said = _stop(cmd, env, judge, total // 2, pick, tmp_path / f"{who}.log")
        assert code == 130, said[-3000:]
        assert took < 10, f"{took:.1f} s:\n{said[-3000:]}"
        error = _one_error_line(said)
        assert "finished shards are kept" in error
        if who == "prefect-server":
            assert "Prefect's temporary API server" in error and "SIGTERM" in error, error

        judge.asked = 0
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert _dataset(out) == _dataset(reference)  # byte-identical to the uninterrupted run


# Ctrl-C as a Python started from a terminal has it: a test runner started in the background (a CI
# script, `cmd &`) hands its children SIGINT ignored, and such a child rightly never hears it.
IN_PROCESS = """
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)
import flows.synthesize
from prm_synth.config import load_config
flows.synthesize.synthesize(config=load_config(sys.argv[1]), out_dir=sys.argv[2])
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_run_started_from_python_answers_a_signal_at_once(tmp_path, sig):
    """No worker, no CLI: the flow called from Python. A signal stops the engines before it goes on, so
    the shard threads blocked on a server that never answers (120 s timeouts, 6 retries) do not hold
    the process; nothing is sent after the signal."""
    from _simulated_run import openai_policy
    from test_shutdown import SilentThenSimulated

    with SilentThenSimulated() as server:
        pipeline = small_pipeline(tmp_path, "in-process-stop", openai_policy(server.url))
        env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONPATH": str(ROOT)}
        env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "600"  # a busy machine starts it slowly
        log = tmp_path / "in-process.log"
        with log.open("w") as sink:
            cmd = [sys.executable, "-c", IN_PROCESS, pipeline, str(tmp_path / "out")]
            proc = subprocess.Popen(
                cmd, env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        seen: dict[int, str] = {}
        try:
            wait_for(lambda: server.asked >= 2 or proc.poll() is not None, 600, "the requests reach the server")
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(1.0)
            asked_at_signal = server.asked
            seen = tree(proc.pid)  # Prefect's temporary server among them
            signalled = time.monotonic()
            os.kill(proc.pid, sig)
            wait_for(lambda: proc.poll() is not None, 120, "the process ends", poll_s=0.05)
            took = time.monotonic() - signalled
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)
            # A Python process that dies of SIGTERM leaves Prefect's temporary server (Prefect's own child,
            # which watches nothing) behind: the CLI's worker group ends it; here the test does.
            for pid in alive(seen):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        assert proc.returncode != 0
        assert took < 30, f"{took:.1f} s:\n{log.read_text()[-3000:]}"  # seconds, not minutes of timeouts
        assert server.asked == asked_at_signal, "a request was sent after the signal"
