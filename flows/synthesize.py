"""The synthesis flow: one Prefect task per shard of problems; the work lives in prm_synth.pipeline.

Shards are submitted through a bounded window, so memory holds at most `run.max_parallel_shards`
shards whatever the dataset size. Finished shards (by manifest marker) are skipped: a re-run of the
same config, scheduled or by hand, redoes only what is missing. A failing shard does not stop the
others; the flow ends failed and names the failed shards.

No `from __future__ import annotations` here: Prefect builds the flow's parameter model from the
annotations, and a flow loaded from its entrypoint (a served or deployed run) cannot resolve them
when they are strings ("SynthesizeModel is not fully defined").
"""

import contextlib
import errno
import itertools
import math
import os
import signal
import socket
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.concurrency.sync import concurrency
from prefect.context import FlowRunContext
from prefect.exceptions import TerminationSignal
from prefect.futures import PrefectFuture

from flows.reporting import (
    ShardProgress,
    active_shard_callback,
    engine_retries,
    engine_totals,
    publish_engine_pictures,
    publish_run_artifacts,
    retries_since,
)
from flows.terminal import progress_line_extra, throttled
from prm_synth.config import PipelineConfig, VLLMConfig
from prm_synth.engines import get_engine, stop_engines
from prm_synth.engines.stream import STOPPING, stream_for
from prm_synth.errors import PrmSynthError
from prm_synth.pipeline import (
    ShardInput,
    ShardOutput,
    UnreadableJudgeError,
    check_judges_readable,
    iter_shards,
    process_shard,
    unreadable_message,
)
from prm_synth.problems.given import problems_in  # a given solution's question too
from prm_synth.problems.sources import count_hint
from prm_synth.products.cost_measure import measure_dry_run
from prm_synth.records import Item
from prm_synth.shard.audit import AuditRun, carried_target, same_model
from prm_synth.shard.open_rows import with_open_rows_finished
from prm_synth.shard.rewrite import ShardRefusedError, plan_shard, write_shard_rows
from prm_synth.simulated.solvable import check_policy_can_solve
from prm_synth.store.layout import ShardEntry, shard_name
from prm_synth.store.limit import keeps_finished, kept_past_limit, recorded_limit
from prm_synth.store.resume import run_fingerprint
from prm_synth.store.shards import ShardStore
from prm_synth.store.summary import RunFacts, RunSummary, summarize

DRY_RUN_PROBLEMS = 32  # the cost estimate's range is a bootstrap over them; 8 missed a 100-problem run's cost
# An empty source is no error (a scheduled run over a folder that is empty today), but it is said.
EMPTY_SOURCE = "the problem source holds no problems (an empty file, or only blank lines): nothing to label"


class ShardsFailedError(PrmSynthError, RuntimeError):
    """Some shards failed; the others are kept, and the next run redoes only the failed ones."""


# The output folder cannot take more (full, over quota, read-only): every later shard would be labeled,
# then lost at its write. The run stops submitting shards, and ends with the disk's error.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def _disk_error(error: object) -> bool:
    return isinstance(error, OSError) and error.errno in DISK_ERRNOS


def _worth_retrying(task: Any, task_run: Any, state: Any) -> bool:
    """A shard whose every request the engine refused is not retried at once: the server refuses what
    is asked, and asking again in ten seconds costs the same for the same answer. Nor is one whose judge
    answered unreadable text: it is written already, its unreadable rows left for the next run."""
    if STOPPING.is_set():  # the run is stopping (a signal): a retry would only wait, then be refused
        return False
    if _disk_error(state.data):  # a full disk is not full for a moment: a retry relabels, then fails again
        return False
    return not isinstance(state.data, ShardRefusedError | UnreadableJudgeError)


@task(
    name="label-shard",
    task_run_name="shard-{shard_index}",
    retries=2,
    # the waits before them are the run's (run.shard_retry_delays_s, set per run in _label_shards)
    retry_condition_fn=_worth_retrying,
    # Resume is the manifest's job; the engine handle is never part of a cache key.
    cache_policy=NO_CACHE,
)
def label_shard(
    config: PipelineConfig,
    out_dir: str,
    shard_index: int,
    items: list[Item],
    redo: list[str] | None = None,
    reopen: list[str] | None = None,
    fingerprint: str | None = None,
    certify: float | None = None,
) -> ShardEntry:
    """Label one shard and write it: what to ask (`redo`, `reopen`: shard/rewrite.plan_shard) and how the rows
    made are written with the shard as it was (shard/rewrite.write_shard_rows) are the library's. A shard where
    most judge votes are unreadable is written, then fails the run (`UnreadableJudgeError`, not retried). `fingerprint`: the folder's key (prm_synth.store.resume), the
    config's fingerprint when not given. `certify`: the keep rule's stricter target (`_certify_targets`)."""
    fingerprint = fingerprint or config.fingerprint()
    store = ShardStore(out_dir, fingerprint, config.labeler_revision())
    work = plan_shard(store, shard_index, items, redo or (), reopen or ())
    if work is None:  # changed since the run looked: nothing to merge into, so the shard is redone whole
        raise ShardsFailedError(f"shard {shard_index} changed on disk during the run; the next run redoes it")
    items, open_rows = work.items, work.open_rows
    limit = config.run.gpu_concurrency_limit
    logger = get_run_logger()
    # Where a shard ran (a Ray worker on some node, or this process), for the flow run's logs.
    where = (shard_index, len(items), socket.gethostname(), os.getpid())
    what = "problems refused last time, asked again" if redo else "problems"
    if open_rows:
        what += f" and {len(open_rows)} row(s) left open last time (judge or verifier unreadable)"
    logger.info("shard %d: %d %s on %s (pid %d)", where[0], where[1], what, *where[2:], extra=progress_line_extra())

    def log_progress(message: str) -> None:
        logger.info("shard %d: %s", shard_index, message, extra=progress_line_extra())

    # Where a work pool shares GPUs, a global concurrency limit keeps one engine per GPU busy.
    with concurrency(limit, occupy=1, strict=False) if limit else contextlib.nullcontext():
        engine = get_engine(config.policy)
        judge_engine = get_engine(config.judge.engine) if config.judge else None
        verify_engine = get_engine(config.verify.engine) if config.verify else None
        named = config.audit.judge.engine if config.judge is not None and config.audit.enabled else None
        # an audit judge of its own only where it is another model (else the run's judge answers it)
        other = named is not None and config.judge is not None and not same_model(named, config.judge.engine)
        audit_engine = get_engine(named) if other else None
        for used in (engine, judge_engine, verify_engine, audit_engine):
            if used is not None:  # a run that stops making progress says so, and what it waits on
                stream_for(used).watchdog.after_s = config.run.stall_warning_s
        out = (
            process_shard(
                engine,
                config,
                ShardInput(shard_index, items),
                fingerprint,
                judge_engine,
                progress=throttled(log_progress),
                on_progress=active_shard_callback(shard_index),
                verify_engine=verify_engine,
                audit=AuditRun(audit_engine, certify),
            )
            if items or work.previous is None
            else ShardOutput()
        )
        out = with_open_rows_finished(config, work, out, fingerprint, judge_engine, verify_engine)
    entry = write_shard_rows(store, config, shard_index, work, out)
    # Written first: the rollouts' labels are kept, and the next run asks again for the open rows only.
    check_judges_readable(out, judge_engine, verify_engine, earlier=work.previous.stats if work.previous else None)
    return entry


def _certify_targets(config: PipelineConfig, store: ShardStore, logger: Any) -> Callable[[int], float | None]:
    """ "Label until certified": per shard index, the keep rule's stricter target where the audit of the
    shards at least `run.max_parallel_shards` before it found their labels surely below
    `consensus.target_precision` (shard/audit.carried_target); None where none did. Those shards are
    written when this one is submitted (the window drains the oldest first), whatever order the ones in
    flight finish in, so a run's rows do not depend on timing, and a resumed shard reads what it read."""
    if config.judge is None or config.consensus is None or not config.audit.enabled:
        return lambda index: None

    def target(index: int) -> float | None:
        last = index - config.run.max_parallel_shards
        if last < 0:
            return None
        stricter = carried_target(
            config, [e.stats for i, e in sorted(store.finished(verify=False).items()) if i <= last]
        )
        if stricter is not None:
            logger.warning(
                "shard %d: the audit of the shards before it found their labels below consensus.target_precision; "
                "its keep rule holds them to %.4f (label until certified: fewer rows kept)",
                index,
                stricter,
            )
        return stricter

    return target


def _on_ray() -> bool:
    """Whether this flow run's task runner is Prefect's Ray runner (or ours, built on it). Asked without
    importing prefect_ray: a run on threads never loads it (nor Ray, which it drags in)."""
    context = FlowRunContext.get()
    runner = getattr(context, "task_runner", None)
    return any(cls.__module__.partition(".")[0] == "prefect_ray" for cls in type(runner).__mro__)


def _ray_options(config: PipelineConfig) -> contextlib.AbstractContextManager[Any]:
    """Under Ray, ask for the resources the shard's engine needs (a GPU per tensor-parallel rank)."""
    if not _on_ray():
        return contextlib.nullcontext()
    from prefect_ray.context import remote_options

    gpus = config.run.ray_num_gpus
    if gpus is None:
        gpus = config.policy.tensor_parallel_size if isinstance(config.policy, VLLMConfig) else 0
    return remote_options(num_cpus=1, num_gpus=gpus)


def _source_size(config: PipelineConfig) -> int | None:
    return count_hint(config.problems)


def _expected_shards(config: PipelineConfig, limit: int | None) -> int | None:
    hint = _source_size(config)
    if hint is None:
        return None
    return math.ceil((min(hint, limit) if limit else hint) / config.output.shard_size)


def _dry_run_shards(config: PipelineConfig) -> Iterator[ShardInput]:
    first = next(iter_shards(config, limit=DRY_RUN_PROBLEMS), None)
    if first is not None:
        yield first


@dataclass
class ShardsOutcome:
    """What the shard window did: shards labeled, skipped as already finished, and failed (index -> why)."""

    done: int = 0
    skipped: int = 0
    redone: int = 0  # problems refused by the engine in an earlier run, asked again
    refused_for_good: int = 0  # problems this run found refused on run.refused_runs runs in a row
    unreadable_for_good: int = 0  # rows this run left unreadable on run.refused_runs runs in a row
    failed: dict[int, str] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)  # failed because the engine refused everything
    unreadable: dict[int, UnreadableJudgeError] = field(default_factory=dict)  # written, judge unreadable
    disk: OSError | None = None  # a shard could not be written: the disk is full (no later shard is started)
    # shards whose marker says finished but whose files no longer match it (a run killed between rewriting a
    # file and its marker, as the schema upgrade does): redone whole, and named in the summary
    mismatched: list[int] = field(default_factory=list)


def _open_shards(config: PipelineConfig, limit: int | None, dry_run: bool) -> Iterator[ShardInput]:
    """The shards to label. The problem source is opened here, before anything is written: a broken
    source leaves no folder behind that a corrected config would then be refused from as "another
    config"; and the simulated policy, which cannot solve foreign text, is refused on the first shard."""
    shards = _dry_run_shards(config) if dry_run else iter_shards(config, limit)
    first = next(shards, None)
    if first is None:
        get_run_logger().warning(EMPTY_SOURCE)
        return iter(())
    check_policy_can_solve(config.policy, ((p.id, p.question) for p in problems_in(first.items)))
    return itertools.chain([first], shards)


@contextlib.contextmanager
def _output_folder(out_dir: str, dry_run: bool) -> Iterator[str]:
    """Where the shards go: `out_dir`, or a temporary folder a dry run leaves nothing in."""
    if not dry_run:
        yield out_dir
        return
    with tempfile.TemporaryDirectory(prefix="prm-synth-dry-run-") as tmp:
        yield tmp


@contextlib.contextmanager
def _stops_engines_on_a_signal() -> Iterator[None]:
    """A run in-process (started from Python, a notebook, the test runner) that gets SIGINT (Ctrl-C) or
    SIGTERM while shards run: the engines are stopped before the signal goes on, so the shard threads
    waiting on them return at once (their requests fail with RunStopped, an in-process vLLM engine's
    are aborted) instead of the flow waiting for every request to finish. The CLI's worker stops on its
    own (prm_synth.cli.supervise); there the signal never reaches the flow."""
    try:
        yield
    except (KeyboardInterrupt, TerminationSignal) as e:
        name = signal.Signals(e.signal).name if isinstance(e, TerminationSignal) else signal.SIGINT.name
        stop_engines(f"the run is stopping ({name})")
        raise


def _label_shards(
    config: PipelineConfig,
    target: str,
    shards: Iterator[ShardInput],
    store: ShardStore,
    progress: ShardProgress,
    retry_refused: bool = False,
) -> ShardsOutcome:
    """Submit every unfinished shard through a window of `run.max_parallel_shards` tasks; `retry_refused`:
    ask again the problems refused for good too (`engine_refused_permanent`)."""
    logger = get_run_logger()
    finished = store.finished()
    marked = store.finished(verify=False)  # the markers alone: no file read
    if finished:
        logger.info("resuming: %d shard(s) already finished in %s", len(finished), target)
    window: deque[tuple[int, PrefectFuture[ShardEntry], list[str] | None, list[str] | None]] = deque()
    outcome = ShardsOutcome()
    certify = _certify_targets(config, store, logger)
    label_task = label_shard.with_options(retry_delay_seconds=list(config.run.shard_retry_delays_s))

    def drain_one() -> None:
        index, future, redo, reopen = window.popleft()
        tokens = 0
        try:
            entry = future.result()
            outcome.done += 1
            tokens = entry.stats.tokens
            asked = entry.refusals if redo is None else {p: entry.refusals[p] for p in redo if p in entry.refusals}
            outcome.refused_for_good += sum(1 for n in asked.values() if n == config.run.refused_runs)
            reopened = entry.unreadable if redo is None else {r: entry.unreadable.get(r) for r in reopen or ()}
            outcome.unreadable_for_good += sum(1 for n in reopened.values() if n == config.run.refused_runs)
            logger.info("shard %d finished: %d rows, %d rejected", index, entry.rows, entry.rejected)
        except Exception as e:  # noqa: BLE001 - a failed shard must not stop the others
            outcome.failed[index] = f"{type(e).__name__}: {e}"
            if isinstance(e, ShardRefusedError):
                outcome.refused[index] = str(e)
            if isinstance(e, UnreadableJudgeError):
                outcome.unreadable[index] = e
            if _disk_error(e) and outcome.disk is None:
                outcome.disk = e  # type: ignore[assignment]
            logger.error("shard %d failed: %s", index, outcome.failed[index])
        progress.advance(tokens, shard_index=index)

    for shard in shards:
        if outcome.disk is not None or STOPPING.is_set():  # a full disk, or a stop: no further shard starts
            break
        entry = finished.get(shard.index)
        if entry is None and shard.index in marked:
            outcome.mismatched.append(shard.index)
            logger.warning("shard %d: its files do not match its marker: redone whole", shard.index)
        redo: list[str] | None = None
        reopen: list[str] | None = None
        if entry is not None and entry.problems > len(shard.items):
            # This run's --limit cuts a finished shard: it is kept byte for byte (store/limit.py), its
            # refused problems and open rows included (a run without the limit asks them again).
            outcome.skipped += 1
            progress.advance(entry.stats.tokens, resumed=True)
            continue
        # A shard cut short by an earlier --limit holds fewer problems than now: it is redone.
        if entry is not None and keeps_finished(entry, len(shard.items)):
            # Problems the engine refused are not done: only they are asked again, the rest is kept; so
            # are rows whose judge (or verifier) could not be read: only they are judged again.
            redo = sorted(store.refused_problems(entry, permanent=retry_refused))
            reopen = sorted(store.open_rows(entry, permanent=retry_refused))
            if not redo and not reopen:
                outcome.skipped += 1
                progress.advance(entry.stats.tokens, resumed=True)
                continue
            outcome.redone += len(redo) + len(reopen)
            if redo:
                logger.info(
                    "shard %d: %d problem(s) the engine refused last time are asked again", shard.index, len(redo)
                )
            if reopen:
                logger.info("shard %d: %d row(s) left open last time are judged again", shard.index, len(reopen))
        if len(window) >= config.run.max_parallel_shards:
            drain_one()
        if outcome.disk is not None:  # the disk is full: a shard labeled now could not be written either
            logger.error("the output folder cannot take more (%s): no further shard is started", outcome.disk)
            break
        with _ray_options(config):
            future = label_task.submit(
                config, target, shard.index, shard.items, redo, reopen, store.fingerprint, certify(shard.index)
            )
        window.append((shard.index, future, redo, reopen))
    while window:
        drain_one()
    return outcome


@flow(name="prm-synth-synthesize", log_prints=True)
def synthesize(
    config: PipelineConfig,
    out_dir: str,
    limit: int | None = None,
    overwrite: bool = False,
    dry_run: bool = False,
    show_progress: bool = False,
    retry_refused: bool = False,
) -> RunSummary:
    """Label every problem of `config` into `out_dir`, resuming whatever a previous run finished.

    dry_run: label one small shard end to end in a temporary folder; nothing final is written.
    retry_refused: ask again the problems the engine refused on run.refused_runs runs in a row.
    """
    started = time.time()
    shards = _open_shards(config, limit, dry_run)
    engines_before, retries_before = engine_totals(), engine_retries()  # this run's share of the engines
    config_dump = config.model_dump(mode="json")
    with _output_folder(out_dir, dry_run) as target:
        # The folder's key: the config's fingerprint, or the one an earlier rule gave the same rows.
        fingerprint = run_fingerprint(config, target)
        store = ShardStore(target, fingerprint, config.labeler_revision(), rows_fingerprint=config.fingerprint())
        store.prepare(config_dump, yaml.safe_dump(config_dump, sort_keys=False), overwrite=overwrite)
        expected = 1 if dry_run else _expected_shards(config, limit)
        progress = ShardProgress(expected, show_progress and sys.stderr.isatty())
        progress.activate()
        with _stops_engines_on_a_signal():
            outcome = _label_shards(config, target, shards, store, progress, retry_refused)
        progress.close()  # on an exception (Ctrl-C), the command closes it: close_active_progress
        held = store.finished(verify=False).values()
        store.write_manifest(config_dump, limit=None if dry_run else recorded_limit(limit, held, _source_size(config)))

        summary = summarize(target)
        cost_sample = _measure_cost(config, target, engines_before) if dry_run else None
        if not (outcome.done or outcome.skipped or outcome.failed or outcome.redone):
            summary.warnings.append(EMPTY_SOURCE)
        if outcome.mismatched:
            names = ", ".join(shard_name(i) for i in outcome.mismatched)
            summary.warnings.append(
                f"{names}: the files no longer matched the shard's marker (a run killed while rewriting them, "
                "as the upgrade to today's columns does, or files changed by hand): redone whole"
            )
        if outcome.refused_for_good:
            summary.warnings.append(
                f"{outcome.refused_for_good} problem(s) the engine refused on {config.run.refused_runs} runs in a "
                "row are now rejected for good (engine_refused_permanent) and will not be asked again; "
                "`prm-synth run --retry-refused` asks them once more"
            )
        if outcome.unreadable_for_good:
            summary.warnings.append(
                f"{outcome.unreadable_for_good} row(s) whose judge (or verifier) answers could not be read on "
                f"{config.run.refused_runs} runs in a row are now recorded for good (judge_unreadable_permanent, "
                "verify_unreadable_permanent) and will not be asked again; `prm-synth run --retry-refused` asks "
                "them once more"
            )
        summary.run = RunFacts(
            started_at=started,
            wall_seconds=round(time.time() - started, 3),
            shards_run=outcome.done,
            shards_skipped=outcome.skipped,
            shards_failed=sorted(outcome.failed),
            requests_retried=retries_since(retries_before),
            dry_run=dry_run,
            kept_past_limit=None if dry_run else kept_past_limit(held, limit, config.output.shard_size),
            cost_sample=cost_sample,
        )
        publish_run_artifacts(summary, config)
        if not dry_run:
            try:
                publish_engine_pictures(target, engines_before, config)
            except OSError as e:  # best effort: a disk that fills here must not fail a run whose data is complete
                get_run_logger().warning(
                    "the engine telemetry pictures were not saved in %s/telemetry (%s); the dataset is complete",
                    target,
                    e.strerror or e,
                )
    if outcome.disk is not None:  # the command says it in one line (the disk's words, how to resume)
        raise outcome.disk
    if outcome.failed and outcome.unreadable.keys() == outcome.failed.keys():
        # One cause, said once: the judge named, one of its answers shown (the shards are written).
        said = unreadable_message(outcome.unreadable[i] for i in sorted(outcome.unreadable))
        raise ShardsFailedError(f"{len(outcome.unreadable)} shard(s) written with rows left open: {said}")
    if outcome.failed and outcome.refused.keys() == outcome.failed.keys():
        # One cause, said once: the server's words, not one copy per shard.
        first = outcome.refused[min(outcome.refused)]
        raise ShardsFailedError(f"{len(outcome.refused)} shard(s) made nothing: {first}")
    if outcome.failed:
        details = "; ".join(f"shard {i}: {msg}" for i, msg in sorted(outcome.failed.items()))
        raise ShardsFailedError(f"{len(outcome.failed)} shard(s) failed and will be redone on the next run: {details}")
    return summary


def _measure_cost(config: PipelineConfig, target: str, before: dict[int, Any]) -> dict[str, Any] | None:
    """What a dry run measured for the cost estimate, read before its temporary folder goes."""
    try:
        return measure_dry_run(config, target, before).to_dict()
    except PrmSynthError as e:  # best effort: the dry run's summary stands without an estimate
        get_run_logger().warning("no cost estimate: %s", e)
        return None


def synthesize_with_runner(runner: str = "threads", ray_address: str | None = None) -> Any:
    """The flow with the requested task runner: a thread pool (default) or a Ray cluster."""
    if runner == "threads":
        return synthesize
    if runner == "ray":
        from flows.ray_runner import FlowServerRayTaskRunner

        return synthesize.with_options(task_runner=FlowServerRayTaskRunner(address=ray_address))
    raise ValueError(f"unknown runner {runner!r} (threads or ray)")
