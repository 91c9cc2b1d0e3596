"""`prm-synth export DIR`: trainer-ready views of a finished dataset, to a folder or the Hugging Face Hub.

There is deliberately no --token option: a token on the command line ends up in shell history and
process lists. The Hub token comes from HF_TOKEN or `huggingface-cli login`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prm_synth.cli.common import fail, guarded
from prm_synth.export.views import VIEWS

if TYPE_CHECKING:
    from prm_synth.export.hub import ExportPlan, ExportResult

# Why a view left a row out (export/rows.py's SkipRow reasons, export/writing.py's _skip_reason), in words.
SKIP_WORDS = {
    "no_labeled_steps": "first step unlabeled",
    "no_soft_target": "first step without a soft target",
    "below_min_confidence": "first label below --min-confidence",
    "marker_in_text": "step marker in the text",
    "not_verified": "not verified",
    "no_kept_chain": "no kept chain",
    "unreadable_chain": "unreadable chain",
}


def register(app: typer.Typer) -> None:
    app.command("export")(guarded(export))


def export(
    directory: Annotated[Path, typer.Argument(help="A finished output folder of `prm-synth run`.")],
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            "-f",
            help=f"View to export (repeatable): {', '.join(VIEWS)}. Default: all PRM views with --tokenizer, "
            "else those that do not need one; and verifier (chat SFT rows) when the run made verification chains.",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="Tokenizer of the model you will train (Hub name, folder or tokenizer.json): every row is checked "
            "as its trainer tokenizes it, and a step marker that is one token is chosen. Needed for openrlhf, qwen."
        ),
    ] = None,
    marker: Annotated[
        str | None, typer.Option(help="Step placeholder to use instead of searching for one (checked; --tokenizer).")
    ] = None,
    min_confidence: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Leave out labels whose probability (p_good; the consensus's where it set the label) is below this "
            "(default: the run's labels.min_confidence); "
            "a row stops before its first doubtful step. Rows of methods without p_good keep no label above 0.",
        ),
    ] = None,
    soft: Annotated[
        bool,
        typer.Option(
            "--soft",
            help="Soft targets: each step's label is a float (its probability, p_good: the consensus's where it set "
            "the label, >= 0.5 exactly where the label is good; or the MC value) in the trl and openrlhf "
            "views, for trainers that read float labels (OpenRLHF's PRMLoss); see --soft-from.",
        ),
    ] = False,
    soft_from: Annotated[
        str,
        typer.Option(help="With --soft: p_good, mc (mc_values, Math-Shepherd's soft label), or auto (p_good if any)."),
    ] = "auto",
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
    plots: Annotated[
        bool,
        typer.Option("--plots", help="Also pictures of the data (PNG, in plots/), linked from the card."),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Export views (TRL, Math-Shepherd, OpenRLHF, Qwen, verifier) as Parquet with a dataset card."""
    from prm_synth.export.hub import export_to_dir, export_to_hub, plan_export
    from prm_synth.store.lock import reading

    if (to_dir is None) == (repo_id is None):
        fail("give exactly one of --to-dir OUT and --repo-id ORG/NAME")
    if private and repo_id is None:
        fail("--private applies to --repo-id only")
    if soft_from != "auto" and not soft:
        fail("--soft-from applies to --soft only")
    # One snapshot: no run writes the folder while its views are made (every view the same rows).
    with reading(directory):
        # Every check (views, tokenizer, marker) before anything is written or a repo is created.
        plan = plan_export(
            directory,
            formats or None,
            tokenizer,
            marker,
            min_confidence,
            soft_from if soft else None,
            progress=lambda line: typer.echo(f"{line}...", err=True),  # a large run's checks take a while
        )
        # The Hub's errors (HubExportError) come scrubbed of the token.
        options = {"test_fraction": test_fraction, "seed": seed, "license": license, "plan": plan, "plots": plots}
        if to_dir is not None:
            result = export_to_dir(directory, to_dir, **options)
        else:
            assert repo_id is not None
            result = export_to_hub(directory, repo_id, private=private, **options)
    if json_out:
        typer.echo(json.dumps(result.as_dict(), sort_keys=True, default=str))
        return
    _print_export(result, plan, repo_id, to_dir)


def _print_export(result: ExportResult, plan: ExportPlan, repo_id: str | None, to_dir: Path | None) -> None:
    """What was exported, as text: each view's rows per split, its token check, and how to load it."""
    where = f"https://huggingface.co/datasets/{repo_id}" if repo_id else str(to_dir)
    for name, view in result.views.items():
        rows = ", ".join(f"{split} {s.rows}" for split, s in view.splits.items())
        why = ", ".join(f"{SKIP_WORDS.get(reason, reason)} {n}" for reason, n in sorted(view.skipped.items()))
        typer.echo(f"{name:<14} {rows}" + (f"  (skipped {sum(view.skipped.values())}: {why})" if why else ""))
    for name, check in result.token_checks.items():
        typer.echo(
            f"{name:<14} {check['labels_found']}/{check['labels']} labels found by its trainer's tokenization, "
            f"{check['tokens_per_row_mean']} tokens a row (max {check['tokens_per_row_max']})"
        )
    if plan.soft:
        typer.echo(f"soft targets from {plan.soft} (floats in place of labels)")
    if result.tokenizer:
        # The marker only where a view puts it in the text (math-shepherd, openrlhf): qwen and trl have none.
        marked = any(VIEWS[name].marked for name in result.views)
        typer.echo(
            f"checked with tokenizer {result.tokenizer}"
            + (f'; step marker "{result.marker.shown()}"' if marked else "")
        )
    typer.echo(f"\nwrote {len(result.files)} files to {where}")
    typer.echo(f"load: datasets.load_dataset({str(repo_id or to_dir)!r}, {next(iter(result.views))!r})")
