"""How good are the verification chains the verify stage keeps, against judges that err like real ones?

The simulated policy writes arithmetic chains whose true first error is recomputable from the text, some
of them right answers after a wrong step (the rollouts' blind spot); the default labeler labels them
(pipelines/simulated-verifier.yaml's world). Then, per judge profile (engines.simulated.JUDGE_PROFILES:
oracle, uniform-0.8, realistic, blind-spot, correlated), the simulated judge writes `votes` verification
chains a row, and the verify stage keeps those whose step verdicts agree with the labels; once on every row,
once after the same judge (at most 3 votes) and the default consensus (`soft`, `judge.select: needed`)
filtered and completed the rows. Every chain the engine
returned is recorded on the way (a recording engine in front of the judge), so all chains and kept chains
are scored against the same truth:

- step precision: the share of step verdicts that are right, with the PRM's prefix semantics (a step is
  correct when no earlier or same step holds an error); bad precision: of the incorrect verdicts, the
  share at the true first error; first-error accuracy: chains whose first incorrect step (-1: none) is
  the true first error; over all readable chains and over kept chains;
- kept fraction: kept chains / chains sampled; rows the judge completed (with consensus); tokens per kept
  chain: every verify token (prompts and all chains, the dropped included) / kept chains.

Last line: one JSON object, per profile (and profile+soft) the figures.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from prm_synth.config import (
    ConsensusConfig,
    JudgeConfig,
    PipelineConfig,
    SimulatedJudgeConfig,
    validate_config,
)
from prm_synth.engines import build_engine
from prm_synth.engines.base import Engine, GenerationRequest, GenerationResult
from prm_synth.grading.chain import parse_chain
from prm_synth.judge.consensus import apply_consensus
from prm_synth.judge.selection import judge_selected
from prm_synth.judge.verify import verify_records
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.prompting.prompts import parse_verify_prompt
from prm_synth.records import ConsensusStats, LabeledRecord, ShardStats, VerifyStats
from prm_synth.simulated import arithmetic
from prm_synth.simulated.engines import JUDGE_PROFILES, SimulatedJudge

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "pipelines" / "simulated-verifier.yaml"


class RecordingEngine:
    """The judge engine, with every chain it returns kept by (steps shown in the prompt)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.chains: list[tuple[list[str], str, str | None]] = []  # (steps, chain, finish reason)

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    def close(self) -> None:
        self.engine.close()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        results = self.engine.generate(requests)
        for request, result in zip(requests, results, strict=True):
            parsed = parse_verify_prompt(request.user)
            assert parsed is not None
            self.chains += [(parsed[1], c.text, c.finish_reason) for c in result.completions]
        return results


@dataclass
class Score:
    right: int = 0
    verdicts: int = 0
    bad_right: int = 0
    bad: int = 0
    chains: int = 0
    first_right: int = 0  # chains whose first incorrect step (-1: none) is the true first error
    by_first_error: dict[str, int] = field(default_factory=dict)

    def add(self, steps: list[str], text: str, finish: str | None) -> None:
        verdicts = parse_chain(text, len(steps), finish).verdicts
        if verdicts is None:
            return
        truth = arithmetic.true_first_error(steps)
        self.chains += 1
        self.first_right += (verdicts.index(False) if False in verdicts else -1) == truth
        for i, verdict in enumerate(verdicts):
            correct = truth < 0 or i < truth  # prefix semantics: a step after the first error is not correct
            self.right += verdict == correct
            self.verdicts += 1
            if not verdict:
                self.bad += 1
                self.bad_right += i == truth

    @property
    def precision(self) -> float | None:
        return self.right / self.verdicts if self.verdicts else None

    @property
    def first_error_accuracy(self) -> float | None:
        return self.first_right / self.chains if self.chains else None

    @property
    def bad_precision(self) -> float | None:
        return self.bad_right / self.bad if self.bad else None


def label(limit: int) -> tuple[PipelineConfig, list[list[LabeledRecord]]]:
    """The pipeline's rows as the default labeler leaves them, shard by shard, before judge and verify.

    The world is the pipeline's, with right answers after a wrong step in the sampled solutions too
    (`recover_in_sample`): the rollouts' blind spot, where a judge that errs like a real one errs as well."""
    base = yaml.safe_load(PIPELINE.read_text())
    base["policy"] = base["policy"] | {"recover_in_sample": True}
    base.pop("annotate", None)  # the default labeler: it leaves spans open for the judge to complete
    config = validate_config(base)
    policy = build_engine(config.policy)
    shards = []
    labeling = config.model_copy(update={"verify": None})
    for shard in iter_shards(config, limit=limit):
        shards.append(process_shard(policy, labeling, shard, config.fingerprint()).records)
    return config, shards


def measure(
    config: PipelineConfig, shards: list[list[LabeledRecord]], judge: SimulatedJudgeConfig, consensus: bool
) -> dict[str, object]:
    """Chains of one judge profile (as verifier, and with `consensus` as judge before it too), scored."""
    assert config.verify is not None
    verify = config.verify.model_copy(update={"engine": judge})
    recorder = RecordingEngine(SimulatedJudge(judge))
    stats, consensus_stats = VerifyStats(), ConsensusStats()
    all_chains, kept_chains = Score(), Score()
    rows_in = 0
    for rows in shards:
        rows = copy.deepcopy(rows)
        rows_in += len(rows)
        if consensus:
            judge_config = JudgeConfig(engine=judge, samples=3)
            soft = ConsensusConfig()
            rows, _, _ = judge_selected(SimulatedJudge(judge), rows, judge_config, soft, config.run.max_batch_requests)
            rows, _, shard_consensus = apply_consensus(rows, soft)
            consensus_stats = ShardStats(consensus=consensus_stats) + ShardStats(consensus=shard_consensus)
            consensus_stats = consensus_stats.consensus or ConsensusStats()
        recorder.chains.clear()
        rows, _, shard_stats = verify_records(recorder, rows, verify, 256)
        stats = (ShardStats(verify=stats) + ShardStats(verify=shard_stats)).verify
        assert stats is not None
        for steps, text, finish in recorder.chains:
            all_chains.add(steps, text, finish)
        for record in rows:
            shown = [" ".join(s.split()) for s in record.steps]  # the steps as the prompt showed them
            for text in record.verify_chains or []:
                kept_chains.add(shown, text, "stop")
    assert kept_chains.chains == stats.kept
    return {
        "rows": stats.rows,
        "rows_kept_by_consensus": round(stats.rows / rows_in, 4) if rows_in else None,
        "rows_completed": consensus_stats.completed,
        "chains": stats.chains,
        "kept": stats.kept,
        "kept_fraction": round(stats.kept / stats.chains, 4) if stats.chains else None,
        "rows_with_chain": stats.rows_with_chain,
        "all_step_precision": _round(all_chains.precision),
        "kept_step_precision": _round(kept_chains.precision),
        "all_bad_precision": _round(all_chains.bad_precision),
        "kept_bad_precision": _round(kept_chains.bad_precision),
        "all_first_error_acc": _round(all_chains.first_error_accuracy),
        "kept_first_error_acc": _round(kept_chains.first_error_accuracy),
        "tokens_per_kept_chain": round(stats.tokens / stats.kept, 1) if stats.kept else None,
        "dropped": stats.dropped_by_reason,
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _f(x: object, width: int, fmt: str = ".4f") -> str:
    return f"{'n/a':>{width}}" if x is None else f"{x:>{width}{fmt}}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=200, help="problems (2 solutions each)")
    args = ap.parse_args()
    config, shards = label(args.limit)
    header = (
        f"{'profile':<12}{'consensus':<10}{'rows':>6}{'done':>5}{'chains':>7}{'kept %':>8}{'step prec all':>14}"
        f"{'kept':>7}{'bad prec all':>13}{'kept':>7}{'fe acc all':>11}{'kept':>7}{'tok/kept':>9}"
    )
    print(header)
    print("-" * len(header))
    summary: dict[str, object] = {}
    for name, judge in JUDGE_PROFILES.items():
        for consensus in (False, True):
            r = measure(config, shards, judge, consensus)
            summary[f"{name}{'+soft' if consensus else ''}"] = {k: v for k, v in r.items() if k != "dropped"}
            print(
                f"{name:<12}{'soft' if consensus else '-':<10}{r['rows']:>6}{r['rows_completed']:>5}{r['chains']:>7}"
                f"{_f(r['kept_fraction'], 8, '.1%')}{_f(r['all_step_precision'], 14)}{_f(r['kept_step_precision'], 7)}"
                f"{_f(r['all_bad_precision'], 13)}{_f(r['kept_bad_precision'], 7)}"
                f"{_f(r['all_first_error_acc'], 11)}{_f(r['kept_first_error_acc'], 7)}"
                f"{_f(r['tokens_per_kept_chain'], 9, '.1f')}"
            )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
