"""Every row of a view read by its consumer with the trainer's tokenizer, and the step marker chosen so.

Where the default marker (" ки", Math-Shepherd's) is not one token in context, `choose_marker` tries
other markers and keeps the first that every row passes, or raises `TokenizationError` naming what
it tried, before anything is written. How each consumer reads a row is the view's own
(`View.read_as_consumer`, mirroring prm_synth.export.consumers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prm_synth.export.consumers import TokenizationError, ViewCheck, tokenizer_name
from prm_synth.export.rows import DEFAULT_MARKER, Marker, SkipRow, with_soft_targets
from prm_synth.export.views import VIEWS
from prm_synth.export.writing import iter_record_rows

# Tried in order after the default: rare in mathematical text, one token in many vocabularies
# standalone. A newline before the placeholder keeps byte-level BPE from merging it with what precedes.
PLACEHOLDERS = ("ки", "§", "¶", "∎", "■", "※", "⊢")
GLUES = (" ", "\n")


def check_view(
    fmt: str,
    tokenizer: Any,
    shards: Iterable[Sequence[Mapping[str, Any]]],
    marker: Marker = DEFAULT_MARKER,
    stop_at_first: bool = True,
    soft: str | None = None,
) -> ViewCheck:
    """Every row view `fmt` would write (with soft targets from `soft`), read by its consumer with `tokenizer`."""
    view = VIEWS[fmt]
    check = ViewCheck(fmt, view.consumer)
    tokenizer, notes = view.consumer_tokenizer(tokenizer)
    check.notes += notes
    for rows in shards:
        for row in rows:
            if soft is not None:
                row = with_soft_targets(row, soft)
            try:
                view_rows = view.build(row, marker)
            except SkipRow:
                continue  # export_view skips it too, and counts it
            n_labels = view.labels_in(row)
            for view_row in view_rows:
                try:
                    tokens, found = view.read_as_consumer(tokenizer, view_row, n_labels, marker)
                except TokenizationError as e:
                    check.add(0, n_labels, 0)
                    check.failure = check.failure or f"row {row['id']}: {e}"
                    if stop_at_first:
                        return check
                    continue
                check.add(tokens, n_labels, found)
    return check


def _describe(marker: Marker) -> str:
    return repr(marker.glue + marker.placeholder)


def choose_marker(
    dataset_dir: str | Path,
    views: Sequence[str],
    tokenizer: Any,
    placeholder: str | None = None,
) -> tuple[Marker, list[dict[str, str]]]:
    """The first marker whose placeholder the consumers of `views` find once per label in every row.

    With `placeholder` given only it is tried (after a space, then on a line of its own). Returns
    (marker, the candidates refused and why); raises TokenizationError when none passes.
    """
    marked = [v for v in views if VIEWS[v].marked]
    placeholders = [placeholder] if placeholder else list(PLACEHOLDERS)
    candidates = [Marker(p, g) for p in placeholders for g in GLUES]
    refused: list[dict[str, str]] = []
    if not marked:
        return candidates[0], refused
    for candidate in candidates:
        failure = None
        for fmt in marked:
            check = check_view(fmt, tokenizer, iter_record_rows(dataset_dir), candidate)
            if not check.ok:
                failure = f"{fmt}: {check.failure or 'labels missing'}"
                break
        if failure is None:
            return candidate, refused
        refused.append({"marker": _describe(candidate), "reason": failure})
    tried = "; ".join(f"{r['marker']} ({r['reason']})" for r in refused)
    raise TokenizationError(
        f"no step marker is one token in context for tokenizer {tokenizer_name(tokenizer)}, so "
        f"{' and '.join(marked)} would lose labels. Tried {tried}. Pass --marker with a token of this "
        "tokenizer that never occurs in the data (an unused special token, say), or export without those views."
    )


def verify_views(
    dataset_dir: str | Path,
    views: Sequence[str],
    tokenizer: Any,
    marker: Marker,
    soft: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every view checked in full (all rows); TokenizationError naming the first row a consumer misreads.
    `progress`: told of each view before its check (tokenizing every row takes a while on a large run)."""
    checks = {}
    for fmt in views:
        if progress is not None:
            progress(f"checking the {fmt} view: every row, with its trainer's tokenization")
        check = check_view(fmt, tokenizer, iter_record_rows(dataset_dir), marker, stop_at_first=False, soft=soft)
        if not check.ok:
            raise TokenizationError(
                f"view {fmt}: {VIEWS[fmt].consumer} finds {check.found} of {check.labels} labels with tokenizer "
                f"{tokenizer_name(tokenizer)} ({check.failure})"
            )
        checks[fmt] = check.as_dict()
    return checks
