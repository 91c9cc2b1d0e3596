"""What a run's cost is measured from (products.estimate turns it into an estimate): per problem, the
policy's and the judge's tokens (prompt and generated apart), rollouts, labeled steps and kept rows; per
engine, its own tokens a second and when it was ready.

Shard stats count tokens by stage, rows count them by solution: a problem gets its rows' tokens (scaled to
the stats where rows count a shared prefix's probes once a solution), and the tokens no row holds
(solutions rejected at sampling) are shared evenly; the judge's tokens go to the rows it was asked about.
Rows count prompt and generated tokens together: the engine's measured prompt share splits them.
An engine's rate is its tokens over its own clock (`prm_synth.telemetry`: wall seconds for a real engine,
modelled seconds for the simulated one): from the engines themselves after a dry run, from the
`telemetry/` a finished run saved otherwise.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


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
        pid = row.get("problem_id")
        if not pid:  # a source row rejected before it became a problem: not one of the problems labeled
            continue
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


def measure_engines(config: Any, before: Mapping[int, Any]) -> tuple[EngineRate | None, EngineRate | None]:
    """The policy's and the judge's work since `before` (`{id(engine): TelemetryTotals}` taken at the run's
    start; an engine built later counts from its first record). None for an engine never built."""
    from prm_synth.engines import existing_engine
    from prm_synth.engines.stream import stream_for

    def rate(engine_config: Any) -> EngineRate | None:
        engine = existing_engine(engine_config) if engine_config is not None else None
        if engine is None:
            return None
        telemetry = stream_for(engine).telemetry
        return rate_from_totals(before.get(id(engine)) or telemetry.first(), telemetry.totals())

    return rate(config.policy), rate(config.judge.engine if config.judge is not None else None)


def measure_dry_run(config: Any, root: str | Path, before: Mapping[int, Any]) -> CostSample:
    """A dry run's measurement, from its (temporary) folder and its engines, before the folder goes."""
    policy, judge = measure_engines(config, before)
    costs = problem_costs(root, _share(policy), _share(judge))
    # startup_seconds: the command knows when it started; it counts them up to the policy's `ready_at`
    return CostSample(costs, policy, judge)
