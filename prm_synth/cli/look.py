"""`prm-synth inspect` and `prm-synth show`: look at a finished run in the terminal.

Text of the dataset (model output, questions, answers) is shown literally: as rich `Text`, never parsed
as markup (a step holding `[/INST]` or `[a, b]` is shown as written), with control characters shown
as escapes (a model's escape sequence cannot retitle or clear the terminal).

`inspect` prints the run's counts and label statistics as a table (`--json` for scripts); `show` prints a
few labeled rows step by step, with each step's label, how it was obtained, its MC counts and `p_good`,
and what the row cost, so a researcher can read the labels before training on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from prm_synth.cli.common import fail, guarded, visible

if TYPE_CHECKING:
    from prm_synth.store.summary import RunSummary

STEP_CHARS = 160  # a step longer than this is cut in `show` (the shards keep it whole)


def register(app: typer.Typer) -> None:
    app.command()(guarded(inspect))
    app.command()(guarded(show))


def inspect(
    directory: Annotated[Path, typer.Argument(help="An output folder of `prm-synth run`.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    plots: Annotated[
        Path | None,
        typer.Option(
            "--plots",
            help="Also write pictures of the data to this folder (PNG): label share by step position, first "
            "error positions, p_good, unlabeled and rejected reasons, cost a row, and the judge's accuracy.",
        ),
    ] = None,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Also estimate what the whole run costs (GPU hours, yield, with ranges), as `run --dry-run` "
            "does, from the shards finished so far and the engine rates the run saved in telemetry/.",
        ),
    ] = False,
) -> None:
    """Counts and label statistics of a dataset."""
    from prm_synth.store.lock import reading
    from prm_synth.store.summary import summarize

    with reading(directory):  # never a folder a run is writing: its counts would not add up
        summary = summarize(directory)
        pictures = _draw(directory, plots) if plots is not None else None
        cost = _estimate(directory) if estimate else None
    if json_out:
        typer.echo(json.dumps(summary.to_dict() | ({"cost": cost[0].to_dict()} if cost else {}), sort_keys=True))
        return
    Console().print(summary_table(summary, str(directory)))
    if cost is not None:
        from prm_synth.products.estimate import estimate_lines

        typer.echo("")
        for line in estimate_lines(*cost):
            typer.echo(line)
    if pictures is not None:
        for path in pictures.written.values():
            typer.echo(f"wrote {path}")
        for file, why in pictures.skipped.items():
            typer.echo(f"not drawn: {file} ({why})")


def _estimate(directory: Path) -> tuple[Any, bool] | None:
    """The cost estimate from a run's finished shards, and whether its policy is the simulated one."""
    from prm_synth.config import validate_config
    from prm_synth.products.estimate import estimate, sample_from_folder
    from prm_synth.store.readers import read_manifest

    config = validate_config(read_manifest(directory).get("config") or {}, str(directory), check_paths=False)
    found = estimate(sample_from_folder(directory, config), config)
    if found is None:
        fail(f"{directory} has no finished shard to estimate from")
    return found, config.policy.kind == "simulated"


def _draw(directory: Path, plots: Path) -> Any:
    from prm_synth.export.plots import draw

    if plots.exists() and not plots.is_dir():
        fail(f"--plots {plots} is a file, not a folder")
    return draw(directory, plots)  # without matplotlib: one error line (PlotsUnavailableError)


def summary_table(summary: RunSummary, title: str) -> Table:
    """The run summary as a two-column table (store.summary.summary_lines; the same figures as `--json`)."""
    from prm_synth.store.summary import summary_lines

    rows = summary_lines(summary)
    table = Table(title=literal(title), show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, literal(value))
    return table


# ---------------------------------------------------------------- show
def show(
    directory: Annotated[Path, typer.Argument(help="An output folder of `prm-synth run`.")],
    n: Annotated[int, typer.Option("--n", "-n", min=1, help="How many rows.")] = 3,
    bad: Annotated[bool, typer.Option("--bad", help="Only rows with a bad step.")] = False,
) -> None:
    """A few labeled rows, step by step: labels, how each was found, MC counts, p_good, cost."""
    from prm_synth.store.lock import reading

    with reading(directory):
        rows = list(islice(pick_rows(directory, bad), n))
    if not rows:
        fail(f"{directory} has no labeled rows" + (" with a bad step" if bad else ""))
    console = Console()
    for row in rows:
        console.print(row_table(row))


def pick_rows(directory: Path, bad: bool) -> Iterator[dict[str, Any]]:
    """Rows in shard order; with `bad`, only those holding a bad label."""
    from prm_synth.store.readers import iter_records, read_manifest

    read_manifest(directory)  # a folder that is not a run fails here, naming it
    for row in iter_records(directory, "data"):
        if not bad or any(label is False for label in row["labels"]):
            yield row


_LABEL = {True: Text("good", style="green"), False: Text("bad", style="bold red"), None: Text("-", style="dim")}


def literal(text: object, style: str = "") -> Text:
    """Dataset text for the terminal: no markup, no emoji codes, control characters made visible."""
    return Text(visible(text), style=style)


def first_error_words(labels: list[bool | None], first: int) -> str:
    """What the labels say about the first error: the first bad label is where the error was found, not
    necessarily where it is when unlabeled steps come before it (the error may lie among them)."""
    if first < 0:
        return "no error found" if all(label is True for label in labels) else "no bad label (some steps unlabeled)"
    open_before = [str(i) for i in range(first) if labels[i] is None]
    if not open_before:
        return f"first error at step {first}"
    return f"first bad label at step {first} (the error may be earlier: step {', '.join(open_before)} unlabeled)"


def row_table(row: Mapping[str, Any]) -> Group:
    """One record: a header line (answer, first error, cost), then a table row per step (text, label,
    its source, MC counts, p_good, why unlabeled) and the question."""
    correct = {True: "right", False: "wrong", None: "ungradable"}[row["final_correct"]]
    first = row["first_error_mc"]
    header = literal(
        f"{row['id']}  answer {row['final_answer']} ({correct}, gold {row['gold_answer']})  "
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
        text = " ".join(step.split())
        total = row["mc_total"][i]
        table.add_row(
            str(i),
            literal(text if len(text) <= STEP_CHARS else text[:STEP_CHARS] + "…"),
            _LABEL[row["labels"][i]],
            literal(row["label_source"][i]),
            f"{row['mc_correct'][i]}/{total}" if total else "-",
            "-" if p_good[i] is None else f"{p_good[i]:.2f}",
            literal(reasons[i] or ""),
        )
    return Group(header, table)
