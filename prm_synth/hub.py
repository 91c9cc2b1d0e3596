"""Publishing a finished dataset: the views as Parquet configs plus a dataset card, to a folder or the Hub.

One code path writes the repo layout (`export_to_dir`): `<view>/<split>-*.parquet` for each view and
a README.md whose YAML `configs:` make `load_dataset(repo, "<view>")` work. `export_to_hub` writes
that same layout into a staging folder and uploads it in one commit with `upload_folder`, so the
Hub repo and a `--to-dir` folder hold the same files, and data and card never disagree mid-upload.
(`Dataset.push_to_hub` writes the same layout, but builds its own HfApi, so it cannot be pointed at
a test stand-in, and it needs each split as one in-memory or cached Dataset; the views stream.)

The card is rendered from a Jinja2 template in data_cards/. An existing card is merged, never
replaced: unknown YAML fields and every line of text outside the
`<!-- prm-synth:begin -->` / `<!-- prm-synth:end -->` markers are kept.

The Hub token comes from the argument, HF_TOKEN, or the saved `huggingface-cli login`. It is handed
only to the HfApi calls; every message that leaves this module is scrubbed of it.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow.compute as pc
import yaml
from huggingface_hub import DatasetCard, DatasetCardData

from prm_synth.shards import iter_tables, read_manifest
from prm_synth.summary import summarize
from prm_synth.views import VIEW_NAMES, VIEWS, export_view

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = Path(__file__).resolve().parent.parent / "data_cards" / "prm_dataset_card.md.j2"
BEGIN = "<!-- prm-synth:begin -->"
END = "<!-- prm-synth:end -->"
CARD = "README.md"
TAGS = ["process-reward-model", "prm-synth", "trl", "synthetic", "math"]
TASK_CATEGORIES = ["token-classification"]  # PRMs are trained as token classifiers (TRL, OpenRLHF)
REDACTED = "***"
LOAD_PLACEHOLDER = "ORG/NAME"


class HubExportError(RuntimeError):
    """The export to the Hub failed; the message never holds the token."""


class HubApi(Protocol):
    """The part of `huggingface_hub.HfApi` the export uses (tests pass a recording stand-in)."""

    def create_repo(self, repo_id: str, **kwargs: Any) -> Any: ...
    def repo_info(self, repo_id: str, **kwargs: Any) -> Any: ...
    def hf_hub_download(self, repo_id: str, filename: str, **kwargs: Any) -> Any: ...
    def upload_folder(self, **kwargs: Any) -> Any: ...


# ---------------------------------------------------------------- secrets
_SECRET_PARTS = {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "auth"}
_HF_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{20,}")


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


def scrub(text: str, token: str | None) -> str:
    """Remove the token (and anything shaped like a Hub token) from a message."""
    if token:
        text = text.replace(token, REDACTED)
    return _HF_TOKEN_RE.sub(REDACTED, text)


def resolve_token(token: str | None = None) -> str | None:
    """The argument, else HF_TOKEN, else the token saved by `huggingface-cli login` (None: anonymous)."""
    if token:
        return token
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    from huggingface_hub import get_token

    return get_token()


# ---------------------------------------------------------------- facts for the card
def _distinct(values: Iterable[Any]) -> list[str]:
    return sorted({str(v) for v in values if v not in (None, "")})


def record_facts(dataset_dir: str | Path) -> dict[str, Any]:
    """Who made the rows and how many agree, read column-wise one shard at a time."""
    seen: dict[str, set[Any]] = {c: set() for c in ("policy_model", "judge_model", "annotator", "label_rule")}
    consensus: Counter[str] = Counter()
    for table in iter_tables(dataset_dir, "data"):
        for column, acc in seen.items():
            acc.update(pc.unique(table[column]).to_pylist())
        for value in table["consensus"].to_pylist():
            consensus["none" if value is None else "agree" if value else "disagree"] += 1
    facts: dict[str, Any] = {column: _distinct(values) for column, values in seen.items()}
    facts["consensus"] = {k: consensus.get(k, 0) for k in ("agree", "disagree", "none")}
    return facts


def source_facts(config: Mapping[str, Any]) -> dict[str, Any]:
    """Describe the problem source; pick the default license and source_datasets from it.

    Builtin problems are generated by prm-synth (Apache-2.0, like the project). GSM8K is MIT.
    Anything else is marked `unknown`: the publisher must set the source's license (--license).
    """
    src = config.get("problems") or {}
    kind = src.get("kind")
    if kind == "builtin":
        return {
            "description": f"{src.get('count', '?')} generated arithmetic-chain problems (builtin, seed {src.get('seed', 0)})",
            "license": "apache-2.0",
            "source_datasets": ["original"],
        }
    if kind == "hf":
        path = str(src.get("path", ""))
        name = f" ({src['name']})" if src.get("name") else ""
        return {
            "description": f"the Hugging Face dataset `{path}`{name}, split `{src.get('split', 'test')}`",
            "license": "mit" if "gsm8k" in path.lower() else "unknown",
            "source_datasets": [path] if path else [],
        }
    if kind == "file":
        return {
            "description": f"the problem file `{Path(str(src.get('path', ''))).name}`",
            "license": "unknown",
            "source_datasets": [],
        }
    return {"description": "an unrecorded problem source", "license": "unknown", "source_datasets": []}


def size_category(n: int) -> str:
    bounds = [
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
        (10_000_000, "1M<n<10M"),
        (100_000_000, "10M<n<100M"),
        (1_000_000_000, "100M<n<1B"),
    ]
    for bound, label in bounds:
        if n < bound:
            return label
    return "n>1B"


def _made_rows(
    config: Mapping[str, Any], facts: Mapping[str, Any], source: str, fingerprint: str
) -> list[tuple[str, str]]:
    """The 'How it was made' table; every value has a fallback, so an older manifest still renders."""

    def get(*path: str, default: Any = "n/a") -> Any:
        node: Any = config
        for p in path:
            if not isinstance(node, Mapping) or node.get(p) is None:
                return default
            node = node[p]
        return node

    judge = get("judge", default=None)
    consensus = get("consensus", default=None)
    budgets = (
        f"{get('sampling', 'samples_per_problem')} solutions a problem, sampling max_tokens "
        f"{get('sampling', 'max_tokens')}, rollout max_tokens {get('annotate', 'rollout_max_tokens')}"
    )
    method = get("annotate", "method")
    # The search annotators cap rollouts beyond k; name the cap that applies to this method.
    if method == "omegaprm" and get("annotate", "omega_rollout_budget", default=None) is not None:
        budgets += f", OmegaPRM rollout budget {get('annotate', 'omega_rollout_budget')} a question"
    elif method != "mc" and get("annotate", "probe_max_rollouts", default=None) is not None:
        budgets += f", at most {get('annotate', 'probe_max_rollouts')} rollouts a probe"
    if judge:
        budgets += f", {judge.get('samples', 1)} judge samples (max_tokens {judge.get('max_tokens', 'n/a')})"
    return [
        ("problems", source),
        ("policy model", ", ".join(facts["policy_model"]) or "n/a"),
        ("judge model", ", ".join(facts["judge_model"]) or "none"),
        ("annotator", f"{', '.join(facts['annotator']) or 'n/a'} (method `{method}`)"),
        ("labeling rule", ", ".join(facts["label_rule"]) or str(get("labels", "rule"))),
        ("rollouts per probe (k)", str(get("annotate", "k"))),
        ("budgets", budgets),
        (
            "consensus",
            f"policy `{consensus.get('policy')}`, tolerance {consensus.get('tolerance')}" if consensus else "none",
        ),
        ("config fingerprint", f"`{fingerprint}`"),
    ]


def _view_row(export: Mapping[str, Any], split_names: Sequence[str]) -> dict[str, Any]:
    skipped = ", ".join(f"{reason} {n}" for reason, n in sorted(export["skipped"].items()))
    return {
        "view": export["view"],
        "columns": ", ".join(export["columns"]),
        "rows": [export["splits"][s]["rows"] if s in export["splits"] else "-" for s in split_names],
        "skipped": skipped or "0",
    }


# ---------------------------------------------------------------- the card
def card_metadata(
    source: Mapping[str, Any], exports: Sequence[Mapping[str, Any]], license: str | None, name: str
) -> dict[str, Any]:
    configs = []
    for i, ex in enumerate(exports):
        entry: dict[str, Any] = {
            "config_name": ex["view"],
            "data_files": [{"split": s, "path": p} for s, p in ex["data_files"].items()],
        }
        if i == 0:
            entry["default"] = True  # `load_dataset(repo)` without a name needs one default config
        configs.append(entry)
    biggest = max((ex["rows"] for ex in exports), default=0)
    meta: dict[str, Any] = {
        "license": license or source["license"],
        "pretty_name": name,
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
    for key in ("tags", "task_categories"):
        old = existing.get(key) or []
        old = [old] if isinstance(old, str) else list(old)
        merged[key] = old + [v for v in generated[key] if v not in old]
    for key in ("license", "pretty_name"):
        if key not in existing or (key == "license" and explicit_license):
            merged[key] = generated[key]
    # dataset_info from an earlier push_to_hub would describe the old files of our configs.
    info = merged.get("dataset_info")
    if isinstance(info, list):
        merged["dataset_info"] = [i for i in info if not (isinstance(i, Mapping) and i.get("config_name") in ours)]
    elif isinstance(info, Mapping) and info.get("config_name", "default") in ours:
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
    exports: Sequence[Mapping[str, Any]],
    existing: str | None = None,
    repo_id: str | None = None,
    license: str | None = None,
    template: str | Path = DEFAULT_TEMPLATE,
) -> str:
    """The README.md for the exported views: rendered from the template, merged into `existing`."""
    manifest = read_manifest(dataset_dir)
    config = manifest.get("config") or {}
    summary = summarize(dataset_dir)
    facts = record_facts(dataset_dir)
    source = source_facts(config)
    labels = summary["labels"]
    name = f"{config.get('name', 'prm-synth')} (prm-synth)"
    meta = card_metadata(source, exports, license, name)
    bad = labels.get("bad_step_fraction")
    split_names = [s for s in ("train", "test") if any(s in ex["splits"] for ex in exports)]
    context = {
        "pretty_name": name,
        "source": source["description"],
        "made": _made_rows(config, facts, source["description"], manifest.get("config_fingerprint", "")),
        "summary": summary,
        "rejected_by_reason": sorted((summary.get("rejected_by_reason") or {}).items()),
        "facts": facts,
        "labels": labels,
        "bad_percent": "n/a" if bad is None else f"{100 * bad:.1f}%",
        "first_errors": sorted(labels["first_error_histogram"].items(), key=lambda kv: int(kv[0])),
        "views": [_view_row(ex, split_names) for ex in exports],
        "split_names": split_names,
        "repo_id": repo_id or LOAD_PLACEHOLDER,
        "config_yaml": yaml.safe_dump(redact(config), sort_keys=False, allow_unicode=True),
    }
    fresh = DatasetCard.from_template(DatasetCardData(**meta), template_path=str(template), **context)
    if not existing:
        return fresh.content
    # Start from the existing card, so its key order, line endings and text survive.
    card = DatasetCard(existing, ignore_metadata_errors=True)
    merged = merge_metadata(card.data.to_dict(), meta, explicit_license=license is not None)
    card.data = DatasetCardData(**merged, ignore_metadata_errors=True)
    card.text = merge_text(card.text, fresh.text)
    return card.content


# ---------------------------------------------------------------- export
def _check_formats(formats: Iterable[str]) -> list[str]:
    formats = list(dict.fromkeys(formats))  # keep order, drop repeats
    unknown = [f for f in formats if f not in VIEWS]
    if unknown or not formats:
        raise ValueError(f"unknown view(s) {unknown or formats}; choose from {', '.join(VIEW_NAMES)}")
    return formats


def export_to_dir(
    dataset_dir: str | Path,
    out_dir: str | Path,
    formats: Iterable[str] = VIEW_NAMES,
    test_fraction: float = 0.1,
    seed: int = 0,
    repo_id: str | None = None,
    license: str | None = None,
    existing_card: str | None = None,
    template: str | Path = DEFAULT_TEMPLATE,
) -> dict[str, Any]:
    """Write the Hub repo layout (views + README.md) to `out_dir`; a README.md already there is merged.

    `existing_card` (the text of a card to merge into) overrides the README.md found in `out_dir`.
    """
    formats = _check_formats(formats)
    read_manifest(dataset_dir)  # fail before writing anything when this is not a dataset folder
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    readme = out / CARD
    if existing_card is None and readme.exists():
        existing_card = readme.read_text(encoding="utf-8")
    exports = []
    for fmt in formats:
        logger.info("writing view %s", fmt)
        exports.append(export_view(dataset_dir, fmt, out, test_fraction=test_fraction, seed=seed))
    card = render_card(dataset_dir, exports, existing_card, repo_id=repo_id, license=license, template=template)
    readme.write_text(card, encoding="utf-8")
    files = [p for ex in exports for split in ex["splits"].values() for p in split["files"]] + [CARD]
    return {"out_dir": str(out), "views": {ex["view"]: ex for ex in exports}, "files": files}


def _fetch_card(api: HubApi, repo_id: str, token: str | None, workdir: Path) -> str | None:
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

    try:
        path = api.hf_hub_download(
            repo_id=repo_id, filename=CARD, repo_type="dataset", token=token, local_dir=str(workdir)
        )
    except (EntryNotFoundError, RepositoryNotFoundError):
        return None
    return Path(path).read_text(encoding="utf-8")


def export_to_hub(
    dataset_dir: str | Path,
    repo_id: str,
    private: bool = False,
    formats: Iterable[str] = VIEW_NAMES,
    token: str | None = None,
    api: HubApi | None = None,
    test_fraction: float = 0.1,
    seed: int = 0,
    license: str | None = None,
    template: str | Path = DEFAULT_TEMPLATE,
) -> dict[str, Any]:
    """Create (or reuse) the dataset repo, merge its card, and upload views + card in one commit.

    Files of the exported views left from an earlier export are deleted in the same commit; other
    files in the repo are untouched. With `private=True`, an existing public repo is refused rather
    than published to.
    """
    formats = _check_formats(formats)
    read_manifest(dataset_dir)  # a wrong folder must not leave an empty repo behind
    token = resolve_token(token)
    if not token:
        raise HubExportError("no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    try:
        with tempfile.TemporaryDirectory(prefix="prm-synth-hub-") as tmp:
            staging, download = Path(tmp) / "repo", Path(tmp) / "download"
            logger.info("creating or reusing dataset repo %s", repo_id)
            api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True, token=token)
            if private and not getattr(api.repo_info(repo_id, repo_type="dataset", token=token), "private", True):
                raise HubExportError(f"{repo_id} exists and is public; refusing to upload with --private")
            existing = _fetch_card(api, repo_id, token, download)
            result = export_to_dir(
                dataset_dir,
                staging,
                formats,
                test_fraction,
                seed,
                repo_id=repo_id,
                license=license,
                existing_card=existing or "",
                template=template,
            )
            logger.info("uploading %d files to %s", len(result["files"]), repo_id)
            api.upload_folder(
                repo_id=repo_id,
                repo_type="dataset",
                folder_path=str(staging),
                commit_message=f"prm-synth export: {', '.join(formats)}",
                delete_patterns=[f"{fmt}/*.parquet" for fmt in formats],
                token=token,
            )
    except HubExportError as e:
        raise HubExportError(scrub(str(e), token)) from None
    except Exception as e:  # noqa: BLE001 - any failure is re-raised without the token or its traceback
        raise HubExportError(scrub(f"export to {repo_id} failed: {type(e).__name__}: {e}", token)) from None
    return {**result, "out_dir": None, "repo_id": repo_id, "private": private}
