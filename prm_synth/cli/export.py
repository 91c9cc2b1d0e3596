"""`prm-synth export DIR`: trainer-ready views of a finished dataset, to a folder or the Hugging Face Hub.

There is deliberately no --token option: a token on the command line ends up in shell history and
process lists. The Hub token comes from HF_TOKEN or `huggingface-cli login`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from prm_synth.cli.common import fail
from prm_synth.export.views import VIEW_NAMES


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    directory: Annotated[Path, typer.Argument(help="A finished output folder of `prm-synth run`.")],
    formats: Annotated[
        list[str] | None,
        typer.Option("--format", "-f", help=f"View to export (repeatable; default all): {', '.join(VIEW_NAMES)}."),
    ] = None,
    to_dir: Annotated[Path | None, typer.Option("--to-dir", help="Write the Hub repo layout to this folder.")] = None,
    repo_id: Annotated[str | None, typer.Option("--repo-id", help="Push to this Hub dataset repo (ORG/NAME).")] = None,
    private: Annotated[bool, typer.Option("--private", help="Create the Hub repo private.")] = False,
    test_fraction: Annotated[
        float, typer.Option(min=0.0, max=0.99, help="Fraction of problems (not rows) in the test split.")
    ] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed of the problem-id hash that picks the split.")] = 0,
    license: Annotated[
        str | None, typer.Option(help="License for the card (default: from the problem source).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Export views (TRL, Math-Shepherd, OpenRLHF, Qwen) as Parquet with a dataset card."""
    from prm_synth.export.hub import HubExportError, export_to_dir, export_to_hub

    if (to_dir is None) == (repo_id is None):
        fail("give exactly one of --to-dir OUT and --repo-id ORG/NAME")
    chosen = formats or list(VIEW_NAMES)
    unknown = sorted(set(chosen) - set(VIEW_NAMES))
    if unknown:
        fail(f"unknown --format {', '.join(unknown)}; choose from {', '.join(VIEW_NAMES)}")
    if private and repo_id is None:
        fail("--private applies to --repo-id only")
    try:
        if to_dir is not None:
            result = export_to_dir(directory, to_dir, chosen, test_fraction, seed, license=license)
        else:
            assert repo_id is not None
            result = export_to_hub(
                directory,
                repo_id,
                private=private,
                formats=chosen,
                test_fraction=test_fraction,
                seed=seed,
                license=license,
            )
    except FileNotFoundError as e:
        fail(str(e))
    except (HubExportError, ValueError) as e:  # messages from hub are already scrubbed of the token
        fail(str(e), code=1)
    if json_out:
        typer.echo(json.dumps(result, sort_keys=True, default=str))
        return
    where = f"https://huggingface.co/datasets/{repo_id}" if repo_id else str(to_dir)
    for name, view in result["views"].items():
        rows = ", ".join(f"{split} {s['rows']}" for split, s in view["splits"].items())
        skipped = sum(view["skipped"].values())
        typer.echo(f"{name:<14} {rows}" + (f"  (skipped {skipped})" if skipped else ""))
    typer.echo(f"\nwrote {len(result['files'])} files to {where}")
    typer.echo(f"load: datasets.load_dataset({str(repo_id or to_dir)!r}, {next(iter(result['views']))!r})")
