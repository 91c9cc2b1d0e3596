"""How labels compare with a known first error: precision and recall of the bad labels and of the first
error, against the truth of the simulated world (prm_synth/simulated/arithmetic.py) or of a benchmark's
labels. `eval labels` and `eval dataset` report them (prm_synth/products/evaluate.py), and so does a
dataset card made from a simulated run (prm_synth/export/card_facts.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Confusion:
    """Counts behind precision and recall of "bad" predictions against the truth."""

    predicted: int = 0  # predicted bad
    actual: int = 0  # truly bad
    hit: int = 0  # predicted bad and truly bad (for first errors: at the same index)

    @property
    def precision(self) -> float | None:
        return self.hit / self.predicted if self.predicted else None

    @property
    def recall(self) -> float | None:
        return self.hit / self.actual if self.actual else None

    def as_dict(self) -> dict[str, Any]:
        return {"precision": self.precision, "recall": self.recall} | asdict(self)


def first_error_quality(rows: Iterable[tuple[int | None, int]]) -> dict[str, Any]:
    """(predicted first error, true first error) pairs -> exact accuracy, precision and recall.

    precision: of the rows predicted to hold an error (prediction != -1), the fraction whose index
    is the true one; recall: of the rows that truly hold one, the fraction found at the right index.
    A missing prediction (None) counts against accuracy and recall, never as a positive.
    """
    c, n, exact = Confusion(), 0, 0
    for pred, truth in rows:
        n += 1
        exact += pred == truth
        c.predicted += pred is not None and pred != -1
        c.actual += truth != -1
        c.hit += truth != -1 and pred == truth
    return {"rows": n, "exact_acc": exact / n if n else None} | c.as_dict()


def step_label_quality(rows: Iterable[tuple[Sequence[bool | None], int]]) -> dict[str, Any]:
    """Per-step bad labels against the truth. A step is truly bad when its prefix holds an error
    (index >= the true first error): the hard MC label is a verdict on the prefix. Unlabeled steps
    (None) are left out. `good_precision`: of the steps labeled good, the fraction truly good (a
    trainer is taught both labels, so both precisions matter)."""
    c = Confusion()
    good = good_hit = 0
    for labels, truth in rows:
        for i, label in enumerate(labels):
            if label is None:
                continue
            bad, truly_bad = label is False, truth != -1 and i >= truth
            c.predicted += bad
            c.actual += truly_bad
            c.hit += bad and truly_bad
            good += not bad
            good_hit += not bad and not truly_bad
    return c.as_dict() | {
        "good_precision": good_hit / good if good else None,
        "predicted_good": good,
        "good_hit": good_hit,
    }
