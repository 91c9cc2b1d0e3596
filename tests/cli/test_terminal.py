"""What a run shows in the terminal: a bar that fits 80 columns, log lines above it, vLLM quiet,
a calm line for Ctrl-C."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import flows.reporting as reporting
from flows.terminal import LogsAboveTheBar, progress_line_extra, throttled
from prm_synth.cli.environment import CALM_INTERRUPT, INTERRUPT_CRASH
from prm_synth.telemetry import ProgressSnapshot

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_artifacts(monkeypatch):
    for name in ("create_progress_artifact", "update_progress_artifact"):
        monkeypatch.setattr(reporting, name, lambda *a, **k: "artifact-id")


def _snapshot(done: int, total: int, finished: bool = False) -> ProgressSnapshot:
    # numbers as large as a long GPU run's, so that every field is at its widest
    return ProgressSnapshot(
        "annotate", 9999.0, done, total, total, 123_456_789, 98_765_432_100, 54_321.0, 1024, 1024, finished
    )


def _rendered(progress: reporting.ShardProgress, width: int) -> list[str]:
    out = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    out.print(progress.bar.get_renderable())
    return out.export_text().rstrip("\n").splitlines()


@pytest.mark.parametrize("width", [80, 120])
def test_the_bar_fits_the_terminal_with_its_percentages_whole(no_artifacts, width):
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    progress = reporting.ShardProgress(total=2000, terminal=True, console=console)
    try:
        for shard in range(3):
            progress.update(shard, _snapshot(37 + shard, 5000))
        lines = _rendered(progress, width)
    finally:
        progress.close()
    assert len(lines) == 4  # the run, then one line per shard in flight (each updated in place)
    assert lines[0].startswith("0/2000 shards") and "tok/s" in lines[0]
    assert [line.split()[1] for line in lines[1:]] == ["0:", "1:", "2:"]  # "shard N:"
    for line in lines:
        assert len(line) <= width
        assert line.split()[-2].endswith("%") and line.split()[-1].count(":") == 2  # "1%  0:00:00", never cut


def test_a_shards_progress_updates_its_own_line_and_leaves_when_done(no_artifacts):
    progress = reporting.ShardProgress(total=4, terminal=True, console=Console(file=io.StringIO(), width=80))
    try:
        for done in (1, 2, 3):
            progress.update(7, _snapshot(done, 10))
        assert sum("shard 7:" in line for line in _rendered(progress, 80)) == 1
        progress.update(7, _snapshot(10, 10, finished=True))
        assert not any("shard 7:" in line for line in _rendered(progress, 80))
    finally:
        progress.close()


@pytest.mark.parametrize("kind", ["plain", "prefect"])
def test_log_lines_print_above_the_bar_and_progress_lines_stay_in_the_bar(capsys, kind):
    from prefect.logging.handlers import PrefectConsoleHandler

    handler = logging.StreamHandler(sys.stderr) if kind == "plain" else PrefectConsoleHandler(stream=sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger(f"prm-synth-test-terminal-{kind}")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    console = Console(file=io.StringIO(), width=80, color_system=None)
    routed = LogsAboveTheBar(console)
    try:
        routed.start()
        log.info("a worker says [/bold] hello")  # text that looks like rich markup stays text
        log.info("shard 3: annotated 5/50", extra=progress_line_extra())
        routed.restore()
        log.info("after the bar")
    finally:
        routed.restore()
        log.removeHandler(handler)
    shown = console.file.getvalue()
    assert "a worker says [/bold] hello" in shown and "annotated" not in shown  # through the bar's console
    assert capsys.readouterr().err.strip() == "after the bar"  # the handler writes to stderr again
    assert not handler.filters


def test_progress_log_lines_come_at_most_once_an_interval():
    lines: list[str] = []
    log = throttled(lines.append, every_s=3600)
    for i in range(10):
        log(f"annotated {i}/10")
    assert lines == []  # a shard done in seconds logs no progress, only its start and end
    log = throttled(lines.append, every_s=0.0)
    log("a")
    log("b")
    assert lines == ["a", "b"]


def test_our_own_interrupt_is_one_info_line_not_a_crash_at_error():
    crash = logging.LogRecord("prefect.flow_runs", logging.ERROR, __file__, 1, f"{INTERRUPT_CRASH}.", (), None)
    assert CALM_INTERRUPT.filter(crash)
    assert crash.levelno == logging.INFO and "Crash" not in crash.getMessage()
    other = logging.LogRecord("prefect.flow_runs", logging.ERROR, __file__, 1, "Crash detected! Boom.", (), None)
    CALM_INTERRUPT.filter(other)
    assert other.levelno == logging.ERROR  # a real crash stays an error


_VLLM_LEVELS = """
import logging
import prm_synth.cli  # sets the command's environment, as `prm-synth` does
from prm_synth.cli.environment import verbose_engines
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging

configure_logging(LoggingConfig())  # what vLLM does when an LLM is built
quiet = logging.getLogger("vllm").level
verbose_engines()
configure_logging(LoggingConfig())
print(quiet, logging.getLogger("vllm").level)
"""


@pytest.mark.slow  # imports vLLM (half a minute on two cores)
def test_vllm_logs_warnings_only_unless_verbose():
    pytest.importorskip("vllm")
    env = {k: v for k, v in __import__("os").environ.items() if k != "VLLM_LOGGING_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-c", _VLLM_LEVELS],
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == [str(logging.WARNING), str(logging.INFO)]
