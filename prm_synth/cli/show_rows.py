"""What `prm-synth show` picks and prints: the rows to audit, step by step, or as JSON.

Picking (`pick_rows`): the first N rows, the rows of given ids (a row id, or a problem id for all its
rows), a random sample seeded so that an audit can be repeated and shared, and the rejected rows with
their reasons. Rendering (`row_table`, `rejected_table`): dataset text is shown literally (never as
markup, control characters as escapes), and a step or answer that spans lines (a code step, a reference
program) keeps its lines instead of being flattened onto one; a long gold answer is printed once a
problem, under its first row, not escaped into every header. A final answer that could not be graded
says why (the grader's reason, `final_unknown_reason`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from prm_synth.cli.common import fail, visible

STEP_CHARS = 160  # a one-line step longer than this is cut in `show` (the shards keep it whole)
CODE_LINES = 24  # a step (or gold answer) of more lines is cut after this many
SHORT_ANSWER = 60  # an answer up to this long, on one line, is shown in the row's header


def literal(text: object, style: str = "", keep: str = "") -> Text:
    """Dataset text for the terminal: no markup, no emoji codes, control characters made visible
    (but those in `keep`: newlines, where text keeps its lines)."""
    return Text(visible(text, keep), style=style)


# ---------------------------------------------------------------- picking
def pick_rows(
    directory: Path,
    *,
    n: int,
    bad: bool = False,
    ids: Iterable[str] = (),
    random_n: int | None = None,
    seed: int = 0,
    rejected: bool = False,
) -> list[dict[str, Any]]:
    """The rows `show` prints, in shard order (module doc); a clear error where none match."""
    from prm_synth.store.readers import iter_records, read_manifest

    read_manifest(directory)  # a folder that is not a run fails here, naming it
    kind = "rejected" if rejected else "data"
    wanted = set(ids)
    if wanted:
        kinds = ("rejected",) if rejected else ("data", "rejected")
        rows = [r for k in kinds for r in iter_records(directory, k) if r["id"] in wanted or r["problem_id"] in wanted]
        found = {r["id"] for r in rows} | {r["problem_id"] for r in rows}
        if missing := sorted(wanted - found):
            where = "rejected rows" if rejected else "rows (labeled or rejected)"
            fail(f"{directory} has no {where} with id {', '.join(missing)} (a row id or a problem id)")
        return rows
    candidates = (r for r in iter_records(directory, kind) if rejected or not bad or False in r["labels"])
    rows = sample(candidates, random_n, seed) if random_n is not None else list(islice(candidates, n))
    if not rows:
        what = "rejected rows" if rejected else "labeled rows" + (" with a bad step" if bad else "")
        fail(f"{directory} has no {what}")
    return rows


def sample(rows: Iterable[dict[str, Any]], k: int, seed: int) -> list[dict[str, Any]]:
    """`k` rows drawn uniformly without replacement (a reservoir: one pass, `k` rows in memory), the
    same for the same folder and seed, returned in shard order."""
    rng = random.Random(seed)
    kept: list[tuple[int, dict[str, Any]]] = []
    for i, row in enumerate(rows):
        if i < k:
            kept.append((i, row))
        elif (j := rng.randrange(i + 1)) < k:
            kept[j] = (i, row)
    return [row for _, row in sorted(kept, key=lambda pair: pair[0])]


def json_lines(rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """Each row as stored, one JSON object a line (a rejected row's `payload` stays the JSON string it is)."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False, sort_keys=True, default=str)


# ---------------------------------------------------------------- rendering
_LABEL = {True: Text("good", style="green"), False: Text("bad", style="bold red"), None: Text("-", style="dim")}


def first_error_words(labels: list[bool | None], first: int) -> str:
    """What the labels say about the first error: the first bad label is where the error was found, not
    necessarily where it is when unlabeled steps come before it (the error may lie among them)."""
    if first < 0:
        return "no error found" if all(label is True for label in labels) else "no bad label (some steps unlabeled)"
    open_before = [str(i) for i in range(first) if labels[i] is None]
    if not open_before:
        return f"first error at step {first}"
    return f"first bad label at step {first} (the error may be earlier: step {', '.join(open_before)} unlabeled)"


def _spans_lines(text: str) -> bool:
    return "\n" in text.strip("\n")


def block(text: str, style: str = "") -> Text:
    """Text that spans lines (code), its lines and indentation kept, cut after CODE_LINES lines."""
    lines = text.strip("\n").split("\n")
    shown = "\n".join(lines[:CODE_LINES])
    if len(lines) > CODE_LINES:
        shown += f"\n… ({len(lines) - CODE_LINES} more lines)"
    return literal(shown, style, keep="\n")


def step_text(step: str) -> Text:
    """A step as it reads: a code step (several lines) as code, a prose step on one line, cut."""
    if _spans_lines(step):
        return block(step)
    text = " ".join(step.split())
    return literal(text if len(text) <= STEP_CHARS else text[:STEP_CHARS] + "…")


def _short(value: object) -> str | None:
    """`value` when it fits a header (one line, short), else None."""
    text = str(value)
    return text if "\n" not in text.strip() and len(text) <= SHORT_ANSWER else None


def _answer_words(row: Mapping[str, Any], gold: str) -> str:
    """The final answer, its verdict (and why it could not be graded) and the gold, for the header."""
    correct = row.get("final_correct")
    if correct is None:
        reason = row.get("final_unknown_reason")
        verdict = f"ungradable: {reason}" if reason else "ungradable"
    else:
        verdict = "right" if correct else "wrong"
    answer = row.get("final_answer")
    if answer is None:
        shown = "none"
    elif (short := _short(answer)) is not None:
        shown = short
    else:
        shown = f"of {len(str(answer).strip().splitlines())} lines"
    return f"answer {shown} ({verdict}, gold {gold})"


def row_table(row: Mapping[str, Any], gold_shown: set[str] | None = None) -> Group:
    """One record: a header line (answer, verdict, first error, cost), then a table row per step (text,
    label, its source, MC counts, p_good, why unlabeled) and the question; a gold answer too long for the
    header follows the table, once a problem (`gold_shown`: the problems whose gold was printed)."""
    gold = str(row["gold_answer"])
    short_gold = _short(gold)
    first = row["first_error_mc"]
    header = literal(
        f"{row['id']}  {_answer_words(row, short_gold if short_gold is not None else 'below')}  "
        f"{first_error_words(row['labels'], first)}  "
        f"cost {row['rollouts']} rollouts, {row['tokens']} tokens",
        style="bold",
    )
    question = " ".join(row["question"].split())
    table = Table(caption=literal(f"Q: {question[: STEP_CHARS * 2]}"), caption_justify="left")
    for name, style in (("#", "dim"), ("step", None), ("label", None), ("source", None), ("MC", None)):
        table.add_column(name, style=style, overflow="fold")
    table.add_column("p_good", justify="right")
    table.add_column("why unlabeled", style="dim", overflow="fold")
    n = len(row["steps"])
    p_good = row.get("p_good") or [None] * n
    reasons = row.get("unlabeled_reason") or [None] * n
    for i, step in enumerate(row["steps"]):
        total = row["mc_total"][i]
        table.add_row(
            str(i),
            step_text(step),
            _LABEL[row["labels"][i]],
            literal(row["label_source"][i]),
            f"{row['mc_correct'][i]}/{total}" if total else "-",
            "-" if p_good[i] is None else f"{p_good[i]:.2f}",
            literal(reasons[i] or ""),
        )
    parts: list[RenderableType] = [header, table]
    shown = gold_shown if gold_shown is not None else set()
    if short_gold is None and row["problem_id"] not in shown:
        shown.add(row["problem_id"])
        parts += [literal(f"gold answer of {row['problem_id']}:", style="bold"), block(gold)]
    return Group(*parts)


def rejected_table(row: Mapping[str, Any], gold_shown: set[str] | None = None) -> Group:
    """One rejected row: where and why it was rejected, then what it was (the labeled row, rendered as
    `row_table` does, where the rejection kept one; else its payload as written)."""
    header = literal(f"{row['id']}  rejected at {row['stage']}: {row['reason']}", style="bold red")
    parts: list[RenderableType] = [header]
    if row.get("detail"):
        parts.append(literal(row["detail"]))
    payload = _payload(row.get("payload"))
    if isinstance(payload, dict) and {"steps", "labels", "mc_total", "label_source"} <= payload.keys():
        parts.append(row_table(payload, gold_shown))
    elif payload is not None:
        text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, indent=2)
        parts.append(block(text, style="dim"))
    return Group(*parts)


def _payload(raw: object) -> Any:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:  # cut to PAYLOAD_CHARS, or not JSON: shown as written
        return raw


def renderables(rows: Iterable[Mapping[str, Any]]) -> Iterator[Group]:
    """Each row for the terminal: a labeled one as `row_table`, a rejected one as `rejected_table`."""
    gold_shown: set[str] = set()
    for row in rows:
        yield rejected_table(row, gold_shown) if "reason" in row and "stage" in row else row_table(row, gold_shown)
