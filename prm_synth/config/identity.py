"""A dataset's identity: which rows belong to one dataset, and whether a run may add to a folder.

One output folder holds the rows of one config. What makes two configs the same dataset:

- **The fingerprint** (`PipelineConfig.fingerprint`): a hash of everything that changes the rows. Each
  section says what it puts in beside its fields (`Strict.fingerprint_part`, as vLLM's config classes do
  with `compute_hash`): `run` not at all (`HASHED`), an engine its row fields only (`EngineFields`:
  transport settings left out, so a server that moved resumes its folder), a search the knobs it reads
  (`SearchKnobs.row_fields`), a field added after datasets were written not at its "as before" value
  (`ADDED_FIELDS`), what only the `soft` policy reads only under it (`SOFT_ONLY`). The whole config adds
  the prompts' versions and the labeling search's revision (`LABELER_REVISIONS`).
- **Legacy fingerprints**: before transport settings left the hash, each was hashed as set
  (`PipelineConfig.legacy_fingerprint`); a folder made then is keyed by that, and is recognized by its
  stored config. The manifest then records today's fingerprint as `rows_fingerprint`.
- **Config upgrades** (config/upgrade.py): a file of an older layout is moved to today's keys on load,
  hashing as the rows it makes; a default that changed since resumes a folder made under the former one
  with the former value (`with_former_defaults`).
- **The resume decision** (`resume_decision`): resume a folder, resume it under a former default, or
  refuse it naming the keys that differ (or the labeler revision). `prm-synth run` asks it before any
  work (cli/preflight.py); a run keys the folder with `resume_fingerprint` (store/resume.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from prm_synth.config.base import ConfigError
from prm_synth.config.diff import differing_keys, without_sections
from prm_synth.config.loading import validate_config
from prm_synth.config.pipeline import PipelineConfig
from prm_synth.config.upgrade import upgrade
from prm_synth.errors import PrmSynthInputError

ROWS_FINGERPRINT = "rows_fingerprint"
# Sections that do not change the rows (left out of the fingerprint): never a reason to refuse.
RUNTIME_SECTIONS = ("run",)


# ------------------------------------------------------------------ which key a folder resumes under
def resume_fingerprint(config: PipelineConfig, manifest: dict[str, Any]) -> str | None:
    """The key a run of `config` writes the folder of `manifest` with, or None: another config's folder.

    The folder's own key when it is the config's fingerprint, or when the folder was made under an earlier
    rule and its rows are the config's rows (its `rows_fingerprint`, or its stored config's legacy
    fingerprint): rows of one dataset never hold two fingerprints."""
    stored = manifest.get("config_fingerprint")
    current = config.fingerprint()
    if stored == current:
        return stored
    rows = manifest.get(ROWS_FINGERPRINT) or _legacy_rows_fingerprint(manifest)
    return stored if rows == current else None


def _legacy_rows_fingerprint(manifest: dict[str, Any]) -> str | None:
    """Today's fingerprint of the config that made a folder under the earlier rule, or None when the
    stored config is not what made it (or cannot be read)."""
    stored = manifest.get("config")
    if not isinstance(stored, dict) or not stored:
        return None
    logging.disable(logging.WARNING)  # the upgrade's notes are for loading a file, not for this
    try:
        old = validate_config(stored, check_paths=False)
    except (ConfigError, RecursionError):
        return None
    finally:
        logging.disable(logging.NOTSET)
    return old.fingerprint() if old.legacy_fingerprint() == manifest.get("config_fingerprint") else None


# ------------------------------------------------------------------ defaults that changed
# Defaults that changed: (section, key) -> the value a file that left the key out got before.
FORMER_DEFAULTS: dict[tuple[str, str], Any] = {("consensus", "policy"): "agree"}
# Sections whose absence meant something else before: a judge section without `consensus` meant none.
FORMER_ABSENT_SECTIONS = ("consensus",)


def with_former_defaults(config: PipelineConfig, stored: dict[str, Any]) -> tuple[PipelineConfig, list[str]]:
    """`config` with each changed default its file left out taken from `stored` (an output folder's config),
    and a note per key taken: a folder made under a former default resumes with its rows, never mixed with
    rows of the new one. Keys the file sets, and sections the stored config lacks, are left alone."""
    data = config.model_dump(mode="json")
    notes: list[str] = []
    for name in FORMER_ABSENT_SECTIONS:
        section = getattr(config, name, None)
        if name in stored and stored[name] is None and section is not None and section == type(section)():
            data[name] = None
            notes.append(
                f"this folder was made when a file without a `{name}` section meant none, and resumes without "
                f"one; write `{name}: null` to keep that, or `{name}: {{}}` for today's default"
            )
    for (name, key), former in FORMER_DEFAULTS.items():
        section = getattr(config, name, None)
        old = stored.get(name)
        if section is None or data[name] is None or not isinstance(old, dict) or key in section.model_fields_set:
            continue
        value, today = old.get(key, former), data[name][key]
        if value != today:
            data[name][key] = value
            notes.append(
                f"{name}.{key} is not set: this folder was made with {value} (the default then) and resumes with "
                f"it; set {name}.{key} to choose (today's default: {today})"
            )
    if not notes:
        return config, []
    return validate_config(data), notes


# ------------------------------------------------------------------ the decision
@dataclass(frozen=True)
class ResumeDecision:
    """What a run of a config may do with a folder that holds a dataset: resume it with `config` (the
    run's own, or with a former default the folder was made under: `notes` say which), or not (`refusal`:
    why, in words that follow the folder's name)."""

    config: PipelineConfig | None
    notes: list[str] = field(default_factory=list)
    refusal: str | None = None


def resume_decision(config: PipelineConfig, manifest: dict[str, Any]) -> ResumeDecision:
    """Whether a run of `config` may add to the folder of `manifest` (see the module doc)."""
    old_config = manifest.get("config") or {}
    if resume_fingerprint(config, manifest) is not None:  # the same rows (the server may have moved)
        return ResumeDecision(config)
    former, notes = with_former_defaults(config, old_config if isinstance(old_config, dict) else {})
    if notes and resume_fingerprint(former, manifest) is not None:
        return ResumeDecision(former, notes)
    keys = without_sections(differing_keys(current_form(old_config), config.model_dump(mode="json")), RUNTIME_SECTIONS)
    keys = [k for k in keys if k not in config.transport_keys()]
    if keys:
        why = "differs in " + ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
    elif (old_revision := manifest.get("labeler_revision")) != (revision := config.labeler_revision()):
        # the same config, labeled by another revision of its search: resuming would mix two labelers
        return ResumeDecision(
            None,
            refusal=f"holds rows labeled by {old_revision or 'a labeler from before revisions were recorded'}, "
            f"this prm-synth labels with {revision or 'a search without a revision'}; resuming would put "
            "both labelers' rows in one dataset: use another --out, or --overwrite to replace it",
        )
    else:
        why = f"fingerprint {manifest['config_fingerprint']}, this config {config.fingerprint()}"
    return ResumeDecision(
        None,
        refusal=f"holds a dataset made with another config ({why}); use another --out, or --overwrite to replace it",
    )


def current_form(old: dict[str, Any]) -> dict[str, Any]:
    """An older folder's config in today's layout with defaults filled in, so that only real changes
    show as differences; as stored where it no longer validates (its problem file moved, say)."""
    logging.disable(logging.WARNING)  # the upgrade's notes are for loading a file, not for this
    try:
        return validate_config(upgrade(old)).model_dump(mode="json")
    except PrmSynthInputError:  # an old config that does not validate (ConfigError, upgrade's refusals): as stored
        return old
    finally:
        logging.disable(logging.NOTSET)
