"""Thinking traces of reasoning models: where the trace is, how a prefix of it is rendered, what is graded.

A reasoning model (DeepSeek-R1 distills, Qwen3 and QwQ with thinking on) writes `<think> ... </think>`
and then its answer. Three things depend on where that trace sits in a solution's text:

- rendering: a continuation prompt is the chat template's generation prompt followed by exactly the
  prefix. A template that forces the trace open (its generation prompt ends with `<think>\\n`) must not
  open it a second time when the prefix holds the marker itself, and a template that writes an empty,
  closed trace (Qwen3 with `enable_thinking` off) must not close it before a prefix taken from inside
  the trace; the template is asked for its thinking mode (`enable_thinking=True`);
- grading: only the answer after the close marker is read, so a `\\boxed{}` the model wrote while
  thinking is never its answer, and a completion whose trace never closes is unknown
  ("truncated_thinking");
- steps (steps.py, strategy `thinking`): the trace's paragraphs, then the answer as the last step.

The markers come from the config (`policy.thinking`), else from the tokenizer's chat template (the
known pairs it names), else `<think>` / `</think>`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MARKERS = ("<think>", "</think>")
# Pairs reasoning models' chat templates name, most specific first (`<seed:think>` holds no `<think>`).
KNOWN_MARKERS: tuple[tuple[str, str], ...] = (
    ("<seed:think>", "</seed:think>"),
    ("<|begin_of_thought|>", "<|end_of_thought|>"),
    DEFAULT_MARKERS,
)
TRUNCATED_THINKING = "truncated_thinking"  # the verdict reason of a completion whose trace never closes
# What the template is told so it renders the thinking mode (Qwen3's switch; other templates ignore it).
TEMPLATE_KWARGS: dict[str, Any] = {"enable_thinking": True}


@dataclass(frozen=True)
class ThinkingMarkers:
    """Resolved markers: `forced_open` when the generation prompt already opens the trace, so the
    model's text (a sampled solution) starts inside it without the open marker."""

    open: str
    close: str
    forced_open: bool = False

    def trace_start(self, text: str) -> int | None:
        """Where the trace's own text starts (after the open marker and the whitespace the template
        leaves), or None when `text` has no trace (a non-forced text that neither opens nor closes one).

        A text that closes a trace it never opened was written inside one: a template forced it open
        (DeepSeek-R1's) and nothing said so (no local tokenizer to ask, no `forced_open` set). It is read
        as forced open, so a box written while thinking is still never its answer."""
        stripped = len(text) - len(text.lstrip())
        if text.startswith(self.open, stripped):
            return stripped + len(self.open)
        if self.forced_open:
            return 0
        close = text.find(self.close) if self.close else -1
        return 0 if close >= 0 and self.open not in text[:close] else None

    def close_at(self, text: str) -> int | None:
        """The index of the close marker that ends the trace, or None while the trace is open (or absent)."""
        start = self.trace_start(text)
        if start is None:
            return None
        i = text.find(self.close, start)
        return i if i >= 0 else None

    def answer_section(self, text: str) -> str | None:
        """The text after the close marker; the whole text when it has no trace; None when the trace
        never closes (nothing the model wrote there is its answer)."""
        if self.trace_start(text) is None:
            return text
        close = self.close_at(text)
        return None if close is None else text[close + len(self.close) :]

    def inside_trace(self, prefix: str) -> bool:
        """Whether a continuation of `prefix` continues the thinking (not the answer)."""
        return self.trace_start(prefix) is not None and self.close_at(prefix) is None


def markers_in_template(template: str | None) -> tuple[str, str] | None:
    """The known marker pair a chat template names (both markers in its text), or None."""
    if not template:
        return None
    for pair in KNOWN_MARKERS:
        if pair[0] in template and pair[1] in template:
            return pair
    # A template that only forces the trace open names the open marker alone (DeepSeek-R1's).
    for pair in KNOWN_MARKERS:
        if pair[0] in template:
            return pair
    return None


def apply_template(tokenizer: Any, messages: list[dict[str, str]], markers: ThinkingMarkers | None) -> str:
    """The tokenizer's chat template with the generation prompt, in thinking mode when `markers` are set."""
    extra = TEMPLATE_KWARGS if markers is not None else {}
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra))


def template_forces_open(tokenizer: Any, open_marker: str) -> bool:
    """Whether the template's generation prompt ends with the open marker (the model starts inside the trace)."""
    try:
        head = apply_template(tokenizer, [{"role": "user", "content": "1 + 1?"}], ThinkingMarkers(open_marker, ""))
    except Exception as e:  # a template that cannot render a plain turn: nothing is forced
        log.debug("chat template did not render: %s", e)
        return False
    return head.rstrip().endswith(open_marker)


def resolve_markers(config: Any, tokenizer: Any = None) -> ThinkingMarkers | None:
    """The markers of an engine config's `thinking` section (None when it has none): the configured
    ones, else those the tokenizer's chat template names, else `<think>` / `</think>`."""
    thinking = getattr(config, "thinking", None)
    if thinking is None:
        return None
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    named = markers_in_template(template if isinstance(template, str) else None) or DEFAULT_MARKERS
    open_marker = thinking.open or named[0]
    close_marker = thinking.close or named[1]
    forced = thinking.forced_open
    if forced is None:
        forced = template is not None and template_forces_open(tokenizer, open_marker)
    return ThinkingMarkers(open_marker, close_marker, bool(forced))


def engine_markers(config: Any, engine: Any = None) -> ThinkingMarkers | None:
    """`resolve_markers` with the engine's tokenizer, where it has one."""
    return resolve_markers(config, getattr(engine, "tokenizer", None))


def join_prompt(head: str, prefix: str, markers: ThinkingMarkers | None) -> str:
    """The continuation prompt: the rendered head, then exactly the prefix, with the head's thinking
    markers adjusted so the prefix reads as the model's own trace:

    - a head that opens the trace (a forced template) before a prefix that opens it too: the head's
      marker goes, so the trace is opened once;
    - a head that ends with an empty closed trace (a template in non-thinking mode) before a prefix
      that opens a trace: the empty trace goes, so the prefix's thinking is not closed already."""
    if markers is None or not prefix.lstrip().startswith(markers.open):
        return head + prefix
    body = head.rstrip()
    if body.endswith(markers.open):
        return body[: -len(markers.open)] + prefix
    if body.endswith(markers.close):
        inner = body[: -len(markers.close)].rstrip()
        if inner.endswith(markers.open):
            return inner[: -len(markers.open)] + prefix
    return head + prefix
