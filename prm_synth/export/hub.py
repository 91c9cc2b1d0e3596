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

import logging
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from prm_synth.export.card import REDACTED, render_card
from prm_synth.export.views import VIEW_NAMES, VIEWS, export_view
from prm_synth.shards import read_manifest

logger = logging.getLogger(__name__)

CARD = "README.md"
_HF_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{20,}")


class HubExportError(RuntimeError):
    """The export to the Hub failed; the message never holds the token."""


class HubApi(Protocol):
    """The part of `huggingface_hub.HfApi` the export uses (tests pass a recording stand-in)."""

    def create_repo(self, repo_id: str, **kwargs: Any) -> Any: ...
    def repo_info(self, repo_id: str, **kwargs: Any) -> Any: ...
    def hf_hub_download(self, repo_id: str, filename: str, **kwargs: Any) -> Any: ...
    def upload_folder(self, **kwargs: Any) -> Any: ...


# ---------------------------------------------------------------- the token
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
    template: str | Path | None = None,
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
    template: str | Path | None = None,
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
