"""The small things a first GPU day tripped on (issue 60 part 7): a flag's help that read as if it took a
value, offline Hub failures that took a minute of retries, progress lines for the silent waits."""

from __future__ import annotations

from typer.testing import CliRunner

from prm_synth.cli import app

WIDE = {"COLUMNS": "200"}


def _row(help_text: str, flag: str) -> str:
    return next(line for line in help_text.splitlines() if f" {flag} " in line)


def test_a_flag_shows_no_type_in_help_and_an_option_with_a_value_does():
    shown = CliRunner().invoke(app, ["export", "--help"], env=WIDE).stdout
    for flag in ("--private", "--json", "--soft", "--plots"):
        assert "<bool>" not in _row(shown, flag), _row(shown, flag)
    assert "<str>" in _row(shown, "--repo-id")
    ran = CliRunner().invoke(app, ["run", "--help"], env=WIDE).stdout
    assert "<bool>" not in ran and "<float range>" in _row(ran, "--gpu-tokens-per-s")


def test_the_live_progress_says_the_time_left_at_the_runs_pace():
    from flows.reporting import time_left

    assert time_left(60.0, 1.0, 3.0) == "about 3 min 00 s left"
    assert time_left(10.0, 0.5, 0.5) == "about 10 s left"
    assert time_left(10.0, 0.0, 4.0) == ""  # no pace yet
    assert time_left(10.0, 4.0, 0.0) == ""  # done
