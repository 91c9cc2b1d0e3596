"""`--set NAME=VALUE` for the benchmarks: one labeler setting changed for a run, by name.

Three kinds of names, each in one table:
- the change-point search's settings (`ChangepointSettings` fields): every settings object the
  labeler builds gets the value (`dataclasses.replace` on what `ChangepointSettings.of` returns);
- module-level constants that change rows (`CONSTANTS`: name -> (module, attribute)): set in every
  loaded prm_synth module that binds the same object, and in every default argument holding it
  (`pool_priors(recents=RECENT_CHOICES)` reads its default once, when the function is defined);
- rules no constant switches off (`RULES`: name -> a patch that removes the rule, value `off`), so the
  ablation can measure what each special case earns.

Constants the posterior's tables are built from when it is imported (its grids, SPREAD, SPIKE,
MAX_STEPS) are not in the table: setting them after the import would change nothing.

Once every tunable is a field of the one settings dataclass, CONSTANTS empties into it and `--set`
is `dataclasses.replace` alone.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

CHANGEPOINT = "prm_synth.annotate.changepoint"
POSTERIOR = "prm_synth.annotate.changepoint_posterior"
PREFIX_DECISION = "prm_synth.annotate.prefix_decision"

# name -> (module, attribute): the row-changing constants read when the labeler runs
CONSTANTS: dict[str, tuple[str, str]] = {
    "MODE_RISE": (CHANGEPOINT, "MODE_RISE"),
    "MODE_SHARE": (CHANGEPOINT, "MODE_SHARE"),
    "K_CHOICES": (POSTERIOR, "K_CHOICES"),
    "RECENT_CHOICES": (POSTERIOR, "RECENT_CHOICES"),
    "RECENT_STEPS": (POSTERIOR, "RECENT_STEPS"),
    "RECENT_SHARE_PRIOR": (POSTERIOR, "RECENT_SHARE_PRIOR"),
    "UNGRADABLE_GIVE_UP": (PREFIX_DECISION, "UNGRADABLE_GIVE_UP"),
}


def _module(name: str) -> Any:
    return importlib.import_module(name)


def _off_unbacked_bad() -> None:
    # a bad label needs no measurement of its own prefix: neither probed for nor required to label
    _module(CHANGEPOINT).unmeasured_bad = lambda ev, first_bad: None


def _off_lone_bad() -> None:
    # a lone bad label stands under the priors it was labeled under alone
    _module(CHANGEPOINT).lone_bad_stands_from = lambda post, labels, first_bad, *args, **kwargs: first_bad


def _off_verdict_only() -> None:
    # a good label past a tested right answer's test needs `confidence` only
    _module(CHANGEPOINT).verdict_only_steps = lambda ev: range(0)


def _off_probe_value() -> None:
    # probes are valued under the search's priors as they are, the shard's k included
    _module(CHANGEPOINT).probe_value_priors = lambda priors: priors


def _off_repaired_slip() -> None:
    # no dip test on a tested right answer's early prefixes
    _module(CHANGEPOINT).repaired_slip = lambda ev, significance=0.05, hazard=0.0: None


def _off_found_error_spread() -> None:
    # each error a test found stands at the step it was found on, not spread over the steps before it
    def at_found(positions: Any, n: int) -> np.ndarray:
        last = np.floor(np.asarray(positions, dtype=float) * n + 1e-9)
        return (np.arange(n, dtype=float)[:, None] >= last[None, :]).sum(axis=1).astype(float)

    _module(CHANGEPOINT).found_error_spread = at_found


def _off_right_answer_cap() -> None:
    # a right answer's steps are trusted as far as its own posterior says
    _module(CHANGEPOINT).right_answer_cap = lambda *args, **kwargs: None


def _off_dispersion_price() -> None:
    # relabel's pooling picks the likeliest k with no price on overdispersion
    cp = _module(CHANGEPOINT)
    pool = cp.pool_priors

    def pool_priors(evidence: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["dispersion_price"] = False
        return pool(evidence, *args, **kwargs)

    cp.pool_priors = pool_priors


def _off_open_interval() -> None:
    # no probing inside the open interval between the last good and the first bad label
    _module(CHANGEPOINT).open_interval = lambda p_good, confidence, bad_confidence=None: range(0)


# name -> the patch that removes a special-case rule (value `off`; `on` leaves it)
RULES: dict[str, Callable[[], None]] = {
    "rule_unbacked_bad": _off_unbacked_bad,
    "rule_lone_bad": _off_lone_bad,
    "rule_verdict_only": _off_verdict_only,
    "rule_probe_value_priors": _off_probe_value,
    "rule_repaired_slip": _off_repaired_slip,
    "rule_found_error_spread": _off_found_error_spread,
    "rule_right_answer_cap": _off_right_answer_cap,
    "rule_dispersion_price": _off_dispersion_price,
    "rule_open_interval": _off_open_interval,
}


def settings_fields() -> list[str]:
    from prm_synth.annotate.changepoint import ChangepointSettings

    return [f.name for f in dataclasses.fields(ChangepointSettings)]


def names() -> list[str]:
    """Every name `--set` accepts."""
    return [*settings_fields(), *CONSTANTS, *RULES]


def current(name: str) -> Any:
    """A setting's value in the unmodified labeler (`on` for a rule)."""
    if name in RULES:
        return "on"
    if name in CONSTANTS:
        module, attribute = CONSTANTS[name]
        return getattr(_module(module), attribute)
    from prm_synth.annotate.changepoint import ChangepointSettings

    return getattr(ChangepointSettings(), name)


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


def _rebind(attribute: str, old: Any, new: Any) -> None:
    """Every binding of constant `attribute` (value `old`) in the loaded prm_synth modules -> `new`: the
    modules that imported it by name, and the functions' defaults that hold the same object (a tuple;
    a number may be the same object as an unrelated one, so numbers are rebound by name only)."""
    container = not isinstance(old, (bool, int, float, str))
    for name, module in list(sys.modules.items()):
        if not name.startswith("prm_synth") or module is None:
            continue
        if getattr(module, attribute, None) is old:
            setattr(module, attribute, new)
        if not container:
            continue
        for value in list(vars(module).values()):
            defaults = getattr(value, "__defaults__", None)
            if defaults and any(d is old for d in defaults):
                value.__defaults__ = tuple(new if d is old else d for d in defaults)


def apply(overrides: Mapping[str, Any]) -> None:
    """Change the labeler of this process as `overrides` says (from `parse`); call before labeling."""
    fields = {k: v for k, v in overrides.items() if k not in CONSTANTS and k not in RULES}
    for name, value in overrides.items():
        if name in RULES:
            if value == "off":
                RULES[name]()
        elif name in CONSTANTS:
            module, attribute = CONSTANTS[name]
            _rebind(attribute, getattr(_module(module), attribute), value)
    if fields:
        from prm_synth.annotate.changepoint import ChangepointSettings

        of = ChangepointSettings.of.__func__  # type: ignore[attr-defined]

        def of_overridden(cls: type[ChangepointSettings], config: Any) -> ChangepointSettings:
            return dataclasses.replace(of(cls, config), **fields)

        ChangepointSettings.of = classmethod(of_overridden)  # type: ignore[method-assign,assignment]
