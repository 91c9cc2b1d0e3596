"""A run started from Python stops its engines the moment SIGINT or SIGTERM lands, even where the code the
main thread is in holds the signal's exception back (flows/synthesize.py `_stops_engines_on_a_signal`),
and still ends interrupted. Each case runs in a child process: a stop is for good in a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The signal lands while code inside the context swallows what it raises (as library code catching
# BaseException would); the stop must have begun anyway, and the context must end interrupted.
CHILD = """
import os, signal, sys, threading, time
from prefect.exceptions import TerminationSignal
from flows.synthesize import _stops_engines_on_a_signal
from prm_synth.engines.stream import STOPPING

sig = getattr(signal, sys.argv[1])
if sig == signal.SIGTERM:  # as Prefect's flow engine does around a flow
    def prefect_like(signum, frame):
        raise TerminationSignal(signal=signum)
    signal.signal(signal.SIGTERM, prefect_like)
outcome = "none"
try:
    with _stops_engines_on_a_signal():
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)
        except BaseException:
            pass  # swallowed
        deadline = time.monotonic() + 60
        while not STOPPING.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        print("stopping", STOPPING.is_set(), flush=True)
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
except TerminationSignal as e:
    outcome = f"TerminationSignal {e.signal}"
print("outcome", outcome, flush=True)
print("handlers back", signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_engines_at_once_and_ends_the_run_interrupted_even_when_swallowed(name):
    env = os.environ | {"PYTHONPATH": str(ROOT), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, name], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "stopping True" in lines, done.stdout
    expected = "KeyboardInterrupt" if name == "SIGINT" else "TerminationSignal 15"
    assert f"outcome {expected}" in lines, done.stdout
    assert "handlers back True" in lines, done.stdout
