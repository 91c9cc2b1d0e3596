"""How good are the verification chains the verify stage keeps? Simulated policy and judge, truth recomputed.

The simulated policy writes arithmetic chains whose true first error is recomputable from the text; the
simulated judge writes a verification chain that names the true first error with probability `accuracy`
(else another index, uniformly). The pipeline labels every solution by per-step MC rollouts
(pipelines/simulated-verifier.yaml), then the verify stage samples `votes` chains a row and keeps those
whose step verdicts agree with the labels. Every chain the engine returned is recorded on the way (a
recording engine in front of the judge), so all chains and kept chains are scored against the same truth:

- step precision: the share of step verdicts that are right, with the PRM's prefix semantics (a step is
  correct when no earlier or same step holds an error), over all readable chains and over kept chains;
- kept fraction: kept chains / chains sampled; tokens per kept chain: every verify token (prompts and
  all chains, the dropped included) / kept chains.

Last line: {"chains", "kept_fraction", "all_step_precision", "kept_step_precision", "tokens_per_kept_chain"}
for the default setting (first row of the table).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from prm_synth import arithmetic
from prm_synth.config import validate_config
from prm_synth.engines import build_engine
from prm_synth.engines.base import Engine, GenerationRequest, GenerationResult
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.prompts import parse_verify_prompt
from prm_synth.schema import ShardStats, VerifyStats
from prm_synth.verify import parse_chain

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
    by_first_error: dict[str, int] = field(default_factory=dict)

    def add(self, steps: list[str], text: str, finish: str | None) -> None:
        verdicts = parse_chain(text, len(steps), finish).verdicts
        if verdicts is None:
            return
        truth = arithmetic.true_first_error(steps)
        self.chains += 1
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
    def bad_precision(self) -> float | None:
        return self.bad_right / self.bad if self.bad else None


def measure(limit: int, **verify: object) -> dict[str, object]:
    base = yaml.safe_load(PIPELINE.read_text())
    config = validate_config(base | {"verify": base["verify"] | verify})
    assert config.verify is not None
    policy = build_engine(config.policy)
    judge = RecordingEngine(build_engine(config.verify.engine))
    total = ShardStats()
    all_chains, kept_chains = Score(), Score()
    for shard in iter_shards(config, limit=limit):
        judge.chains.clear()
        out = process_shard(policy, config, shard, config.fingerprint(), verify_engine=judge)
        total += out.stats
        for steps, text, finish in judge.chains:
            all_chains.add(steps, text, finish)
        for record in out.records:
            shown = [" ".join(s.split()) for s in record.steps]  # the steps as the prompt showed them
            for text in record.verify_chains or []:
                kept_chains.add(shown, text, "stop")
    stats = total.verify or VerifyStats()
    assert kept_chains.chains == stats.kept
    return {
        "setting": ", ".join(f"{k}={v}" for k, v in verify.items()) or "default",
        "rows": stats.rows,
        "chains": stats.chains,
        "kept": stats.kept,
        "kept_fraction": round(stats.kept / stats.chains, 4) if stats.chains else None,
        "rows_with_chain": stats.rows_with_chain,
        "all_step_precision": _round(all_chains.precision),
        "kept_step_precision": _round(kept_chains.precision),
        "all_bad_precision": _round(all_chains.bad_precision),
        "kept_bad_precision": _round(kept_chains.bad_precision),
        "step_agreement": _round(stats.steps_agreed / stats.steps_compared if stats.steps_compared else None),
        "tokens_per_kept_chain": round(stats.tokens / stats.kept, 1) if stats.kept else None,
        "kept_chain_tokens": round(stats.chain_tokens_kept / stats.kept, 1) if stats.kept else None,
        "dropped": stats.dropped_by_reason,
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=200, help="problems (2 solutions each)")
    args = ap.parse_args()
    settings: list[dict[str, object]] = [
        {},
        {"engine": {"kind": "simulated-judge", "accuracy": 0.6}},
        {"rule": "first-error", "tolerance": 1},
    ]
    rows = [measure(args.limit, **s) for s in settings]
    header = (
        f"{'setting':<46}{'chains':>7}{'kept':>6}{'kept %':>8}{'step prec all':>15}{'kept':>7}"
        f"{'bad prec all':>14}{'kept':>7}{'tok/kept':>10}"
    )
    print(header)
    for r in rows:
        print(
            f"{str(r['setting'])[:45]:<46}{r['chains']:>7}{r['kept']:>6}{r['kept_fraction']:>8.1%}"
            f"{r['all_step_precision']:>15.4f}{r['kept_step_precision']:>7.4f}"
            f"{r['all_bad_precision']:>14.4f}{r['kept_bad_precision']:>7.4f}{r['tokens_per_kept_chain']:>10.1f}"
        )
    print(f"dropped (default): {rows[0]['dropped']}")
    head = rows[0]
    keys = ("chains", "kept_fraction", "all_step_precision", "kept_step_precision", "tokens_per_kept_chain")
    print(json.dumps({k: head[k] for k in keys}))


if __name__ == "__main__":
    main()
