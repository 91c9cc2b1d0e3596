"""Whether the Hugging Face Hub can be reached, asked once, so that an offline machine fails in a second.

Offline, `datasets` and `huggingface_hub` retry every request with growing waits: a run over a Hub dataset,
or an export with a Hub tokenizer, waited 37-94 s before its error. One quick check (an offline setting,
else a TCP connection to the Hub's host within `CHECK_TIMEOUT_S`) decides instead: where the Hub cannot be
reached, the libraries are put in their offline mode for the call (`offline`), so a copy in the local cache
is used at once and a missing one fails at once, and the error says why (`offline_hint`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Iterator
from urllib.parse import urlparse

OFFLINE_SETTINGS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
PROXY_SETTINGS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
CHECK_TIMEOUT_S = 3.0
DEFAULT_ENDPOINT = "https://huggingface.co"


def _on(value: str | None) -> bool:
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


@functools.lru_cache(maxsize=1)
def hub_unreachable() -> str | None:
    """Why the Hub cannot be reached now (None: it can, as far as one check tells; behind a proxy, which
    this check cannot see through, it is assumed reachable). Asked once a process."""
    for name in OFFLINE_SETTINGS:
        if _on(os.environ.get(name)):
            return f"{name} is set"
    if any(os.environ.get(name) for name in PROXY_SETTINGS):
        return None
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT)
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=CHECK_TIMEOUT_S).close()
    except OSError as e:
        return f"{host} cannot be reached: {e.strerror or type(e).__name__}"
    return None


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """`huggingface_hub` and `datasets` (and `transformers`, which asks the first) in their offline mode for the block: local cache only,
    no request, no retry. Their settings are module attributes read at call time; each is put back."""
    changed: list[tuple[object, str, object]] = []
    for module, attribute in (
        ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
        ("datasets.config", "HF_HUB_OFFLINE"),
        ("datasets.config", "HF_DATASETS_OFFLINE"),
    ):
        with contextlib.suppress(ImportError, AttributeError):
            target = __import__(module, fromlist=[attribute])
            changed.append((target, attribute, getattr(target, attribute)))
            setattr(target, attribute, True)
    try:
        yield
    finally:
        for target, attribute, value in reversed(changed):
            setattr(target, attribute, value)


def offline_hint(reason: str, what: str) -> str:
    """The error's end where the Hub could not be reached: why, and what to do."""
    return (
        f"the Hugging Face Hub cannot be reached ({reason}) and {what} is not in the local cache: "
        "fetch it once on a machine with a network (it is cached in ~/.cache/huggingface), or use a local copy"
    )
