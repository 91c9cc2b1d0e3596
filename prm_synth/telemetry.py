"""What the engine did over time, and what a run shows while it works.

`EngineTelemetry` records, on the engine's own clock (wall seconds for a real engine, modelled time
for the simulated one), how many sequences were running and how many tokens finished, in buckets of
time that widen as the run grows (at most `max_buckets` are kept, so a day-long run stays small). From
it come the run's picture (occupancy and tokens/s over time: a PNG, JSON and CSV) and the mean
occupancy a benchmark reports. `ProgressSnapshot` is what the probe scheduler hands its progress
callback every few seconds.

Tokens are counted when their sequence finishes (an engine reports a sequence once, when it is done),
so tokens/s is exact over a bucket of a few seconds and bursty below that.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TelemetryTotals:
    """Running totals at one moment; the difference of two is a window (see `EngineTelemetry.window`)."""

    t: float  # engine clock
    busy: float  # integral of running sequences over time (sequence-seconds)
    tokens: int  # generated tokens of finished sequences
    sequences: int  # finished sequences
    capacity: int
    prompt_tokens: int = 0  # prompt tokens of finished sequences (a dry run's cost estimate reads them apart)
    started_wall: float | None = None  # epoch seconds of the engine's first record (its start-up ends there)


@dataclass(frozen=True)
class WindowSummary:
    seconds: float
    tokens: int
    sequences: int
    tokens_per_s: float
    mean_running: float
    occupancy: float  # mean running sequences / capacity


@dataclass(frozen=True)
class ProgressSnapshot:
    """A scheduler's progress, for bars, logs and artifacts (wall seconds; engine figures on its clock).

    `tokens` is the one definition of cost (docs/reference/output-schema.md): every token the model processed (prompts and
    generated), here of this scheduler's rollouts so far; a finished shard adds its sampling and judge
    tokens in its stats, so a bar that sums finished shards' stats and live snapshots ends equal to the
    run summary."""

    label: str
    elapsed_s: float
    annotators_done: int
    annotators_started: int
    annotators_total: int | None  # None: the job source does not say how many
    rollouts: int
    tokens: int  # prompt + generated tokens of the rollouts so far
    tokens_per_s: float  # `tokens` per wall second, since the scheduler started
    engine_running: int
    engine_capacity: int
    finished: bool = False

    def line(self) -> str:
        total = "?" if self.annotators_total is None else str(self.annotators_total)
        return (
            f"{self.label}: annotated {self.annotators_done}/{total} ({self.annotators_started} started), "
            f"{self.rollouts} rollouts, {self.tokens} tokens, {self.tokens_per_s:.1f} tok/s, "
            f"engine {self.engine_running}/{self.engine_capacity} sequences running"
        )

    def short_line(self) -> str:
        """The same in a few words, for one line of a terminal bar."""
        total = "?" if self.annotators_total is None else str(self.annotators_total)
        return (
            f"{self.annotators_done}/{total} annotated, {compact(self.rollouts)} rollouts, {compact(self.tokens)} tok"
        )


def compact(n: float) -> str:
    """A count in a few characters: 950, 12.3k, 4.5M."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def duration(seconds: float) -> str:
    """A span of time for a person: "45 s", "3 min 20 s", "1 h 05 min"."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


@dataclass
class Countdown:
    """Progress of a loop that knows its length (training steps, samples scored): done out of total,
    time elapsed, and the time left at the pace so far (the first item includes the warm-up, so the
    estimate starts pessimistic and settles)."""

    total: int
    unit: str
    clock: Callable[[], float] = time.perf_counter
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def line(self, done: int) -> str:
        elapsed = self.clock() - self.started
        share = f" ({done / self.total:.0%})" if self.total else ""
        left = ""
        if 0 < done < self.total:
            left = f", about {duration(elapsed / done * (self.total - done))} left"
        return f"{done}/{self.total} {self.unit}{share}, {duration(elapsed)} elapsed{left}"


class EngineTelemetry:
    """Occupancy and finished tokens over the engine's clock; see the module docstring.

    `advance(t, running, ...)` says: from the previous call until `t`, `running` sequences were in
    the engine; `tokens`/`sequences` finished at `t`. The stream that drives the engine calls it.
    """

    def __init__(self, bucket_s: float = 1.0, max_buckets: int = 1200) -> None:
        self._lock = threading.Lock()
        self.width = bucket_s
        self.max_buckets = max_buckets
        self.origin: float | None = None
        self.last_t = 0.0
        self.capacity = 0
        self._busy = 0.0
        self._tokens = 0
        self._prompt_tokens = 0
        self._sequences = 0
        self._started_wall: float | None = None
        # per bucket: [busy sequence-seconds, tokens, sequences, capacity]
        self._buckets: list[list[float]] = []

    def advance(
        self, t: float, running: int, capacity: int, tokens: int = 0, sequences: int = 0, prompt_tokens: int = 0
    ) -> None:
        with self._lock:
            if self.origin is None:
                self.origin = self.last_t = t
                self._started_wall = time.time()
            t = max(t, self.last_t)  # clocks never run backwards here
            self.capacity = max(self.capacity, capacity)
            start = self.last_t
            self._busy += running * (t - start)
            if t > start:
                self._spread(start, t, running, capacity)
            if tokens or sequences:
                # credited to the bucket whose time just ended (t on a boundary closes the earlier one)
                bucket = self._bucket(max(0, math.ceil((t - self.origin) / self.width) - 1))
                bucket[1] += tokens
                bucket[2] += sequences
            self._tokens += tokens
            self._prompt_tokens += prompt_tokens
            self._sequences += sequences
            self.last_t = t
            while len(self._buckets) > self.max_buckets:
                self._merge()

    def totals(self) -> TelemetryTotals:
        with self._lock:
            return TelemetryTotals(
                self.last_t,
                self._busy,
                self._tokens,
                self._sequences,
                self.capacity,
                self._prompt_tokens,
                self._started_wall,
            )

    @staticmethod
    def window(start: TelemetryTotals, end: TelemetryTotals) -> WindowSummary:
        """Tokens/s and mean occupancy between two `totals()` (e.g. a run's annotation phase)."""
        seconds = max(0.0, end.t - start.t)
        busy = end.busy - start.busy
        mean = busy / seconds if seconds > 0 else 0.0
        tokens = end.tokens - start.tokens
        return WindowSummary(
            seconds=seconds,
            tokens=tokens,
            sequences=end.sequences - start.sequences,
            tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
            mean_running=mean,
            occupancy=mean / end.capacity if end.capacity else 0.0,
        )

    def series(self, since: float | None = None) -> list[dict[str, float]]:
        """One row per bucket: start time (relative to `since`, default the first record), mean running
        sequences, capacity, occupancy, tokens/s and finished sequences."""
        with self._lock:
            if self.origin is None:
                return []
            origin, width, buckets, last = self.origin, self.width, [list(b) for b in self._buckets], self.last_t
        zero = origin if since is None else since
        rows = []
        for i, (busy, tokens, sequences, capacity) in enumerate(buckets):
            start = origin + i * width
            if since is not None and start + width <= since:
                continue
            covered = max(1e-9, min(width, last - start))  # the last bucket is partly filled
            rows.append(
                {
                    "t": round(max(0.0, start - zero), 6),  # a bucket begun before `since` shows at 0
                    "running": busy / covered,
                    "capacity": capacity,
                    "occupancy": busy / covered / capacity if capacity else 0.0,
                    "tokens_per_s": tokens / covered,
                    "sequences": sequences,
                }
            )
        return rows

    def save(self, folder: str | Path, name: str = "engine", start: TelemetryTotals | None = None) -> dict[str, Path]:
        """Write `<name>.json` (summary and series), `<name>.csv` and, with matplotlib, `<name>.png`.

        `start`: an earlier `totals()`; only what happened after it is saved (one run of a long-lived engine).
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        rows = self.series(None if start is None else start.t)
        first, end = start or self._first(), self.totals()
        # prompt tokens beside the window's generated ones: `inspect --estimate` reads the engine's rate from here
        summary = asdict(self.window(first, end)) | {"prompt_tokens": end.prompt_tokens - first.prompt_tokens}
        paths = {"json": folder / f"{name}.json", "csv": folder / f"{name}.csv"}
        paths["json"].write_text(json.dumps({"summary": summary, "bucket_s": self.width, "series": rows}, indent=1))
        with paths["csv"].open("w", newline="") as f:
            writer = csv.DictWriter(
                f, fieldnames=["t", "running", "capacity", "occupancy", "tokens_per_s", "sequences"]
            )
            writer.writeheader()
            writer.writerows(rows)
        png = folder / f"{name}.png"
        with self._lock:
            end = None if self.origin is None else self.last_t - (self.origin if start is None else start.t)
        if plot_series(rows, png, title=f"engine: mean occupancy {summary['occupancy']:.0%}", end=end):
            paths["png"] = png
        return paths

    # ------------------------------------------------------------ internals
    def _index(self, t: float) -> int:
        return max(0, int((t - (self.origin or 0.0)) / self.width))

    def _spread(self, start: float, t: float, running: int, capacity: int) -> None:
        """Spread `running` sequences over [start, t) across the buckets it covers.

        The walk runs over integer bucket indices, never over float positions: a boundary that float
        rounding files under the wrong bucket cannot stop it making progress (a loop `start = end` did
        spin forever once the clock crossed 2048 s). One index past the last on each side absorbs such
        rounding; each piece is clipped to [start, t), so no time is counted twice or lost."""
        while self._index(t) >= 2 * self.max_buckets:  # a jump of the clock: widen first, keep the walk short
            self._merge()
        origin, width = self.origin or 0.0, self.width
        for index in range(max(0, self._index(start) - 1), self._index(t) + 2):
            lo = max(start, origin + index * width)
            hi = min(t, origin + (index + 1) * width)
            if hi > lo:
                bucket = self._bucket(index)
                bucket[0] += running * (hi - lo)
                bucket[3] = max(bucket[3], capacity)

    def _bucket(self, index: int) -> list[float]:
        while len(self._buckets) <= index:
            self._buckets.append([0.0, 0, 0, self.capacity])
        return self._buckets[index]

    def _merge(self) -> None:
        """Halve the resolution: pairs of buckets become one of twice the width."""
        merged = []
        for i in range(0, len(self._buckets), 2):
            pair = self._buckets[i : i + 2]
            merged.append(
                [sum(b[0] for b in pair), sum(b[1] for b in pair), sum(b[2] for b in pair), max(b[3] for b in pair)]
            )
        self._buckets = merged
        self.width *= 2

    def _first(self) -> TelemetryTotals:
        return TelemetryTotals(self.origin or 0.0, 0.0, 0, 0, self.capacity, 0, self._started_wall)

    def first(self) -> TelemetryTotals:
        """The totals before the first record: the start of a window over everything the engine did."""
        with self._lock:
            return self._first()


def plot_series(rows: list[dict[str, float]], path: Path, title: str = "engine", end: float | None = None) -> bool:
    """Occupancy (sequences running, capacity) and tokens/s over time as a PNG; False without matplotlib.

    `end`: where the last bucket ends (the engine clock's last record). Each bucket is drawn as a level
    over its span up to it: a run shorter than one bucket is a line across the picture, not one
    invisible point."""
    if not rows:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display; safe in worker threads
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: %s not drawn (the JSON and CSV have the numbers)", path)
        return False
    t = [r["t"] for r in rows]
    step = t[-1] - t[-2] if len(t) > 1 else 1.0
    last = max(t[-1] + 1e-3, end if end is not None and end > t[-1] else t[-1] + step)
    t.append(last)  # a step drawn "post" needs the end of the last bucket to draw it at all

    def levels(key: str) -> list[float]:
        values = [r[key] for r in rows]
        return [*values, values[-1]]

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5))
    top.step(t, levels("running"), where="post", linewidth=2, label="sequences running (mean)")
    capacity = max(r["capacity"] for r in rows)
    show_capacity = max(r["running"] for r in rows) >= capacity / 4
    if show_capacity:
        top.step(t, levels("capacity"), where="post", linestyle="--", color="grey", label="capacity")
    else:  # a capacity line far above would flatten the running line onto the axis
        top.plot([], [], linestyle="--", color="grey", label=f"capacity {capacity:g} (far above)")
    top.set_ylabel("sequences")
    top.set_ylim(0, 1.15 * max(max(levels("running")), capacity if show_capacity else 0) or 1)
    top.legend(loc="best")
    top.set_title(title)
    bottom.step(t, levels("tokens_per_s"), where="post", linewidth=2, color="tab:green")
    bottom.set_xlim(0, last)
    bottom.set_ylabel("generated tokens/s")
    bottom.set_xlabel("time (engine clock, s)")
    bottom.set_ylim(0, 1.15 * max(levels("tokens_per_s")) or 1)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def summary_markdown(summary: dict[str, Any], paths: dict[str, Path]) -> str:
    """The run picture as a markdown artifact: the headline numbers and where the files are."""
    lines = [
        "# Engine occupancy and throughput",
        "",
        "| figure | value |",
        "|---|---|",
        f"| seconds | {summary['seconds']:.1f} |",
        f"| generated tokens | {summary['tokens']} |",
        f"| sequences finished | {summary['sequences']} |",
        f"| tokens/s | {summary['tokens_per_s']:.1f} |",
        f"| mean running sequences | {summary['mean_running']:.1f} |",
        f"| occupancy (mean running / capacity) | {summary['occupancy']:.1%} |",
        "",
        *(f"- {kind}: `{path}`" for kind, path in sorted(paths.items())),
    ]
    if "png" in paths:
        lines += ["", f"![engine occupancy and tokens/s]({paths['png'].resolve().as_uri()})"]
    return "\n".join(lines)
