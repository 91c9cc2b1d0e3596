"""`prm-synth inspect` and `prm-synth show`: look at a finished run in the terminal.

Text of the dataset (model output, questions, answers) is shown literally: as rich `Text`, never parsed
as markup (a step holding `[/INST]` or `[a, b]` is shown as written), with control characters shown
as escapes (a model's escape sequence cannot retitle or clear the terminal).

`inspect` prints the run's counts and label statistics as a table (`--json` for scripts); `show` prints
rows to audit step by step (picked and drawn by `show_rows.py`: the first ones, by id, a seeded random
sample, the rejected ones; `--json` as stored), with each step's label, how it was obtained, its MC
counts and `p_good`, and what the row cost, so a researcher can read the labels before training on them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from prm_synth.cli.common import fail, guarded, visible
from prm_synth.cli.show_rows import first_error_words

__all__ = ["first_error_words", "inspect", "register", "show"]

if TYPE_CHECKING:
    from prm_synth.store.summary import RunSummary


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
    from prm_synth.store.summary_text import summary_lines

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
    n: Annotated[int, typer.Option("--n", "-n", min=1, help="How many rows (the first ones).")] = 3,
    bad: Annotated[bool, typer.Option("--bad", help="Only rows with a bad step.")] = False,
    ids: Annotated[
        list[str] | None,
        typer.Option("--id", help="The row with this id, or every row of this problem id (repeatable)."),
    ] = None,
    random_n: Annotated[
        int | None,
        typer.Option("--random", min=1, help="N rows drawn at random (the same for the same --seed), not the first."),
    ] = None,
    seed: Annotated[int, typer.Option(help="With --random: the seed of the draw.")] = 0,
    rejected: Annotated[
        bool, typer.Option("--rejected", help="Rejected rows instead: stage, reason, detail and the row as labeled.")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Each row as stored, one JSON object a line (nothing cut).")
    ] = False,
) -> None:
    """Rows to audit, step by step: labels, how each was found, MC counts, p_good, cost, why ungradable."""
    from prm_synth.cli.show_rows import json_lines, pick_rows, renderables
    from prm_synth.store.lock import reading

    with reading(directory):
        rows = pick_rows(directory, n=n, bad=bad, ids=ids or (), random_n=random_n, seed=seed, rejected=rejected)
    if json_out:
        for line in json_lines(rows):
            typer.echo(line)
        return
    console = Console()
    for shown in renderables(rows):
        console.print(shown)


def literal(text: object, style: str = "") -> Text:
    """Dataset text for the terminal: no markup, no emoji codes, control characters made visible."""
    return Text(visible(text), style=style)
