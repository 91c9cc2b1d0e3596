"""`prm-synth train` and `prm-synth eval prm`: from our data to a PRM, and from a PRM to its ProcessBench score.

Each prints a readable report and, as its last line, one JSON object with the numbers.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from prm_synth.cli.common import guarded


def register(app: typer.Typer) -> None:
    from prm_synth.cli.eval import eval_app

    app.command("train")(guarded(train))
    eval_app.command("prm")(guarded(eval_prm))


@contextlib.contextmanager
def _progress_to_stderr(logger_name: str) -> Iterator[None]:
    """The library's progress lines (steps, samples, time left) on stderr while the command works; the
    handler is removed after, so nothing global is left behind (the commands also run in-process, under tests)."""
    log = logging.getLogger(logger_name)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def train(
    source: Annotated[Path, typer.Argument(help="A run folder, or an exported trl / qwen view (folder).")],
    model: Annotated[str, typer.Option(help="Causal-LM checkpoint to start from (folder or Hub name).")],
    out: Annotated[Path, typer.Option(help="Where to save the trained PRM.")],
    max_steps: Annotated[int, typer.Option(help="Optimizer steps (-1: --epochs passes).")] = -1,
    epochs: Annotated[float, typer.Option(min=0.0, help="Passes over the training rows.")] = 1.0,
    lr: Annotated[float, typer.Option(min=0.0, help="Learning rate.")] = 5e-5,
    batch_size: Annotated[int, typer.Option(min=1, help="Rows a device step.")] = 4,
    grad_accum: Annotated[int, typer.Option(min=1, help="Gradient accumulation steps.")] = 1,
    max_length: Annotated[int, typer.Option(min=16, help="Tokens a row (longer rows lose their last steps).")] = 512,
    bf16: Annotated[bool, typer.Option("--bf16", help="bfloat16 mixed precision (GPU).")] = False,
    lora: Annotated[
        bool, typer.Option("--lora", help="Train LoRA adapters (needs peft: prm-synth\\[train]); merged on save.")
    ] = False,
    test_fraction: Annotated[
        float, typer.Option(min=0.0, max=0.99, help="Run folder only: share of problems held out.")
    ] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed of the split and the trainer.")] = 0,
) -> None:
    """Train a token-classification PRM (labels on the step separators) with transformers' Trainer."""
    from prm_synth.products.train import TrainSettings, train_prm

    settings = TrainSettings(
        max_steps=max_steps,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        grad_accum=grad_accum,
        max_length=max_length,
        bf16=bf16,
        lora=lora,
        test_fraction=test_fraction,
        seed=seed,
    )
    with _progress_to_stderr("prm_synth.products.train"):
        result = train_prm(source, model, out, settings)
    typer.echo(f"trained {result.steps} steps in {result.seconds:.0f} s on {result.train_rows} rows; saved to {out}")
    typer.echo(f"{'step':>6}{'seconds':>10}{'loss':>10}")
    for step, seconds, loss in result.curve:
        typer.echo(f"{step:>6}{seconds:>10.1f}{loss:>10.4f}")

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    typer.echo(
        f"held-out steps ({result.test_rows} rows): accuracy {fmt(result.eval_step_accuracy)} "
        f"(majority {fmt(result.eval_majority_accuracy)}), bad-step F1 {fmt(result.eval_step_f1)}"
    )
    if (only := result.only_one_class()) is not None:
        typer.echo(
            f"note: the model predicts {only!r} for every held-out step (one class), so its F1 says nothing "
            "yet: train longer or on more rows (--max-steps, --epochs); `prm-synth eval prm --tune-on SUBSET` "
            "picks a threshold from its scores instead of 0.5"
        )
    typer.echo(json.dumps(result.as_dict(), sort_keys=True))


def eval_prm(
    model: Annotated[str, typer.Argument(help="A token-classification PRM (folder or Hub name), 2 labels, 1 = good.")],
    processbench: Annotated[
        str, typer.Option(help="ProcessBench: a folder of <subset>.json files, one file, or a Hub name.")
    ] = "Qwen/ProcessBench",
    subset: Annotated[list[str] | None, typer.Option(help="Subset to score (repeatable; default all).")] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="N samples a subset: the first erroneous and correct ones, half each.")
    ] = None,
    threshold: Annotated[float, typer.Option(min=0.0, max=1.0, help="A step below this P(good) is an error.")] = 0.5,
    tune_on: Annotated[
        str | None, typer.Option(help="Tune the threshold on this subset, then apply it to all (reported).")
    ] = None,
    max_length: Annotated[int, typer.Option(min=16, help="Tokens a sample; later steps get no score.")] = 2048,
    batch_size: Annotated[int, typer.Option(min=1, help="Samples a forward pass.")] = 4,
) -> None:
    """A PRM on ProcessBench: first step below the threshold = predicted error; ProcessBench's F1 per subset."""
    from prm_synth.products.prm_eval import evaluate_prm

    with _progress_to_stderr("prm_synth.products.prm_eval"):
        report = evaluate_prm(model, processbench, subset, limit, threshold, tune_on, max_length, batch_size)

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}"

    tuned = f" (tuned on {report['tuned_on']})" if report["tuned_on"] else ""
    typer.echo(f"PRM {model}, threshold {report['threshold']}{tuned}")
    typer.echo(f"{'subset':<15}{'samples':>8}{'error acc':>11}{'correct acc':>13}{'F1':>7}")
    for name, m in report["subsets"].items():
        typer.echo(
            f"{name:<15}{m['n_error'] + m['n_correct']:>8}{pct(m['error_acc']):>11}"
            f"{pct(m['correct_acc']):>13}{pct(m['f1']):>7}"
        )
    if report["note"]:
        typer.echo(f"note: {report['note']}")
    typer.echo(json.dumps(report, sort_keys=True))
