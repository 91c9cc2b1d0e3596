from __future__ import annotations

from pathlib import Path

import pytest

from prm_synth.config import ConfigError, load_config, validate_config

ROOT = Path(__file__).resolve().parents[2]


# Pipelines over the evaluation sets name them as they lie beside the checkout (../shared/data, ENVIRONMENT.md);
# a checkout elsewhere (a CI clone) finds them at the machines' copy, else cannot check those pipelines.
SHARED_DATA = "../../shared/data"
SHARED_COPIES = (ROOT.parent / "shared" / "data", Path("/work/shared/data"))


@pytest.mark.parametrize("path", sorted((ROOT / "pipelines").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_pipeline_validates(path, tmp_path):
    text = path.read_text(encoding="utf-8")
    if SHARED_DATA in text and not (path.parent / SHARED_DATA).resolve().is_dir():
        found = next((copy for copy in SHARED_COPIES if copy.is_dir()), None)
        if found is None:
            pytest.skip(f"{path.name} reads {SHARED_DATA}, which is not on this machine")
        path = tmp_path / path.name
        path.write_text(text.replace(SHARED_DATA, str(found)), encoding="utf-8")
    assert load_config(path).name


def test_fingerprint_ignores_run_knobs_but_not_labeling_choices():
    base = {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}}
    a = validate_config(base)
    assert a.fingerprint() == validate_config(base | {"run": {"max_parallel_shards": 7}}).fingerprint()
    assert a.fingerprint() == validate_config(base | {"run": {"shard_retry_delays_s": [0, 0]}}).fingerprint()
    assert (
        a.fingerprint() == validate_config(base | {"run": {"max_in_flight": 3, "max_batch_requests": 9}}).fingerprint()
    )
    assert (
        a.fingerprint()
        != validate_config(base | {"annotate": {"method": "binary", "changepoint_max_rollouts": 30}}).fingerprint()
    )
    assert a.fingerprint() != validate_config(base | {"labels": {"rule": "relative"}}).fingerprint()


@pytest.mark.parametrize(
    "data, field",
    [
        ({"problems": {"kind": "builtin", "min_ops": 5, "max_ops": 2}, "policy": {"kind": "simulated"}}, "problems"),
        ({"problems": {"kind": "builtin"}, "policy": {"kind": "gpt"}}, "policy"),
        ({"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}, "steps": {"strategy": "regex"}}, "steps"),
        (
            {
                "problems": {"kind": "builtin"},
                "policy": {"kind": "simulated"},
                "annotate": {"method": "binary", "bad_rate": 0.5, "good_rate": 0.2},
            },
            "annotate",
        ),
        ({"policy": {"kind": "simulated"}}, "problems"),
        *(
            (
                {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}, "run": {"shard_retry_delays_s": d}},
                "run",
            )
            for d in ([1], [-1, 2])  # two waits for the two retries, none negative
        ),
    ],
)
def test_invalid_configs_name_the_field(data, field):
    with pytest.raises(ConfigError, match=field):
        validate_config(data, where="test")


def test_relative_problem_file_resolves_against_the_pipeline_folder(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    (tmp_path / "pipe.yaml").write_text(
        "problems: {kind: file, path: p.jsonl, preset: gsm8k}\npolicy: {kind: simulated}\n"
    )
    assert load_config(tmp_path / "pipe.yaml").problems.path == (tmp_path / "p.jsonl").resolve()


SIM = {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}}


def test_a_0_1_pipeline_file_keeps_loading_with_the_same_meaning():
    old = SIM | {
        "sampling": {"top_p": 0.9},
        "annotate": {
            "method": "omegaprm",
            "k": 8,
            "omega_k": 4,
            "omega_rollout_budget": 50,
            "omega_search_test": "sprt",
            "search_test": "fixed",  # a binary knob: it did nothing for omegaprm
            "save_trees": True,
            "rollout_max_tokens": 64,
            "max_in_flight": 3,
        },
    }
    config = validate_config(old)
    assert config.annotate.method == "omegaprm"
    assert (config.annotate.k, config.annotate.rollout_budget, config.annotate.search_test) == (4, 50, "sprt")
    assert config.output.save_trees and config.run.max_in_flight == 3
    assert (config.rollouts.max_tokens, config.rollouts.top_p) == (64, 0.9)


def test_the_demo_model_is_a_model_name_and_the_old_flag_still_loads():
    new = validate_config({"problems": {"kind": "builtin"}, "policy": {"kind": "vllm", "model": "demo"}})
    old = validate_config({"problems": {"kind": "builtin"}, "policy": {"kind": "vllm", "model": "x", "demo": True}})
    assert new.policy.is_demo and old.policy.is_demo and new.fingerprint() == old.fingerprint()


def test_annotate_fields_belong_to_their_method():
    with pytest.raises(ConfigError, match="annotate.mc.alpha"):
        validate_config(SIM | {"annotate": {"method": "mc", "alpha": 0.3}})


@pytest.mark.parametrize(
    "section, field",
    [
        ({"annotate": {"method": "mc", "k": 1_000_000_000}}, "annotate.mc.k"),
        ({"annotate": {"method": "mc", "k": True}}, "annotate.mc.k"),
        ({"sampling": {"samples_per_problem": 1_000_000_000}}, "sampling.samples_per_problem"),
        ({"sampling": {"temperature": float("inf")}}, "sampling.temperature"),
        ({"name": "../../etc"}, "name"),
        ({"steps": {"strategy": "regex", "pattern": "(unclosed"}}, "steps"),
    ],
)
def test_values_that_would_run_forever_or_escape_are_refused(section, field):
    with pytest.raises(ConfigError, match=field):
        validate_config(SIM | section, where="test")


def test_a_key_given_twice_is_refused(tmp_path):
    (tmp_path / "p.yaml").write_text("problems: {kind: builtin}\npolicy: {kind: simulated}\nname: a\nname: b\n")
    with pytest.raises(ConfigError, match="duplicate key 'name'"):
        load_config(tmp_path / "p.yaml")


def test_a_folder_is_not_a_pipeline_file(tmp_path):
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(tmp_path)


def test_the_labelers_revision_is_part_of_the_fingerprint_of_the_search_it_labels_with(monkeypatch):
    import prm_synth.config.pipeline as config_module

    changepoint = {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}}  # the default search
    sprt = changepoint | {"annotate": {"method": "binary", "search_test": "sprt"}}
    revision = config_module.LABELER_REVISIONS["changepoint"]
    assert validate_config(changepoint).labeler_revision() == f"changepoint {revision}"
    assert validate_config(sprt).labeler_revision() is None
    before = validate_config(changepoint).fingerprint(), validate_config(sprt).fingerprint()
    monkeypatch.setitem(config_module.LABELER_REVISIONS, "changepoint", "next")
    assert validate_config(changepoint).fingerprint() != before[0]
    assert validate_config(sprt).fingerprint() == before[1]  # a search without a revision keeps its folders


def test_the_prompt_versions_are_part_of_the_fingerprint(monkeypatch):
    import prm_synth.config.pipeline as config_module

    before = validate_config(SIM).fingerprint()
    monkeypatch.setitem(config_module.PROMPT_VERSIONS, "policy", "policy-v2")
    assert validate_config(SIM).fingerprint() != before
