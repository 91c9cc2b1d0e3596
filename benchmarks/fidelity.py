"""Label fidelity across a suite of simulated worlds: which labels are right, how many steps get one,
and whether `p_good` means what it says.

Every world is the simulated policy (prm_synth/simulated/engines.py) writing arithmetic chains whose
true first error is recomputed from the text (arithmetic.true_first_error), never taken from a
labeler. Luck q is the chance that a continuation of a wrong prefix still reaches the gold answer
(and, `recover_in_sample`, that a sampled solution with an error still ends on it). Each world
breaks one assumption of a change-point model (one luck rate per run, a geometric clean curve,
exact grading, one step per line, independent rollouts); the first is the model's own world:

- in_model: 10-20 steps, step error drawn per problem from 0.03-0.2, luck 0.15.
- hard_step: one hard step per problem (fresh errors 0.5 there, 0.02 elsewhere), luck 0.
- hard_step_luck: the same with luck 0.15.
- problem_luck: luck drawn per problem from 0-0.7 (step error 0.03-0.2).
- high_luck: luck 0.6 for every problem (above the old posterior's grid, which stops at 0.45); one of
  the two hardest worlds: a wrong prefix reaches the answer almost as often as a right one.
- very_hard: step error 0.3-0.5 per problem, luck 0.05 (one of the two hardest worlds).
- ungradable: 15 % of completions (rollouts and samples) cannot be graded: half cut off at
  max_tokens (finish reason "length"), half without an answer; luck 0.05.
- step_drift: a continuation puts two operations on one line (a skipped step) or adds a line
  without an equation (an extra step), each 15 % a step, so rollouts and the sampled solution
  write a different number of steps than the prefix implies; luck 0.1.
- lengths: solutions of 3 to 40 steps, step error 0.01-0.1, luck 0.1.
- recent_luck: luck that depends on where the prefix ends: a continuation notices and fixes a recent
  error with probability 0.4 * 0.5^d (d = steps written after it) on top of luck 0.05 (the prefix
  right after the error looks almost clean).
- correlated: all rollouts of one prefix share a factor exp(0.7 z), z ~ N(0, 1), on their step error
  and the odds of their luck (overdispersed counts); luck 0.15.
- repair: the policy repairs an early slip (first half of the chain) on the next step with chance 0.5,
  in its sampled solution and in rollouts alike: a solution can hold a wrong step and still end on the
  gold answer, and prefixes after the repair look clean (step error 0.03-0.2, luck 0.05).
- two_lucks: one hard step per problem as in hard_step, and two luck populations: half the problems
  at luck 0, half at 0.6 (`recover_choices`), so the shard's luck has two modes where a pooled prior
  with one would fit neither.
- luck_05, luck_15, luck_30: every step wrong with chance 0.1 on every problem, luck 0.05 / 0.15 /
  0.3: the worlds of the measurement from outside the project that issue 29 reports.
- mixed: one hard step (0.4, 0.03 elsewhere), luck per problem 0-0.5, 10 % ungradable and 10 %
  step drift at once.

Beyond math (benchmarks/domain_worlds.py, under "domains" in the JSON line): a code world (programs
run in the sandbox, bugs at known steps, some hidden by a later step), a multiple-choice world and a
no-gold world (majority pseudo-gold, wrong on a known share; judged and filtered by soft consensus with
each row's pseudo-gold doubt, and its variants), each on the domain worlds' development seeds 0-3 (their held-out 1012-1013 with `--seeds heldout`).

Each world's problems get one sampled solution each (`--samples N`: N, which the default search
labels with their problem's luck shared) and are labeled through the library's labeler
(`annotate.make_labeler`: sampling, scheduler, grading, the annotators), as `prm-synth run` does.

Per world and method: good / bad precision of the emitted labels; coverage (labeled steps among the
steps up to and including the true first error, every step of a clean solution); first_error_accuracy
(rows whose solution holds an error and whose first bad label is on the true first error, among the
rows with an error) and rollouts_per_located_error (rollouts spent on the rows with an error, sampled
solution included, per row located exactly: what one exactly placed first error costs); ece_kept and a
reliability table of `p_good` over the steps a trainer keeps: a row's steps up to and including its
first error as the row says (its first bad label, else its first step with p_good < 0.5, else all
of them). The steps after it hold that error and would score about 0 trivially, so they are left
out; the choice reads the row only, never the truth, so it cannot favour a labeler. max_bin_gap, the largest |mean p_good - observed share still correct| over bins with at
least 100 such steps; rollouts_per_question (per sampled solution, itself included); unknown_rate
(ungradable rollouts among all rollouts). A reliability diagram (PNG) is saved per run.

knob_independent: the default method on the `mixed` world, run twice with different
`run.max_in_flight` and `run.max_batch_requests`: every row must be identical, every column
(tests/annotate/test_changepoint.py checks the same with two solutions a problem, where solutions share
prefixes: there `tokens` may differ, as a prefix's samples can be split into requests differently).

Last line, one JSON object for the default method:
{"worlds": {NAME: {"good_precision", "bad_precision", "coverage", "first_error_accuracy",
"rollouts_per_located_error", "ece_kept", "max_bin_gap", "rollouts_per_question", "unknown_rate"}},
"min_good_precision", "min_bad_precision", "min_coverage", "min_first_error_accuracy", "max_bin_gap",
"knob_independent"}
(with --methods, one more JSON line per extra method precedes it, in the same shape).

Seeds: `--seeds dev` (0-17, the seeds settings are chosen on: the ablation's screenings too),
`--seeds used` (1000-1008, 1010-1011: once called held-out, then looked at by a choice: the 2026-12-05
ablation chose its removals on 1000-1001 and confirmed them on 1002-1003; the 2026-12-06 round kept two
settings after its report on 1004-1005, and its second round one after its report on 1006-1007; 1008
gates CI in tests/test_labels_vs_truth.py and 1010-1011 shaped the domain worlds; neither development nor
held-out now), `--seeds heldout` (1009, 1012-1029,
which no choice has looked at: report these), `--seeds A-B` or `--seeds N` (`--seed N`
alone: one seed, as before). Over several seeds each world's figures are the mean and standard error
over seeds, the reliability table and diagram pool the seeds, and the last line is
{"method", "seeds", "worlds": {NAME: {FIGURE: {"mean", "se"}}}, "min_FIGURE" (the worst world's mean),
"mean_FIGURE" and "mean_FIGURE_se" (the mean over worlds, its standard error over seeds),
"world_seeds_under_0.95" (world-seeds with good or bad precision under 0.95), "world_seeds",
"max_bin_gap", "knob_independent"} (the knob check runs once, on the first seed; `--knob-problems 0`
skips it: null). `--per-seed PATH` writes every world-seed's figures as JSON (benchmarks/ablation.py
pairs them). `--set NAME=VALUE` (repeatable) runs a changed labeler (benchmarks/labeler_settings.py
names what can be set).

    python benchmarks/fidelity.py --worlds all [--problems 150] [--methods default mc8 sprt]
    python benchmarks/fidelity.py --worlds all --seeds heldout
    python benchmarks/fidelity.py --worlds all --seeds 0-3 --set bad_confidence=0.9

`--worlds long`: thinking traces of 100, 300 and 1000 paragraph steps under a token budget, not part of
`all` (benchmarks/long_worlds.py says what they are and what is reported).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# One core: the posterior's array work is small, and BLAS threads would only contend.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import labeler_settings  # noqa: E402  (benchmarks/, beside this file)

from prm_synth.annotate.labeler import make_labeler  # noqa: E402
from prm_synth.config import PipelineConfig  # noqa: E402
from prm_synth.problems.sources import iter_problems  # noqa: E402
from prm_synth.records import LabeledRecord, Problem  # noqa: E402
from prm_synth.simulated import arithmetic  # noqa: E402
from prm_synth.simulated.engines import SimulatedPolicy  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import long_worlds  # noqa: E402  (benchmarks/long_worlds.py: the thinking-trace worlds, `--worlds long`)

# name -> (policy overrides, (min_ops, max_ops))
WORLDS: dict[str, tuple[dict[str, Any], tuple[int, int]]] = {
    "in_model": ({"step_error_range": (0.03, 0.2), "recover": 0.15}, (10, 20)),
    "hard_step": ({"step_error": 0.02, "hard_step_error": 0.5, "recover": 0.0}, (10, 20)),
    "hard_step_luck": ({"step_error": 0.02, "hard_step_error": 0.5, "recover": 0.15}, (10, 20)),
    "problem_luck": ({"step_error_range": (0.03, 0.2), "recover_range": (0.0, 0.7)}, (10, 20)),
    "high_luck": ({"step_error_range": (0.03, 0.2), "recover": 0.6}, (10, 20)),
    "very_hard": ({"step_error_range": (0.3, 0.5), "recover": 0.05}, (10, 20)),
    "ungradable": ({"step_error_range": (0.03, 0.2), "recover": 0.05, "ungradable": 0.15}, (10, 20)),
    "step_drift": ({"step_error_range": (0.03, 0.2), "recover": 0.1, "step_drift": 0.3}, (10, 20)),
    "lengths": ({"step_error_range": (0.01, 0.1), "recover": 0.1}, (3, 40)),
    "recent_luck": ({"step_error_range": (0.03, 0.2), "recover": 0.05, "recent_recover": 0.4}, (10, 20)),
    "correlated": ({"step_error_range": (0.03, 0.2), "recover": 0.15, "correlation": 0.7}, (10, 20)),
    "repair": ({"step_error_range": (0.03, 0.2), "recover": 0.05, "repair": 0.5}, (10, 20)),
    "two_lucks": ({"step_error": 0.02, "hard_step_error": 0.5, "recover_choices": (0.0, 0.6)}, (10, 20)),
    # the outside measurement's worlds (issue 29): every step wrong with chance 0.1, luck 0.05 / 0.15 / 0.3
    "luck_05": ({"step_error": 0.1, "recover": 0.05}, (10, 20)),
    "luck_15": ({"step_error": 0.1, "recover": 0.15}, (10, 20)),
    "luck_30": ({"step_error": 0.1, "recover": 0.3}, (10, 20)),
    "mixed": (
        {
            "step_error": 0.03,
            "hard_step_error": 0.4,
            "recover_range": (0.0, 0.5),
            "ungradable": 0.1,
            "step_drift": 0.1,
        },
        (10, 20),
    ),
}
HARDEST = ("very_hard", "high_luck")  # coverage target 0.25 instead of 0.5
# name -> (annotate section, labels rule)
METHODS: dict[str, tuple[dict[str, Any], str]] = {
    "default": ({"method": "binary"}, "hard"),
    "mc8": ({"method": "mc", "k": 8}, "hard"),
    "sprt": ({"method": "binary", "search_test": "sprt"}, "hard"),
    "changepoint": ({"method": "binary", "search_test": "changepoint"}, "hard"),
    # one row per root-to-leaf path of each question's tree; the paper's bisection, and the posterior's
    "omegaprm": ({"method": "omegaprm"}, "hard"),
    "omegaprm-changepoint": ({"method": "omegaprm", "search_test": "changepoint"}, "hard"),
}
BINS = 10
SHORT = {
    "first_error_accuracy": "first_err_acc",
    "rollouts_per_located_error": "ro/located",
    "rollouts_per_question": "ro/question",
}
MIN_BIN = 100  # steps a bin needs before its gap counts
# dev: choices are made here; used: looked at by a choice (the 2026-12-05 ablation chose on 1000-1001 and
# confirmed on 1002-1003; the 2026-12-06 round kept mode_rise and recent_choices after reading 1004-1005,
# and its second round restored recent_share_prior after reading 1006-1007);
# 1008 gates CI (tests/test_labels_vs_truth.py) and 1010-1011 shaped the domain worlds (issue 57): used too;
# heldout: no choice has looked at them (report these; choose nothing on them)
SEED_RANGES = {
    "dev": list(range(0, 18)),
    "used": [*range(1000, 1009), 1010, 1011],
    "heldout": [1009, *range(1012, 1030)],
}
FIGURES = (
    "good_precision",
    "bad_precision",
    "first_error_accuracy",
    "coverage",
    "rollouts_per_question",
    "rollouts_per_located_error",
    "ece_kept",
)
KNOBS = ({"max_in_flight": 64, "max_batch_requests": 256}, {"max_in_flight": 3, "max_batch_requests": 5})


@dataclass
class Score:
    rows: int = 0
    good: int = 0
    good_right: int = 0
    bad: int = 0
    bad_right: int = 0
    covered: int = 0
    coverable: int = 0
    rollouts: int = 0
    unknown: int = 0
    all_rollouts: int = 0
    kept: list[tuple[float, bool]] = field(default_factory=list)  # (p_good, still correct) of kept steps
    seconds: float = 0.0
    with_error: int = 0  # rows whose solution holds an error
    located: int = 0  # of them, rows whose first bad label is on the true first error
    error_rollouts: int = 0  # rollouts spent on the rows with an error

    def add(self, row: LabeledRecord) -> None:
        n = len(row.steps)
        truth = arithmetic.true_first_error(row.steps)
        truth_end = truth if truth >= 0 else n - 1
        self.rows += 1
        self.rollouts += row.rollouts + 1  # the sampled solution is one more sample of the policy
        if truth >= 0:
            self.with_error += 1
            self.error_rollouts += row.rollouts + 1
            self.located += next((i for i, x in enumerate(row.labels) if x is False), None) == truth
        for i, label in enumerate(row.labels):
            still_good = truth < 0 or i < truth
            if label is True:
                self.good += 1
                self.good_right += still_good
            elif label is False:
                self.bad += 1
                self.bad_right += not still_good
            if i <= truth_end:
                self.coverable += 1
                self.covered += label is not None
        if row.p_good is None:
            return
        row_end = next((i for i, x in enumerate(row.labels) if x is False), None)
        if row_end is None:
            row_end = next((i for i, p in enumerate(row.p_good) if p is not None and p < 0.5), n - 1)
        for i, p in enumerate(row.p_good[: row_end + 1]):
            if p is not None:
                self.kept.append((p, truth < 0 or i < truth))

    def merged(self, other: Score) -> Score:
        """The two scores' rows as one (seeds pooled for the reliability table)."""
        out = Score()
        for f in self.__dataclass_fields__:
            setattr(out, f, getattr(self, f) + getattr(other, f))
        return out

    def bins(self) -> list[tuple[int, float, float]]:
        """Per bin of p_good: (count, mean p_good, observed share still correct)."""
        groups: list[list[tuple[float, bool]]] = [[] for _ in range(BINS)]
        for p, y in self.kept:
            groups[min(int(p * BINS), BINS - 1)].append((p, y))
        return [
            (len(g), sum(p for p, _ in g) / len(g), sum(y for _, y in g) / len(g)) if g else (0, math.nan, math.nan)
            for g in groups
        ]

    def ece(self) -> float | None:
        if not self.kept:
            return None
        return sum(c * abs(m - o) for c, m, o in self.bins() if c) / len(self.kept)

    def max_bin_gap(self) -> float | None:
        if not self.kept:
            return None
        return max((abs(m - o) for c, m, o in self.bins() if c >= MIN_BIN), default=0.0)

    def headline(self) -> dict[str, float | None]:
        def div(a: float, b: float) -> float | None:
            return round(a / b, 3) if b else None

        def rnd(x: float | None) -> float | None:
            return None if x is None else round(x, 3)

        return {
            "good_precision": div(self.good_right, self.good),
            "bad_precision": div(self.bad_right, self.bad),
            "coverage": div(self.covered, self.coverable),
            "first_error_accuracy": div(self.located, self.with_error),
            "rollouts_per_located_error": div(self.error_rollouts, self.located),
            "ece_kept": rnd(self.ece()),
            "max_bin_gap": rnd(self.max_bin_gap()),
            "rollouts_per_question": div(self.rollouts, self.rows),
            "unknown_rate": div(self.unknown, self.all_rollouts) or 0.0,
        }


def pipeline(
    world: str, method: str, problems: int, seed: int, run: dict[str, int] | None = None, samples: int = 1
) -> PipelineConfig:
    policy, (lo, hi) = WORLDS[world]
    annotate, rule = METHODS[method]
    return PipelineConfig.model_validate(
        {
            "name": f"fidelity-{world}",
            "problems": {"kind": "builtin", "count": problems, "seed": seed, "min_ops": lo, "max_ops": hi},
            "policy": {"kind": "simulated", "recover_in_sample": True, "seed": seed, **policy},
            "sampling": {"samples_per_problem": samples},
            "steps": {"strategy": "line"},
            "annotate": annotate,
            "labels": {"rule": rule},
            "run": run or KNOBS[0],
        }
    )


def label(config: PipelineConfig) -> tuple[list[LabeledRecord], Any]:
    problems = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    engine = SimulatedPolicy(config.policy)  # type: ignore[arg-type]
    result = make_labeler(config).label(engine, problems)
    return result.records, result.stats


def score(world: str, method: str, problems: int, seed: int, samples: int = 1) -> Score:
    started = time.perf_counter()
    records, stats = label(pipeline(world, method, problems, seed, samples=samples))
    s = Score()
    for row in records:
        s.add(row)
    s.all_rollouts = stats.rollouts
    s.unknown = getattr(stats, "unknown_rollouts", 0)
    s.seconds = time.perf_counter() - started
    return s


def knob_independent(problems: int, seed: int) -> bool:
    """The default method's rows on the mixed world do not depend on the run's concurrency knobs."""
    a, _ = label(pipeline("mixed", "default", problems, seed, KNOBS[0]))
    b, _ = label(pipeline("mixed", "default", problems, seed, KNOBS[1]))
    return [r.to_row() for r in a] == [r.to_row() for r in b]


def fmt(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def print_world(world: str, scores: dict[str, Score]) -> None:
    cols = list(next(iter(scores.values())).headline()) + ["seconds"]
    print(f"\n== {world}: {WORLDS[world][0]}, {WORLDS[world][1][0]}-{WORLDS[world][1][1]} steps")
    print(f"{'method':<12}" + "".join(f"{SHORT.get(c, c)[:12]:>13}" for c in cols))
    for method, s in scores.items():
        values = s.headline() | {"seconds": s.seconds}
        print(f"{method:<12}" + "".join(f"{fmt(values[c]):>13}" for c in cols))
    for method, s in scores.items():
        if not s.kept:
            continue
        print(f"  reliability of p_good, {method} ({len(s.kept)} kept steps): bin, count, mean p, observed")
        for b, (count, mean, observed) in enumerate(s.bins()):
            if count:
                flag = "  <- gap > 0.07" if count >= MIN_BIN and abs(mean - observed) > 0.07 else ""
                print(f"    [{b / BINS:.1f}, {(b + 1) / BINS:.1f})  {count:>6}  {mean:.3f}  {observed:.3f}{flag}")


def diagram(path: Path, results: dict[str, dict[str, Score]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    worlds = list(results)
    cols = 4
    rows = (len(worlds) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows), squeeze=False)
    for ax, world in zip(axes.flat, worlds, strict=False):
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
        for method, s in results[world].items():
            pts = [(m, o, c) for c, m, o in s.bins() if c]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=[8 + 60 * p[2] / len(s.kept) for p in pts])
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=method)
        ax.set_title(world)
        ax.set_xlabel("p_good")
        ax.set_ylabel("share still correct")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(worlds) :]:
        ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def summary(results: dict[str, dict[str, Score]], method: str) -> dict[str, Any]:
    worlds = {w: by_method[method].headline() for w, by_method in results.items() if method in by_method}

    def worst(key: str, pick: Any) -> float | None:
        values = [h[key] for h in worlds.values() if h[key] is not None]
        return pick(values) if values else None

    return {
        "method": method,
        "worlds": worlds,
        "min_good_precision": worst("good_precision", min),
        "min_bad_precision": worst("bad_precision", min),
        "min_coverage": worst("coverage", min),
        "min_first_error_accuracy": worst("first_error_accuracy", min),
        "max_bin_gap": worst("max_bin_gap", max),
    }


def _pooled(runs: dict[int, dict[str, dict[str, Score]]], world: str, method: str) -> Score:
    scores = [runs[seed][world][method] for seed in runs]
    out = scores[0]
    for s in scores[1:]:
        out = out.merged(s)
    return out


def parse_seeds(text: str) -> list[int]:
    """`dev`, `used`, `heldout`, `A-B` (both included) or `N` -> the seeds."""
    if text in SEED_RANGES:
        return list(SEED_RANGES[text])
    lo, sep, hi = text.partition("-")
    try:
        seeds = list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected dev, used, heldout, A-B or N") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r}: an empty range")
    return seeds


def mean_se(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and its standard error (None for no values; 0 for one)."""
    if not values:
        return None, None
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    var = sum((v - m) ** 2 for v in values) / (len(values) - 1)
    return m, math.sqrt(var / len(values))


def seed_summary(runs: dict[int, dict[str, dict[str, Score]]], method: str) -> dict[str, Any]:
    """The figures of `method` over seeds: per world mean and standard error, the worst world's mean,
    the mean over worlds with its standard error over seeds (`runs`: seed -> world -> method -> score)."""
    seeds = list(runs)
    worlds = list(runs[seeds[0]])
    heads = {seed: {w: runs[seed][w][method].headline() for w in worlds} for seed in seeds}

    def rnd(x: float | None) -> float | None:
        return None if x is None else round(x, 4)

    per_world: dict[str, dict[str, dict[str, float | None]]] = {}
    for w in worlds:
        per_world[w] = {}
        for fig in FIGURES:
            m, se = mean_se([v for seed in seeds if (v := heads[seed][w][fig]) is not None])
            per_world[w][fig] = {"mean": rnd(m), "se": rnd(se)}
    out: dict[str, Any] = {"method": method, "seeds": f"{seeds[0]}-{seeds[-1]}", "worlds": per_world}
    for fig in FIGURES:
        means = [x for w in worlds if (x := per_world[w][fig]["mean"]) is not None]
        pick = max if fig.startswith("rollouts") or fig == "ece_kept" else min
        out[f"{pick.__name__}_{fig}"] = pick(means) if means else None
        per_seed = []
        for seed in seeds:
            values = [v for w in worlds if (v := heads[seed][w][fig]) is not None]
            if values:
                per_seed.append(sum(values) / len(values))
        m, se = mean_se(per_seed)
        out[f"mean_{fig}"], out[f"mean_{fig}_se"] = rnd(m), rnd(se)
    out["world_seeds_under_0.95"] = sum(
        1
        for seed in seeds
        for w in worlds
        if any((heads[seed][w][f] or 1.0) < 0.95 for f in ("good_precision", "bad_precision"))
    )
    out["world_seeds"] = len(seeds) * len(worlds)
    gaps = [g for seed in seeds for w in worlds if (g := heads[seed][w]["max_bin_gap"]) is not None]
    out["max_bin_gap"] = max(gaps) if gaps else None
    return out


def print_seed_world(world: str, runs: dict[int, dict[str, dict[str, Score]]], methods: list[str]) -> None:
    """One world's figures over seeds: mean +- standard error per method."""
    seeds = list(runs)
    print(
        f"\n== {world}: {WORLDS[world][0]}, {WORLDS[world][1][0]}-{WORLDS[world][1][1]} steps, seeds {seeds[0]}-{seeds[-1]}"
    )
    print(f"{'method':<12}" + "".join(f"{SHORT.get(c, c)[:15]:>16}" for c in FIGURES))
    for method in methods:
        cells = []
        for fig in FIGURES:
            m, se = mean_se([v for s in seeds if (v := runs[s][world][method].headline()[fig]) is not None])
            cells.append("-" if m is None else f"{m:.3f}+-{se:.3f}")
        print(f"{method:<12}" + "".join(f"{c:>16}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--worlds", nargs="*", default=["all"], help=f"'all', 'long' (long_worlds.py) or names from {list(WORLDS)}"
    )
    parser.add_argument("--methods", nargs="*", default=["default"], help=f"names from {list(METHODS)}")
    parser.add_argument("--problems", type=int, default=150, help="problems (one solution each) per world")
    parser.add_argument(
        "--samples",
        type=int,
        default=1,
        help="sampled solutions a problem (the default search shares its luck between them)",
    )
    parser.add_argument("--knob-problems", type=int, default=40, help="problems of the knob-independence check")
    parser.add_argument("--seed", type=int, default=0, help="one seed (--seeds: several)")
    parser.add_argument(
        "--seeds",
        type=parse_seeds,
        default=None,
        help="dev (0-17: settings are chosen on these), used (1000-1007: choices looked at them), "
        "heldout (1009, 1012-1029: no choice looked at them; report these), A-B or N",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change one labeler setting for the run (repeatable; names: benchmarks/labeler_settings.py)",
    )
    parser.add_argument(
        "--domain-problems",
        type=int,
        default=None,
        help="problems per seed in each world beyond math (domain_worlds.py: code in the sandbox, choice, "
        "no gold), on their development seeds 0-3 (held-out 1012-1013 with --seeds heldout); default min(--problems, 40); 0 leaves them out",
    )
    parser.add_argument("--per-seed", type=Path, default=None, help="write every world-seed's figures here (JSON)")
    parser.add_argument("--png", type=Path, default=Path("benchmarks/out/fidelity_reliability.png"))
    from _report import ReportFlag, write_report  # benchmarks/ is on sys.path: run as a script

    parser.add_argument("--report", action=ReportFlag)
    args = parser.parse_args()
    if args.worlds == ["long"]:
        long_worlds.main(args.problems, args.seed, Score)
        return
    worlds = list(WORLDS) if args.worlds in (["all"], []) else args.worlds
    for name in worlds:
        if name not in WORLDS:
            parser.error(f"unknown world {name!r}; choose from {list(WORLDS)}")
    methods = list(dict.fromkeys(["default", *args.methods]))
    for name in methods:
        if name not in METHODS:
            parser.error(f"unknown method {name!r}; choose from {list(METHODS)}")

    try:
        labeler_settings.apply(labeler_settings.parse(args.overrides))
    except ValueError as e:
        parser.error(str(e))
    seeds = args.seeds or [args.seed]

    runs: dict[int, dict[str, dict[str, Score]]] = {}
    for seed in seeds:
        runs[seed] = {}
        for world in worlds:
            runs[seed][world] = {m: score(world, m, args.problems, seed, args.samples) for m in methods}
            if len(seeds) == 1:
                print_world(world, runs[seed][world])
                sys.stdout.flush()
        if len(seeds) > 1:
            print(f"seed {seed} done", flush=True)
    if args.per_seed is not None:
        args.per_seed.parent.mkdir(parents=True, exist_ok=True)
        figures = {
            str(seed): {w: {m: s.headline() for m, s in by.items()} for w, by in runs[seed].items()} for seed in seeds
        }
        args.per_seed.write_text(json.dumps({"overrides": args.overrides, "seeds": figures}))
    results = runs[seeds[0]]
    if len(seeds) > 1:
        for world in worlds:
            print_seed_world(world, runs, methods)
        results = {w: {m: _pooled(runs, w, m) for m in methods} for w in worlds}
    diagram(args.png, results)
    print(f"\nreliability diagram: {args.png}; hardest worlds (coverage target 0.25): {', '.join(HARDEST)}")
    summarize = summary if len(seeds) == 1 else (lambda _, m: seed_summary(runs, m))
    for method in methods[1:]:
        print(json.dumps(summarize(results, method)))
    head = summarize(results, "default")
    head["knob_independent"] = knob_independent(args.knob_problems, seeds[0]) if args.knob_problems else None
    domain_problems = min(args.problems, 40) if args.domain_problems is None else args.domain_problems
    if domain_problems > 0:
        import domain_worlds  # benchmarks/ is on sys.path: run as a script

        # the domain worlds' own held-out seeds (1012-1013) with held-out seeds, else their development ones
        held_out = all(seed in SEED_RANGES["heldout"] for seed in seeds)
        domain_seeds = domain_worlds.HELD_OUT if held_out else domain_worlds.DEVELOPMENT
        head["domains"] = domain_worlds.run(domain_problems, list(domain_seeds))
        for world, r in head["domains"].items():
            print(f"domain world {world}: good precision {r['good_precision']}, bad precision {r['bad_precision']}")
    print(json.dumps(head))
    write_report("fidelity", head)


if __name__ == "__main__":
    main()
