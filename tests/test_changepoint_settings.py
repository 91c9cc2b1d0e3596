"""The change-point search's settings: one frozen object, every field documented in the code and in the
tuning table (docs/design/changepoint-tuning.md), and the model's fields fixed at import."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from prm_synth.annotate.changepoint.settings import DEFAULTS, FIELDS, MODEL_FIELDS, ChangepointSettings
from prm_synth.config import validate_config

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "prm_synth" / "annotate" / "changepoint" / "settings.py"
TUNING = ROOT / "docs" / "design" / "changepoint-tuning.md"


def field_docstrings() -> dict[str, str]:
    """Each field's attribute docstring (the string literal right under it)."""
    cls = next(n for n in ast.parse(SETTINGS.read_text()).body if isinstance(n, ast.ClassDef))
    docs = {}
    for node, after in zip(cls.body, cls.body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            docs[node.target.id] = after.value.value
    return docs


def test_every_setting_has_a_one_line_docstring():
    docs = field_docstrings()
    missing = [name for name in FIELDS if not docs.get(name, "").strip()]
    assert not missing, f"give these ChangepointSettings fields a docstring: {missing}"
    long = [name for name in FIELDS if "\n" in docs[name].strip()]
    assert not long, f"one line each (the history goes to {TUNING.name}): {long}"


def test_every_setting_has_a_row_in_the_tuning_table():
    rows = set(re.findall(r"^\| `(\w+)` \|", TUNING.read_text(), re.M))
    assert rows >= set(FIELDS), f"add rows to docs/design/changepoint-tuning.md: {sorted(set(FIELDS) - rows)}"
    assert not rows - set(FIELDS), f"rows of settings that do not exist: {sorted(rows - set(FIELDS))}"


def test_a_model_field_away_from_its_default_is_refused():
    ChangepointSettings(confidence=0.8, mode_rise=2.0)  # search fields may be set
    for name in MODEL_FIELDS:
        with pytest.raises(ValueError, match=name):
            ChangepointSettings(**{name: 0 if not isinstance(getattr(DEFAULTS, name), tuple) else (0.5,)})


def test_the_rollout_knob_bounds_both_budgets():
    base = {"name": "t", "problems": {"kind": "builtin", "count": 1}, "policy": {"kind": "simulated"}}
    default = ChangepointSettings.of(validate_config(base | {"annotate": {"method": "binary"}}).annotate)
    assert (default.max_rollouts, default.localize_max_rollouts) == (DEFAULTS.max_rollouts, 128)
    low = validate_config(base | {"annotate": {"method": "binary", "changepoint_max_rollouts": 24}}).annotate
    assert (ChangepointSettings.of(low).max_rollouts, ChangepointSettings.of(low).localize_max_rollouts) == (24, 24)


def test_the_default_knob_keeps_the_fingerprint_of_folders_made_before_it_bounded_everything():
    """128 (today's default: the old default's rows) hashes as the old default 56 did; any other value under a
    key of its own, so a folder made when the knob meant the smaller budget never resumes as today's."""
    base = {"name": "t", "problems": {"kind": "builtin", "count": 1}, "policy": {"kind": "simulated"}}
    config = validate_config(base | {"annotate": {"method": "binary"}})
    explicit = validate_config(base | {"annotate": {"method": "binary", "changepoint_max_rollouts": 128}})
    assert explicit.fingerprint() == config.fingerprint()
    old = validate_config(base | {"annotate": {"method": "binary", "changepoint_max_rollouts": 56}})
    assert old.fingerprint() != config.fingerprint()
    assert config.annotate.fingerprint_part()["changepoint_max_rollouts"] == 56
    low = old.annotate.fingerprint_part()
    assert "changepoint_max_rollouts" not in low and low["changepoint_rollout_bound"] == 56
