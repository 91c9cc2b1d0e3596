"""Trainer-ready views of a finished dataset, and their export as Parquet with train/test splits.

A view turns one record row (a dict per RECORD_SCHEMA) into one row of a trainer's format. All four
PRM views share one rule for which steps are supervised (`supervised_steps`):

    walk the steps in order; an unlabeled step (label null) ends the row before it, a bad step
    (label False) ends the row after it. What is left is zero or more good steps, optionally
    followed by exactly one bad step, the first error.

Why: a label after the first error says nothing reliable. Under the hard rule a later prefix still
holds the error, and its MC value only measures whether the policy happened to recover, so training
on it teaches the model to forgive mistakes. A null label means the step was never measured; a
guess would be worse than leaving it out, and a row cannot skip a step (the later steps sit on top
of it in the text). A row whose first step is unlabeled has nothing to supervise and is skipped.

The `verifier` view is of another kind: chat-format SFT rows for a generative verifier (ThinkPRM,
GenPRM), one per distinct kept verification chain of a record (prm_synth/judge/verify.py), with the
`messages` (system, user = the question and the numbered steps, assistant = the chain) that TRL's
`SFTTrainer` renders with the model's chat template. The chains were kept by agreeing with the
labels when the run made them, so `min_confidence` at export time does not change this view.

Step text is stripped of surrounding whitespace: the lossless split keeps each step's newline, and
every format adds its own separator after a step. Views never change the record files.

Export writes the layout `datasets.push_to_hub` creates for a config, one folder per view:

    OUT/<view>/train-00000-of-00002.parquet
    OUT/<view>/test-00000-of-00001.parquet

so `load_dataset("parquet", data_files={"train": "OUT/trl/train-*.parquet"})` reads it, and with the
README `configs:` metadata written by prm_synth.export.card, `load_dataset("OUT", "trl")` does too.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from prm_synth.annotate.labels import confident_labels
from prm_synth.errors import PrmSynthInputError
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
from prm_synth.judge.verify import parse_chain
from prm_synth.prompting.prompts import VERIFY_SYSTEM, render_verify_prompt
from prm_synth.store.shards import iter_tables

STEP_TAG = "ки"  # Math-Shepherd's step tag; also OpenRLHF's placeholder token in its Math-Shepherd example
# The system prompt of Qwen2.5-Math-PRM's documented usage (its model card).
QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
SPLITS = ("train", "test")
DEFAULT_MAX_ROWS_PER_FILE = 100_000

Row = Mapping[str, Any]


class SkipRow(PrmSynthInputError):
    """A record that a view cannot represent; `reason` is a short code counted by export_view."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- the shared rule
def supervised_steps(row: Row) -> tuple[list[str], list[bool]]:
    """The steps a view supervises and their labels (see the module docstring for the rule)."""
    steps: list[str] = []
    labels: list[bool] = []
    for text, label in zip(row["steps"], row["labels"], strict=True):
        if label is None:
            break
        steps.append(text.strip())
        labels.append(bool(label))
        if not label:
            break
    if not steps:
        raise SkipRow("no_labeled_steps")
    return steps, labels


def with_min_confidence(row: Row, min_confidence: float) -> Row:
    """The row with its labels below `min_confidence` set to None (the same row when it is 0).

    A view stops before its first unlabeled step, so a row keeps the confident labels up to its first
    doubtful one. Rows of methods without `p_good` keep no label at a threshold above 0; labels the soft
    consensus set carry its posterior's confidence (`label_confidence`)."""
    if min_confidence <= 0.0:
        return row
    return {**row, "labels": confident_labels(row["labels"], label_confidence(row), min_confidence)}


def label_confidence(row: Row) -> list[float | None] | None:
    """Per step, how sure the row's labels are that its prefix is correct: the soft consensus posterior's
    (`consensus_p_good`), which the labels follow, where it ran; else the labeler's `p_good`."""
    return row.get("consensus_p_good") or row.get("p_good")


# Soft targets: the float a step is trained toward instead of its good/bad label. `p_good` is the
# first-error search's posterior that the prefix is still correct (where the run's search estimates
# one, as the default search does); `mc` is Math-Shepherd's soft label,
# the share of rollouts from the prefix that reached the answer (`mc_values`).
SOFT_SOURCES = {"p_good": "p_good", "mc": "mc_values"}


def with_soft_targets(row: Row, source: str) -> Row:
    """The row with its soft targets (`soft`) from `source`, and its labels cut where a step has none:
    a view stops before such a step, as before an unlabeled one (no target is guessed)."""
    values = row.get(SOFT_SOURCES[source]) or [None] * len(row["labels"])
    labels = [lab if v is not None else None for lab, v in zip(row["labels"], values, strict=True)]
    return {**row, "labels": labels, "soft": values}


def _targets(row: Row, labels: list[bool]) -> list[Any]:
    """The supervised steps' labels, or their soft targets where the row carries them."""
    return [float(v) for v in row["soft"][: len(labels)]] if "soft" in row else labels


def _ids(row: Row) -> dict[str, str]:
    # Kept in every view: trainers ignore extra columns, and they tie a view row back to its record.
    return {"id": row["id"], "problem_id": row["problem_id"]}


def _refuse_marker(marker: str, question: str, steps: list[str]) -> None:
    # A marker inside the text would add a label position the labels do not have.
    if marker in question or any(marker in s for s in steps):
        raise SkipRow("marker_in_text")


def _sign(label: bool) -> str:
    return "+" if label else "-"


# ---------------------------------------------------------------- the views
@dataclass(frozen=True)
class Marker:
    """What follows each step in the views that mark steps in running text (Math-Shepherd, OpenRLHF).

    `placeholder` is the token a trainer looks for (OpenRLHF's `--placeholder_token`); `glue` is the
    text between the step and it. Math-Shepherd's convention is glue " " and placeholder "ки", which
    is one token in context only for SentencePiece tokenizers (Llama 2, Mistral); byte-level BPE
    tokenizers merge the space into the next token, so prm_synth.export.consumers picks another
    marker for them and checks it row by row.
    """

    placeholder: str = STEP_TAG
    glue: str = " "

    def after(self, step: str) -> str:
        return step + self.glue + self.placeholder

    def as_dict(self) -> dict[str, str]:
        return {"placeholder": self.placeholder, "glue": self.glue}

    def shown(self) -> str:
        """The marker as a card shows it in running text (a newline glue as `\\n`)."""
        return self.glue.replace("\n", "\\n") + self.placeholder


DEFAULT_MARKER = Marker()


def to_trl(row: Row, marker: Marker = DEFAULT_MARKER) -> dict[str, Any]:
    """TRL stepwise supervision: `prompt`, `completions` (one string per step), `labels` (bool per step).

    TRL's PRMTrainer joins prompt and steps itself, appending its `step_separator` (default "\\n") to
    each step and putting the step's label on the separator's last token. (No in-text marker.)
    """
    steps, labels = supervised_steps(row)
    return {"prompt": row["question"].strip(), "completions": steps, "labels": _targets(row, labels), **_ids(row)}


def to_math_shepherd(row: Row, marker: Marker = DEFAULT_MARKER) -> dict[str, Any]:
    """Math-Shepherd: `input` is "question step1 ки\\nstep2 ки…", `label` the same text with +/- for ки."""
    steps, labels = supervised_steps(row)
    question = row["question"].strip()
    _refuse_marker(marker.placeholder, question, steps)
    return {
        "input": question + " " + "\n".join(marker.after(s) for s in steps),
        "label": question + " " + "\n".join(s + marker.glue + _sign(lab) for s, lab in zip(steps, labels, strict=True)),
        **_ids(row),
    }


def to_openrlhf(row: Row, marker: Marker = DEFAULT_MARKER) -> dict[str, Any]:
    """OpenRLHF ProcessRewardDataset: `input` with the placeholder after each step, `value` a list of +/-.

    Train with `--input_key input --label_key value --placeholder_token <placeholder> --reward_tokens + -`.
    """
    steps, labels = supervised_steps(row)
    question = row["question"].strip()
    _refuse_marker(marker.placeholder, question, steps)
    soft = "soft" in row  # OpenRLHF reads a list of numbers as soft labels (PRMLoss over the reward tokens)
    return {
        "input": question + "\n" + "\n".join(marker.after(s) for s in steps),
        "value": _targets(row, labels) if soft else [_sign(lab) for lab in labels],
        **_ids(row),
    }


def to_qwen(row: Row, marker: Marker = DEFAULT_MARKER) -> dict[str, Any]:
    """Qwen2.5-Math-PRM's documented input: `system`, `query`, `response` (the list of steps), `labels` 1/0.

    Qwen's code renders `"<extra_0>".join(response) + "<extra_0>"` as the assistant turn of the chat
    template and reads the score at each `<extra_0>`; a step that holds that text would add a position.
    """
    steps, labels = supervised_steps(row)
    question = row["question"].strip()
    _refuse_marker(QWEN_STEP_TOKEN, question, steps)
    return {
        "system": QWEN_SYSTEM,
        "query": question,
        "response": steps,
        "labels": [int(lab) for lab in labels],
        **_ids(row),
    }


def to_verifier(row: Row, marker: Marker = DEFAULT_MARKER) -> list[dict[str, Any]]:
    """Chat-format SFT rows for a generative verifier: one per distinct kept chain of the record.

    The user turn is the verifier prompt the chain answered (prompts.render_verify_prompt), so the
    trained verifier sees at inference exactly what the chains were made from."""
    chains = row.get(CHAINS_COLUMN)
    if chains is None:
        raise SkipRow("not_verified")
    if not chains:
        raise SkipRow("no_kept_chain")
    if any(parse_chain(c, len(row["steps"])).verdicts is None for c in chains):
        raise SkipRow("unreadable_chain")  # never written by the verify stage; a record edited since
    user = render_verify_prompt(row["question"], row["steps"])
    return [
        {
            "messages": [
                {"role": "system", "content": VERIFY_SYSTEM},
                {"role": "user", "content": user},
                {"role": "assistant", "content": chain},
            ],
            **_ids(row),
        }
        for chain in dict.fromkeys(chains)  # identical chains of one record would only weigh it twice
    ]


def chain_verdicts(view_row: Row, n_steps: int) -> list[bool]:
    """The step verdicts of a verifier row's chain (to_verifier writes only chains that parse)."""
    return parse_chain(view_row["messages"][-1]["content"], n_steps).verdicts or []


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
        _count(acc, row)
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
        "  (the steps a row holds are the same as with good/bad labels; a step without a value ends the row). "
        + layout
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
        _count_chains(acc, view_rows, len(row["steps"]))

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


VIEWS: dict[str, View] = {v.name: v for v in (TRLView(), MathShepherdView(), OpenRLHFView(), QwenView(), VerifierView())}
VERIFIER_VIEW = VerifierView.name
# The PRM views (step labels); the verifier view is asked for by name or made by default from runs with chains.
VIEW_NAMES: tuple[str, ...] = tuple(name for name, view in VIEWS.items() if view.step_labels)
SOFT_VIEWS: tuple[str, ...] = tuple(name for name, view in VIEWS.items() if view.soft_column)


def view_schema(fmt: str, soft: str | None = None) -> pa.Schema:
    """A view's Parquet schema; with soft targets its label column holds floats."""
    return VIEWS[fmt].schema(soft)


# ---------------------------------------------------------------- splitting
def split_of(problem_id: str, test_fraction: float, seed: int = 0) -> str:
    """'train' or 'test', decided by a hash of the problem id alone: every row of a problem lands in
    the same split, on every machine and every re-export."""
    digest = hashlib.sha256(f"{seed}\x00{problem_id}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2**64 < test_fraction else "train"


class _SplitWriter:
    """Parquet files of one split, rolled over at max_rows, renamed to their final
    `<split>-00000-of-0000N` names once N is known."""

    def __init__(self, folder: Path, split: str, schema: pa.Schema, max_rows: int) -> None:
        self.folder, self.split, self.schema, self.max_rows = folder, split, schema, max_rows
        self.parts: list[Path] = []
        self.rows = 0
        # Arrow bytes of the rows written: what `datasets` records as the split's `num_bytes` when it
        # loads these files (it sums the tables' nbytes), so the card can state it exactly.
        self.num_bytes = 0
        self._writer: pq.ParquetWriter | None = None
        self._rows_in_part = 0

    def write(self, table: pa.Table) -> None:
        while table.num_rows:
            if self._writer is None or self._rows_in_part >= self.max_rows:
                self._open()
            take = min(table.num_rows, self.max_rows - self._rows_in_part)
            assert self._writer is not None
            part = table.slice(0, take)
            self._writer.write_table(part)
            self.num_bytes += part.nbytes
            self._rows_in_part += take
            self.rows += take
            table = table.slice(take)

    def _open(self) -> None:
        self._close_part()
        part = self.folder / f".{self.split}-{len(self.parts):05d}.parquet.tmp"
        self.parts.append(part)
        self._writer = pq.ParquetWriter(part, self.schema)
        self._rows_in_part = 0

    def _close_part(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def finish(self) -> list[str]:
        if not self.parts:  # an empty split still gets one (empty) file, so the split exists when loaded
            self._open()
        self._close_part()
        n = len(self.parts)
        names = []
        for i, part in enumerate(self.parts):
            name = f"{self.split}-{i:05d}-of-{n:05d}.parquet"
            os.replace(part, self.folder / name)
            names.append(name)
        return names

    def abort(self) -> None:
        self._close_part()
        for part in self.parts:
            part.unlink(missing_ok=True)


def _clear_view_folder(folder: Path) -> None:
    # Files of an earlier export would otherwise match the `train-*` pattern next to the new ones.
    for split in SPLITS:
        for old in folder.glob(f"{split}-*-of-*.parquet"):
            old.unlink()
    for tmp in folder.glob(".*.parquet.tmp"):
        tmp.unlink()


@dataclass
class SplitCounts:
    """One split of a view: its files, then what they hold (the supervised steps a trainer sees, not
    what the records hold)."""

    files: list[str] = field(default_factory=list)
    num_bytes: int = 0  # Arrow bytes, what `datasets` records as the split's num_bytes
    rows: int = 0
    problems: int = 0
    steps: int = 0
    bad_steps: int = 0
    label_sources: dict[str, int] = field(default_factory=dict)
    with_confidence: int = 0
    steps_before_confidence: int = 0  # supervised steps of the kept rows without the confidence filter


@dataclass(frozen=True)
class ViewExport:
    """One view written: its counts per split, skipped rows by reason, files, and the card's example row."""

    view: str
    columns: list[str]
    splits: dict[str, SplitCounts]
    skipped: dict[str, int]
    data_files: dict[str, str]
    marker: Marker | None  # the step marker, in the views that carry one
    min_confidence: float
    soft: str | None
    example: dict[str, Any] | None

    @property
    def rows(self) -> int:
        return sum(split.rows for split in self.splits.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "view": self.view,
            "columns": list(self.columns),
            "splits": {name: asdict(split) for name, split in self.splits.items()},
            "rows": self.rows,
            "skipped": dict(self.skipped),
            "data_files": dict(self.data_files),
            "marker": None if self.marker is None else self.marker.as_dict(),
            "min_confidence": self.min_confidence,
            "soft": self.soft,
            "example": self.example,
        }


def export_view(
    dataset_dir: str | Path,
    fmt: str,
    out_dir: str | Path,
    test_fraction: float = 0.1,
    seed: int = 0,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    marker: Marker = DEFAULT_MARKER,
    min_confidence: float = 0.0,
    soft: str | None = None,
) -> ViewExport:
    """Write view `fmt` of the dataset in `dataset_dir` to `out_dir/<fmt>/<split>-*.parquet`.

    `min_confidence` > 0 keeps only labels whose `p_good` meets it (see `with_min_confidence`).
    `soft` ("p_good" or "mc", views trl and openrlhf): float targets instead of labels (`with_soft_targets`).

    Streams one record shard at a time (memory holds one shard and one Parquet row group). Returns
    the counts of what was written: rows, problems, steps, bad steps, label sources and confidence
    coverage per split, skipped rows by reason, the files, and the first row (the card's example).
    """
    if fmt not in VIEWS:
        raise ValueError(f"unknown view {fmt!r}; choose from {', '.join(VIEWS)}")
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    view = VIEWS[fmt]
    if soft is not None and (view.soft_column is None or soft not in SOFT_SOURCES):
        raise ValueError(f"soft targets ({soft}) go to the {' and '.join(SOFT_VIEWS)} views only, not {fmt}")
    schema = view.schema(soft)
    folder = Path(out_dir) / fmt
    folder.mkdir(parents=True, exist_ok=True)
    _clear_view_folder(folder)
    splits = SPLITS if test_fraction > 0 else ("train",)
    writers = {s: _SplitWriter(folder, s, schema, max_rows_per_file) for s in splits}
    counts = {s: SplitCounts() for s in splits}
    skipped: Counter[str] = Counter()
    example: dict[str, Any] | None = None
    try:
        for table in iter_tables(dataset_dir, "data"):
            out: dict[str, list[dict[str, Any]]] = {s: [] for s in splits}
            # A problem lives in exactly one shard, so per-shard sets count problems with flat memory.
            problems: dict[str, set[str]] = {s: set() for s in splits}
            for raw in _rows(table):
                base = raw if soft is None else with_soft_targets(raw, soft)
                row = view.with_min_confidence(base, min_confidence)
                try:
                    view_rows = view.build(row, marker)
                except SkipRow as e:
                    skipped[_skip_reason(e.reason, raw, base, row)] += 1
                    continue
                split = split_of(row["problem_id"], test_fraction, seed)
                out[split] += view_rows
                example = example or view_rows[0]
                problems[split].add(row["problem_id"])
                view.count(counts[split], row, base, view_rows)
            for split, rows in out.items():
                counts[split].problems += len(problems[split])
                if rows:
                    writers[split].write(pa.Table.from_pylist(rows, schema=schema))
        for split, writer in writers.items():
            counts[split].files = [f"{fmt}/{name}" for name in writer.finish()]
            counts[split].num_bytes = writer.num_bytes
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    return ViewExport(
        view=fmt,
        columns=schema.names,
        splits=counts,
        skipped=dict(skipped),
        data_files={s: f"{fmt}/{s}-*" for s in splits},
        marker=marker if view.marked else None,
        min_confidence=min_confidence,
        soft=soft,
        example=example,
    )


def _skip_reason(reason: str, raw: Row, base: Row, row: Row) -> str:
    """Why a row was skipped, naming the filter that took its first label: the soft targets (`base`:
    a first step without one) or the minimum confidence (`row`)."""
    if reason != "no_labeled_steps":
        return reason
    if raw["labels"][:1] not in ([], [None]) and base["labels"][0] is None:
        return "no_soft_target"
    if base["labels"][:1] not in ([], [None]) and row["labels"][0] is None:
        return "below_min_confidence"
    return reason


_READ_COLUMNS = ["id", "problem_id", "question", "steps", "labels", "label_source", "mc_values"]
CONFIDENCE_COLUMN = "p_good"  # per-step P(good), where a run computed one; counted when present
CHAINS_COLUMN = "verify_chains"  # kept verification chains, where a run made them (the verifier view)


def iter_record_rows(dataset_dir: str | Path) -> Iterable[list[dict[str, Any]]]:
    """The record rows a view reads, one shard at a time."""
    for table in iter_tables(dataset_dir, "data"):
        yield _rows(table)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    # Only the columns a view reads: converting the whole record to Python would double the work.
    columns = [c for c in (*_READ_COLUMNS, CONFIDENCE_COLUMN, CHAINS_COLUMN) if c in table.column_names]
    return table.select(columns).to_pylist()


def _count(acc: SplitCounts, row: Row) -> None:
    """Counts of the supervised steps only: what a trainer sees, not what the records hold."""
    steps, labels = supervised_steps(row)
    n = len(steps)
    acc.rows += 1
    acc.steps += n
    acc.bad_steps += labels.count(False)
    for source in (row.get("label_source") or [])[:n]:
        acc.label_sources[source] = acc.label_sources.get(source, 0) + 1
    confidence = row.get(CONFIDENCE_COLUMN) or []
    acc.with_confidence += sum(v is not None for v in confidence[:n])


def _count_chains(acc: SplitCounts, view_rows: list[dict[str, Any]], n_steps: int) -> None:
    """Verifier rows: one per chain; its steps are the steps it gives a verdict on, bad the incorrect ones."""
    for view_row in view_rows:
        verdicts = chain_verdicts(view_row, n_steps)
        acc.rows += 1
        acc.steps += len(verdicts)
        acc.bad_steps += verdicts.count(False)
