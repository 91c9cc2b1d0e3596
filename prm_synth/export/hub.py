"""Publishing a finished dataset: the views as Parquet configs plus a dataset card, to a folder or the Hub.

One code path writes the repo layout (`export_to_dir`): `<view>/<split>-*.parquet` for each view and
a README.md whose YAML `configs:` make `load_dataset(repo, "<view>")` work. `export_to_hub` writes
that same layout into a staging folder and uploads it in one commit with `upload_folder`, so the
Hub repo and a `--to-dir` folder hold the same files, and data and card never disagree mid-upload.
(`Dataset.push_to_hub` writes the same layout, but builds its own HfApi, so it cannot be pointed at
a test stand-in, and it needs each split as one in-memory or cached Dataset; the views stream.)

The card itself (facts, metadata, merging with an existing card, redaction) is prm_synth.export.card.

The Hub token comes from the argument, HF_TOKEN, or the saved `huggingface-cli login`. It is handed
only to the HfApi calls; every message that leaves this module is scrubbed of it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import pyarrow.compute as pc

from prm_synth.errors import PrmSynthError, PrmSynthInputError
from prm_synth.export.card import REDACTED, render_card
from prm_synth.export.consumers import load_tokenizer, tokenizer_name
from prm_synth.export.rows import (
    CHAINS_COLUMN,
    CONFIDENCE_COLUMN,
    CONSENSUS_CONFIDENCE_COLUMN,
    DEFAULT_MARKER,
    SOFT_SOURCES,
    Marker,
)
from prm_synth.export.token_check import choose_marker, verify_views
from prm_synth.export.views import SOFT_VIEWS, VERIFIER_VIEW, VIEW_NAMES, VIEWS
from prm_synth.export.writing import ViewExport, export_view
from prm_synth.key_scrub import scrub as scrub_key
from prm_synth.store.readers import iter_tables, read_manifest

logger = logging.getLogger(__name__)

CARD = "README.md"
VIEW_CONFIG = "view.json"  # beside each view's Parquet files: how its consumer must read it
_HF_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{20,}")


class HubExportError(PrmSynthError, RuntimeError):
    """The export to the Hub failed; the message never holds the token."""


class HubApi(Protocol):
    """The part of `huggingface_hub.HfApi` the export uses (tests pass a recording stand-in)."""

    def create_repo(self, repo_id: str, **kwargs: Any) -> Any: ...
    def repo_info(self, repo_id: str, **kwargs: Any) -> Any: ...
    def hf_hub_download(self, repo_id: str, filename: str, **kwargs: Any) -> Any: ...
    def upload_folder(self, **kwargs: Any) -> Any: ...


# ---------------------------------------------------------------- the token
def scrub(text: str, token: str | None) -> str:
    """Remove the token (in the forms prm_synth.key_scrub finds) and anything shaped like a Hub token
    from a message."""
    return _HF_TOKEN_RE.sub(REDACTED, scrub_key(text, token, REDACTED))


def resolve_token(token: str | None = None) -> str | None:
    """The argument, else HF_TOKEN, else the token saved by `huggingface-cli login` (None: anonymous)."""
    if token:
        return token
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    from huggingface_hub import get_token

    return get_token()


# ---------------------------------------------------------------- export
class ExportRequestError(PrmSynthInputError):
    """The export was asked for something it cannot do; nothing was written."""


@dataclass(frozen=True)
class ExportPlan:
    """A checked export request: the views, the step marker, and what their consumers find.

    Made by `plan_export` before anything is written (the CLI, the flow and the Hub export share it).
    """

    formats: list[str]
    marker: Marker = DEFAULT_MARKER
    tokenizer: str | None = None
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    refused_markers: list[dict[str, str]] = field(default_factory=list)
    min_confidence: float = 0.0  # labels below it are dropped from the views (the run's labels.min_confidence)
    soft: str | None = None  # float targets from this source ("p_good" or "mc") instead of labels

    def card_facts(self) -> dict[str, Any]:
        return {
            "tokenizer": self.tokenizer,
            "marker": self.marker.as_dict(),
            "checks": self.checks,
            "refused_markers": self.refused_markers,
        }


def has_p_good(dataset_dir: str | Path) -> bool:
    """Whether any step of the run has a probability its labels give it (`label_probability`): a p_good,
    or the soft consensus's posterior (read column-wise, one shard at a time)."""
    return any(
        column in table.column_names and pc.count(pc.list_flatten(table[column])).as_py() > 0
        for table in iter_tables(dataset_dir, "data")
        for column in (CONFIDENCE_COLUMN, CONSENSUS_CONFIDENCE_COLUMN)
    )


def has_chains(dataset_dir: str | Path) -> bool:
    """Whether any row of the run holds a kept verification chain (what the verifier view is made of)."""
    for table in iter_tables(dataset_dir, "data"):
        if CHAINS_COLUMN in table.column_names:
            lengths = pc.list_value_length(table[CHAINS_COLUMN])
            if pc.max(lengths).as_py() or 0:
                return True
    return False


def default_formats(with_tokenizer: bool, with_chains: bool = False) -> list[str]:
    """Every PRM view with a tokenizer; without one, those whose consumer does not depend on it; and the
    verifier view when the run made verification chains."""
    prm = [v for v in VIEW_NAMES if with_tokenizer or not VIEWS[v].needs_tokenizer]
    return prm + [VERIFIER_VIEW] if with_chains else prm


def plan_export(
    dataset_dir: str | Path,
    formats: Iterable[str] | None = None,
    tokenizer: Any = None,
    placeholder: str | None = None,
    min_confidence: float | None = None,
    soft: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> ExportPlan:
    """Check an export request before anything is written.

    `min_confidence`: labels below it are left out of the views (None: the run's `labels.min_confidence`).
    `soft`: float targets instead of labels in the trl and openrlhf views, from "p_good", "mc"
    (`mc_values`), or "auto" (p_good where the run has it, else mc).

    `tokenizer`: the tokenizer of the model that will be trained (a name, folder, tokenizer.json or a
    loaded tokenizer). With it every view is read row by row as its consumer reads it
    (prm_synth.export.consumers) and a step marker that is one token is chosen; the OpenRLHF and
    Qwen views need it. Raises ExportRequestError or TokenizationError (both ValueErrors).
    """
    chosen = list(dict.fromkeys(formats)) if formats is not None else default_formats(tokenizer is not None)
    unknown = [f for f in chosen if f not in VIEWS]
    if unknown or not chosen:
        raise ExportRequestError(f"unknown view(s) {unknown or chosen}; choose from {', '.join(VIEWS)}")
    manifest = read_manifest(dataset_dir)  # fail before writing anything when this is not a dataset folder
    if formats is None and manifest.get("config", {}).get("verify") and has_chains(dataset_dir):
        chosen = default_formats(tokenizer is not None, with_chains=True)
    if VERIFIER_VIEW in chosen and not has_chains(dataset_dir):
        # An empty verifier view loads in no library (`datasets`: "train" corresponds to no data).
        raise ExportRequestError(
            "the verifier view needs verification chains, and no row of this run has one: run with a `verify` "
            "section (see docs/guides/verifier-data.md), or export the PRM views without -f verifier"
        )
    if soft is not None:
        chosen, soft = _soft_request(dataset_dir, chosen, formats is not None, soft)
    if min_confidence is None:
        min_confidence = float(manifest.get("config", {}).get("labels", {}).get("min_confidence", 0.0))
    if not 0.0 <= min_confidence <= 1.0:
        raise ExportRequestError(f"--min-confidence must be between 0 and 1, not {min_confidence}")
    if min_confidence > 0 and not has_p_good(dataset_dir):
        method = manifest.get("config", {}).get("annotate", {}).get("method", "?")
        raise ExportRequestError(
            f"--min-confidence {min_confidence} needs per-step p_good, and this run (annotate.method {method}) has "
            "none: every label would be dropped. Only `search_test: changepoint` estimates it; export without "
            "--min-confidence"
        )
    if tokenizer is None:
        needs = [f for f in chosen if VIEWS[f].needs_tokenizer]
        if needs:
            raise ExportRequestError(
                f"the {' and '.join(needs)} view(s) need --tokenizer (the tokenizer of the model you will train): "
                "their step markers are found by token id, and whether a marker is one token depends on it"
            )
        if placeholder is not None:
            raise ExportRequestError("--marker needs --tokenizer to be checked")
        return ExportPlan(chosen, min_confidence=min_confidence, soft=soft)
    if isinstance(tokenizer, str | Path):
        if progress is not None:
            progress(f"loading tokenizer {Path(tokenizer).name if Path(tokenizer).exists() else tokenizer}")
        tokenizer = load_tokenizer(tokenizer)
    logger.info("checking views %s against tokenizer %s", ", ".join(chosen), tokenizer_name(tokenizer))
    marker, refused = choose_marker(dataset_dir, chosen, tokenizer, placeholder)
    checks = verify_views(dataset_dir, chosen, tokenizer, marker, soft, progress)
    return ExportPlan(chosen, marker, tokenizer_name(tokenizer), checks, refused, min_confidence, soft)


def _soft_request(dataset_dir: str | Path, chosen: list[str], explicit: bool, soft: str) -> tuple[list[str], str]:
    """The views and the source of soft targets, or ExportRequestError naming what cannot be done."""
    if soft == "auto":
        soft = "p_good" if has_p_good(dataset_dir) else "mc"
    if soft not in SOFT_SOURCES:
        raise ExportRequestError(f"soft targets come from {' or '.join(SOFT_SOURCES)}, not {soft!r}")
    if soft == "p_good" and not has_p_good(dataset_dir):
        raise ExportRequestError("--soft-from p_good: this run has no p_good (only `search_test: changepoint` has)")
    hard_only = [f for f in chosen if f not in SOFT_VIEWS]
    if explicit and hard_only:
        raise ExportRequestError(
            f"--soft: the {' and '.join(hard_only)} view(s) carry labels as tokens or 0/1; soft targets go to "
            f"{' and '.join(SOFT_VIEWS)}"
        )
    return [f for f in chosen if f in SOFT_VIEWS], soft


def view_config(export: ViewExport, plan: ExportPlan) -> dict[str, Any]:
    """`<view>/view.json`: what the view's consumer must be told to read it (OpenRLHF's flags, ...)."""
    check = plan.checks.get(export.view)
    return {
        "view": export.view,
        "columns": export.columns,
        "marker": None if export.marker is None else export.marker.as_dict(),
        "consumer": VIEWS[export.view].consumer_config(plan.marker, plan.soft, check),
        "tokenizer": plan.tokenizer,
        "token_check": check,
        # float targets in place of labels, and the column they come from (None: good/bad labels)
        "soft_targets": None if plan.soft is None else SOFT_SOURCES[plan.soft],
    }


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: each view's counts, every file (relative to the folder or repo), the token checks."""

    out_dir: str | None  # None for an export to the Hub (written to a staging folder, then uploaded)
    views: dict[str, ViewExport]
    files: list[str]
    tokenizer: str | None
    marker: Marker
    token_checks: dict[str, dict[str, Any]]
    repo_id: str | None = None
    private: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {
            "out_dir": self.out_dir,
            "views": {name: view.as_dict() for name, view in self.views.items()},
            "files": list(self.files),
            "tokenizer": self.tokenizer,
            "marker": self.marker.as_dict(),
            "token_checks": self.token_checks,
        }
        if self.repo_id is not None:
            out |= {"repo_id": self.repo_id, "private": self.private}
        return out


def export_to_dir(
    dataset_dir: str | Path,
    out_dir: str | Path,
    formats: Iterable[str] | None = None,
    test_fraction: float = 0.1,
    seed: int = 0,
    repo_id: str | None = None,
    license: str | None = None,
    existing_card: str | None = None,
    template: str | Path | None = None,
    tokenizer: Any = None,
    placeholder: str | None = None,
    plan: ExportPlan | None = None,
    plots: bool = False,
) -> ExportResult:
    """Write the Hub repo layout (views + README.md) to `out_dir`; a README.md already there is merged.

    `plots`: also the pictures of the data (prm_synth.export.plots) in `plots/`, linked from the card.

    `existing_card` (the text of a card to merge into) overrides the README.md found in `out_dir`.
    `tokenizer` / `placeholder`: see `plan_export` (or pass a `plan` it made).
    """
    plan = plan or plan_export(dataset_dir, formats, tokenizer, placeholder)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    readme = out / CARD
    if existing_card is None and readme.exists():
        existing_card = readme.read_text(encoding="utf-8")
    exports = []
    files: list[str] = []
    for fmt in plan.formats:
        logger.info("writing view %s", fmt)
        export = export_view(
            dataset_dir,
            fmt,
            out,
            test_fraction=test_fraction,
            seed=seed,
            marker=plan.marker,
            min_confidence=plan.min_confidence,
            soft=plan.soft,
        )
        exports.append(export)
        text = json.dumps(view_config(export, plan), indent=2, ensure_ascii=False) + "\n"
        (out / fmt / VIEW_CONFIG).write_text(text, encoding="utf-8")  # the marker may be any script
        files += [p for split in export.splits.values() for p in split.files] + [f"{fmt}/{VIEW_CONFIG}"]
    pictures: dict[str, str] = {}
    if plots:
        from prm_synth.export.plots import PICTURES_FOLDER, draw

        drawn = draw(dataset_dir, out / PICTURES_FOLDER).written
        pictures = {name: f"{PICTURES_FOLDER}/{name}" for name in drawn}
        files += list(pictures.values())
    card = render_card(
        dataset_dir,
        exports,
        existing_card,
        repo_id=repo_id,
        license=license,
        template=template,
        consumers=plan.card_facts(),
        pictures=pictures,
    )
    readme.write_text(card, encoding="utf-8")
    return ExportResult(
        out_dir=str(out),
        views={ex.view: ex for ex in exports},
        files=[*files, CARD],
        tokenizer=plan.tokenizer,
        marker=plan.marker,
        token_checks=plan.checks,
    )


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
    formats: Iterable[str] | None = None,
    token: str | None = None,
    api: HubApi | None = None,
    test_fraction: float = 0.1,
    seed: int = 0,
    license: str | None = None,
    template: str | Path | None = None,
    tokenizer: Any = None,
    placeholder: str | None = None,
    plan: ExportPlan | None = None,
    plots: bool = False,
) -> ExportResult:
    """Create (or reuse) the dataset repo, merge its card, and upload views + card in one commit.

    Files of the exported views left from an earlier export are deleted in the same commit; other
    files in the repo are untouched. With `private=True`, an existing public repo is refused rather
    than published to.
    """
    # A wrong folder or a tokenizer the views do not fit must not leave an empty repo behind.
    plan = plan or plan_export(dataset_dir, formats, tokenizer, placeholder)
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
                test_fraction=test_fraction,
                seed=seed,
                repo_id=repo_id,
                license=license,
                existing_card=existing or "",
                template=template,
                plan=plan,
                plots=plots,
            )
            logger.info("uploading %d files to %s", len(result.files), repo_id)
            api.upload_folder(
                repo_id=repo_id,
                repo_type="dataset",
                folder_path=str(staging),
                commit_message=f"prm-synth export: {', '.join(plan.formats)}",
                delete_patterns=[f"{fmt}/*.parquet" for fmt in plan.formats],
                token=token,
            )
    except HubExportError as e:
        raise HubExportError(scrub(str(e), token)) from None
    except Exception as e:  # noqa: BLE001 - any failure is re-raised without the token or its traceback
        raise HubExportError(scrub(f"export to {repo_id} failed: {type(e).__name__}: {e}", token)) from None
    return replace(result, out_dir=None, repo_id=repo_id, private=private)
