"""Trainer-ready views of a finished dataset: one class per view in the registry (`VIEWS`), declaring its
columns, tokenizer need, consumer check and card text; the row each makes follows the shared rule of
prm_synth/export/rows.py, and prm_synth/export/writing.py writes them.

The `verifier` view is of another kind: chat-format SFT rows for a generative verifier (ThinkPRM,
GenPRM), one per distinct kept verification chain of a record (prm_synth/judge/verify.py), with the
`messages` (system, user = the question and the numbered steps, assistant = the chain) that TRL's
`SFTTrainer` renders with the model's chat template. The chains were kept by agreeing with the
labels when the run made them, so `min_confidence` at export time does not change this view.
Views never change the record files.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import pyarrow as pa

from prm_synth.export.consumers import (
    IGNORE,
    QWEN_STEP_TOKEN,
    REWARD_TOKENS,
    TRL_STEP_SEPARATOR,
    TokenizationError,
    chat_tokens,
    openrlhf_labels,
    qwen_step_positions,
    qwen_tokenizer,
    trl_labels,
)
from prm_synth.export.rows import (
    Marker,
    Row,
    SplitCounts,
    count_chains,
    count_supervised,
    supervised_steps,
    to_math_shepherd,
    to_openrlhf,
    to_qwen,
    to_trl,
    to_verifier,
    with_min_confidence,
)

_ID_FIELDS = [pa.field("id", pa.string()), pa.field("problem_id", pa.string())]


# ---------------------------------------------------------------- the registry: one class per view
class View(ABC):
    """One trainer format, declared whole: its columns, what its consumer needs and finds, its card text.

    A new view is one subclass and one line in VIEWS; nothing else dispatches on a view's name.
    `build` turns a record row into the view's rows (SkipRow where it cannot); `read_as_consumer`
    tokenizes one view row exactly as the trainer does (prm_synth.export.consumers) and returns
    (tokens, labels found); `consumer_config` is what `<view>/view.json` tells the trainer;
    `card_text` is the view's line in the dataset card, after its name and columns.
    """

    name: ClassVar[str]
    consumer: ClassVar[str]  # the trainer whose reading `read_as_consumer` mirrors
    columns: ClassVar[pa.Schema]  # fixed, so every file of a view has the same columns even when a shard is empty
    soft_column: ClassVar[str | None] = None  # the label column that holds floats with soft targets (None: no soft)
    marked: ClassVar[bool] = False  # a placeholder after each step in running text: its tokenization is checked
    needs_tokenizer: ClassVar[bool] = False  # cannot be trained on without knowing the consumer's tokenizer
    step_labels: ClassVar[bool] = True  # a PRM view of step labels (False: the verifier's chains)

    @abstractmethod
    def build(self, row: Row, marker: Marker) -> list[dict[str, Any]]: ...

    def schema(self, soft: str | None = None) -> pa.Schema:
        """The Parquet schema; with soft targets the label column holds floats."""
        if soft is None:
            return self.columns
        if self.soft_column is None:
            raise ValueError(f"the {self.name} view has no soft targets")
        index = self.columns.get_field_index(self.soft_column)
        return self.columns.set(index, pa.field(self.soft_column, pa.list_(pa.float64())))

    def with_min_confidence(self, row: Row, min_confidence: float) -> Row:
        return with_min_confidence(row, min_confidence)

    def labels_in(self, row: Row) -> int:
        """How many labels each of the record's view rows carries (what its consumer must find)."""
        return len(supervised_steps(row)[1])

    def count(self, acc: SplitCounts, row: Row, base: Row, view_rows: list[dict[str, Any]]) -> None:
        """Add a written record to its split's counts (`base`: the row before the confidence filter)."""
        count_supervised(acc, row)
        acc.steps_before_confidence += len(supervised_steps(base)[0]) if row is not base else 0

    def consumer_tokenizer(self, tokenizer: Any) -> tuple[Any, list[str]]:
        """The tokenizer as the consumer will use it, and notes on what had to change for that."""
        return tokenizer, []

    @abstractmethod
    def read_as_consumer(self, tokenizer: Any, view_row: Row, n_labels: int, marker: Marker) -> tuple[int, int]:
        """(tokens, labels found) of one view row; TokenizationError where the consumer would fail."""

    @abstractmethod
    def consumer_config(self, marker: Marker, soft: str | None, check: Mapping[str, Any] | None) -> dict[str, Any]:
        """What `<view>/view.json` tells the trainer (`check`: this view's token check, if one ran)."""

    @abstractmethod
    def card_text(self, marker: Marker, soft_text: str | None, check: Mapping[str, Any] | None) -> str:
        """The view's line in the card after its name and columns (`soft_text`: what its soft targets are)."""


def _soft_card_text(soft_text: str, layout: str) -> str:
    return (
        f": **soft targets**: each supervised step's label is a float in [0, 1], {soft_text}\n"
        "  (the steps a row holds are the same as with good/bad labels; a step without a value ends the row). " + layout
    )


class TRLView(View):
    name = "trl"
    consumer = "TRL PRMTrainer.tokenize_row (trl 1.0-1.13)"
    columns = pa.schema(
        [
            pa.field("prompt", pa.string()),
            pa.field("completions", pa.list_(pa.string())),
            pa.field("labels", pa.list_(pa.bool_())),
            *_ID_FIELDS,
        ]
    )
    soft_column = "labels"

    def build(self, row: Row, marker: Marker) -> list[dict[str, Any]]:
        return [to_trl(row, marker)]

    def read_as_consumer(self, tokenizer: Any, view_row: Row, n_labels: int, marker: Marker) -> tuple[int, int]:
        ids, labels = trl_labels(tokenizer, view_row)
        return len(ids), sum(x != IGNORE for x in labels)

    def consumer_config(self, marker: Marker, soft: str | None, check: Mapping[str, Any] | None) -> dict[str, Any]:
        if soft:  # TRL's PRMTrainer casts labels to int: it would train these as 0
            return {"step_separator": TRL_STEP_SEPARATOR, "trl": "none: PRMTrainer casts labels to int"}
        return {"step_separator": TRL_STEP_SEPARATOR, "trl": ">=1.0,<1.14 (trl.experimental.prm.PRMTrainer)"}

    def card_text(self, marker: Marker, soft_text: str | None, check: Mapping[str, Any] | None) -> str:
        if soft_text:
            return _soft_card_text(
                soft_text,
                "The TRL stepwise layout, for trainers that read float labels: TRL's PRMTrainer\n"
                "  casts labels to int and `prm-synth train` trains good/bad labels, so neither trains these.",
            )
        return (
            ": TRL stepwise supervision. PRMTrainer appends its `step_separator`\n"
            '  (default `"\\n"`) to each step and puts the label on it. PRMTrainer left TRL in 1.14: pin\n'
            "  `trl>=1.0,<1.14` (`trl.experimental.prm`), or train with `prm-synth train` (below)."
        )


class MathShepherdView(View):
    name = "math-shepherd"
    consumer = "Math-Shepherd step-tag scoring (input_ids == step tag id)"
    columns = pa.schema([pa.field("input", pa.string()), pa.field("label", pa.string()), *_ID_FIELDS])
    marked = True

    def build(self, row: Row, marker: Marker) -> list[dict[str, Any]]:
        return [to_math_shepherd(row, marker)]

    def read_as_consumer(self, tokenizer: Any, view_row: Row, n_labels: int, marker: Marker) -> tuple[int, int]:
        # The signs are in the `label` text; the count is what decides whether every label is found.
        ids, labels = openrlhf_labels(tokenizer, view_row["input"], ["+"] * n_labels, marker.placeholder)
        return len(ids), sum(x != IGNORE for x in labels)

    def consumer_config(self, marker: Marker, soft: str | None, check: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"step_tag": marker.placeholder, "good_token": "+", "bad_token": "-"}

    def card_text(self, marker: Marker, soft_text: str | None, check: Mapping[str, Any] | None) -> str:
        return (
            ": `input` is the question, a space, then the steps, each followed by\n"
            f"  `{marker.shown()}`, joined by newlines; `label` is the same text with `+` (good) or `-` (bad)"
            f" in place\n  of each `{marker.placeholder}`."
        )


class OpenRLHFView(View):
    name = "openrlhf"
    consumer = "OpenRLHF ProcessRewardDataset (openrlhf/datasets/process_reward_dataset.py)"
    columns = pa.schema([pa.field("input", pa.string()), pa.field("value", pa.list_(pa.string())), *_ID_FIELDS])
    soft_column = "value"
    marked = True
    needs_tokenizer = True

    def build(self, row: Row, marker: Marker) -> list[dict[str, Any]]:
        return [to_openrlhf(row, marker)]

    def read_as_consumer(self, tokenizer: Any, view_row: Row, n_labels: int, marker: Marker) -> tuple[int, int]:
        ids, labels = openrlhf_labels(tokenizer, view_row["input"], view_row["value"], marker.placeholder)
        return len(ids), sum(x != IGNORE for x in labels)

    def consumer_config(self, marker: Marker, soft: str | None, check: Mapping[str, Any] | None) -> dict[str, Any]:
        # Soft values too: OpenRLHF's PRMLoss trains them as targets over the two reward tokens.
        flags = ["--input_key", "input", "--label_key", "value", "--placeholder_token", marker.placeholder]
        return {"openrlhf_train_prm_args": [*flags, "--reward_tokens", *REWARD_TOKENS]}

    def card_text(self, marker: Marker, soft_text: str | None, check: Mapping[str, Any] | None) -> str:
        if soft_text:
            return _soft_card_text(
                soft_text,
                "`input` as in the OpenRLHF view below; `value` is the list of floats, which OpenRLHF's `PRMLoss`\n"
                f"  trains as soft targets over `--reward_tokens + -` (`--placeholder_token {marker.placeholder}`)."
                " OpenRLHF's\n"
                "  `ProcessRewardDataset` as of commit 14fe44c builds an integer label tensor and fails on floats;"
                " use a\n  version whose label tensor is float.",
            )
        return (
            ": `input` is the question, a newline, then the steps each followed by\n"
            f"  `{marker.shown()}`; `value` is the list of `+`/`-`. Train with\n"
            f"  `--input_key input --label_key value --placeholder_token {marker.placeholder} --reward_tokens + -`\n"
            "  (also in `openrlhf/view.json`)."
        )


def _step_token_added(check: Mapping[str, Any] | None) -> bool:
    return any("added" in n for n in (check or {}).get("notes", []))


# How to make `<extra_0>` one token, as Qwen's model card needs it.
_ADD_STEP_TOKEN = (
    '(`tokenizer.add_special_tokens({"additional_special_tokens":\n'
    '  ["<extra_0>"]})`, then `model.resize_token_embeddings(len(tokenizer))`).'
)


class QwenView(View):
    name = "qwen"
    consumer = "Qwen2.5-Math-PRM (chat template, <extra_0> after each step)"
    columns = pa.schema(
        [
            pa.field("system", pa.string()),
            pa.field("query", pa.string()),
            pa.field("response", pa.list_(pa.string())),
            pa.field("labels", pa.list_(pa.int64())),
            *_ID_FIELDS,
        ]
    )
    needs_tokenizer = True

    def build(self, row: Row, marker: Marker) -> list[dict[str, Any]]:
        return [to_qwen(row, marker)]

    def consumer_tokenizer(self, tokenizer: Any) -> tuple[Any, list[str]]:
        tokenizer, added = qwen_tokenizer(tokenizer)
        notes = [f"{QWEN_STEP_TOKEN} is not one token in this tokenizer: checked with it added"] if added else []
        if not getattr(tokenizer, "chat_template", None):
            notes.append("the tokenizer has no chat template: checked as plain text")
        return tokenizer, notes

    def read_as_consumer(self, tokenizer: Any, view_row: Row, n_labels: int, marker: Marker) -> tuple[int, int]:
        ids, positions = qwen_step_positions(tokenizer, view_row)
        if len(positions) != n_labels:
            raise TokenizationError(f"found {len(positions)} {QWEN_STEP_TOKEN} for {n_labels} labels")
        return len(ids), len(positions)

    def consumer_config(self, marker: Marker, soft: str | None, check: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"step_token": QWEN_STEP_TOKEN, "add_step_token_as_special": _step_token_added(check)}

    def card_text(self, marker: Marker, soft_text: str | None, check: Mapping[str, Any] | None) -> str:
        text = (
            ": Qwen2.5-Math-PRM's documented input: `system`, `query`, `response` (the\n"
            "  list of steps), `labels` 1 (good) / 0 (bad). Render "
            '`"<extra_0>".join(response) + "<extra_0>"` as the\n'
            "  assistant turn of the chat template and read the score at each `<extra_0>`.\n  "
        )
        if _step_token_added(check):
            return text + (
                "In the tokenizer this export was checked with, `<extra_0>` is not one token: add it\n"
                "  as a special token before training from it " + _ADD_STEP_TOKEN
            )
        return text + (
            "When training from a\n"
            "  base model whose tokenizer lacks `<extra_0>` (base Qwen2.5 and most others split it into several"
            " tokens),\n  add it as a special token first " + _ADD_STEP_TOKEN
        )


class VerifierView(View):
    """Chat-format SFT rows of the kept verification chains; no step labels, so no confidence filter."""

    name = "verifier"
    consumer = "TRL SFTTrainer (conversational `messages`, chat template)"
    columns = pa.schema(
        [
            pa.field("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            *_ID_FIELDS,
        ]
    )
    step_labels = False

    def build(self, row: Row, marker: Marker) -> list[dict[str, Any]]:
        return to_verifier(row, marker)

    def with_min_confidence(self, row: Row, min_confidence: float) -> Row:
        return row  # the chains were kept by agreeing with the labels when the run made them

    def labels_in(self, row: Row) -> int:
        return 1  # one "label" a row: its chain, the turn SFT trains on

    def count(self, acc: SplitCounts, row: Row, base: Row, view_rows: list[dict[str, Any]]) -> None:
        count_chains(acc, view_rows, len(row["steps"]))

    def read_as_consumer(self, tokenizer: Any, view_row: Row, n_labels: int, marker: Marker) -> tuple[int, int]:
        return len(chat_tokens(tokenizer, view_row["messages"])), 1

    def consumer_config(self, marker: Marker, soft: str | None, check: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"trl": "SFTTrainer (conversational: `messages`, rendered with the model's chat template)"}

    def card_text(self, marker: Marker, soft_text: str | None, check: Mapping[str, Any] | None) -> str:
        return (
            ": chat-format SFT rows for a generative verifier, one per distinct\n"
            "  kept chain: `messages` = system, user (the question and the steps numbered from 1), assistant (the\n"
            "  chain). TRL's `SFTTrainer` reads them with the model's chat template."
        )


VIEWS: dict[str, View] = {
    v.name: v for v in (TRLView(), MathShepherdView(), OpenRLHFView(), QwenView(), VerifierView())
}


VERIFIER_VIEW = VerifierView.name


# The PRM views (step labels); the verifier view is asked for by name or made by default from runs with chains.
VIEW_NAMES: tuple[str, ...] = tuple(name for name, view in VIEWS.items() if view.step_labels)


SOFT_VIEWS: tuple[str, ...] = tuple(name for name, view in VIEWS.items() if view.soft_column)


def view_schema(fmt: str, soft: str | None = None) -> pa.Schema:
    """A view's Parquet schema; with soft targets its label column holds floats."""
    return VIEWS[fmt].schema(soft)
