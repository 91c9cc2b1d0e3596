"""A dataset's identity (prm_synth/config/identity.py) held still: what each config section puts in the
fingerprint, for every committed pipeline under variants that touch each rule of the hash (transport
settings, fields added later at their "as before" value, soft-only fields, the search's own knobs, the
former rollout knob, the old label-rule name), is pinned in tests/fixtures/fingerprints.json, with the
legacy (transport-as-set) form beside it. A refactor of the config must pass unchanged; a change that
means to move a dataset's identity regenerates the fixture and says so in the changelog:

    PYTHONPATH=$PWD python tests/config/test_identity.py --regenerate

The labeler revision is left out of the pinned form: bumping it (tests/annotate/test_golden_rows.py) is meant to
move the fingerprint of the search it names, and does.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from prm_synth.config import PipelineConfig, Strict, read_yaml_mapping, validate_config  # noqa: E402
from prm_synth.config.base import digest  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "fingerprints.json"
SIMULATED_JUDGE = {"engine": {"kind": "simulated-judge"}}
VARIANTS: dict[str, dict[str, Any]] = {
    "as-committed": {},
    "judge-soft-knobs": {"judge": SIMULATED_JUDGE | {"skip_confidence": 0.95, "select": "all", "calibrate": 0.2}},
    "judge-profile-zeros": {"judge": {"engine": {"kind": "simulated-judge", "errors": {"early_miss": 0.0}}}},
    "consensus-agree": {"judge": SIMULATED_JUDGE, "consensus": {"policy": "agree", "tolerance": 1}},
    "consensus-none": {"judge": SIMULATED_JUDGE, "consensus": None},
    "labels-majority": {"labels": {"rule": "majority"}},
    "mc": {"annotate": {"method": "mc", "k": 4}},
    "binary-fixed": {"annotate": {"method": "binary", "search_test": "fixed"}},
    "rollout-knob-default": {"annotate": {"method": "binary", "changepoint_max_rollouts": 128}},
    "rollout-knob-other": {"annotate": {"method": "binary", "changepoint_max_rollouts": 64}},
    "rollout-tokens": {"annotate": {"method": "binary", "max_rollout_tokens": 5000}},
    "omegaprm": {"annotate": {"method": "omegaprm", "search_limit": 6, "rollout_budget": 80}},
    "steps-added": {"steps": {"min_chars": 3, "max_steps": 40}},
    "top-k": {"sampling": {"top_k": 20}, "rollouts": {"top_k": 20}},
    "run-only": {"run": {"max_in_flight": 3}},
    "verify": {"verify": {"engine": {"kind": "simulated-judge"}}},
}


def configs() -> dict[str, PipelineConfig]:
    out = {}
    for path in sorted((ROOT / "pipelines").glob("*.yaml")):
        base = read_yaml_mapping(path)
        for name, variant in VARIANTS.items():
            if name == "omegaprm" and base.get("problems", {}).get("kind") == "solutions":
                continue  # given solutions are labeled one by one: OmegaPRM, which samples its own, is refused
            data = copy.deepcopy(base)
            for key, value in variant.items():
                merge = isinstance(value, dict) and isinstance(data.get(key), dict) and key != "annotate"
                data[key] = {**data[key], **value} if merge else value
            out[f"{path.stem}/{name}"] = validate_config(data, check_paths=False)
    return out


def pinned(config: PipelineConfig, transport: bool) -> str:
    part = config.fingerprint_part(transport)
    part.pop("labeler_revision", None)
    return digest(part)


def identities() -> dict[str, list[str]]:
    return {name: [pinned(c, False), pinned(c, True)] for name, c in configs().items()}


def test_every_config_hashes_as_pinned():
    expected = json.loads(FIXTURE.read_text())
    assert identities() == expected


def test_the_pinned_forms_tell_the_variants_apart():
    """The fixture would hide a rule that stopped hashing anything: most variants differ."""
    values = [v[0] for v in identities().values()]
    assert len(set(values)) > len(values) * 0.8


def test_run_and_transport_settings_never_move_the_fingerprint():
    for name, config in configs().items():
        if name.endswith("/run-only"):
            assert config.fingerprint() == configs()[name.replace("run-only", "as-committed")].fingerprint()


def _sections() -> list[type[Strict]]:
    seen, todo = [], [Strict]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("prm_synth.config") and sub not in seen:
                seen.append(sub)
                todo.append(sub)
    return [cls for cls in seen if not cls.__subclasses__()]  # the sections a file is validated by


@pytest.mark.parametrize("section", _sections(), ids=lambda c: c.__name__)
def test_what_a_section_declares_about_its_hash_names_its_own_fields(section):
    """`ADDED_FIELDS` and `SOFT_ONLY` sit beside the fields they speak of: a stale name fails here."""
    fields = set(section.model_fields)
    declared = set(section.ADDED_FIELDS) | set(getattr(section, "SOFT_ONLY", ()))
    assert declared <= fields, f"{section.__name__} declares {sorted(declared - fields)}, not fields of it"


if __name__ == "__main__":
    if sys.argv[1:] == ["--regenerate"]:
        FIXTURE.write_text(json.dumps(identities(), indent=1, sort_keys=True) + "\n")
