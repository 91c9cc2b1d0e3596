"""`prm-synth eval ...`: how good are a judge, our labeler, and a finished dataset.

Each command prints a readable report and, as its last line, one JSON object with the numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from prm_synth.cli.common import fail, guarded

eval_app = typer.Typer(no_args_is_help=True, help="Measure label quality (ProcessBench metric, simulated truth).")


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _report(
    file: Path, out: Path | None, kind: str, predictions: list[dict[str, Any]], metric: dict[str, Any], lines: list[str]
) -> None:
    """Write the predictions (default: <file stem>.<kind>-predictions.jsonl) and print the report: the
    command's own lines around ProcessBench's metric, then the JSON line."""
    from prm_synth.products.evaluate import format_metric

    out = out or Path(f"{file.stem}.{kind}-predictions.jsonl")
    _write_jsonl(out, predictions)
    for line in (lines[0], format_metric(metric), *lines[1:], f"predictions: {out}"):
        typer.echo(line)
    typer.echo(json.dumps(metric | {"file": str(file), "predictions": str(out)}, sort_keys=True))


def _judge_config(judge: Path | None, model: str | None, max_model_len: int, overrides: dict[str, Any]) -> Any:
    from prm_synth.config import JudgeConfig, VLLMConfig, load_judge_config

    if (judge is None) == (model is None):
        fail("give exactly one of --judge FILE.yaml or --model (a local model folder, or 'demo')")
    if judge is not None:
        config = load_judge_config(judge)
    else:
        assert model is not None
        config = JudgeConfig(engine=VLLMConfig(model=model, max_model_len=max_model_len))
    update = {k: v for k, v in overrides.items() if v is not None}
    return JudgeConfig.model_validate(config.model_dump() | update) if update else config


@eval_app.command("judge")
@guarded
def judge_cmd(
    file: Annotated[
        Path, typer.Argument(help="ProcessBench-format file (.json list or .jsonl): problem, steps, label.")
    ],
    judge: Annotated[
        Path | None, typer.Option(help="Pipeline YAML with a judge section, or a judge section YAML.")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Judge with this vLLM model instead ('demo': the embedded one).")
    ] = None,
    max_model_len: Annotated[
        int, typer.Option(min=256, help="With --model: the context (prompt + answer) in tokens.")
    ] = 2048,
    samples: Annotated[int | None, typer.Option(min=1, help="Override: judge samples per solution.")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Override: tokens per judge sample.")] = None,
    temperature: Annotated[float | None, typer.Option(min=0.0, help="Override: sampling temperature.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N samples.")] = None,
    batch: Annotated[int, typer.Option(min=1, help="Requests per engine call.")] = 256,
    out: Annotated[
        Path | None, typer.Option(help="Predictions file (default: <file stem>.judge-predictions.jsonl).")
    ] = None,
    verifier: Annotated[
        bool,
        typer.Option(
            "--verifier",
            help="A generative verifier trained on the `verifier` export: ask with its prompt and take the first "
            "step its chain finds incorrect as the answer (instead of ProcessBench's critique prompt).",
        ),
    ] = False,
) -> None:
    """A judge on a ProcessBench-format file: ProcessBench's metric and per-sample predictions."""
    from prm_synth.engines import build_engine
    from prm_synth.products.evaluate import evaluate_judge, load_processbench

    bench = load_processbench(file, limit)
    config = _judge_config(
        judge, model, max_model_len, {"samples": samples, "max_tokens": max_tokens, "temperature": temperature}
    )
    engine = build_engine(config.engine)
    try:
        metric, predictions = evaluate_judge(engine, bench, config, batch, verifier=verifier)
    finally:
        engine.close()
    headline = f"judge {metric['judge_model']} on {file} ({len(bench)} samples, {config.samples} votes each)"
    undecided = (
        f"undecided (tie or unreadable): {metric['no_prediction']}  unreadable samples: "
        f"{metric['judge']['unparseable']} of {metric['judge']['samples']}"
    )
    _report(file, out, "judge", predictions, metric, [headline, undecided])


@eval_app.command("labels")
@guarded
def labels_cmd(
    file: Annotated[Path, typer.Argument(help="ProcessBench-format file: problem, steps, label.")],
    gold_answers: Annotated[
        Path, typer.Option(help="Gold answers joined by problem text (GSM8K jsonl: question, answer).")
    ],
    pipeline: Annotated[Path, typer.Option(help="Pipeline YAML: its policy, annotate and labels sections are used.")],
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N samples.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Predictions file (default: <file stem>.label-predictions.jsonl).")
    ] = None,
) -> None:
    """Our labeler (policy + annotator + labeling rule) on a ProcessBench-format file."""
    from prm_synth.config import load_config
    from prm_synth.engines import build_engine
    from prm_synth.problems.gold_answers import load_gold_answers
    from prm_synth.products.evaluate import evaluate_labels, load_processbench
    from prm_synth.simulated.solvable import check_policy_can_solve

    config = load_config(pipeline)
    bench = load_processbench(file, limit)
    gold = load_gold_answers(gold_answers)
    check_policy_can_solve(config.policy, ((s.id, s.problem) for s in bench))  # before an engine starts
    engine = build_engine(config.policy)
    try:
        metric, predictions = evaluate_labels(engine, bench, gold, config)
    finally:
        engine.close()
    per = metric["rollouts_per_sample"]
    headline = f"labeler {metric['annotator']}/{metric['label_rule']} with {metric['policy_model']} on {file}"
    counts = (
        f"labeled {metric['labeled']}, skipped without a gold answer {metric['skipped_no_gold']}, "
        f"rollouts per sample {'n/a' if per is None else f'{per:.1f}'}"
    )
    _report(file, out, "label", predictions, metric, [headline, counts])


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


@eval_app.command("dataset")
@guarded
def dataset_cmd(
    directory: Annotated[Path, typer.Argument(help="An output folder made with the simulated policy.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of the table.")] = False,
) -> None:
    """Bad-label precision/recall of a simulated-policy dataset against the recomputed truth."""
    from prm_synth.products.evaluate import evaluate_dataset
    from prm_synth.store.lock import reading

    with reading(directory):
        report = evaluate_dataset(directory)
    if json_out:
        typer.echo(json.dumps(report, sort_keys=True))
        return
    header = f"{'rows':>7}{'exact':>8}{'fe prec':>9}{'fe rec':>8}{'bad prec':>10}{'bad rec':>9}{'good prec':>11}"
    typer.echo(f"{'':18}{header}")
    for name in ("before_consensus", "after_consensus"):
        q = report[name]
        fe, st = q["first_error_mc"], q["step_labels"]
        typer.echo(
            f"{name:18}{q['rows']:>7}{_fmt(fe['exact_acc']):>8}{_fmt(fe['precision']):>9}"
            f"{_fmt(fe['recall']):>8}{_fmt(st['precision']):>10}{_fmt(st['recall']):>9}{_fmt(st['good_precision']):>11}"
        )
    typer.echo(
        f"kept fraction {_fmt(report['kept_fraction'])}, rollouts per kept row {_fmt(report['rollouts_per_kept_row'])}"
    )
