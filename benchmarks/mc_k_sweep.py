"""Per-step MC on pipelines/simulated.yaml at k = 4, 8, 16: how often first_error_mc is exactly right.

The truth is the first false equation recomputed from each row's step text. Prints a table and, last,
one JSON line {"exact_k4", "exact_k8", "exact_k16", "exact_wrong_k8", "rows_per_s_k8"}.

    python benchmarks/mc_k_sweep.py [--problems 400]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from prm_synth.config import validate_config  # noqa: E402
from prm_synth.pipeline import iter_shards, process_shard  # noqa: E402
from prm_synth.simulated import arithmetic  # noqa: E402
from prm_synth.simulated.engines import SimulatedPolicy  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=400)
    args = parser.parse_args()
    base = yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text())
    headline: dict[str, float] = {}
    print(f"per-step MC on pipelines/simulated.yaml, {args.problems} problems")
    print(f"{'k':>4}{'rows':>8}{'exact (all)':>14}{'exact (wrong)':>16}{'rollouts/row':>15}{'rows/s':>10}")
    for k in (4, 8, 16):
        # per-step MC on the quickstart's policy and problems (the pipeline itself runs the default labeler)
        config = validate_config(base | {"annotate": {"method": "mc", "k": k}})
        engine = SimulatedPolicy(config.policy)  # type: ignore[arg-type]
        rows = exact = wrong = exact_wrong = rollouts = 0
        started = time.perf_counter()
        for shard in iter_shards(config, args.problems):
            for r in process_shard(engine, config, shard, "bench").records:
                truth = arithmetic.true_first_error(r.steps)
                rows += 1
                exact += r.first_error_mc == truth
                rollouts += r.rollouts
                if truth >= 0:
                    wrong += 1
                    exact_wrong += r.first_error_mc == truth
        rate = rows / (time.perf_counter() - started)
        print(f"{k:>4}{rows:>8}{exact / rows:>14.3f}{exact_wrong / wrong:>16.3f}{rollouts / rows:>15.1f}{rate:>10.0f}")
        headline[f"exact_k{k}"] = round(exact / rows, 3)
        headline[f"exact_wrong_k{k}"] = round(exact_wrong / wrong, 3)
        headline[f"rows_per_s_k{k}"] = round(rate, 1)
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
