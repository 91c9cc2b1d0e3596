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
GenPRM), one per distinct kept verification chain of a record (prm_synth/verify.py), with the
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
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from prm_synth.annotate.labels import confident_labels
from prm_synth.prompts import VERIFY_SYSTEM, render_verify_prompt
from prm_synth.shards import iter_tables
from prm_synth.verify import parse_chain

STEP_TAG = "ки"  # Math-Shepherd's step tag; also OpenRLHF's placeholder token in its Math-Shepherd example
QWEN_STEP_TOKEN = "<extra_0>"  # Qwen2.5-Math-PRM scores the hidden state at this token after each step
# The system prompt of Qwen2.5-Math-PRM's documented usage (its model card).
QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
SPLITS = ("train", "test")
DEFAULT_MAX_ROWS_PER_FILE = 100_000

Row = Mapping[str, Any]


class SkipRow(ValueError):
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
    doubtful one. Rows of methods without `p_good` keep no label at a threshold above 0."""
    if min_confidence <= 0.0:
        return row
    return {**row, "labels": confident_labels(row["labels"], row.get("p_good"), min_confidence)}


# Soft targets: the float a step is trained toward instead of its good/bad label. `p_good` is the
# changepoint search's posterior that the prefix is still correct; `mc` is Math-Shepherd's soft label,
# the share of rollouts from the prefix that reached the answer (`mc_values`).
SOFT_SOURCES = {"p_good": "p_good", "mc": "mc_values"}
SOFT_VIEWS = ("trl", "openrlhf")  # the others carry labels as tokens (+/-) or Qwen's documented 0/1


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

VERIFIER_VIEW = "verifier"
VIEWS: dict[str, Callable[..., dict[str, Any] | list[dict[str, Any]]]] = {
    "trl": to_trl,
    "math-shepherd": to_math_shepherd,
    "openrlhf": to_openrlhf,
    "qwen": to_qwen,
    VERIFIER_VIEW: to_verifier,
}
# The views whose text carries a placeholder after each step, so its tokenization must be checked.
MARKED_VIEWS = ("math-shepherd", "openrlhf")
# The views that cannot be trained on without knowing the consumer's tokenizer (see consumers.py).
TOKENIZER_REQUIRED = ("openrlhf", "qwen")

# Fixed Parquet schemas: every file of a view has the same columns even when a shard is empty.
VIEW_SCHEMAS: dict[str, pa.Schema] = {
    "trl": pa.schema(
        [
            pa.field("prompt", pa.string()),
            pa.field("completions", pa.list_(pa.string())),
            pa.field("labels", pa.list_(pa.bool_())),
            *_ID_FIELDS,
        ]
    ),
    "math-shepherd": pa.schema([pa.field("input", pa.string()), pa.field("label", pa.string()), *_ID_FIELDS]),
    "openrlhf": pa.schema([pa.field("input", pa.string()), pa.field("value", pa.list_(pa.string())), *_ID_FIELDS]),
    "qwen": pa.schema(
        [
            pa.field("system", pa.string()),
            pa.field("query", pa.string()),
            pa.field("response", pa.list_(pa.string())),
            pa.field("labels", pa.list_(pa.int64())),
            *_ID_FIELDS,
        ]
    ),
    VERIFIER_VIEW: pa.schema(
        [
            pa.field("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            *_ID_FIELDS,
        ]
    ),
}

# The PRM views (step labels); the verifier view is asked for by name or made by default from runs with chains.
VIEW_NAMES: tuple[str, ...] = tuple(v for v in VIEWS if v != VERIFIER_VIEW)
_SOFT_LABELS = {"trl": "labels", "openrlhf": "value"}


def view_schema(fmt: str, soft: str | None = None) -> pa.Schema:
    """A view's Parquet schema; with soft targets its label column holds floats."""
    schema = VIEW_SCHEMAS[fmt]
    if soft is None:
        return schema
    column = _SOFT_LABELS[fmt]
    return schema.set(schema.get_field_index(column), pa.field(column, pa.list_(pa.float64())))


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
) -> dict[str, Any]:
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
    if soft is not None and (fmt not in SOFT_VIEWS or soft not in SOFT_SOURCES):
        raise ValueError(f"soft targets ({soft}) go to the {' and '.join(SOFT_VIEWS)} views only, not {fmt}")
    view, schema = VIEWS[fmt], view_schema(fmt, soft)
    folder = Path(out_dir) / fmt
    folder.mkdir(parents=True, exist_ok=True)
    _clear_view_folder(folder)
    splits = SPLITS if test_fraction > 0 else ("train",)
    writers = {s: _SplitWriter(folder, s, schema, max_rows_per_file) for s in splits}
    stats = {s: _empty_counts() for s in splits}
    skipped: Counter[str] = Counter()
    example: dict[str, Any] | None = None
    try:
        for table in iter_tables(dataset_dir, "data"):
            out: dict[str, list[dict[str, Any]]] = {s: [] for s in splits}
            # A problem lives in exactly one shard, so per-shard sets count problems with flat memory.
            problems: dict[str, set[str]] = {s: set() for s in splits}
            for raw in _rows(table):
                base = raw if soft is None else with_soft_targets(raw, soft)
                row = base if fmt == VERIFIER_VIEW else with_min_confidence(base, min_confidence)
                try:
                    made = view(row, marker)
                except SkipRow as e:
                    skipped[_skip_reason(e.reason, raw, base, row)] += 1
                    continue
                view_rows = made if isinstance(made, list) else [made]
                split = split_of(row["problem_id"], test_fraction, seed)
                out[split] += view_rows
                example = example or view_rows[0]
                problems[split].add(row["problem_id"])
                if fmt == VERIFIER_VIEW:
                    _count_chains(stats[split], view_rows, len(row["steps"]))
                    continue
                _count(stats[split], row)
                stats[split]["steps_before_confidence"] += len(supervised_steps(base)[0]) if row is not base else 0
            for split, rows in out.items():
                stats[split]["problems"] += len(problems[split])
                if rows:
                    writers[split].write(pa.Table.from_pylist(rows, schema=schema))
        files = {s: [f"{fmt}/{name}" for name in w.finish()] for s, w in writers.items()}
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    return {
        "view": fmt,
        "columns": schema.names,
        "splits": {s: {**st, "files": files[s], "num_bytes": writers[s].num_bytes} for s, st in stats.items()},
        "rows": sum(st["rows"] for st in stats.values()),
        "skipped": dict(skipped),
        "data_files": {s: f"{fmt}/{s}-*" for s in splits},
        "marker": marker.as_dict() if fmt in MARKED_VIEWS else None,
        "min_confidence": min_confidence,
        "soft": soft,
        "example": example,
    }


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


def _empty_counts() -> dict[str, Any]:
    return {
        "rows": 0,
        "problems": 0,
        "steps": 0,
        "bad_steps": 0,
        "label_sources": {},
        "with_confidence": 0,
        "steps_before_confidence": 0,  # supervised steps of the kept rows without the confidence filter
    }


def _count(acc: dict[str, Any], row: Row) -> None:
    """Counts of the supervised steps only: what a trainer sees, not what the records hold."""
    steps, labels = supervised_steps(row)
    n = len(steps)
    acc["rows"] += 1
    acc["steps"] += n
    acc["bad_steps"] += labels.count(False)
    sources = acc["label_sources"]
    for source in (row.get("label_source") or [])[:n]:
        sources[source] = sources.get(source, 0) + 1
    confidence = row.get(CONFIDENCE_COLUMN) or []
    acc["with_confidence"] += sum(v is not None for v in confidence[:n])


def _count_chains(acc: dict[str, Any], view_rows: list[dict[str, Any]], n_steps: int) -> None:
    """Verifier rows: one per chain; its steps are the steps it gives a verdict on, bad the incorrect ones."""
    for view_row in view_rows:
        verdicts = chain_verdicts(view_row, n_steps)
        acc["rows"] += 1
        acc["steps"] += len(verdicts)
        acc["bad_steps"] += verdicts.count(False)
