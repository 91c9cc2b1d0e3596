"""`soft` is the default consensus policy: files that leave it out get it, folders made under the former
default (`agree`) resume with it, and the fields only `soft` reads change no other policy's fingerprint."""

from __future__ import annotations

import yaml

from prm_synth.cli.preflight import check_same_config
from prm_synth.config import validate_config
from prm_synth.store.shards import ShardStore

SIM = {"problems": {"kind": "builtin", "count": 4}, "policy": {"kind": "simulated"}}
JUDGE = {"engine": {"kind": "simulated-judge"}, "samples": 3}


def _stored_before_soft_was_the_default(config: dict) -> dict:
    """The full dump an output folder's manifest held before this change: `agree` written out, and none of
    the fields added with it (judge.select, skip_confidence, calibrate, consensus.class_min_votes)."""
    dump = validate_config(config | {"consensus": {"policy": "agree"}}).model_dump(mode="json")
    added = (
        ("judge", "select"),
        ("judge", "skip_confidence"),
        ("judge", "calibrate"),
        ("consensus", "class_min_votes"),
    )
    for section, key in added:
        dump[section].pop(key)
    return dump


def test_soft_is_the_default_policy_and_judges_only_what_is_needed():
    config = validate_config(SIM | {"judge": JUDGE, "consensus": {}})
    assert config.consensus is not None and config.consensus.policy == "soft"
    assert config.judge is not None and config.judge.select == "needed"


def test_a_stored_config_of_the_former_default_loads_with_its_policy_and_fingerprint():
    stored = _stored_before_soft_was_the_default(SIM | {"judge": JUDGE})
    old = validate_config(stored)
    assert old.consensus is not None and old.consensus.policy == "agree"
    explicit = validate_config(SIM | {"judge": JUDGE, "consensus": {"policy": "agree"}})
    assert old.fingerprint() == explicit.fingerprint()
    # what only soft reads is not hashed under agree: any value of it leaves the folder's fingerprint
    other = SIM | {"judge": JUDGE | {"select": "all", "calibrate": 0.5}, "consensus": {"policy": "agree"}}
    assert validate_config(other).fingerprint() == old.fingerprint()
    # under soft it is what changes the rows
    soft = SIM | {"judge": JUDGE, "consensus": {}}
    assert (
        validate_config(soft).fingerprint()
        != validate_config(soft | {"judge": JUDGE | {"select": "all"}}).fingerprint()
    )


def test_a_folder_made_under_the_former_default_resumes_with_it(tmp_path, caplog):
    file = SIM | {"judge": JUDGE, "consensus": {}}  # the same file, loaded before and after the change
    stored = _stored_before_soft_was_the_default(file)
    old = validate_config(stored)
    out = tmp_path / "out"
    ShardStore(out, old.fingerprint()).prepare(stored, yaml.safe_dump(stored))
    today = validate_config(file)
    assert today.fingerprint() != old.fingerprint()
    resumed = check_same_config(out, today)
    assert resumed.consensus is not None and resumed.consensus.policy == "agree"
    assert resumed.fingerprint() == old.fingerprint()
    assert "consensus.policy is not set" in caplog.text
    # a file that names the policy is taken at its word: a soft folder is not this one
    named = validate_config(file | {"consensus": {"policy": "soft"}})
    try:
        check_same_config(out, named)
    except ValueError as e:
        assert "consensus.policy" in str(e)
    else:
        raise AssertionError("a folder of another policy was not refused")


def test_a_judge_section_brings_the_default_consensus_and_null_keeps_it_out():
    config = validate_config(SIM | {"judge": JUDGE})
    assert config.consensus is not None and config.consensus.policy == "soft"
    assert validate_config(SIM | {"judge": JUDGE, "consensus": None}).consensus is None
    assert validate_config(SIM).consensus is None  # no judge, no consensus


def test_a_judge_only_folder_made_before_resumes_without_consensus(tmp_path):
    file = SIM | {"judge": JUDGE}  # no consensus section: none before, the default (soft) now
    stored = validate_config(file | {"consensus": None}).model_dump(mode="json")
    for key in ("select", "skip_confidence", "calibrate"):
        stored["judge"].pop(key)
    old = validate_config(stored)
    out = tmp_path / "out"
    ShardStore(out, old.fingerprint()).prepare(stored, yaml.safe_dump(stored))
    resumed = check_same_config(out, validate_config(file))
    assert resumed.consensus is None and resumed.fingerprint() == old.fingerprint()
