"""Which fingerprint a run writes an existing output folder with, so that a folder keeps resuming
across changes of what the fingerprint hashes.

A folder is keyed by the fingerprint its manifest, markers and rows hold. A run of a config resumes it
when that key is the config's fingerprint, or when the folder was made under an earlier rule and its
rows are the config's rows: then the run goes on writing under the folder's own key (rows of one
dataset never hold two fingerprints), and the manifest records the config's current fingerprint as
`rows_fingerprint`, so the next run need not work it out again.

Earlier rules: before transport settings (a server's address, timeouts, retries, concurrency, the
key's variable) left the fingerprint, each was hashed as set (`PipelineConfig.legacy_fingerprint`); a
folder made then is recognized by its stored config, whose legacy fingerprint is the folder's key.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from prm_synth.config.sections import ConfigError, OpenAIConfig, PipelineConfig, validate_config
from prm_synth.store.shards import DatasetError, read_manifest

ROWS_FINGERPRINT = "rows_fingerprint"


def resume_fingerprint(config: PipelineConfig, manifest: dict[str, Any]) -> str | None:
    """The key a run of `config` writes the folder of `manifest` with, or None: another config's folder."""
    stored = manifest.get("config_fingerprint")
    current = config.fingerprint()
    if stored == current:
        return stored
    rows = manifest.get(ROWS_FINGERPRINT) or _legacy_rows_fingerprint(manifest)
    return stored if rows == current else None


def run_fingerprint(config: PipelineConfig, root: str | Path) -> str:
    """The key for a run of `config` into `root`: the folder's, when the run resumes it; else the
    config's fingerprint (a new folder, an unreadable manifest, or another config's folder, which the
    store then refuses or, with --overwrite, clears)."""
    try:
        manifest = read_manifest(root)
    except (DatasetError, FileNotFoundError):
        return config.fingerprint()
    return resume_fingerprint(config, manifest) or config.fingerprint()


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


def servers(config: PipelineConfig) -> dict[str, str]:
    """The server each OpenAI-compatible engine of the run talks to, by role, as recorded in each
    shard's marker: scheme, host, port and path only (never a user, password or query, where a key
    could hide)."""
    out = {}
    for role, engine in config.engines().items():
        if isinstance(engine, OpenAIConfig):
            parts = urlsplit(engine.base_url)
            host = parts.hostname or ""
            if ":" in host:  # an IPv6 address goes back in brackets
                host = f"[{host}]"
            try:
                port = parts.port
            except ValueError:  # not a port: left out rather than guessed
                port = None
            netloc = f"{host}:{port}" if port else host
            out[role] = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return out
