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


def test_offline_a_hub_dataset_fails_at_once_with_why(monkeypatch):
    """HF_HUB_OFFLINE (or no network: one quick check) puts the libraries offline for the call: a dataset
    not in the cache fails with the reason instead of a minute of retries."""
    import pytest

    from prm_synth.config import HFSource
    from prm_synth.engines import hub_reach
    from prm_synth.problems.sources import ProblemSourceError, iter_problems

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_reach.hub_unreachable.cache_clear()
    try:
        assert hub_reach.hub_unreachable() == "HF_HUB_OFFLINE is set"
        source = HFSource(path="prm-synth-tests/no-such-dataset", split="train")
        with pytest.raises(ProblemSourceError, match="cannot be reached \\(HF_HUB_OFFLINE is set\\)") as caught:
            next(iter(iter_problems(source)))
        assert "not in the local cache" in str(caught.value)
    finally:
        hub_reach.hub_unreachable.cache_clear()


def test_without_a_network_the_one_check_says_which_host(monkeypatch):
    import socket

    from prm_synth.engines import hub_reach

    def no_network(*_args, **_kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    for name in (*hub_reach.OFFLINE_SETTINGS, *hub_reach.PROXY_SETTINGS, "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(socket, "create_connection", no_network)
    hub_reach.hub_unreachable.cache_clear()
    try:
        assert hub_reach.hub_unreachable() == "huggingface.co cannot be reached: Name or service not known"
    finally:
        hub_reach.hub_unreachable.cache_clear()
    import huggingface_hub.constants

    huggingface_hub.constants.HF_HUB_OFFLINE = False  # as on a machine whose settings say online
    with hub_reach.offline():
        assert huggingface_hub.constants.HF_HUB_OFFLINE is True
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False  # put back
