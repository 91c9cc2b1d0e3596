"""What a whole run of a pipeline will cost, measured on the user's own pipeline (`prm-synth run --dry-run`,
`prm-synth inspect --estimate`).

A dry run labels one small shard end to end; a real run's first finished shards do the same at a larger
size. From what they made come two measurements:
- per problem (`ProblemCost`): the policy's and the judge's tokens (prompt and generated apart), rollouts,
  labeled steps and kept rows. Shard stats count tokens by stage, rows count them by solution: a problem
  gets its rows' tokens, and the tokens no row holds (solutions rejected at sampling) are shared evenly;
  the judge's tokens go to the rows it was asked about.
- per engine (`EngineRate`): the engine's own tokens a second over the run, prompt and generated apart, on
  its own clock (`telemetry`: wall seconds for a real engine, modelled seconds for the simulated one),
  and when it was ready (the start-up before it).

The estimate resamples the problems (a bootstrap, fixed seed) for a range, and turns the per-problem
tokens into GPU hours at the measured rates, plus the start-up: per size, the policy's hours, the judge's
(a judge server's share: the hours its own engine worked) and both with the start-up. A dry run's batch
is small, so its rate is a floor of the engine's (its hours an upper end); `--gpu-tokens-per-s` replaces
the measured rate with one the user knows.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Used only where nothing was measured (a folder without telemetry, an engine that did no work): a
# 7B-class policy in bf16 on one H100 under vLLM with prefix caching; the table says it is assumed.
DEFAULT_TOKENS_PER_S = 10_000.0
SIZES = (1_000, 10_000, 100_000)
RESAMPLES = 2_000
SEED = 0
INTERVAL = 0.95  # the range printed: the 2.5th to the 97.5th percentile of the resampled means


@dataclass(frozen=True)
class ProblemCost:
    """What one problem cost and made. Tokens are floats: a share of the shard's unattributed tokens."""

    prompt_tokens: float
    generated_tokens: float
    judge_prompt_tokens: float
    judge_generated_tokens: float
    rollouts: float
    labeled_steps: int
    kept_rows: int

    @property
    def policy_tokens(self) -> float:
        return self.prompt_tokens + self.generated_tokens

    @property
    def judge_tokens(self) -> float:
        return self.judge_prompt_tokens + self.judge_generated_tokens


@dataclass(frozen=True)
class EngineRate:
    """An engine's work over a run: tokens finished, prompt and generated apart, over its seconds."""

    prompt_tokens: int
    generated_tokens: int
    seconds: float
    ready_at: float | None = None  # epoch seconds when the engine first worked (start-up ends there)

    @property
    def tokens_per_s(self) -> float | None:
        tokens = self.prompt_tokens + self.generated_tokens
        return tokens / self.seconds if self.seconds > 0 and tokens > 0 else None

    @property
    def prompt_share(self) -> float | None:
        tokens = self.prompt_tokens + self.generated_tokens
        return self.prompt_tokens / tokens if tokens else None


@dataclass
class CostSample:
    """The measurements an estimate rests on (JSON-able: the flow hands it to the command)."""

    problems: list[ProblemCost]
    policy: EngineRate | None
    judge: EngineRate | None
    startup_seconds: float | None = None  # command start to the policy engine's first work; None: unknown
    source: str = "dry run"  # "dry run" or "first N finished shards"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostSample:
        rate = lambda d: EngineRate(**d) if d else None  # noqa: E731
        return cls(
            [ProblemCost(**p) for p in data["problems"]],
            rate(data.get("policy")),
            rate(data.get("judge")),
            data.get("startup_seconds"),
            data.get("source", "dry run"),
        )


@dataclass(frozen=True)
class Span:
    """A point (the sample's mean) and the bootstrap's range around it (low <= point <= high)."""

    point: float
    low: float
    high: float

    def scaled(self, factor: float, plus: float = 0.0) -> Span:
        return Span(self.point * factor + plus, self.low * factor + plus, self.high * factor + plus)


@dataclass(frozen=True)
class CostEstimate:
    """Per-problem figures with ranges, the rates used, and GPU hours for each size."""

    problems: int
    source: str
    # prompt_tokens, generated_tokens, judge_prompt_tokens, judge_generated_tokens, rollouts, labeled_steps,
    # kept_rows, tokens (all four token counts: what `tokens` counts in a run's summary)
    per_problem: dict[str, Span]
    policy_tokens_per_s: float
    judge_tokens_per_s: float | None
    rates_measured: bool
    startup_seconds: float
    startup_measured: bool
    gpu_seconds_per_problem: Span
    requested: int | None  # the size asked for (--limit, or the source's size)
    sizes: list[int]
    max_rollouts_per_solution: int | None
    samples_per_problem: int
    interval: float = INTERVAL
    resamples: int = RESAMPLES
    seed: int = SEED
    notes: list[str] = field(default_factory=list)

    def gpu_hours(self, problems: int) -> Span:
        return self.gpu_seconds_per_problem.scaled(problems / 3600, self.startup_seconds / 3600)

    def to_dict(self) -> dict[str, Any]:
        """The `cost` block of `run --dry-run --json` and `inspect --estimate --json`."""
        span = lambda s: {"point": s.point, "low": s.low, "high": s.high}  # noqa: E731
        sizes = [
            {
                "problems": n,
                "gpu_hours": span(self.gpu_hours(n)),
                **{key: span(self.per_problem[key].scaled(n)) for key in _SCALED},
            }
            for n in self.sizes
        ]
        requested = next((s for s in sizes if s["problems"] == self.requested), None)
        return {
            "problems": self.problems,
            "measured_on": self.source,
            "per_problem": {k: span(v) for k, v in self.per_problem.items()},
            "gpu_seconds_per_problem": span(self.gpu_seconds_per_problem),
            "policy_tokens_per_s": self.policy_tokens_per_s,
            "judge_tokens_per_s": self.judge_tokens_per_s,
            "rates_measured": self.rates_measured,
            "startup_seconds": self.startup_seconds,
            "startup_measured": self.startup_measured,
            "requested": requested,
            "sizes": sizes,
            "bootstrap": {"resamples": self.resamples, "seed": self.seed, "interval": self.interval},
            "max_rollouts_per_solution": self.max_rollouts_per_solution,
            "notes": self.notes,
        }


_KEYS = (
    "prompt_tokens",
    "generated_tokens",
    "judge_prompt_tokens",
    "judge_generated_tokens",
    "rollouts",
    "labeled_steps",
    "kept_rows",
)
_SCALED = (
    "prompt_tokens",
    "generated_tokens",
    "judge_prompt_tokens",
    "judge_generated_tokens",
    "tokens",
    "labeled_steps",
    "kept_rows",
)


# ---------------------------------------------------------------- measuring
def problem_costs(
    root: str | Path, policy_prompt_share: float | None, judge_prompt_share: float | None
) -> list[ProblemCost]:
    """Per-problem costs of a folder's finished shards (see the module docstring for how tokens are shared).

    `*_prompt_share`: the engine's measured share of prompt tokens, which splits a problem's tokens (rows
    count prompt and generated together); None where nothing was measured: all counted as generated."""
    from prm_synth.store.readers import iter_records
    from prm_synth.store.summary import summarize

    summary = summarize(root)
    tokens: dict[str, float] = defaultdict(float)
    rollouts: dict[str, float] = defaultdict(float)
    judged: dict[str, int] = defaultdict(int)
    steps: dict[str, int] = defaultdict(int)
    kept: dict[str, int] = defaultdict(int)
    for row in iter_records(root, "data"):
        pid = row["problem_id"]
        tokens[pid] += row["tokens"]
        rollouts[pid] += row["rollouts"]
        judged[pid] += bool(row.get("judge_votes"))
        steps[pid] += sum(label is not None for label in row["labels"])
        kept[pid] += 1
    for row in iter_records(root, "rejected"):
        pid = row.get("problem_id") or ""
        tokens[pid] += 0  # the problem counts even where it made no row
        record = _payload(row.get("payload"))
        if record is not None:
            tokens[pid] += float(record.get("tokens") or 0)
            rollouts[pid] += float(record.get("rollouts") or 0)
            judged[pid] += bool(record.get("judge_votes"))
    problems = max(summary.problems_loaded, len(tokens), 1)
    ids = list(tokens) + [f"<no row {i}>" for i in range(problems - len(tokens))]
    judge_total = summary.judge_tokens
    policy_tokens = _shared(tokens, summary.tokens - judge_total, ids)
    policy_rollouts = _shared(rollouts, summary.rollouts, ids)
    judged_rows = sum(judged.values())
    p_share = policy_prompt_share or 0.0
    j_share = judge_prompt_share or 0.0
    out = []
    for pid in ids:
        policy = policy_tokens[pid]
        judge = judge_total * (judged.get(pid, 0) / judged_rows if judged_rows else 1 / problems)
        out.append(
            ProblemCost(
                prompt_tokens=policy * p_share,
                generated_tokens=policy * (1 - p_share),
                judge_prompt_tokens=judge * j_share,
                judge_generated_tokens=judge * (1 - j_share),
                rollouts=policy_rollouts[pid],
                labeled_steps=steps.get(pid, 0),
                kept_rows=kept.get(pid, 0),
            )
        )
    return out


def _shared(by_problem: Mapping[str, float], total: float, ids: list[str]) -> dict[str, float]:
    """`total` (a shard stat) over the problems, in proportion to what their rows hold: rows count a shared
    prefix's probes once a solution, so they may hold more than the stat (then scaled down), or less (the
    tokens of solutions that made no row: shared evenly)."""
    held = sum(by_problem.values())
    if held >= total and held > 0:
        return {pid: by_problem.get(pid, 0.0) * total / held for pid in ids}
    spare = (total - held) / len(ids)
    return {pid: by_problem.get(pid, 0.0) + spare for pid in ids}


def _payload(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def rate_from_totals(before: Any, after: Any) -> EngineRate | None:
    """An engine's work between two `TelemetryTotals` (prm_synth.telemetry); None where it did none."""
    generated = after.tokens - before.tokens
    prompt = after.prompt_tokens - before.prompt_tokens
    if generated + prompt <= 0:
        return None
    return EngineRate(prompt, generated, max(0.0, after.t - before.t), after.started_wall)


def rate_from_telemetry(folder: str | Path, model: str) -> EngineRate | None:
    """An engine's rate from a finished run's `telemetry/<model>.json` (None: none saved for it)."""
    path = Path(folder) / "telemetry" / f"{slug(model)}.json"
    try:
        saved = json.loads(path.read_text())["summary"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return EngineRate(int(saved.get("prompt_tokens", 0)), int(saved["tokens"]), float(saved["seconds"]))


def slug(name: str) -> str:
    """A model's name as a file name (the same as flows.reporting's telemetry files)."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "run"


# ---------------------------------------------------------------- estimating
def estimate(
    sample: CostSample,
    config: Any,
    requested: int | None = None,
    tokens_per_s: float | None = None,
) -> CostEstimate | None:
    """The estimate from `sample` for `config` (None when it holds no problem). `requested`: the size to
    plan for (default the source's size); `tokens_per_s`: a rate to use instead of the measured ones."""
    import numpy as np

    from prm_synth.problems.sources import count_hint

    if not sample.problems:
        return None
    notes: list[str] = []
    measured = tokens_per_s is None
    policy_rate = tokens_per_s or (sample.policy.tokens_per_s if sample.policy else None)
    if policy_rate is None:
        policy_rate, measured = DEFAULT_TOKENS_PER_S, False
        notes.append("the policy's rate was not measured: an assumed 10,000 tokens/s")
    judge_rate = None
    if config.judge is not None:
        judge_rate = tokens_per_s or (sample.judge.tokens_per_s if sample.judge else None) or policy_rate
    columns = np.array([[getattr(p, k) for k in _KEYS] for p in sample.problems], dtype=float)
    seconds = (columns[:, 0] + columns[:, 1]) / policy_rate
    if judge_rate:
        seconds = seconds + (columns[:, 2] + columns[:, 3]) / judge_rate
    columns = np.column_stack([columns, columns[:, :4].sum(axis=1), seconds])
    rng = np.random.default_rng(SEED)
    picks = rng.integers(0, len(columns), size=(RESAMPLES, len(columns)))
    means = columns[picks].mean(axis=1)
    point = columns.mean(axis=0)
    tail = (1 - INTERVAL) / 2
    low, high = np.quantile(means, tail, axis=0), np.quantile(means, 1 - tail, axis=0)
    spans = [Span(float(p), float(min(lo, p)), float(max(hi, p))) for p, lo, hi in zip(point, low, high, strict=True)]
    source_size = count_hint(config.problems)
    requested = requested or source_size
    startup = sample.startup_seconds
    if startup is None:
        notes.append("the hours leave the start-up out (a dry run measures it)")
    annotate = config.annotate
    bound = getattr(annotate, "changepoint_max_rollouts", None) if annotate.method == "binary" else None
    return CostEstimate(
        problems=len(sample.problems),
        source=sample.source,
        per_problem=dict(zip((*_KEYS, "tokens"), spans[:-1], strict=True)),
        policy_tokens_per_s=policy_rate,
        judge_tokens_per_s=judge_rate,
        rates_measured=measured,
        startup_seconds=startup or 0.0,
        startup_measured=startup is not None,
        gpu_seconds_per_problem=spans[-1],
        requested=requested,
        sizes=sorted({*SIZES, *([requested] if requested else [])}),
        max_rollouts_per_solution=bound,
        samples_per_problem=config.sampling.samples_per_problem,
        notes=notes,
    )


# ---------------------------------------------------------------- printing
def _n(value: float) -> str:
    """A count for the table: 1,234 / 1.2M / 3.4B."""
    for unit, size in (("B", 1e9), ("M", 1e6)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:,.0f}"


def _hours(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:,.0f}"


def _range(span: Span, fmt: Any = _n) -> str:
    return f"{fmt(span.point)} ({fmt(span.low)}-{fmt(span.high)})"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def estimate_lines(est: CostEstimate, simulated: bool = False) -> list[str]:
    """The estimate as the commands print it: what it rests on, a problem's figures, one row a size."""
    p = est.per_problem
    one = lambda s: f"{s.point:.1f} ({s.low:.1f}-{s.high:.1f})"  # noqa: E731
    lines = [
        f"estimate from the {est.source}: {est.problems} problems, {est.samples_per_problem} solution(s) each",
        f"  ranges: {est.interval:.0%} bootstrap over problems (seed {est.seed})",
        f"  a problem, policy: {_range(p['prompt_tokens'])} prompt tokens, {_range(p['generated_tokens'])} generated",
    ]
    if est.judge_tokens_per_s is not None:
        lines.append(
            f"  a problem, judge:  {_range(p['judge_prompt_tokens'])} prompt tokens, "
            f"{_range(p['judge_generated_tokens'])} generated"
        )
    rates = "measured on this run" if est.rates_measured else "given (--gpu-tokens-per-s) or assumed"
    judge = "" if est.judge_tokens_per_s is None else f", judge {_rate(est.judge_tokens_per_s)}"
    lines += [
        f"  a problem: {one(p['rollouts'])} rollouts",
        f"  yield a problem: {one(p['labeled_steps'])} labeled steps, {one(p['kept_rows'])} kept rows",
        f"  tokens/s a GPU, {rates}: policy {_rate(est.policy_tokens_per_s)}{judge}",
        f"  start-up: {est.startup_seconds:.0f} s, once a run" if est.startup_measured else "  start-up: not measured",
    ]
    if est.max_rollouts_per_solution:
        bound = est.max_rollouts_per_solution * est.samples_per_problem
        lines.append(f"  at most {bound} rollouts a problem (annotate.changepoint_max_rollouts × samples)")
    lines.append(f"  {'problems':>9}  {'labeled steps':>13}  {'kept rows':>9}  {'GPU hours (range)':>20}")
    for size in est.sizes:
        label = f"{size:,}" + ("*" if size == est.requested else "")
        hours = est.gpu_hours(size)
        lines.append(
            f"  {label:>9}  {_n(p['labeled_steps'].point * size):>13}  {_n(p['kept_rows'].point * size):>9}  "
            f"{_range(hours, _hours):>20}"
        )
    lines.append("  * the size asked for (--limit, else the source's)")
    if est.source == "dry run" and est.rates_measured:
        lines.append("  a dry run's batch is small: a full engine is faster (inspect --estimate on the")
        lines.append("  real run's first shards measures it)")
    lines += [f"  note: {note}" for note in est.notes]
    if simulated:
        lines.append("  (the simulated policy counts words as tokens on a modelled clock: its hours only")
        lines.append("  show the arithmetic)")
    return lines


def sample_from_folder(root: str | Path, config: Any) -> CostSample:
    """A finished (or partly finished) run's measurement: its finished shards' rows, and the engine rates
    its `telemetry/` saved (None where the run has not saved them yet)."""
    from prm_synth.engines.names import model_name
    from prm_synth.store.readers import dataset_shards

    policy = rate_from_telemetry(root, model_name(config.policy))
    judge = rate_from_telemetry(root, model_name(config.judge.engine)) if config.judge is not None else None
    costs = problem_costs(root, _share(policy), _share(judge))
    shards = len(dataset_shards(root))
    return CostSample(costs, policy, judge, None, f"first {shards} finished shard(s)")


def _share(rate: EngineRate | None) -> float | None:
    return rate.prompt_share if rate is not None else None
