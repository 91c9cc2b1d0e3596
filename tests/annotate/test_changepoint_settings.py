"""The change-point search's settings: one frozen object, every field documented in the code and in the
tuning table (docs/design/changepoint-tuning.md); the model's constants are not among them, and no function
of the package takes a default from the settings' defaults."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from prm_synth.annotate.changepoint.settings import DEFAULTS, FIELDS, ChangepointSettings
from prm_synth.config import validate_config

ROOT = Path(__file__).resolve().parents[2]
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


def test_the_settings_hold_no_model_constant_and_nothing_derived():
    # the model's grids and hazards are engine/model.py's constants (its tables are built from them at
    # import); whether probes are ranked per token is the labeler's TokenBudget, not a setting
    model = {"luck_grid", "level_grid", "hazard_grid", "class_grid", "hazard_spread", "hard_step_chance"}
    assert not (model | {"hard_step_hazard", "default_luck_tilt", "recent_steps", "token_weighted"}) & set(FIELDS)


def test_no_function_of_the_package_defaults_to_a_setting():
    """Settings reach code one way: the object, passed explicitly (no `= DEFAULTS.x` parameter default,
    no module constant read from the defaults at import)."""
    for path in sorted((SETTINGS.parent).rglob("*.py")):
        if path == SETTINGS:
            continue
        text = path.read_text()
        assert "DEFAULTS" not in text, f"{path.relative_to(ROOT)} reads the settings' defaults"


def test_the_changepoint_folder_reads_without_forward_jumps():
    """Each file imports only the files before it in the reading order the package's docstring gives."""
    order = ["settings", "engine", "memo", "right_answers", "rules", "pooling", "search", "relabel"]
    engine = ["model", "kernels", "posterior", "gains"]
    folder = SETTINGS.parent
    for path in sorted(folder.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        inner = path.parent.name == "engine"
        me = ("engine", engine.index(path.stem)) if inner else (path.stem, -1)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                "prm_synth.annotate.changepoint"
            ):
                continue
            parts = node.module.split(".")[3:] or ["."]
            names = [a.name for a in node.names] if parts == ["engine"] and inner else []
            target = parts[0]
            if target == "engine":
                sub = parts[1] if len(parts) > 1 else None
                subs = [sub] if sub else names
                if inner:
                    assert all(engine.index(s) < me[1] for s in subs if s in engine), (path.name, node.module)
                    continue
                target = "engine"
            assert order.index(target) < order.index(me[0]), f"{path.relative_to(folder)} imports {node.module}"
    for name in ("model", "kernels", "posterior", "gains"):
        assert (folder / "engine" / f"{name}.py").exists()
    assert max(len(p.read_text().splitlines()) for p in folder.rglob("*.py")) < 500


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
