"""`--set NAME=VALUE` for the benchmarks: one labeler setting changed for a run, by name.

Two kinds of names:
- the change-point search's settings (`ChangepointSettings` fields, prm_synth/annotate/changepoint/
  settings.py): every settings object the labeler builds gets the value (`dataclasses.replace` on what
  `ChangepointSettings.of` returns). The model's constants (its grids and hazards, engine/model.py)
  are not settings: its tables are built from them once, at import;
- rules no setting switches off (`RULES`: name -> a patch that removes the rule, value `off`), so the
  ablation (benchmarks/ablation.py) can measure what each special case earns.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def _patch(name: str, new: Callable[..., Any]) -> None:
    """Replace the labeler's function `name` with `new` wherever a loaded prm_synth module binds it."""
    importlib.import_module("prm_synth.annotate.labeler")  # the change-point modules, all loaded
    modules = [m for n, m in list(sys.modules.items()) if n.startswith("prm_synth") and m is not None]
    originals = {id(f) for m in modules if callable(f := vars(m).get(name)) and getattr(f, "__name__", "") == name}
    if not originals:
        raise RuntimeError(f"no function {name!r} in the labeler to switch off (renamed?)")
    for module in modules:
        if id(vars(module).get(name)) in originals:
            setattr(module, name, new)


def _off_unbacked_bad() -> None:
    # a bad label needs no measurement of its own prefix: neither probed for nor required to label
    _patch("unmeasured_bad", lambda *args, **kwargs: None)


def _off_lone_bad() -> None:
    # a lone bad label stands under the priors it was labeled under alone
    _patch("lone_bad_stands_from", lambda post, labels, first_bad, *args, **kwargs: first_bad)


def _off_probe_value() -> None:
    # probes are valued under the search's priors as they are, the shard's k included
    _patch("probe_value_priors", lambda priors, *args, **kwargs: priors)


def _off_repaired_slip() -> None:
    # no dip test on a tested right answer's early prefixes
    _patch("repaired_slip", lambda *args, **kwargs: None)


def _off_right_answer_cap() -> None:
    # a right answer's steps are trusted as far as its own posterior says
    _patch("right_answer_cap", lambda *args, **kwargs: None)


def _off_open_interval() -> None:
    # no probing inside the open interval between the last good and the first bad label
    _patch("open_interval", lambda *args, **kwargs: range(0))


def _off_main_mode_only() -> None:
    # a wrong answer's lone bad label must hold under every luck mode with a quarter of the prior or
    # more, not the main mode only: `mode_share` 0.25 as before revision 2026-12-05.5 (its confirming run)
    def every_mode(q: Any, rise: float, *args: Any, **kwargs: Any) -> list[np.ndarray]:
        import prm_synth.annotate.changepoint.rules as rules

        rest = np.array(q, dtype=float)
        parts = []
        while rest.sum() > 0:
            span = rules._mode_span(rest, rise)
            part = np.zeros(len(rest))
            part[span] = rest[span]
            parts.append(part)
            rest[span] = 0.0
        if len(parts) == 1:
            return []
        return [rules._alone(part) for i, part in enumerate(parts) if i == 0 or part.sum() >= 0.25]

    _patch("luck_modes", every_mode)


# name -> the patch that removes a special-case rule (value `off`; `on` leaves it)
RULES: dict[str, Callable[[], None]] = {
    "rule_unbacked_bad": _off_unbacked_bad,
    "rule_lone_bad": _off_lone_bad,
    "rule_probe_value_priors": _off_probe_value,
    "rule_repaired_slip": _off_repaired_slip,
    "rule_right_answer_cap": _off_right_answer_cap,
    "rule_open_interval": _off_open_interval,
    "rule_main_mode_only": _off_main_mode_only,
}


def settings_fields() -> list[str]:
    """The settings a run may change."""
    from prm_synth.annotate.changepoint.settings import FIELDS

    return list(FIELDS)


def names() -> list[str]:
    """Every name `--set` accepts."""
    return [*settings_fields(), *RULES]


def current(name: str) -> Any:
    """A setting's value in the unmodified labeler (`on` for a rule)."""
    if name in RULES:
        return "on"
    from prm_synth.annotate.changepoint.settings import DEFAULTS

    return getattr(DEFAULTS, name)


def parse(items: list[str]) -> dict[str, Any]:
    """`NAME=VALUE` strings -> {name: value}; ValueError naming the problem (unknown name, bad value)."""
    known = names()
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"--set {item!r}: expected NAME=VALUE")
        if name not in known:
            raise ValueError(f"--set {item!r}: unknown setting {name!r}; choose from {known}")
        if name in RULES:
            if text not in ("on", "off"):
                raise ValueError(f"--set {item!r}: a rule is 'on' or 'off'")
            out[name] = text
            continue
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise ValueError(f"--set {item!r}: {text!r} is not a Python literal (number, tuple)") from None
        default = current(name)
        if isinstance(default, tuple):
            value = tuple(value) if isinstance(value, (tuple, list)) else (value,)
        elif isinstance(default, float) and isinstance(value, int):
            value = float(value)
        elif type(value) is not type(default):
            raise ValueError(f"--set {item!r}: expected a {type(default).__name__} like {default!r}")
        out[name] = value
    return out


def apply(overrides: Mapping[str, Any]) -> None:
    """Change the labeler of this process as `overrides` says (from `parse`); call before labeling."""
    fields = {k: v for k, v in overrides.items() if k not in RULES}
    for name, value in overrides.items():
        if name in RULES and value == "off":
            RULES[name]()
    if fields:
        from prm_synth.annotate.changepoint.settings import ChangepointSettings

        for maker in ("of", "of_bisection"):  # the binary search's settings, and OmegaPRM's bisection's
            made = getattr(ChangepointSettings, maker).__func__

            def overridden(cls: type[ChangepointSettings], config: Any, made: Any = made) -> ChangepointSettings:
                return dataclasses.replace(made(cls, config), **fields)

            setattr(ChangepointSettings, maker, classmethod(overridden))
