"""Label fidelity under luck: which labels are right, how many steps get one, and how sure each is.

The simulated policy writes arithmetic chains of 10 to 20 steps whose true first error is
recomputable from the text. Each problem has its own difficulty (step error drawn uniformly from
0.03-0.2), and at luck rate q a continuation of a prefix that holds an error still reaches the gold
answer, and so does a sampled solution after its own error (lucky solutions). For q in {0, 0.05,
0.15, 0.3}, the same problems (one sampled solution each) are labeled by every method at its
defaults and at a better setting, through the library (annotators + ProbeScheduler + policy).

Per method: good / bad precision of the emitted labels, coverage (labeled steps among the steps up
to and including the true first error; every step of a clean solution), first-error accuracy (the
row's first bad label is the true first error; -1 for a clean one), expected calibration error of
`p_good` over every step of every row (10 bins), and rollouts per question. Last line, one JSON
object for the default method (calibrated search):
{"min_good_precision", "min_bad_precision", "coverage": {q: ...}, "ece", "rollouts_per_question": {q: ...}}

    python benchmarks/fidelity.py [--problems 300] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# One core: the posterior's matrix products are small, and BLAS threads would only contend.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from prm_synth import arithmetic  # noqa: E402
from prm_synth.annotate.annotation import Annotation  # noqa: E402
from prm_synth.annotate.calibration import RunEstimates  # noqa: E402
from prm_synth.annotate.labels import apply_rule  # noqa: E402
from prm_synth.annotate.mc import per_step_mc  # noqa: E402
from prm_synth.annotate.omega import omegaprm  # noqa: E402
from prm_synth.annotate.scheduler import Annotator, ProbeScheduler, SolutionJob  # noqa: E402
from prm_synth.annotate.search import binary_search  # noqa: E402
from prm_synth.config import AnnotateConfig, BinaryConfig, MCConfig, SimulatedPolicyConfig  # noqa: E402
from prm_synth.engines.base import GenerationRequest, SamplingOptions  # noqa: E402
from prm_synth.engines.simulated import SimulatedPolicy  # noqa: E402
from prm_synth.grading import grade  # noqa: E402
from prm_synth.prompts import policy_user_prompt  # noqa: E402
from prm_synth.steps import split_steps  # noqa: E402

LUCK = (0.0, 0.05, 0.15, 0.3)
DEFAULT = "calibrated (default)"
# name -> (annotate config, labeling rule)
METHODS: dict[str, tuple[dict[str, Any], str]] = {
    "mc k8 hard (default)": ({"method": "mc", "k": 8}, "hard"),
    "mc k8 relative": ({"method": "mc", "k": 8}, "relative"),
    "binary sprt (default)": ({"method": "binary"}, "hard"),
    "binary sprt, verify all": ({"method": "binary", "verify_correct": 1.0}, "hard"),
    "omegaprm (default)": ({"method": "omegaprm"}, "hard"),
    "omegaprm calibrated": ({"method": "omegaprm", "search_test": "calibrated"}, "hard"),
    DEFAULT: ({"method": "binary", "search_test": "calibrated"}, "hard"),
    "calibrated, confidence 0.95": ({"method": "binary", "search_test": "calibrated", "confidence": 0.95}, "hard"),
}
split = functools.partial(split_steps, strategy="line")


@dataclass
class Row:
    steps: list[str]
    labels: list[bool | None]
    p_good: list[float] | None


@dataclass
class Score:
    rows: int = 0
    good: int = 0
    good_right: int = 0
    bad: int = 0
    bad_right: int = 0
    covered: int = 0
    coverable: int = 0
    first_error_right: int = 0
    rollouts: int = 0
    questions: int = 0
    calibration: list[tuple[float, bool]] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, row: Row) -> None:
        n = len(row.steps)
        truth = arithmetic.true_first_error(row.steps)
        end = truth if truth >= 0 else n - 1  # the last step that counts for coverage
        self.rows += 1
        for i, label in enumerate(row.labels):
            still_good = truth < 0 or i < truth
            if label is True:
                self.good += 1
                self.good_right += still_good
            elif label is False:
                self.bad += 1
                self.bad_right += not still_good
            if i <= end:
                self.coverable += 1
                self.covered += label is not None
            if row.p_good is not None:
                self.calibration.append((row.p_good[i], still_good))
        first = next((i for i, x in enumerate(row.labels) if x is False), -1)
        self.first_error_right += first == truth

    def ece(self) -> float:
        if not self.calibration:
            return float("nan")
        bins: dict[int, list[tuple[float, bool]]] = {}
        for p, y in self.calibration:
            bins.setdefault(min(int(p * 10), 9), []).append((p, y))
        total = len(self.calibration)
        return sum(abs(sum(p for p, _ in b) - sum(y for _, y in b)) for b in bins.values()) / total

    def row(self) -> dict[str, float]:
        def div(a: float, b: float) -> float:
            return round(a / b, 3) if b else float("nan")

        return {
            "good prec": div(self.good_right, self.good),
            "bad prec": div(self.bad_right, self.bad),
            "coverage": div(self.covered, self.coverable),
            "first-err acc": div(self.first_error_right, self.rows),
            "ECE p_good": round(self.ece(), 3),
            "rollouts/q": div(self.rollouts, self.questions),
            "seconds": round(self.seconds, 1),
        }


@dataclass(frozen=True)
class Question:
    key: str
    prompt: str
    gold: str
    steps: list[str]
    status: str


def questions(policy: SimulatedPolicy, count: int, seed: int) -> list[Question]:
    """`count` problems of 10-20 steps and one sampled solution of each."""
    problems = [arithmetic.generate(random.Random(f"{seed}:{i}"), 10, 20) for i in range(count)]
    prompts = [policy_user_prompt(p.question()) for p in problems]
    results = policy.generate([GenerationRequest(prompt, n=1) for prompt in prompts])
    out = []
    for i, (p, prompt, result) in enumerate(zip(problems, prompts, results, strict=True)):
        text = result.completions[0].text
        out.append(Question(f"q{i}", prompt, str(p.answer), split(text), grade(text, str(p.answer)).status))
    return out


def annotator(config: AnnotateConfig, q: Question, estimates: RunEstimates) -> Annotator[Annotation]:
    """The per-solution annotator of `config` (what the pipeline's labeler builds)."""
    if isinstance(config, MCConfig):
        return per_step_mc(q.steps, q.status, config.k, config.stop_at_first_zero)
    assert isinstance(config, BinaryConfig)
    verify = config.verify_correct >= 1.0
    return binary_search(q.steps, q.status, config, verify, estimates, q.key)


def label(policy: SimulatedPolicy, config: AnnotateConfig, rule: str, qs: list[Question]) -> Iterator[Row]:
    scheduler = ProbeScheduler(policy, SamplingOptions(), max_batch_requests=256, max_in_flight=64)
    estimates = RunEstimates()
    if config.method == "omegaprm":
        jobs = [SolutionJob(q.key, q.key, q.prompt, q.gold, omegaprm(config, split, estimates=estimates)) for q in qs]
        for _, result in scheduler.run(jobs):
            for path in result.paths():
                ann = path.annotation
                yield Row(path.steps, apply_rule(ann, rule).labels, ann.p_good)
    else:
        jobs = [SolutionJob(q.key, q.key, q.prompt, q.gold, annotator(config, q, estimates)) for q in qs]
        by_key = {q.key: q for q in qs}
        for job, ann in scheduler.run(jobs):
            yield Row(by_key[job.key].steps, apply_rule(ann, rule).labels, ann.p_good)
    label.rollouts = scheduler.stats.rollouts  # type: ignore[attr-defined]


def run(method: str, luck: float, qs: list[Question], seed: int) -> Score:
    overrides, rule = METHODS[method]
    config: AnnotateConfig = TypeAdapter(AnnotateConfig).validate_python(overrides)
    policy = SimulatedPolicy(policy_config(luck, seed))
    score = Score(questions=len(qs))
    started = time.perf_counter()
    for row in label(policy, config, rule, qs):
        score.add(row)
    score.rollouts = label.rollouts  # type: ignore[attr-defined]
    score.seconds = time.perf_counter() - started
    return score


def policy_config(luck: float, seed: int) -> SimulatedPolicyConfig:
    return SimulatedPolicyConfig(step_error_range=(0.03, 0.2), recover=luck, recover_in_sample=True, seed=seed)


def print_table(title: str, rows: dict[str, dict[str, float]]) -> None:
    cols = list(next(iter(rows.values())))
    name_w = max(len(n) for n in rows) + 2
    print(f"\n{title}")
    print(" " * name_w + "".join(f"{c:>14}" for c in cols))
    for name, values in rows.items():
        print(f"{name:<{name_w}}" + "".join(f"{values[c]:>14}" for c in cols))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", nargs="*", default=list(METHODS), help="names from METHODS")
    args = parser.parse_args()
    if DEFAULT not in args.methods:
        args.methods.append(DEFAULT)

    default: dict[float, dict[str, float]] = {}
    default_calibration: list[tuple[float, bool]] = []
    for luck in LUCK:
        qs = questions(SimulatedPolicy(policy_config(luck, args.seed)), args.problems, args.seed)
        table = {}
        for method in args.methods:
            score = run(method, luck, qs, args.seed)
            table[method] = score.row()
            if method == DEFAULT:
                default[luck] = table[method]
                default_calibration += score.calibration
        lucky = sum(q.status == "correct" and arithmetic.true_first_error(q.steps) >= 0 for q in qs)
        print_table(
            f"luck q {luck}: {args.problems} problems of 10-20 steps, step error 0.03-0.2 per problem, "
            f"{sum(q.status == 'correct' for q in qs)} solutions correct ({lucky} of them by luck)",
            table,
        )
    pooled = Score(calibration=default_calibration)
    print(f"\n{DEFAULT}: ECE of p_good over all settings {pooled.ece():.3f}")
    print(
        json.dumps(
            {
                "min_good_precision": min(r["good prec"] for r in default.values()),
                "min_bad_precision": min(r["bad prec"] for r in default.values()),
                "coverage": {str(q): r["coverage"] for q, r in default.items()},
                "ece": round(max(r["ECE p_good"] for r in default.values()), 3),
                "rollouts_per_question": {str(q): r["rollouts/q"] for q, r in default.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
