"""What a run shows while and after it works: a progress bar, a progress artifact, summary artifacts,
and the picture of the engine's occupancy and tokens/s over the run."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from rich.console import Console
from rich.progress import Progress

from flows.terminal import LogsAboveTheBar, new_bar
from prm_synth.annotate.labeler import make_labeler
from prm_synth.config import PipelineConfig
from prm_synth.engines import model_name
from prm_synth.engines.stream import streams_now
from prm_synth.store.summary import RunSummary
from prm_synth.store.summary_text import judge_cost_text
from prm_synth.telemetry import ProgressSnapshot, TelemetryTotals, compact, duration, summary_markdown

# The Prefect progress artifact is a server call: at most one update this often (seconds).
ARTIFACT_INTERVAL_S = 5.0


_ACTIVE: ShardProgress | None = None  # the run's progress in this process (set by the flow)


def active_shard_callback(shard_index: int) -> Callable[[ProgressSnapshot], None] | None:
    """What a shard task passes to its scheduler: the running flow's progress, if it is in this process.

    A module-level handle rather than a task parameter: Prefect parameters must be serializable."""
    return _ACTIVE.shard_callback(shard_index) if _ACTIVE is not None else None


def close_active_progress() -> None:
    """Close the run's progress if a flow left it open (an exception, Ctrl-C): the bar stops and the
    log handlers are put back, so what the command prints next lands on a clean terminal."""
    if _ACTIVE is not None:
        _ACTIVE.close()


class ShardProgress:
    """Shards done out of the expected total (None when the source cannot say how many), and what the
    shards in flight are doing: each one's probe scheduler reports a `ProgressSnapshot` every few
    seconds through `shard_callback(index)` (thread-safe), shown per shard and summed for the run in
    the terminal bar (flows.terminal) and in the Prefect progress artifact's description.

    Tokens are the summary's: finished and resumed shards count their stats' `tokens` (sampling,
    rollouts and judge, prompts included); a shard in flight counts its rollouts' tokens so far."""

    def __init__(self, total: int | None, terminal: bool, console: Console | None = None) -> None:
        self.total, self.done = total, 0
        self.started = time.perf_counter()
        self._lock = threading.Lock()
        self._live: dict[int, ProgressSnapshot] = {}  # shards being labeled: their latest snapshot
        self._ending: dict[int, ProgressSnapshot] = {}  # labeled, not yet written: their last snapshot
        self._annotated = self._rollouts = 0  # of shards that finished in this run
        self._tokens = 0  # of shards finished in this run (their stats)
        self._resumed_tokens = 0  # of shards an earlier run finished: in the summary, not in tok/s
        self._resumed_shards = 0  # finished by an earlier run: no part of this run's pace
        self._last_artifact = 0.0
        self.artifact = create_progress_artifact(0.0, description="shards finished or resumed")
        self.bar: Progress | None = None
        self._logs: LogsAboveTheBar | None = None
        self._shard_tasks: dict[int, Any] = {}
        self._closed = False
        if terminal:
            self.bar = new_bar(console)
            self._logs = LogsAboveTheBar(self.bar.console)
            self.task = self.bar.add_task(self._run_description(), total=total)
            self.bar.start()
            self._logs.start()

    def advance(self, tokens: int = 0, resumed: bool = False, shard_index: int | None = None) -> None:
        """A shard is done (`resumed`: an earlier run finished it); `tokens`: its stats' tokens, which
        replace the rollout tokens its last snapshot counted."""
        with self._lock:
            self.done += 1
            self._ending.pop(shard_index, None)
            if resumed:
                self._resumed_tokens += tokens
                self._resumed_shards += 1
            else:
                self._tokens += tokens
        if self.bar:
            self.bar.update(self.task, advance=1, description=self._run_description())
        self._publish(force=True)

    def activate(self) -> None:
        """Make this the run's progress for shard tasks in this process (the thread runner); a task on
        a Ray worker finds none and reports through its log lines only."""
        global _ACTIVE
        _ACTIVE = self

    def shard_callback(self, shard_index: int) -> Callable[[ProgressSnapshot], None]:
        """What a shard's probe scheduler calls with its progress (`ProbeScheduler(on_progress=...)`)."""
        return lambda snapshot: self.update(shard_index, snapshot)

    def update(self, shard_index: int, snapshot: ProgressSnapshot) -> None:
        with self._lock:
            if snapshot.finished:
                self._live.pop(shard_index, None)
                self._ending[shard_index] = snapshot  # its tokens count until its stats do (advance)
                self._annotated += snapshot.annotators_done
                self._rollouts += snapshot.rollouts
            else:
                self._live[shard_index] = snapshot
        if self.bar:
            self._show_shard(shard_index, snapshot)
            self.bar.update(self.task, description=self._run_description())
        self._publish()

    def totals(self) -> tuple[int, int, int, float]:
        """Annotators finished, rollouts and tokens so far (finished and resumed shards plus those in
        flight), and this run's tokens per second (resumed shards' tokens left out)."""
        with self._lock:
            live = list(self._live.values())
            annotated, rollouts, tokens, resumed = self._annotated, self._rollouts, self._tokens, self._resumed_tokens
            tokens += sum(s.tokens for s in self._ending.values())
        tokens += sum(s.tokens for s in live)
        rate = tokens / max(1e-9, time.perf_counter() - self.started)
        return (
            annotated + sum(s.annotators_done for s in live),
            rollouts + sum(s.rollouts for s in live),
            tokens + resumed,
            rate,
        )

    def _engine(self) -> str:
        with self._lock:
            last = next(reversed(self._live.values()), None)
        return f"engine {last.engine_running}/{last.engine_capacity}" if last else ""

    def run_line(self) -> str:
        """The run so far: annotators finished, rollouts, tokens, tokens/s, engine occupancy."""
        annotated, rollouts, tokens, rate = self.totals()
        engine = self._engine()
        return f"{annotated} annotated, {rollouts} rollouts, {tokens} tokens, {rate:.1f} tok/s" + (
            f", {engine} running" if engine else ""
        )

    def fraction(self) -> float:
        """Finished shards plus the finished share of the shards in flight, out of the expected total."""
        if not self.total:
            return 0.0
        with self._lock:
            partial = sum(s.annotators_done / s.annotators_total for s in self._live.values() if s.annotators_total)
            return min(1.0, (self.done + partial) / self.total)

    def time_left(self) -> str:
        """The run's ETA at its pace so far ("" until it has one, or without a known total)."""
        if not self.total:
            return ""
        with self._lock:
            resumed = self._resumed_shards
        done = self.fraction() * self.total
        return time_left(time.perf_counter() - self.started, done - resumed, self.total - done)

    def close(self) -> None:
        """Stop the bar and put the log handlers back (call it in a `finally`: Ctrl-C included)."""
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None
        if self._closed:
            return
        self._closed = True
        if self._logs:
            self._logs.restore()
        if self.bar:
            self.bar.stop()
        with contextlib.suppress(Exception):
            # a run stopped early shows how far it got; without a known total, done is done
            done = 100.0 * self.fraction() if self.total else 100.0
            update_progress_artifact(self.artifact, done, description=self._description())

    def _run_description(self) -> str:
        """The run's bar line, most telling first (the end is cut on a narrow terminal)."""
        _, _, tokens, rate = self.totals()
        engine = self._engine()
        total = "?" if self.total is None else str(self.total)
        left = self.time_left()
        return (
            f"{self.done}/{total} shards, {compact(tokens)} tok, {compact(rate)} tok/s"
            + (f", {left}" if left else "")
            + (f", {engine}" if engine else "")
        )

    def _show_shard(self, shard_index: int, snapshot: ProgressSnapshot) -> None:
        assert self.bar is not None
        task = self._shard_tasks.get(shard_index)
        if snapshot.finished:
            if task is not None:
                self.bar.remove_task(self._shard_tasks.pop(shard_index))
            return
        if task is None:
            task = self._shard_tasks[shard_index] = self.bar.add_task("", total=snapshot.annotators_total)
        self.bar.update(
            task, completed=snapshot.annotators_done, description=f"  shard {shard_index}: {snapshot.short_line()}"
        )

    def _description(self) -> str:
        with self._lock:
            shards = [f"shard {i}: {s.line()}" for i, s in sorted(self._live.items())]
        left = self.time_left()
        return "; ".join([f"{self.done} shard(s) done; {self.run_line()}" + (f"; {left}" if left else ""), *shards])

    def _publish(self, force: bool = False) -> None:
        now = time.perf_counter()
        with self._lock:
            if not force and now - self._last_artifact < ARTIFACT_INTERVAL_S:
                return
            self._last_artifact = now
        with contextlib.suppress(Exception):  # progress is best effort; the run is what matters
            update_progress_artifact(self.artifact, 100.0 * self.fraction(), description=self._description())


def time_left(elapsed_s: float, done: float, left: float) -> str:
    """ "about 4 min 10 s left" at the pace of `done` units in `elapsed_s` ("" before any unit is done, or
    after the last). Units are shards, with the finished share of those in flight."""
    if done <= 0 or left <= 0 or elapsed_s <= 0:
        return ""
    return f"about {duration(elapsed_s / done * left)} left"


def engine_totals() -> dict[int, TelemetryTotals]:
    """Where each engine of this process stands now (call at the start of a run; see publish_engine_pictures)."""
    return {id(engine): stream.telemetry.totals() for engine, stream in streams_now()}


def engine_retries() -> dict[int, int]:
    """Requests each engine of this process has retried so far (transient failures: timeouts, 5xx, 429)."""
    return {id(engine): int(getattr(engine, "retries", 0)) for engine, _ in streams_now()}


def retries_since(before: dict[int, int]) -> int:
    """Retries of this process's engines since `before` (an `engine_retries()` of the run's start)."""
    return sum(n - before.get(key, 0) for key, n in engine_retries().items())


def publish_engine_pictures(
    out_dir: str | Path, before: dict[int, TelemetryTotals], config: PipelineConfig
) -> list[Path]:
    """Save each engine's occupancy and tokens/s since `before` (PNG, JSON, CSV under
    `out_dir/telemetry/`) and attach them to the flow run as a markdown artifact. Returns the PNGs."""
    pngs = []
    for engine, stream in streams_now():
        if stream.telemetry.totals().sequences == (before[id(engine)].sequences if id(engine) in before else 0):
            continue  # this engine did nothing in this run
        name = _slug(str(getattr(engine, "model_name", "engine")))
        paths = stream.telemetry.save(Path(out_dir) / "telemetry", name=name, start=before.get(id(engine)))
        summary = json.loads(paths["json"].read_text())["summary"]
        pngs += [paths["png"]] if "png" in paths else []
        with contextlib.suppress(Exception):  # an artifact is best effort; the files are saved
            create_markdown_artifact(
                summary_markdown(summary, paths),
                key=f"{_slug(config.name)}-engine-{name}",
                description=f"engine occupancy and tokens/s over the run ({name})",
            )
    return pngs


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "run"


def publish_run_artifacts(summary: RunSummary, config: PipelineConfig) -> None:
    """A table of counts and a markdown summary with label statistics, attached to the flow run."""
    labels = summary.labels
    consensus = summary.consensus.as_dict() if summary.consensus else {}
    rows = [
        {"count": "problems in", "value": summary.problems_in},
        {"count": "rows out", "value": summary.rows},
        {"count": "rejected", "value": summary.rejected},
        *({"count": f"rejected: {k}", "value": v} for k, v in sorted(summary.rejected_by_reason.items())),
        {"count": "kept by consensus", "value": consensus.get("kept", "n/a")},
        *([{"count": "estimated precision", "value": text}] if (text := summary.precision_text()) is not None else []),
        *(
            [{"count": "canaries (planted errors, written apart)", "value": summary.canaries.planted}]
            if summary.canaries is not None
            else []
        ),
        *(
            [
                {"count": "judge requests (votes asked)", "value": summary.judge_requests},
                {"count": "judge tokens", "value": summary.judge_tokens},
                {"count": "rows judged", "value": summary.rows_judged},
                {"count": "judge tokens per kept row", "value": summary.judge_tokens_per_kept_row},
            ]
            if summary.judge is not None
            else []
        ),
        {"count": "rollouts", "value": summary.rollouts},
        {"count": "tokens", "value": summary.tokens},
        {"count": "shards", "value": summary.shards},
    ]
    key = _slug(config.name)
    create_table_artifact(rows, key=f"{key}-counts", description="prm-synth run counts")
    markdown = "\n".join(
        [
            f"# prm-synth run: {config.name}",
            "",
            f"- policy: `{model_name(config.policy)}`",
            f"- annotator: `{config.annotate.method}`: {make_labeler(config).budget_line()}; rule `{config.labels.rule}`",
            f"- config fingerprint: `{summary.config_fingerprint}`",
            f"- counts reconcile: **{summary.reconciles}**",
            f"- wall time: {summary.run.wall_seconds if summary.run else 0:.1f} s",
            "",
            "## Label statistics",
            "",
            "| statistic | value |",
            "|---|---|",
            *(f"| {k} | {json.dumps(v) if isinstance(v, dict) else v} |" for k, v in labels.items()),
            *_consensus_section(consensus),
            *([] if (cost := judge_cost_text(summary)) is None else ["", f"- judge cost: {cost}"]),
            *(
                [f"- judge accuracy by answer class (what soft reads): {summary.consensus.by_answer_text()}"]
                if summary.consensus and summary.consensus.by_answer
                else []
            ),
        ]
    )
    create_markdown_artifact(markdown, key=f"{key}-summary", description="prm-synth label statistics")


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _consensus_section(consensus: dict[str, Any]) -> list[str]:
    """Kept fraction, per-source counts and the agreement matrix (MC first error × judge's)."""
    if not consensus.get("rows"):
        return []
    agreement = consensus.get("agreement", {})
    return [
        "",
        "## Consensus",
        "",
        f"- kept {consensus.get('kept', 0)} of {consensus['rows']} ({consensus.get('kept_fraction') or 0:.1%})",
        f"- by source: `{json.dumps(consensus.get('by_source', {}), sort_keys=True)}`",
        f"- completed by the judge: {consensus.get('completed', 0)}, ties decided by the rollouts: "
        f"{consensus.get('ties_broken', 0)}",
        f"- judge accuracy measured on rows the rollouts pinned: names the error "
        f"{_share(consensus.get('judge_recall_pinned'))}, says -1 on clean rows {_share(consensus.get('judge_clean_rate'))}",
        "",
        "| MC first error, judge first error | rows |",
        "|---|---|",
        *(f"| {pair} | {n} |" for pair, n in sorted(agreement.items())),
    ]
