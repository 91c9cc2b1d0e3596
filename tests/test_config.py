from __future__ import annotations

from pathlib import Path

import pytest

from prm_synth.config import ConfigError, load_config, validate_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((ROOT / "pipelines").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_pipeline_validates(path):
    assert load_config(path).name


def test_fingerprint_ignores_run_knobs_but_not_labeling_choices():
    base = {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}}
    a = validate_config(base)
    assert a.fingerprint() == validate_config(base | {"run": {"max_parallel_shards": 7}}).fingerprint()
    assert a.fingerprint() == validate_config(base | {"annotate": {"max_in_flight": 3}}).fingerprint()
    assert a.fingerprint() != validate_config(base | {"annotate": {"k": 3}}).fingerprint()
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
                "annotate": {"bad_rate": 0.5, "good_rate": 0.2},
            },
            "annotate",
        ),
        ({"policy": {"kind": "simulated"}}, "problems"),
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
