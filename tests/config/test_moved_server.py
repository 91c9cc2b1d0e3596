"""Only what changes the rows is hashed: a server that moved (another port, host, a load balancer),
or is asked with other timeouts, retries or concurrency, resumes its folder and makes only what is
missing; folders made when the fingerprint still hashed those settings resume too. Each shard's
marker records the server it was made against (no key, ever)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from _simulated_run import SMALL_PROBLEMS, openai_policy, served_policy, small_pipeline
from fault_proxy import JudgeServer, SimulatedCompletionsServer
from typer.testing import CliRunner

import flows.synthesize  # noqa: F401 - Prefect sets its log handlers up at import: here, not inside CliRunner's capture
from prm_synth.cli import app
from prm_synth.config import (
    EngineConfig,
    EngineFields,
    JudgeEngineConfig,
    OpenAIConfig,
    PipelineConfig,
    SimulatedPolicyConfig,
    validate_config,
)
from prm_synth.store.readers import read_manifest

KEY = "sk-moved-server-key-0123456789"


# ---------------------------------------------------------------- the marks
def _engine_classes() -> set[type]:
    members = set()
    for union in (EngineConfig, JudgeEngineConfig):
        members |= {m for m in get_args(get_args(union)[0]) if isinstance(m, type)}
    return members


def test_every_engine_field_is_marked_as_changing_rows_or_as_transport():
    classes = _engine_classes()
    assert len(classes) == 4  # simulated policy, vLLM, OpenAI-compatible, simulated judge
    for cls in classes:
        assert issubclass(cls, EngineFields), cls
        for name in cls.model_fields:
            marks = (name in cls.ROW_FIELDS) + (name in cls.TRANSPORT_FIELDS)
            assert marks == 1, f"{cls.__name__}.{name} is marked {marks} times"
    assert {"base_url", "api_key_env", "max_concurrency", "max_retries", "timeout_s"} == OpenAIConfig.TRANSPORT_FIELDS


def test_an_engine_with_an_unmarked_field_fails_at_definition():
    with pytest.raises(TypeError, match="unmarked \\['new_knob'\\]"):

        class Engine(EngineFields):
            ROW_FIELDS = frozenset({"model"})
            model: str = "m"
            new_knob: int = 0


def _config(**policy: Any) -> PipelineConfig:
    engine = {"kind": "openai", "model": "m"} | policy
    return validate_config(
        {"problems": SMALL_PROBLEMS, "policy": engine, "judge": {"engine": engine}, "verify": {"engine": engine}}
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("base_url", "http://10.0.0.7:9000/v1"),
        ("api_key_env", "OTHER_KEY"),
        ("max_concurrency", 3),
        ("max_retries", 0),
        ("timeout_s", 7.5),
    ],
)
def test_transport_settings_leave_the_fingerprint(field, value):
    base = _config()
    for role in ("policy", "judge", "verify"):
        data = base.model_dump(mode="json")
        section = data[role] if role == "policy" else data[role]["engine"]
        section[field] = value
        moved = validate_config(data)
        assert moved.fingerprint() == base.fingerprint(), (role, field)
        assert moved.legacy_fingerprint() != base.legacy_fingerprint()  # the old rule hashed it


@pytest.mark.parametrize(("field", "value"), [("model", "other"), ("system_prompt", "Be brief."), ("tokenizer", "t")])
def test_row_settings_stay_in_the_fingerprint(field, value):
    assert _config(**{field: value}).fingerprint() != _config().fingerprint()


def test_default_transport_keeps_the_fingerprint_folders_already_hold():
    config = _config()
    assert config.fingerprint() == config.legacy_fingerprint()
    simulated = validate_config({"problems": SMALL_PROBLEMS, "policy": SimulatedPolicyConfig().model_dump()})
    assert simulated.fingerprint() == simulated.legacy_fingerprint()


# ---------------------------------------------------------------- a run against servers that move
def _pipeline(tmp_path: Path, policy_url: str, judge_url: str, **transport: Any) -> str:
    judge = {"engine": {"kind": "openai", "model": "judge", "base_url": f"{judge_url}/v1"} | transport}
    return small_pipeline(tmp_path, "moving", openai_policy(policy_url, max_retries=0) | transport, judge=judge)


def _run(path: str, out: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["run", path, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def _markers(out: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in sorted((out / "shards").glob("shard-*.json"))}


def _moves(tmp_path: Path, monkeypatch, first_rule: str) -> None:
    """Run into a folder against one pair of servers (under `first_rule`'s fingerprint), lose a shard,
    then run the same command against a policy and a judge on other ports, with other transport."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    policy = served_policy()
    out = tmp_path / "out"
    with SimulatedCompletionsServer(config=policy) as old_policy, JudgeServer() as old_judge:
        path = _pipeline(tmp_path, old_policy.url, old_judge.url)
        if first_rule == "legacy":  # the fingerprint as it was when the folder was made
            with monkeypatch.context() as m:
                m.setattr(PipelineConfig, "fingerprint", PipelineConfig.legacy_fingerprint)
                first = _run(path, out)
        else:
            first = _run(path, out)
        old_urls = {"policy": f"{old_policy.url}/v1", "judge": f"{old_judge.url}/v1"}
        calls_before = (old_policy.calls, old_judge.calls)
    assert first["rows"] > 0 and old_judge.calls > 0
    key = read_manifest(out)["config_fingerprint"]
    assert {m["servers"]["policy"] for m in _markers(out).values()} == {old_urls["policy"]}
    (out / "shards" / "shard-00001.json").unlink()  # a run stopped before its last shard finished

    with SimulatedCompletionsServer(config=policy) as new_policy, JudgeServer() as new_judge:
        assert new_policy.url != old_urls["policy"][:-3]
        path = _pipeline(tmp_path, new_policy.url, new_judge.url, timeout_s=30.0, max_concurrency=2)
        second = _run(path, out)
        assert second["shards_skipped"] == 1 and second["shards_run"] == 1, second
        assert second["rows"] == first["rows"] and second["reconciles"]
        assert new_policy.calls > 0 and new_judge.calls > 0
        assert (old_policy.calls, old_judge.calls) == calls_before  # the old servers are gone
        markers = _markers(out)
        assert markers[0]["servers"] == old_urls
        assert markers[1]["servers"] == {"policy": f"{new_policy.url}/v1", "judge": f"{new_judge.url}/v1"}
        manifest = read_manifest(out)
        assert manifest["config_fingerprint"] == key  # one key for the whole folder, rows included
        assert {m["config_fingerprint"] for m in markers.values()} == {key}
        from prm_synth.store.readers import iter_records

        assert {r["config_fingerprint"] for r in iter_records(out)} == {key}
        for file in (out / "shards").glob("*.json"):
            assert KEY not in file.read_text()
        assert KEY not in (out / "manifest.json").read_text()

        calls = new_policy.calls
        third = _run(path, out)  # nothing left to make
        assert third["shards_skipped"] == 2 and new_policy.calls == calls
    if first_rule == "legacy":
        assert key != validate_config(manifest["config"]).fingerprint()  # made under the old rule
        assert manifest["rows_fingerprint"] == validate_config(manifest["config"]).fingerprint()


@pytest.mark.usefixtures("prefect_harness")
def test_a_moved_server_resumes_the_folder_and_makes_only_the_missing_shards(tmp_path, monkeypatch):
    _moves(tmp_path, monkeypatch, "current")


@pytest.mark.usefixtures("prefect_harness")
def test_a_folder_made_when_the_fingerprint_hashed_the_server_resumes_too(tmp_path, monkeypatch):
    _moves(tmp_path, monkeypatch, "legacy")


def test_another_model_behind_the_server_is_still_another_config(tmp_path):
    """The refusal names the row setting that differs, never the server's address."""
    from prm_synth.cli.preflight import PreflightError, check_same_config
    from prm_synth.store.shards import ShardStore

    old = validate_config(
        {"problems": SMALL_PROBLEMS, "policy": {"kind": "openai", "model": "a", "base_url": "http://h:1/v1"}}
    )
    dump = old.model_dump(mode="json")
    ShardStore(tmp_path, old.fingerprint()).prepare(dump, yaml.safe_dump(dump))
    new = validate_config(
        {"problems": SMALL_PROBLEMS, "policy": {"kind": "openai", "model": "b", "base_url": "http://h:2/v1"}}
    )
    with pytest.raises(PreflightError, match="policy.model") as info:
        check_same_config(tmp_path, new)
    assert "base_url" not in str(info.value)
    moved = validate_config(
        {"problems": SMALL_PROBLEMS, "policy": {"kind": "openai", "model": "a", "base_url": "http://h:2/v1"}}
    )
    check_same_config(tmp_path, moved)  # the same model elsewhere: resumed
