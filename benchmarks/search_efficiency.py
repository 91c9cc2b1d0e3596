"""How many rollouts each annotator spends, and how often it names the true first error.

The simulated policy writes arithmetic chains whose true first error is recomputable from the
text, so every label can be scored. For several step-error and recovery settings and solutions of
3 to 20 steps, the same sampled solutions are labeled by per-step MC (every prefix, and stopping at
the first MC 0), plain bisection (search_test fixed, no re-check), bisection with sequential tests
and a re-check (search_test sprt), the changepoint search (search_test changepoint: the `binary`
method's default), and OmegaPRM with its paper's bisection (fixed) and with sequential tests (sprt),
all at the same k, through the real pipeline (prm_synth.pipeline.process_shard: sampling, splitting,
grading, probe scheduler). A method whose config does not validate stops the benchmark.

Prints one table per setting, a table of labeling rules, and, last, one JSON line measured on the
10-to-20-step solutions at step_error 0.1, recover 0.05: {"binary_vs_mc_rollouts", "binary_accuracy"
(the default, changepoint), "sprt_vs_mc_rollouts", "sprt_accuracy", "mc_accuracy", "omegaprm_accuracy", ...}.

    python benchmarks/search_efficiency.py [--problems 400]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prm_synth.config import PipelineConfig, validate_config  # noqa: E402
from prm_synth.pipeline import iter_shards, process_shard  # noqa: E402
from prm_synth.records import LabeledRecord  # noqa: E402
from prm_synth.simulated import arithmetic  # noqa: E402
from prm_synth.simulated.engines import SimulatedPolicy  # noqa: E402

K = 8
DEFAULT = "binary (changepoint, the default)"
METHODS = {
    "per-step MC": {"method": "mc", "k": K},
    "MC, stop at first 0": {"method": "mc", "k": K, "stop_at_first_zero": True},
    "plain bisection": {"method": "binary", "k": K, "search_test": "fixed", "recheck": False},
    "binary (SPRT + re-check)": {"method": "binary", "k": K, "search_test": "sprt"},
    DEFAULT: {"method": "binary"},  # the changepoint search has no k
    "OmegaPRM": {"method": "omegaprm", "k": K},
    "OmegaPRM, SPRT bisection": {"method": "omegaprm", "k": K, "search_test": "sprt"},
}


@dataclass
class Score:
    rows: int = 0
    wrong: int = 0  # rows whose solution truly holds an error
    exact: int = 0  # first error named exactly (over all rows; -1 = -1 counts)
    exact_wrong: int = 0
    bad_labels: int = 0
    bad_labels_right: int = 0  # labeled bad and the prefix truly holds an error
    first_errors_found: int = 0  # true first error step labeled bad
    rollouts: int = 0
    rollouts_wrong: int = 0
    tokens: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def add(self, r: LabeledRecord) -> None:
        truth = arithmetic.true_first_error(r.steps)
        self.rows += 1
        self.exact += r.first_error_mc == truth
        self.rollouts += r.rollouts
        self.tokens += r.tokens
        if truth >= 0:
            self.wrong += 1
            self.exact_wrong += r.first_error_mc == truth
            self.rollouts_wrong += r.rollouts
            self.first_errors_found += r.labels[truth] is False
        for i, label in enumerate(r.labels):
            if label is False:
                self.bad_labels += 1
                self.bad_labels_right += truth >= 0 and i >= truth

    def row(self) -> dict[str, float]:
        def div(a: float, b: float) -> float:
            return round(a / b, 3) if b else float("nan")

        return {
            "accuracy(wrong)": div(self.exact_wrong, self.wrong),
            "accuracy(all)": div(self.exact, self.rows),
            "bad precision": div(self.bad_labels_right, self.bad_labels),
            "bad recall": div(self.first_errors_found, self.wrong),
            "rollouts/sol": div(self.rollouts, self.rows),
            "rollouts/wrong sol": div(self.rollouts_wrong, self.wrong),
            "tokens/sol": div(self.tokens, self.rows),
        }


def config_for(
    method: dict, step_error: float, recover: float, problems: int, min_ops: int, max_ops: int, seed: int
) -> PipelineConfig:
    return validate_config(
        {
            "name": "bench",
            "problems": {"kind": "builtin", "count": problems, "seed": seed, "min_ops": min_ops, "max_ops": max_ops},
            "policy": {"kind": "simulated", "step_error": step_error, "recover": recover, "seed": seed},
            "sampling": {"samples_per_problem": 1},
            "annotate": method,
            "output": {"shard_size": problems},
            "run": {"max_in_flight": 256},
        }
    )


def run(
    method: dict, step_error: float, recover: float, problems: int, min_ops: int, max_ops: int, seed: int = 0
) -> tuple[Score, list[LabeledRecord]]:
    config = config_for(method, step_error, recover, problems, min_ops, max_ops, seed)
    engine = SimulatedPolicy(config.policy)  # type: ignore[arg-type]
    score, records = Score(), []
    started = time.perf_counter()
    for shard in iter_shards(config):
        out = process_shard(engine, config, shard, "bench")
        for r in out.records:
            score.add(r)
        records += out.records
    score.seconds = time.perf_counter() - started
    return score, records


def print_table(title: str, rows: dict[str, dict[str, float]]) -> None:
    cols = list(next(iter(rows.values())))
    name_w = max(len(n) for n in rows) + 2
    print(f"\n{title}")
    print(" " * name_w + "".join(f"{c:>20}" for c in cols))
    for name, values in rows.items():
        print(f"{name:<{name_w}}" + "".join(f"{values[c]:>20}" for c in cols))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=400)
    from _report import ReportFlag, write_report  # benchmarks/ is on sys.path: run as a script

    parser.add_argument("--report", action=ReportFlag)
    args = parser.parse_args()

    headline: dict[str, float] = {}
    settings = [(0.1, 0.05), (0.1, 0.0), (0.1, 0.2), (0.2, 0.05)]
    for min_ops, max_ops in ((10, 20), (3, 9)):
        for step_error, recover in settings:
            table = {}
            for name, method in METHODS.items():
                score, _ = run(method, step_error, recover, args.problems, min_ops, max_ops)
                table[name] = score.row()
            print_table(
                f"{min_ops}-{max_ops} steps, step_error {step_error}, recover {recover}, k {K}, "
                f"{args.problems} problems",
                table,
            )
            if (min_ops, max_ops, step_error, recover) == (10, 20, 0.1, 0.05):
                mc, binary = table["per-step MC"], table[DEFAULT]
                sprt = table["binary (SPRT + re-check)"]
                headline = {
                    "binary_vs_mc_rollouts": round(binary["rollouts/sol"] / mc["rollouts/sol"], 3),
                    "binary_vs_mc_rollouts_wrong": round(binary["rollouts/wrong sol"] / mc["rollouts/wrong sol"], 3),
                    "binary_accuracy": binary["accuracy(wrong)"],
                    "sprt_vs_mc_rollouts": round(sprt["rollouts/sol"] / mc["rollouts/sol"], 3),
                    "sprt_accuracy": sprt["accuracy(wrong)"],
                    "mc_accuracy": mc["accuracy(wrong)"],
                    "mc_stop_accuracy": table["MC, stop at first 0"]["accuracy(wrong)"],
                    "plain_bisection_accuracy": table["plain bisection"]["accuracy(wrong)"],
                    "omegaprm_accuracy": table["OmegaPRM"]["accuracy(wrong)"],
                    "omegaprm_sprt_accuracy": table["OmegaPRM, SPRT bisection"]["accuracy(wrong)"],
                }

    # Labeling rules on the same per-step MC counts: the hard rule calls a recovered error good.
    rules = {}
    for recover in (0.05, 0.2):
        _, records = run(METHODS["per-step MC"], 0.1, recover, args.problems, 10, 20)
        from prm_synth.annotate.annotation import Annotation
        from prm_synth.records.labels import apply_rule

        for rule in ("hard", "majority", "relative"):
            score = Score()
            for r in records:
                ann = Annotation("mc", r.mc_correct, r.mc_total, r.label_source)
                lab = apply_rule(ann, rule)
                score.add(LabeledRecord(**(r.to_row() | {"labels": lab.labels, "first_error_mc": lab.first_error})))
            rules[f"{rule}, recover {recover}"] = score.row()
    print_table(f"labeling rules on per-step MC counts (10-20 steps, step_error 0.1, k {K})", rules)
    headline |= {
        "relative_vs_hard_accuracy_recover_0.2": round(
            rules["relative, recover 0.2"]["accuracy(wrong)"] - rules["hard, recover 0.2"]["accuracy(wrong)"], 3
        )
    }
    print(json.dumps(headline))
    write_report("search_efficiency", headline)


if __name__ == "__main__":
    main()
