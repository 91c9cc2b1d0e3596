"""What the store asks of a run's config: the key it writes an existing folder with (the decision is
config/identity.py's `resume_fingerprint`), and the servers a shard's marker records.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from prm_synth.config import OpenAIConfig, PipelineConfig
from prm_synth.config.identity import resume_fingerprint
from prm_synth.store.layout import DatasetError
from prm_synth.store.readers import read_manifest


def run_fingerprint(config: PipelineConfig, root: str | Path) -> str:
    """The key for a run of `config` into `root`: the folder's, when the run resumes it; else the
    config's fingerprint (a new folder, an unreadable manifest, or another config's folder, which the
    store then refuses or, with --overwrite, clears)."""
    try:
        manifest = read_manifest(root)
    except (DatasetError, FileNotFoundError):
        return config.fingerprint()
    return resume_fingerprint(config, manifest) or config.fingerprint()


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
