"""Every vocabulary word the code writes is declared once, in schema.py: reject reasons read from the source."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from prm_synth.records import REJECT_REASONS, UnlabeledReason, labels

ROOT = Path(__file__).resolve().parents[2] / "prm_synth"
# Where each rejecting call takes its reason: schema.reject (5th argument), problems._reject (3rd), the
# one-row closures named `reject` in problems.py (1st of 2), and RejectedRecord(reason=...).
REASON_ARG = {"_reject": 2}


def reasons_in_source() -> set[str]:
    found: set[str] = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            name, args = node.func.id, node.args
            if name == "reject":
                index = 4 if len(args) >= 5 else 0 if len(args) == 2 else None
            else:
                index = REASON_ARG.get(name)
            if index is not None and isinstance(args[index], ast.Constant) and isinstance(args[index].value, str):
                found.add(args[index].value)
            for keyword in node.keywords if name == "RejectedRecord" else []:
                if keyword.arg == "reason" and isinstance(keyword.value, ast.Constant):
                    found.add(keyword.value.value)
    return found


def test_every_reject_reason_in_the_source_is_declared():
    found = reasons_in_source()
    assert {"not_an_object", "empty_solution", "line_too_long"} <= found  # the scan sees the call sites
    assert found <= set(REJECT_REASONS), f"declare in schema.RejectReason: {sorted(found - set(REJECT_REASONS))}"


def test_the_searches_unlabeled_reasons_are_the_schemas():
    names = [labels.AFTER_ERROR, labels.UNDECIDED_BUDGET, labels.UNDECIDED_UNINFORMATIVE]
    names += [
        labels.UNDECIDED_VERDICT,
        labels.UNDECIDED_UNLOCATED,
        "undecided_misfit",  # rows of labeler revisions before 2026-12-05.5 (the model check, removed)
        labels.TOKEN_BUDGET,
        labels.TRUNCATED_THINKING,
        labels.BELOW_TARGET,
    ]  # the verdict's, the change-point search's own, the scheduler's token budget, and soft consensus's
    assert set(names) == set(get_args(UnlabeledReason))
