"""Prompt rendering shared by the engines: the tokenizer's chat template, then exactly the prefix.

A continuation prompt is the templated conversation (optional system turn, the user turn, the
assistant turn opened by the generation prompt) followed by exactly `assistant_prefix`, so the
model continues a partial assistant answer rather than starting a new one. The prefix is appended
as text, after the template, so it is never re-formatted or closed by the template. For a thinking
model (`thinking` markers) the template renders its thinking mode and the head's markers are adjusted
around a prefix that opens a trace itself (prm_synth/prompting/thinking.py, `join_prompt`).
"""

from __future__ import annotations

import logging
from typing import Any

from prm_synth.engines.base import GenerationRequest
from prm_synth.prompting.thinking import ThinkingMarkers, apply_template, join_prompt

log = logging.getLogger(__name__)

# Chat templates put their own special tokens (BOS and turn markers) into the text, so the rendered
# prompt must be tokenized without the tokenizer adding a BOS again (the HF convention for chat).
TOKENIZATION_KWARGS: dict[str, Any] = {"add_special_tokens": False}


def messages_for(request: GenerationRequest, default_system: str | None = None) -> list[dict[str, str]]:
    system = request.system if request.system is not None else default_system
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": request.user})
    return messages


def render_prompt(
    tokenizer: Any,
    request: GenerationRequest,
    default_system: str | None = None,
    thinking: ThinkingMarkers | None = None,
) -> str:
    """The prompt text: chat template with the assistant generation prompt, then exactly the prefix."""
    head = apply_template(tokenizer, messages_for(request, default_system), thinking)
    return join_prompt(head, request.assistant_prefix, thinking)


def render_plain(request: GenerationRequest, default_system: str | None = None) -> str:
    """Fallback without a tokenizer: "system\\n\\nuser\\n\\n" then exactly the prefix."""
    system = request.system if request.system is not None else default_system
    parts = [p for p in (system, request.user) if p]
    return "\n\n".join(parts) + "\n\n" + request.assistant_prefix


def strip_duplicate_bos(tokenizer: Any, prompt: str) -> str:
    """For text APIs that tokenize with special tokens on (a server's completions endpoint): when the
    template already wrote the BOS and the tokenizer adds one too, drop the template's copy."""
    bos = getattr(tokenizer, "bos_token", None)
    if not bos or not prompt.startswith(bos):
        return prompt
    try:
        ids = tokenizer("x", add_special_tokens=True)["input_ids"]
    except Exception:  # pragma: no cover - exotic tokenizers
        return prompt
    if ids and ids[0] == getattr(tokenizer, "bos_token_id", None):
        return prompt[len(bos) :]
    return prompt


def load_tokenizer(name_or_path: str) -> Any:
    """A Hugging Face tokenizer from a local folder (or a cached Hub name); raises when unavailable."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path)


def count_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, **TOKENIZATION_KWARGS)["input_ids"])
