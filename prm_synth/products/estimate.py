"""What a whole run of a pipeline will cost, measured on the user's own pipeline (`prm-synth run --dry-run`,
`prm-synth inspect --estimate`).

A dry run labels one small shard end to end; a real run's first finished shards do the same at a larger
size. What they measured (`products.cost_measure.CostSample`): per problem, the policy's and the judge's
tokens (prompt and generated apart), rollouts, labeled steps and kept rows; per engine, its own tokens a
second and when it was ready (the start-up before it).

The estimate resamples the problems (a bootstrap, fixed seed) for a range, and turns the per-problem
tokens into GPU hours at the measured rates, plus the start-up: per size, the policy's hours, the judge's
(a judge server's share: the hours its own engine worked) and both with the start-up. A dry run's batch
is small, so its rate is a floor of the engine's (its hours an upper end); `--gpu-tokens-per-s` replaces
the measured rate with one the user knows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prm_synth.products.cost_measure import CostSample, EngineRate, ProblemCost, sample_from_folder

__all__ = [
    "CostEstimate",
    "CostSample",
    "EngineRate",
    "ProblemCost",
    "estimate",
    "estimate_lines",
    "sample_from_folder",
]

# Used only where nothing was measured (a folder without telemetry, an engine that did no work): a
# 7B-class policy in bf16 on one H100 under vLLM with prefix caching; the table says it is assumed.
DEFAULT_TOKENS_PER_S = 10_000.0
SIZES = (1_000, 10_000, 100_000)
RESAMPLES = 2_000
SEED = 0
INTERVAL = 0.95  # the range printed: the 2.5th to the 97.5th percentile of the resampled means


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
        notes.append(
            "the policy's rate was not measured (no telemetry/ yet): an assumed 10,000 tokens/s, and its prompt "
            "and generated tokens are not told apart (all shown as generated)"
        )
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
    if est.requested:
        lines.append("  * the size asked for (--limit, else the source's)")
    else:
        lines.append("  the source does not say its size: --limit N plans for N problems")
    if est.source == "dry run" and est.rates_measured:
        lines.append("  a dry run's batch is small: a full engine is faster (inspect --estimate on the")
        lines.append("  real run's first shards measures it)")
    lines += [f"  note: {note}" for note in est.notes]
    if simulated:
        lines.append("  (the simulated policy counts words as tokens on a modelled clock: its hours only")
        lines.append("  show the arithmetic)")
    return lines
