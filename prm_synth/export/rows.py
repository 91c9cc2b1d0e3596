"""One record row as the trainers' formats hold it. All four PRM views share one rule for which steps
are supervised (`supervised_steps`):

    walk the steps in order; an unlabeled step (label null) ends the row before it, a bad step
    (label False) ends the row after it. What is left is zero or more good steps, optionally
    followed by exactly one bad step, the first error.

Why: a label after the first error says nothing reliable. Under the hard rule a later prefix still
holds the error, and its MC value only measures whether the policy happened to recover, so training
on it teaches the model to forgive mistakes. A null label means the step was never measured; a
guess would be worse than leaving it out, and a row cannot skip a step (the later steps sit on top
of it in the text). A row whose first step is unlabeled has nothing to supervise and is skipped.

Step text is stripped of surrounding whitespace: the lossless split keeps each step's newline, and
every format adds its own separator after a step. Here too: the counts a split of a view reports
(`SplitCounts`: the supervised steps a trainer sees, not what the records hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prm_synth.errors import PrmSynthInputError
from prm_synth.export.consumers import (
    QWEN_STEP_TOKEN,
)
from prm_synth.grading.chain import parse_chain
from prm_synth.prompting.prompts import VERIFY_SYSTEM, render_verify_prompt
from prm_synth.records.labels import confident_labels

STEP_TAG = "ки"  # Math-Shepherd's step tag; also OpenRLHF's placeholder token in its Math-Shepherd example


# The system prompt of Qwen2.5-Math-PRM's documented usage (its model card).
QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


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
    """Per step, how sure the row's labels are that its prefix is correct: the labels' final probability
    (`label_probability`)."""
    return label_probability(row)


# The column the soft consensus stores its posterior's P(prefix correct) in, per step (judge/consensus.py).
CONSENSUS_CONFIDENCE_COLUMN = "consensus_p_good"


def label_probability(row: Row) -> list[float | None] | None:
    """Per step, the probability that its prefix is correct as the row's labels finally stand (None where
    nothing gives one), so that p >= 0.5 exactly where the label is good:

    - where the soft consensus ran, its posterior (`consensus_p_good`), which its labels follow;
    - else, for a label the consensus set or changed without a posterior (`agree`, `judge-only`: label
      source `consensus`), the label itself, 1.0 or 0.0: the judge's word is final there;
    - else the labeler's `p_good` (the first-error search's posterior), which its labels follow.

    None for a row with none of them (per-step MC without a judge: its soft label is `mc_values`)."""
    if (posterior := row.get(CONSENSUS_CONFIDENCE_COLUMN)) is not None:
        return posterior
    labels = row["labels"]
    sources = row.get("label_source") or [None] * len(labels)
    p_good = row.get(CONFIDENCE_COLUMN)
    if "consensus" not in sources:
        return p_good
    measured = p_good or [None] * len(labels)
    return [
        (None if label is None else float(label)) if source == "consensus" else p
        for label, source, p in zip(labels, sources, measured, strict=True)
    ]


# Soft targets: the float a step is trained toward instead of its good/bad label. `p_good` is the
# probability the labels give the step's prefix (`label_probability`: the soft consensus's posterior
# where it set the labels, else the first-error search's `p_good`); `mc` is Math-Shepherd's soft label,
# the share of rollouts from the prefix that reached the answer (`mc_values`), as the rollouts measured it.
SOFT_SOURCES = {"p_good": "p_good", "mc": "mc_values"}


def with_soft_targets(row: Row, source: str) -> Row:
    """The row with its soft targets (`soft`) from `source`, and its labels cut where a step has none:
    a view stops before such a step, as before an unlabeled one (no target is guessed)."""
    read = label_probability(row) if source == "p_good" else row.get(SOFT_SOURCES[source])
    values = read or [None] * len(row["labels"])
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


CONFIDENCE_COLUMN = "p_good"  # per-step P(good), where a run computed one; counted when present


CHAINS_COLUMN = "verify_chains"  # kept verification chains, where a run made them (the verifier view)


def count_supervised(acc: SplitCounts, row: Row) -> None:
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


def count_chains(acc: SplitCounts, view_rows: list[dict[str, Any]], n_steps: int) -> None:
    """Verifier rows: one per chain; its steps are the steps it gives a verdict on, bad the incorrect ones."""
    for view_row in view_rows:
        verdicts = chain_verdicts(view_row, n_steps)
        acc.rows += 1
        acc.steps += len(verdicts)
        acc.bad_steps += verdicts.count(False)
