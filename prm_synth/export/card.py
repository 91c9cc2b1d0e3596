"""The dataset card: facts read from the run, HF metadata, the rendered template, merging into an
existing card, and redaction of secrets in the published config.

The card is rendered from a Jinja2 template shipped as package data (`templates/`). An existing card
is merged, never replaced: unknown YAML fields and every line of text outside the
`<!-- prm-synth:begin -->` / `<!-- prm-synth:end -->` markers are kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import DatasetCard, DatasetCardData

from prm_synth.export.card_facts import (
    dataset_info,
    given_facts,
    label_quality,
    labeling,
    made_rows,
    problems_line,
    record_facts,
    size_category,
    source_facts,
    verification_facts,
    view_row,
)
from prm_synth.export.grader_card import grader_facts
from prm_synth.export.plots import TITLES
from prm_synth.export.rows import DEFAULT_MARKER, Marker
from prm_synth.export.writing import ViewExport
from prm_synth.records import LabelSource
from prm_synth.store.readers import read_manifest
from prm_synth.store.summary import summarize
from prm_synth.store.summary_text import judge_cost_text

TEMPLATE_NAME = "prm_dataset_card.md.j2"


BEGIN = "<!-- prm-synth:begin -->"


END = "<!-- prm-synth:end -->"


TAGS = ["process-reward-model", "prm-synth", "trl", "synthetic", "math"]


TASK_CATEGORIES = ["token-classification"]  # PRMs are trained as token classifiers (TRL, OpenRLHF)


REDACTED = "***"


LOAD_PLACEHOLDER = "ORG/NAME"


def default_template() -> str:
    """The card template shipped inside the package (works from a wheel or a zip too)."""
    return resources.files("prm_synth.export").joinpath("templates", TEMPLATE_NAME).read_text(encoding="utf-8")


# ---------------------------------------------------------------- secrets
_SECRET_PARTS = {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "auth"}


def is_secret_key(key: str) -> bool:
    """A config key whose value must not be published.

    Matched on the words of the key, not on substrings: `hf_token`, `api_key_env`, `client_secret`
    are secret; `max_tokens`, `rollout_max_tokens`, `tokenizer` are budgets and names the card must show.
    """
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key).lower())
    return any(w in _SECRET_PARTS for w in words) or "secret" in key.lower() or "password" in key.lower()


def redact(obj: Any) -> Any:
    """A copy of a config with the value of every secret-looking key replaced by '***'."""
    if isinstance(obj, Mapping):
        return {k: REDACTED if is_secret_key(str(k)) else redact(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    return obj


SOURCE_TEXT: dict[LabelSource, str] = {  # one sentence per word of the schema's vocabulary
    "mc": "measured by rollouts from the step's prefix",
    "test": "measured by rollouts and decided by the search's statistical test (a posterior or a sequential test)",
    "inferred": "inferred by the search from the probes around it",
    "verdict": "the solution's own final grade (right answer: every step good)",
    "consensus": "set by the consensus stage from the judge's first error, where the rollouts left it open "
    "(or, under `judge-only` and `soft`, where the policy's first error differs from the rollouts')",
    "none": "not measured",
}


# ---------------------------------------------------------------- the card
def card_metadata(
    source: Mapping[str, Any], exports: Sequence[ViewExport], license: str | None, name: str
) -> dict[str, Any]:
    configs = []
    for i, ex in enumerate(exports):
        entry: dict[str, Any] = {
            "config_name": ex.view,
            "data_files": [{"split": s, "path": p} for s, p in ex.data_files.items()],
        }
        if i == 0:
            entry["default"] = True  # `load_dataset(repo)` without a name needs one default config
        configs.append(entry)
    biggest = max((ex.rows for ex in exports), default=0)
    meta: dict[str, Any] = {
        "license": license or source["license"],
        "pretty_name": name,
        "language": ["en"],
        "annotations_creators": ["machine-generated"],  # labels from rollouts and judges, no human
        "language_creators": ["machine-generated"],  # the solutions are a policy model's
        "task_categories": list(TASK_CATEGORIES),
        "tags": list(TAGS),
        "size_categories": [size_category(biggest)],
        "configs": configs,
    }
    if source["source_datasets"]:
        meta["source_datasets"] = list(source["source_datasets"])
    return meta


def merge_metadata(existing: Mapping[str, Any], generated: Mapping[str, Any], explicit_license: bool) -> dict[str, Any]:
    """Existing fields win unless the export owns them.

    Owned (rewritten): configs of the exported views, size_categories, source_datasets. Unioned: tags,
    task_categories. Kept when present: license (unless given explicitly), pretty_name, anything else.
    """
    merged = dict(existing)
    ours = {c["config_name"] for c in generated["configs"]}
    kept = [c for c in existing.get("configs") or [] if c.get("config_name") not in ours]
    new_configs = [dict(c) for c in generated["configs"]]
    if any(c.get("default") for c in kept):  # a hand-made default config stays the default
        for c in new_configs:
            c.pop("default", None)
    merged["configs"] = kept + new_configs
    for key in ("size_categories", "source_datasets"):
        if key in generated:
            merged[key] = generated[key]
    for key in ("language", "annotations_creators", "language_creators"):
        merged.setdefault(key, generated[key])
    for key in ("tags", "task_categories"):
        old = existing.get(key) or []
        old = [old] if isinstance(old, str) else list(old)
        merged[key] = old + [v for v in generated[key] if v not in old]
    for key in ("license", "pretty_name"):
        if key not in existing or (key == "license" and explicit_license):
            merged[key] = generated[key]
    # dataset_info of our configs (from an earlier export or push_to_hub) describes old files: replaced.
    info = merged.get("dataset_info")
    if isinstance(info, Mapping):
        info = [info]
    kept_info = [i for i in info or [] if not (isinstance(i, Mapping) and i.get("config_name", "default") in ours)]
    merged["dataset_info"] = kept_info + list(generated.get("dataset_info") or [])
    if not merged["dataset_info"]:
        del merged["dataset_info"]
    return merged


def _section(text: str) -> tuple[int, int] | None:
    start = text.find(BEGIN)
    end = text.find(END, start + len(BEGIN)) if start >= 0 else -1
    return (start, end + len(END)) if start >= 0 and end >= 0 else None


def merge_text(existing: str, generated: str) -> str:
    """Replace the marked section of the existing text with the generated one (append if none)."""
    span = _section(generated)
    if span is None:
        raise ValueError(f"the card template must hold a section between {BEGIN} and {END}")
    section = generated[span[0] : span[1]]
    old = _section(existing)
    if old is None:
        return existing.rstrip("\n") + "\n\n" + section + "\n"
    return existing[: old[0]] + section + existing[old[1] :]


def render_card(
    dataset_dir: str | Path,
    exports: Sequence[ViewExport],
    existing: str | None = None,
    repo_id: str | None = None,
    license: str | None = None,
    template: str | Path | None = None,
    consumers: Mapping[str, Any] | None = None,
    pictures: Mapping[str, str] | None = None,
) -> str:
    """The README.md for the exported views: rendered from the template, merged into `existing`.

    `consumers`: the tokenizer check of the export (`ExportPlan.card_facts()`), or None when none ran.
    `pictures`: the data's pictures in the export (file name: path in the repo), linked from the card.
    """
    manifest = read_manifest(dataset_dir)
    config = manifest.get("config") or {}
    summary = summarize(dataset_dir)
    facts = record_facts(dataset_dir)
    source = source_facts(config)
    labels = summary.labels
    name = f"{config.get('name', 'prm-synth')} (prm-synth)"
    meta = card_metadata(source, exports, license, name)
    meta["dataset_info"] = dataset_info(exports)
    bad = labels.get("bad_step_fraction")
    split_names = [s for s in ("train", "test") if any(s in ex.splits for ex in exports)]
    how = labeling(config)
    consumers = dict(consumers or {"tokenizer": None, "marker": None, "checks": {}, "refused_markers": []})
    marker = Marker(**consumers["marker"]) if consumers.get("marker") else DEFAULT_MARKER
    views = [view_row(ex, split_names, marker, consumers["checks"]) for ex in exports]
    context = {
        "pretty_name": name,
        "source": source["description"],
        "problems_line": problems_line(summary, config, manifest),
        "made": made_rows(config, facts, source["description"], manifest, how),
        "method_text": how["text"],
        "has_judge": bool(config.get("judge")),
        "source_text": {k: v for k, v in SOURCE_TEXT.items() if any(k in row["label_sources"] for row in views)},
        "summary": summary,
        "rejected_by_reason": sorted(summary.rejected_by_reason.items()),
        "facts": facts,
        "labels": labels,
        "bad_percent": "n/a" if bad is None else f"{100 * bad:.1f}%",
        "first_errors": sorted(labels["first_error_histogram"].items(), key=lambda kv: int(kv[0])),
        "views": views,
        "view_names": [ex.view for ex in exports],
        "split_names": split_names,
        "repo_id": repo_id or LOAD_PLACEHOLDER,
        "config_yaml": yaml.safe_dump(redact(config), sort_keys=False, allow_unicode=True),
        "consumers": consumers,
        "checks": [consumers["checks"][v] for v in consumers["checks"]],
        "marker_text": marker.shown(),
        "placeholder": marker.placeholder,
        "quality": label_quality(dataset_dir, config, max((ex.min_confidence for ex in exports), default=0.0)),
        # consensus figures only where a consensus filter ran (0 of 0 would read as a result)
        "consensus": summary.consensus.as_dict() | {"judge_accuracy": summary.consensus.judge_accuracy_text()}
        if summary.consensus and config.get("consensus")
        else None,
        "judge_cost": judge_cost_text(summary),
        "estimated_precision": summary.precision_text(),
        "cost": {
            k: "n/a" if cost is None else f"{cost:.1f}"
            for k, cost in (
                ("rollouts", summary.rollouts_per_labeled_step),
                ("tokens", summary.tokens_per_labeled_step),
                ("rollout_tokens", summary.rollout_tokens_per_labeled_step),
                ("rollout_tokens_per_error", summary.rollout_tokens_per_located_error),
            )
        },
        "verification": verification_facts(summary, facts),
        "pictures": [(TITLES.get(name, name), path) for name, path in (pictures or {}).items()],
        "grader": grader_facts(dataset_dir, config),
        "given": given_facts(dataset_dir, config, summary),
    }
    template_str = default_template() if template is None else Path(template).read_text(encoding="utf-8")
    fresh = DatasetCard.from_template(DatasetCardData(**meta), template_str=template_str, **context)
    if not existing:
        return fresh.content
    # Start from the existing card, so its key order, line endings and text survive.
    card = DatasetCard(existing, ignore_metadata_errors=True)
    merged = merge_metadata(card.data.to_dict(), meta, explicit_license=license is not None)
    card.data = DatasetCardData(**merged, ignore_metadata_errors=True)
    card.text = merge_text(card.text, fresh.text)
    return card.content
