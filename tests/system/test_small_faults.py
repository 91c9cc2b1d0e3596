"""The smaller faults of a finished or stopped run (issue 53): each said truthfully, and once."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import yaml
from test_consensus_defaults import JUDGE, SIM, _stored_before_soft_was_the_default

from prm_synth.cli.preflight import check_same_config
from prm_synth.config import validate_config
from prm_synth.export.card_facts import problems_line
from prm_synth.records import ShardStats
from prm_synth.store.layout import LOCK
from prm_synth.store.lock import name_lock_owner
from prm_synth.store.shards import ShardStore
from prm_synth.store.summary import _budget_warnings


def test_a_card_of_a_run_that_has_not_finished_does_not_say_it_was_limited():
    summary = SimpleNamespace(problems_in=40, problems_loaded=40)
    config = {"problems": {"count": 400}}
    unfinished = problems_line(summary, config, {})  # no --limit: a killed run, or failed shards
    assert "limited" not in unfinished and "has not finished" in unfinished
    assert "run with a limit of 40" in problems_line(summary, config, {"limit": 40})
    assert problems_line(SimpleNamespace(problems_in=400, problems_loaded=400), config, {}) == "400 read, 400 loaded"


def test_the_manifest_records_the_runs_limit_and_a_run_without_one_clears_it(tmp_path):
    store = ShardStore(tmp_path / "out", "fp")
    store.prepare({}, "")
    assert store.write_manifest(limit=40)["limit"] == 40
    assert store.write_manifest()["limit"] == 40  # not given: kept
    assert "limit" not in store.write_manifest(limit=None)  # the whole source now


def test_the_lock_names_the_command_a_user_started_not_its_worker(tmp_path):
    name_lock_owner(4242)
    try:
        store = ShardStore(tmp_path / "out", "fp")
        store.lock()
        assert (tmp_path / "out" / LOCK).read_text().strip() == "4242"
        store.release()
    finally:
        name_lock_owner(None)


def test_the_former_default_note_is_said_by_the_command_not_again_by_its_worker(tmp_path, caplog):
    file = SIM | {"judge": JUDGE, "consensus": {}}
    stored = _stored_before_soft_was_the_default(file)
    out = tmp_path / "out"
    ShardStore(out, validate_config(stored).fingerprint()).prepare(stored, yaml.safe_dump(stored))
    with caplog.at_level(logging.WARNING):
        resumed = check_same_config(out, validate_config(file), say_notes=False)
    assert resumed.consensus is not None and resumed.consensus.policy == "agree"  # the same folder, resumed
    assert "consensus.policy is not set" not in caplog.text
    with caplog.at_level(logging.WARNING):
        check_same_config(out, validate_config(file))
    assert caplog.text.count("consensus.policy is not set") == 1


@pytest.mark.parametrize(("budget", "rollouts", "warned"), [(1, 0, True), (1, 5, False), (None, 0, False)])
def test_a_token_budget_no_rollout_fits_is_said(budget, rollouts, warned):
    config = {"annotate": {"method": "binary", "max_rollout_tokens": budget}}
    said = _budget_warnings(config, ShardStats(rows=10, rollouts=rollouts))
    assert bool(said) == warned
    if warned:
        assert "max_rollout_tokens (1)" in said[0]
