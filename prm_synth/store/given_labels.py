"""The labels a source gave its solutions (`problems.kind: solutions`), and the kept labels against them.

A row made from a given solution carries what its source said (`given_first_error`: the earliest wrong
step, -1 for none; `given_labels`: per-step ratings -1/0/1 where given per step, whose first -1 is the first
error, a neutral 0 being no error). Read as the record schema reads a step's label, a step's prefix is
good before the given first error and bad from it on.

`given_labels` returns them per kept row (the audit's gold for the rows that carry them); `against_given`
measures the kept labels against them: the precision of the good and of the bad labels (over the steps
both label), the share of rows whose first bad label is the given first error, and ProcessBench's metric
(accuracy on erroneous and on correct solutions, and their harmonic mean, F1), where the run's first
error is its first bad label (-1: none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prm_synth.store.readers import iter_tables

GIVEN_COLUMNS = ("given_first_error", "given_labels")


@dataclass(frozen=True)
class GivenLabels:
    """What a source said about one solution."""

    first_error: int  # the earliest wrong step, -1 for none
    ratings: tuple[int, ...] | None = None  # per-step ratings -1/0/1 where given per step

    def step_truth(self, steps: int) -> list[bool]:
        """Per step, whether its prefix is still correct (good) by the given labels."""
        return [self.first_error < 0 or i < self.first_error for i in range(steps)]


def given_labels(root: str | Path) -> dict[str, GivenLabels]:
    """Per kept row (by id) that carries given labels, the labels its source gave; {} where none does
    (a run that sampled its own solutions, or a folder written before the columns existed)."""
    return {row["id"]: given for row, given in _kept_rows(root)}


def _kept_rows(root: str | Path) -> list[tuple[dict[str, Any], GivenLabels]]:
    out = []
    for table in iter_tables(root, "data"):
        if not set(GIVEN_COLUMNS) <= set(table.column_names):
            continue
        cols = table.select(["id", "labels", *GIVEN_COLUMNS]).to_pylist()
        for row in cols:
            if row["given_first_error"] is not None:
                ratings = tuple(row["given_labels"]) if row["given_labels"] is not None else None
                out.append((row, GivenLabels(row["given_first_error"], ratings)))
    return out


def first_bad_label(labels: Sequence[bool | None]) -> int:
    """The run's first error of a row: its first bad label, -1 where it has none."""
    return next((i for i, label in enumerate(labels) if label is False), -1)


def processbench_metric(labels: Sequence[int], predictions: Sequence[int | None]) -> dict[str, Any]:
    """ProcessBench's metric as fractions in [0, 1]; an accuracy over no samples is None. A missing
    prediction (None) is a wrong one."""
    if len(labels) != len(predictions):
        raise ValueError("labels and predictions differ in length")
    err = [(lab, p) for lab, p in zip(labels, predictions, strict=True) if lab != -1]
    cor = [p for lab, p in zip(labels, predictions, strict=True) if lab == -1]
    err_acc = sum(p == lab for lab, p in err) / len(err) if err else None
    cor_acc = sum(p == -1 for p in cor) / len(cor) if cor else None
    if err_acc is None or cor_acc is None:
        f1 = None
    else:
        f1 = 2 * err_acc * cor_acc / (err_acc + cor_acc) if err_acc + cor_acc else 0.0
    return {
        "error_acc": err_acc,
        "correct_acc": cor_acc,
        "f1": f1,
        "n_error": len(err),
        "n_correct": len(cor),
        "no_prediction": sum(p is None for p in predictions),
    }


def compare(rows: Sequence[tuple[Sequence[bool | None], GivenLabels]]) -> dict[str, Any]:
    """The kept labels (one list a row) against the given ones (module doc)."""
    good = [0, 0]  # [agreeing, labeled good]
    bad = [0, 0]
    for labels, given in rows:
        for label, truth in zip(labels, given.step_truth(len(labels)), strict=True):
            if label is True:
                good[0] += truth
                good[1] += 1
            elif label is False:
                bad[0] += not truth
                bad[1] += 1
    firsts = [(first_bad_label(labels), given.first_error) for labels, given in rows]
    return {
        "rows": len(rows),
        "good_precision": good[0] / good[1] if good[1] else None,
        "good_steps": good[1],
        "bad_precision": bad[0] / bad[1] if bad[1] else None,
        "bad_steps": bad[1],
        "first_error_accuracy": sum(p == t for p, t in firsts) / len(firsts) if firsts else None,
        "processbench": processbench_metric([t for _, t in firsts], [p for p, _ in firsts]),
    }


def against_given(root: str | Path) -> dict[str, Any] | None:
    """The kept labels against the given ones, over the kept rows that carry them; None where none does."""
    rows = [(row["labels"], given) for row, given in _kept_rows(root)]
    return compare(rows) if rows else None


def against_given_text(report: dict[str, Any]) -> str:
    """The comparison in words (`inspect`, the run summary, the card)."""

    def share(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    pb = report["processbench"]
    return (
        f"good labels {share(report['good_precision'])} of {report['good_steps']} steps, bad labels "
        f"{share(report['bad_precision'])} of {report['bad_steps']} steps, first error "
        f"{share(report['first_error_accuracy'])} of {report['rows']} rows; ProcessBench F1 {share(pb['f1'])} "
        f"(erroneous {share(pb['error_acc'])} of {pb['n_error']}, correct {share(pb['correct_acc'])} of "
        f"{pb['n_correct']})"
    )
