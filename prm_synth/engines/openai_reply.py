"""An OpenAI-compatible server's reply, read and checked: its size bounded before it is read, its JSON
parsed into choices with their texts, finish reasons and token counts, anything malformed named in a
ValueError (model output and servers are untrusted; the engine retries such a reply).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from prm_synth.engines.base import (
    GenerationRequest,
)

# ---------------------------------------------------------------- the reply, read and checked
REPLY_BASE_BYTES = 1 << 20


REPLY_BYTES_PER_TOKEN = 64  # a token is a few bytes of text; JSON escapes (\uXXXX) make it at most ~12 per char


def max_reply_bytes(request: GenerationRequest) -> int:
    """The most a well-behaved server can send for this request, with room to spare; more is refused."""
    return REPLY_BASE_BYTES + server_n(request) * request.sampling.max_tokens * REPLY_BYTES_PER_TOKEN


@dataclass(frozen=True)
class Choice:
    index: int
    text: str
    finish_reason: str | None
    tokens: int | None  # where the server reports them (vLLM's `token_ids`, logprobs tokens)


@dataclass(frozen=True)
class Reply:
    choices: list[Choice]
    prompt_tokens: int | None
    completion_tokens: int | None


def parse_reply(body: bytes) -> Reply:
    """A completions reply, checked field by field; anything malformed (HTML, truncated JSON, `choices`
    that is not a list, a text that is not a string) is a retryable fault with a short description."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        what = "an empty body" if not body.strip() else f"not JSON: {short(body[:200].decode('utf-8', 'replace'))}"
        raise ValueError(f"malformed reply ({what})") from None
    if not isinstance(data, dict):
        raise ValueError(f"malformed reply (a JSON {type(data).__name__}, not an object)")
    raw_choices = data.get("choices")
    if not isinstance(raw_choices, list):
        raise ValueError(f"malformed reply ('choices' is {_kind(raw_choices)}, not a list)")
    choices = [_parse_choice(i, c) for i, c in enumerate(raw_choices)]
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise ValueError(f"malformed reply ('usage' is {_kind(usage)})")
    usage = usage or {}
    return Reply(
        choices,
        _count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
        _count(usage.get("completion_tokens"), "usage.completion_tokens"),
    )


def _parse_choice(position: int, c: Any) -> Choice:
    where = f"choices[{position}]"
    if not isinstance(c, dict):
        raise ValueError(f"malformed reply ({where} is {_kind(c)}, not an object)")
    index, text, finish = c.get("index"), c.get("text"), c.get("finish_reason")
    if not isinstance(index, int) or isinstance(index, bool):
        raise ValueError(f"malformed reply ({where}.index is {_kind(index)})")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise ValueError(f"malformed reply ({where}.text is {_kind(text)}, not a string)")
    if finish is not None and not isinstance(finish, str):
        raise ValueError(f"malformed reply ({where}.finish_reason is {_kind(finish)})")
    tokens: int | None = None
    ids = c.get("token_ids")
    logprobs = c.get("logprobs")
    if isinstance(ids, list):
        tokens = len(ids)
    elif isinstance(logprobs, dict) and isinstance(logprobs.get("tokens"), list):
        tokens = len(logprobs["tokens"])
    return Choice(index, text, finish, tokens)


def _count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"malformed reply ({name} is {_kind(value)})")
    return value


def _kind(value: Any) -> str:
    return "missing" if value is None else f"a {type(value).__name__}"


def server_n(request: GenerationRequest) -> int:
    """Greedy decoding is deterministic and servers (vLLM) refuse n > 1 with it: ask once, repeat."""
    return 1 if request.sampling.temperature == 0 else request.n


def retry_after(e: Any) -> float | None:
    try:
        value = e.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def short(text: object, limit: int = 300) -> str:
    """A server's words for a log line or an error: one line, cut, control characters shown as escapes
    (a server's text must not drive the terminal the log is read on)."""
    text = " ".join(str(text).split())
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape", "backslashreplace").decode() for ch in text)
    return text if len(text) <= limit else text[:limit] + "..."
