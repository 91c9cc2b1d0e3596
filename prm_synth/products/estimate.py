"""What a whole run of a pipeline will cost, from a dry run's measured figures (`prm-synth run --dry-run`).

A dry run labels one small shard of the user's own pipeline end to end: its summary holds what that
cost per problem (rollouts, the policy's tokens, the judge's tokens) and per labeled step. Those
figures, scaled to 1k, 10k and 100k problems and to the source's own size, and divided by a stated
throughput (tokens processed per second per GPU: prompts and generated tokens, as `tokens` counts
them everywhere), give GPU hours. The throughput is an assumption the table states; the dry run's
engine picture (`telemetry/`) or a first real shard measures it on the user's hardware.

A dry run holds few problems: the figures vary from one shard to the next (the estimate says how
many problems it rests on), and the default labeler spends at most `annotate.changepoint_max_rollouts`
rollouts a solution, which bounds the rollouts whatever the dry run saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prm_synth.store.summary import RunSummary

# 7B-class policy in bf16 on one H100 under vLLM with prefix caching: an assumption for the table,
# stated with it (`--gpu-tokens-per-s` changes it). Rollouts share their prompt prefix, so most
# prompt tokens are cache hits: the rate counts them with the generated ones, as `tokens` does.
DEFAULT_TOKENS_PER_S = 10_000.0
SIZES = (1_000, 10_000, 100_000)


@dataclass(frozen=True)
class Estimate:
    """Per-problem and per-labeled-step figures of a dry run, and what they come to at scale."""

    problems: int  # problems the dry run labeled: what the figures rest on
    rollouts_per_problem: float
    policy_tokens_per_problem: float
    judge_tokens_per_problem: float
    labeled_steps_per_problem: float
    rollouts_per_labeled_step: float | None
    tokens_per_labeled_step: float | None
    tokens_per_s: float
    source_size: int | None  # the source's problem count, where it is known
    max_rollouts_per_solution: int | None  # the default labeler's bound (annotate.changepoint_max_rollouts)
    samples_per_problem: int

    def gpu_hours(self, problems: int) -> float:
        tokens = (self.policy_tokens_per_problem + self.judge_tokens_per_problem) * problems
        return tokens / self.tokens_per_s / 3600

    def sizes(self) -> list[int]:
        return sorted({*SIZES, *([self.source_size] if self.source_size else [])})


def estimate(summary: RunSummary, config: Any, tokens_per_s: float = DEFAULT_TOKENS_PER_S) -> Estimate | None:
    """The estimate from a dry run's summary (None when it labeled no problem)."""
    from prm_synth.problems.sources import count_hint

    problems = summary.problems_loaded
    if problems <= 0:
        return None
    policy_tokens = summary.tokens - summary.judge_tokens
    labeled = summary.labels.get("labeled_steps", 0) or 0
    annotate = config.annotate
    bound = getattr(annotate, "changepoint_max_rollouts", None) if annotate.method == "binary" else None
    return Estimate(
        problems=problems,
        rollouts_per_problem=summary.rollouts / problems,
        policy_tokens_per_problem=policy_tokens / problems,
        judge_tokens_per_problem=summary.judge_tokens / problems,
        labeled_steps_per_problem=labeled / problems,
        rollouts_per_labeled_step=summary.rollouts_per_labeled_step,
        tokens_per_labeled_step=summary.tokens_per_labeled_step,
        tokens_per_s=tokens_per_s,
        source_size=count_hint(config.problems),
        max_rollouts_per_solution=bound,
        samples_per_problem=config.sampling.samples_per_problem,
    )


def _n(value: float) -> str:
    """A count for the table: 1,234 / 1.2M / 3.4B."""
    for unit, size in (("B", 1e9), ("M", 1e6)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:,.0f}"


def _hours(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:,.0f}"


def estimate_lines(est: Estimate, simulated: bool = False) -> list[str]:
    """The estimate as the command prints it: a short preamble, then one row a size."""
    per_step = (
        f"{est.rollouts_per_labeled_step:.1f} rollouts, {est.tokens_per_labeled_step:,.0f} tokens a labeled step"
        if est.rollouts_per_labeled_step is not None and est.tokens_per_labeled_step is not None
        else "no labeled step"
    )
    lines = [
        f"estimate from this dry run ({est.problems} problems, {est.samples_per_problem} solution(s) each):",
        f"  a problem: {est.rollouts_per_problem:.1f} rollouts, {est.policy_tokens_per_problem:,.0f} policy tokens, "
        f"{est.judge_tokens_per_problem:,.0f} judge tokens, {est.labeled_steps_per_problem:.1f} labeled steps",
        f"  {per_step}",
    ]
    if est.max_rollouts_per_solution:
        bound = est.max_rollouts_per_solution * est.samples_per_problem
        lines.append(f"  at most {bound} rollouts a problem (annotate.changepoint_max_rollouts × samples)")
    lines.append(f"  GPU hours at {est.tokens_per_s:,.0f} tokens/s a GPU (an assumption: --gpu-tokens-per-s)")
    lines.append(f"  {'problems':>10}  {'rollouts':>9}  {'tokens':>9}  {'judge tokens':>12}  {'GPU hours':>9}")
    for size in est.sizes():
        label = f"{size:,}" + (" (all)" if size == est.source_size else "")
        lines.append(
            f"  {label:>10}  {_n(est.rollouts_per_problem * size):>9}  "
            f"{_n(est.policy_tokens_per_problem * size):>9}  {_n(est.judge_tokens_per_problem * size):>12}  "
            f"{_hours(est.gpu_hours(size)):>9}"
        )
    if simulated:
        lines.append("  (the simulated policy counts words as tokens: its hours only show the arithmetic)")
    return lines
