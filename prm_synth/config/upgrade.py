"""Pipeline files written for prm-synth 0.1 keep loading: their keys are moved to where they live now.

0.1 kept every annotate knob in one flat section. Now `annotate` holds only its method's fields, and
the rest moved (each move is logged once per load, naming the old and the new key):

| 0.1 key | now |
|---|---|
| annotate.omega_k, omega_alpha, ... (method omegaprm) | annotate.k, annotate.alpha, ... |
| annotate.rollout_max_tokens / rollout_temperature | rollouts.max_tokens / rollouts.temperature |
| sampling.top_p (it also set the rollouts' top_p) | sampling.top_p and rollouts.top_p |
| annotate.max_batch_requests / max_in_flight | run.max_batch_requests / run.max_in_flight |
| annotate.save_trees | output.save_trees |
| policy.demo: true (and judge.engine.demo) | policy.model: demo |
| labels.rule: soft (it was MC >= 0.5, a hard label) | labels.rule: majority (same rows, same fingerprint) |
| annotate without `method` | refused: 0.1's default was mc, today's is binary; the message says to add one |
| annotate.search_test: calibrated (binary, omegaprm) | search_test: changepoint (the one change-point posterior) |
| annotate.calibrated_max_rollouts, calibrated_min_gain | dropped: the changepoint search has its own budget |

`calibrated` named a second change-point posterior (a fixed curve shape, luck pooled online across the
run). It was removed in favour of `changepoint`, which locates the first error as well and holds
outside its model (benchmarks/fidelity.py); a file that asked for it gets the changepoint search,
with a note, and a new dataset fingerprint (its rows are not the old ones).

Defaults that changed later are not moved on load (a file that leaves a key out gets today's default),
but a folder made under the former default resumes with it (config/identity.py, `with_former_defaults`): `consensus.policy`
was `agree` before `soft` became the default, and a `judge` section without `consensus` meant no
consensus before it brought the default one.

Knobs of another method (e.g. `search_test` under method mc) did nothing in 0.1; they are dropped with a
note. Anything else unknown still fails validation, naming the key. One case cannot be told apart: 0.1
ignored `annotate.k` under omegaprm (it used `omega_k`, default 16), while `k` is now OmegaPRM's own
rollouts per state; a file with `omega_k` gets its value, a file with `k` alone gets the new meaning.
"""

from __future__ import annotations

import difflib
import logging
from typing import Any

from prm_synth.errors import PrmSynthInputError

log = logging.getLogger(__name__)

# Every field 0.1's flat AnnotateConfig had, and which methods still use it under the same name.
_SHARED = {"k"}
_MC = {"stop_at_first_zero"}
_TEST = {"bad_rate", "good_rate", "sprt_error", "probe_batch", "probe_max_rollouts"}
_BINARY = {"search_test", "recheck", "verify_correct"}
_OMEGA_PREFIXED = {
    "omega_alpha": "alpha",
    "omega_beta": "beta",
    "omega_length": "length",
    "omega_c_puct": "c_puct",
    "omega_k": "k",
    "omega_search_limit": "search_limit",
    "omega_rollout_budget": "rollout_budget",
    "omega_search_test": "search_test",
    "omega_screen": "screen",
}
_FIELDS_OF = {
    "mc": _SHARED | _MC,
    "binary": _SHARED | _TEST | _BINARY,
    "omegaprm": _TEST | set(_OMEGA_PREFIXED.values()),
}
_LEGACY_ANNOTATE = _SHARED | _MC | _TEST | _BINARY | set(_OMEGA_PREFIXED)
_MOVED_OUT = {
    "rollout_max_tokens": ("rollouts", "max_tokens"),
    "rollout_temperature": ("rollouts", "temperature"),
    "max_batch_requests": ("run", "max_batch_requests"),
    "max_in_flight": ("run", "max_in_flight"),
    "save_trees": ("output", "save_trees"),
}


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of `data` with 0.1 keys moved to their current place (see the module docstring)."""
    data = dict(data)
    notes: list[str] = []
    _upgrade_annotate(data, notes)
    _upgrade_top_p(data, notes)
    _upgrade_label_rule(data, notes)
    if "policy" in data:
        data["policy"] = _upgrade_demo(data["policy"], "policy", notes)
    judge = data.get("judge")
    if isinstance(judge, dict) and isinstance(judge.get("engine"), dict):
        data["judge"] = dict(judge, engine=_upgrade_demo(judge["engine"], "judge.engine", notes))
    for note in notes:
        log.warning("pipeline config: %s", note)
    return data


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    current = data.get(name)
    section = dict(current) if isinstance(current, dict) else {}
    data[name] = section
    return section


def _upgrade_annotate(data: dict[str, Any], notes: list[str]) -> None:
    annotate = data.get("annotate")
    if not isinstance(annotate, dict):
        return
    annotate = dict(annotate)
    if "method" not in annotate:
        typo = difflib.get_close_matches("method", [str(k) for k in annotate], n=1, cutoff=0.6)
        if typo:  # `methd: mc` is a typo, not a 0.1 file
            raise PrmSynthInputError(f"annotate.{typo[0]}: unknown key (did you mean `method`?)")
        # 0.1's default was mc and today's is binary: guessing would change what an old file means.
        raise PrmSynthInputError(
            "annotate needs a `method`: add `method: mc` to keep what a 0.1 file meant, or `method: binary` "
            "(the changepoint search, today's default)"
        )
    for old, (section, new) in _MOVED_OUT.items():
        if old in annotate:
            target = _section(data, section)
            value = annotate.pop(old)
            target.setdefault(new, value)
            notes.append(f"annotate.{old} is now {section}.{new}")
    method = annotate["method"]
    _upgrade_calibrated(annotate, notes)
    keep = _FIELDS_OF.get(method)
    if keep is None:  # an unknown method: validation names it
        data["annotate"] = annotate
        return
    if method == "omegaprm" and any(key in annotate for key in _OMEGA_PREFIXED):
        # A 0.1 file: its unprefixed `k` and `search_test` belonged to the other methods.
        for key in ("k", "search_test"):
            if key in annotate:
                annotate.pop(key)
                notes.append(f"annotate.{key} did nothing for omegaprm in 0.1: dropped")
        for old, new in _OMEGA_PREFIXED.items():
            if old in annotate:
                annotate[new] = annotate.pop(old)
                notes.append(f"annotate.{old} is now annotate.{new}")
    for key in sorted(set(annotate) - keep - {"method"}):
        if key in _LEGACY_ANNOTATE:
            annotate.pop(key)
            notes.append(f"annotate.{key} does nothing for method {method}: dropped")
    data["annotate"] = annotate


def _upgrade_calibrated(annotate: dict[str, Any], notes: list[str]) -> None:
    """The removed calibrated posterior: its name becomes the changepoint search, its own knobs go."""
    for key in ("search_test", "omega_search_test"):
        if annotate.get(key) == "calibrated":
            annotate[key] = "changepoint"
            notes.append(
                f"annotate.{key}: calibrated was removed; it is now changepoint, the one change-point "
                "posterior (it pins the first error as well and holds outside its model): the rows, and "
                "the dataset fingerprint, differ from the old search's"
            )
    for key in ("calibrated_max_rollouts", "calibrated_min_gain"):
        if key in annotate:
            annotate.pop(key)
            notes.append(f"annotate.{key} belonged to the removed calibrated search: dropped")


def _upgrade_top_p(data: dict[str, Any], notes: list[str]) -> None:
    """0.1 sampled rollouts with sampling.top_p; keep that unless rollouts.top_p is set."""
    sampling = data.get("sampling")
    if not isinstance(sampling, dict) or "top_p" not in sampling:
        return
    rollouts = data.get("rollouts")
    if isinstance(rollouts, dict) and "top_p" in rollouts:
        return
    if "rollouts" in data and not isinstance(rollouts, dict):
        return  # malformed: validation names it
    _section(data, "rollouts")["top_p"] = sampling["top_p"]
    notes.append("sampling.top_p also sets rollouts.top_p (as in 0.1); set rollouts.top_p to choose it apart")


def _upgrade_label_rule(data: dict[str, Any], notes: list[str]) -> None:
    """`soft` named a threshold (MC >= 0.5), not Math-Shepherd's soft label (the MC value, `mc_values`)."""
    labels = data.get("labels")
    if isinstance(labels, dict) and labels.get("rule") == "soft":
        data["labels"] = dict(labels, rule="majority")
        notes.append(
            "labels.rule: soft is now labels.rule: majority (good when MC >= 0.5); soft labels are the "
            "mc_values column (prm-synth export --soft)"
        )


def _upgrade_demo(engine: Any, where: str, notes: list[str]) -> Any:
    if not isinstance(engine, dict) or "demo" not in engine:
        return engine
    engine = dict(engine)
    if engine.pop("demo") is True:
        engine["model"] = "demo"
        notes.append(f"{where}.demo: true is now {where}.model: demo")
    return engine
