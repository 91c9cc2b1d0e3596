"""`--report` for the benchmark scripts: a dated Markdown page of what a run printed and its figures.

A script adds the flag and makes one call at its end:

    from _report import ReportFlag, write_report     # benchmarks/ is the script's folder

    parser.add_argument("--report", action=ReportFlag)
    ...
    write_report("fidelity", head)                    # the JSON object the script prints last

With `--report`, everything the script prints from the parse on is also kept, and `write_report` writes
benchmarks/results/<script>-<YYYY-MM-DD>.md: the command, the machine, the revision, the headline
figures as a table and the printed output. Without it `write_report` does nothing. The docs link to
these pages (docs/hooks.py puts them on the site) instead of copying figures by hand.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, TextIO

RESULTS = Path(__file__).resolve().parent / "results"
_capture: _Tee | None = None


class _Tee(io.TextIOBase):
    """Writes to the real stdout and keeps a copy."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.kept = io.StringIO()
        self.revision = _revision()  # at the start: the code that ran, not what the tree holds at the end

    def write(self, s: str) -> int:
        self.kept.write(s)
        return self.out.write(s)

    def flush(self) -> None:
        self.out.flush()


class ReportFlag(argparse.Action):
    """`--report`: keep what the script prints, for `write_report`."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "also write a dated Markdown page of this run to benchmarks/results/")
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, *_: Any) -> None:
        global _capture
        setattr(namespace, self.dest, True)
        if _capture is None:
            _capture = _Tee(sys.stdout)
            sys.stdout = _capture


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        return [kv for k, v in data.items() for kv in _flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    return [(prefix, data)]


def _revision() -> str:
    try:
        cwd = Path(__file__).resolve().parents[1]
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if rev.returncode != 0:
        return "unknown"
    return rev.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def render(script: str, result: dict[str, Any], printed: str, when: dt.datetime, revision: str) -> str:
    """The page's Markdown."""
    command = "python benchmarks/" + shlex.join([f"{script}.py", *sys.argv[1:]])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"# {script}.py, {when:%Y-%m-%d}",
        "",
        f"Written by `{command}` at {when:%H:%M} UTC (see [the benchmarks' README](../README.md) for what it measures).",
        "",
        "| | |",
        "|---|---|",
        f"| revision | `{revision}` |",
        f"| machine | {platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f} at the end |",
        f"| python | {platform.python_version()} |",
        "",
        "## Headline figures",
        "",
        "The JSON object the script printed last, one row a key.",
        "",
        "| figure | value |",
        "|---|---|",
    ]
    lines += [f"| `{k}` | {json.dumps(v) if not isinstance(v, str) else v} |" for k, v in _flatten(result)]
    lines += ["", "## What it printed", "", "```text", printed.rstrip("\n"), "```", ""]
    return "\n".join(lines)


def write_report(script: str, result: dict[str, Any], page: str | None = None) -> Path | None:
    """With `--report`: write benchmarks/results/<page>-<date>.md (`page`: the script's name unless a
    script writes several kinds of page; a second run that day replaces it)."""
    if _capture is None:
        return None
    when = dt.datetime.now(dt.UTC)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{page or script}-{when:%Y-%m-%d}.md"
    path.write_text(render(script, result, _capture.kept.getvalue(), when, _capture.revision), encoding="utf-8")
    print(f"report: {path}", file=sys.stderr)
    return path
