"""What the default labeler costs in CPU, by solution length, and whether a GPU-speed engine waits on it.

Four measurements, all of CPU time (time.process_time / the children's rusage), never wall time, except
the occupancy, which is about time by nature:
1. Decisions: the default labeler (`make_labeler(config).annotate_given`) driven by `ProbeScheduler`
   on the simulated policy, on solutions of 10, 25, 100, 300 and 1000 steps (a world whose step error
   is 2 / length, so most solutions hold one error somewhere). Only the annotators' own CPU is
   counted: each resume (one probe decision) is timed. Per solution: the sum of its decisions. At 300
   steps and more these searches stop after one decision (the search's prior finds no probe worth its
   rollouts there: a policy question for the search, not a cost), so a second column times a decision
   with evidence: a posterior with 8 probed prefixes around an error at the middle and the search's two
   `best_probe` calls (`probed_decision_at`). `growth_exponent`: the slope of log(ms per probed
   decision) over log(steps) between the shortest and the longest length (1 = linear).
2. The whole pipeline at 3-12 steps (benchmarks/pipeline_overhead.py's measure): problems/s/core for
   the default and per-step MC (k 8), each after one untimed run of both on other problems (`warm_up`).
3. Occupancy: tests/_timed_engine.py's TimedEngine in real time at GPU-like speed (256 sequences,
   `--step-ms` per decode step; one simulated token is a word) over the default labeler on 100-step
   solutions (`run.max_in_flight` 256): the share of the engine's slot time used. Below 1 the engine
   waited on the labeler or on the run's own shape (its last searches probe one prefix after another
   with slots to spare): the same run on the modelled clock alone, where the labeler takes no time,
   gives the second (`occupancy_100_steps_labeler_free`).
4. The issue's "done when" ratio: marginal CPU per rollout of the default labeler over per-step MC's,
   through `prm-synth run` (child processes) on the simulated policy at 3-12 and at 40 steps, each
   the difference of two run sizes, so start-up cancels.

    python benchmarks/labeler_cost.py [--quick] [--skip-cli]

Last line: one JSON object (ms_per_decision_<n>, ms_per_probed_decision_<n>, ms_per_solution_<n>, growth_exponent,
pipeline_problems_per_s_per_core_default/_mc, occupancy_100_steps(_labeler_free), cores_per_gpu_100_steps,
marginal_cpu_ratio_3_12 / _40).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the time-model engine is a test instrument
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as prm_synth sets it (see prm_synth/__init__.py)

import yaml  # noqa: E402
from _timed_engine import TimedEngine  # noqa: E402
from pipeline_overhead import measure as pipeline_measure  # noqa: E402
from pipeline_overhead import warm_up as pipeline_warm_up  # noqa: E402

from prm_synth.annotate.changepoint import ChangepointSettings, Evidence, Posterior, Priors  # noqa: E402
from prm_synth.annotate.changepoint.search import best_probe, open_interval  # noqa: E402
from prm_synth.annotate.labeler import make_labeler, new_scheduler  # noqa: E402
from prm_synth.annotate.scheduler import SolutionJob  # noqa: E402
from prm_synth.config import validate_config  # noqa: E402
from prm_synth.pipeline import iter_shards  # noqa: E402
from prm_synth.prompting.prompts import policy_user_prompt  # noqa: E402
from prm_synth.records import Problem  # noqa: E402
from prm_synth.sampling.sample import sample_solutions  # noqa: E402
from prm_synth.simulated.engines import SimulatedPolicy  # noqa: E402

LENGTHS = (10, 25, 100, 300, 1000)


class TimedAnnotator:
    """An annotator (generator protocol) whose every resume is timed in CPU: one resume, one decision."""

    def __init__(self, inner: Iterator[Any]) -> None:
        self.inner, self.seconds, self.decisions = inner, 0.0, 0

    def __iter__(self) -> TimedAnnotator:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        t = time.process_time()
        try:
            return self.inner.send(value)
        finally:
            self.seconds += time.process_time() - t
            self.decisions += 1

    def close(self) -> None:
        self.inner.close()

    def throw(self, *args: Any) -> Any:
        return self.inner.throw(*args)


def config_at(steps: int, count: int, **extra: Any) -> Any:
    return validate_config(
        {
            "problems": {"kind": "builtin", "count": count, "seed": 11, "min_ops": steps, "max_ops": steps},
            "policy": {"kind": "simulated", "step_error": min(0.1, 2 / steps), "recover": 0.05},
            "sampling": {"samples_per_problem": 1},
        }
        | extra
    )


def decisions_at(steps: int, solutions: int) -> dict[str, float]:
    config = config_at(steps, solutions)
    engine = SimulatedPolicy(config.policy)  # type: ignore[arg-type]
    problems = [p for p in next(iter_shards(config)).items if isinstance(p, Problem)]
    sampled = sample_solutions(engine, problems, config).solutions
    labeler = make_labeler(config)
    timers = [TimedAnnotator(labeler.annotate_given(s.steps, s.verdict.status, s.id)) for s in sampled]
    jobs = [
        SolutionJob(s.id, s.problem.id, policy_user_prompt(s.problem.question), s.problem.gold_answer, t)  # type: ignore[arg-type]
        for s, t in zip(sampled, timers, strict=True)
    ]
    scheduler = new_scheduler(engine, config)
    for _ in scheduler.run(jobs):
        pass
    seconds = sum(t.seconds for t in timers)
    decisions = sum(t.decisions for t in timers)
    return {
        "ms/decision": 1000 * seconds / decisions,
        "decisions/solution": decisions / len(timers),
        "ms/solution": 1000 * seconds / len(timers),
        "rollouts/solution": scheduler.stats.rollouts / len(timers),
    }


def probed_decision_at(steps: int, probes: int = 8, repeat: int = 5) -> float:
    """CPU ms of one decision of the search on a solution midway through its search: `probes` prefixes
    probed with 4 rollouts each around a first error at the middle (clean ones mostly reach the answer,
    the rest rarely), an incorrect verdict; the decision builds the posterior and asks `best_probe` for
    the search's two kinds of candidates (the default ones, then the open interval's), as a loop of
    `changepoint_search` does. The driven searches above stop after one decision at 300+ steps (their
    prior finds no probe worth its rollouts), so this is what a decision costs there."""
    settings = ChangepointSettings()
    ev = Evidence.empty(steps, "incorrect")
    error = steps // 2
    for i, j in enumerate(sorted({round(x) for x in [0, *(steps * (k + 1) / (probes + 1) for k in range(probes))]})):
        ev.graded[j] = settings.batch
        ev.correct[j] = (3 if i % 3 else 4) if j <= error else (1 if i % 4 == 0 else 0)
    priors = Priors()
    candidates = (settings.probe_levels, settings.ambiguous_clean, False)  # levels, ambiguous band, no token budget

    def decision() -> None:
        post = Posterior(ev, priors)
        best_probe(post, priors, settings.batch, settings.max_rollouts, settings.max_rollouts, (), *candidates)
        interval = open_interval(post.p_good, settings.confidence) or range(max(0, error - 4), error + 1)
        spread = sorted({interval[round(i * (len(interval) - 1) / 4)] for i in range(5)})
        best_probe(
            post, priors, settings.batch, settings.localize_max_rollouts, settings.localize_cap, spread, *candidates
        )

    decision()  # tables built once per length
    t = time.process_time()
    for _ in range(repeat):
        decision()
    return 1000 * (time.process_time() - t) / repeat


def occupancy_at(steps: int, problems: int, step_ms: float | None, capacity: int) -> dict[str, float]:
    """The TimedEngine's occupancy over a run of the default labeler, in real time at `step_ms` a decode
    step, or (None) on the modelled clock alone: time passes only while the engine steps, as if the
    labeler took no time, so what is left short of 1 is the run's own shape (the last searches' probes,
    one after another, with slots to spare)."""
    # one shard holds them all (the default shard is 64 problems: too few to fill 256 slots)
    config = config_at(
        steps,
        problems,
        run={"max_in_flight": capacity, "max_batch_requests": 4 * capacity},
        output={"shard_size": problems},
    )
    policy = SimulatedPolicy(config.policy)  # type: ignore[arg-type]
    policy_cpu = [0.0]  # the simulated policy writing text stands for the GPU: not the labeler's CPU
    generate = policy.generate

    def timed_generate(requests: Any) -> Any:
        t = time.process_time()
        try:
            return generate(requests)
        finally:
            policy_cpu[0] += time.process_time() - t

    policy.generate = timed_generate  # type: ignore[method-assign]
    engine = TimedEngine(policy, capacity=capacity, seconds_per_step=None if step_ms is None else step_ms / 1000)
    items = [p for p in next(iter_shards(config)).items if isinstance(p, Problem)]
    cpu, wall = time.process_time(), time.perf_counter()
    result = make_labeler(config).label(engine, items)
    cpu, wall = time.process_time() - cpu - policy_cpu[0], time.perf_counter() - wall
    rollouts = result.stats.rollouts + result.sampled.completions
    full_speed_s = engine.busy / capacity * (step_ms or 0.0) / 1000  # the same work with every slot busy
    return {
        "occupancy": engine.occupancy(),
        "rollouts": rollouts,
        "wall_s": wall,
        "engine_s": engine.now * (step_ms or 0.0) / 1000,
        "labeler_cpu_s": cpu,
        "policy_cpu_s": policy_cpu[0],
        "cpu_ms_per_rollout": 1000 * cpu / rollouts,
        "gpu_rollouts_per_s": rollouts / full_speed_s if full_speed_s else math.inf,
    }


def cli_run(method: dict[str, Any], lo: int, hi: int, count: int) -> tuple[float, int]:
    """CPU seconds of `prm-synth run` (all its processes) and the rollouts it spent."""
    data = {
        "name": "labeler-cost",
        "problems": {"kind": "builtin", "count": count, "seed": 5, "min_ops": lo, "max_ops": hi},
        "policy": {"kind": "simulated", "step_error": min(0.1, 2 / hi), "recover": 0.05},
        "sampling": {"samples_per_problem": 1},
        "annotate": method,
        "output": {"shard_size": 500},
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pipeline.yaml"
        path.write_text(yaml.safe_dump(data))
        env = os.environ | {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PYTHONPATH": str(ROOT)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(path), "--out", str(Path(tmp) / "out"), "--json"]
        subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=ROOT)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        manifest = json.loads((Path(tmp) / "out" / "manifest.json").read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, int(manifest["totals"]["stats"]["rollouts"])


# Problems in the larger run of each method, per length: each about 5 s more CPU than the smaller run
# (`--quick`; twice that at full size), so the difference stands clear of `prm-synth run`'s start-up,
# which moves by a second or two between runs (Prefect, imports). A fixed size did not: at 3-12
# steps 220 more problems cost the default about a second, and `--quick` read ratios from 0.09 to
# 26 in one day's runs. MC's rollouts are cheap: its runs are the larger ones.
CLI_LARGE = {"3_12": {"default": 1000, "mc": 3000}, "40": {"default": 250, "mc": 350}}


def marginal_ratio(lo: int, hi: int, small: int, large: dict[str, int], repeats: int = 1) -> dict[str, float]:
    """Marginal CPU per rollout of the default and of MC through `prm-synth run`: runs of `small` and
    `large[method]` problems differenced. Each size runs `repeats` times and its least CPU counts: a
    busy machine only ever adds to a run's CPU (cache misses, a slower start-up)."""
    per_rollout = {}
    for name, method in (("default", {"method": "binary"}), ("mc", {"method": "mc", "k": 8})):
        cpu_s, roll_s = min(cli_run(method, lo, hi, small) for _ in range(repeats))
        cpu_l, roll_l = min(cli_run(method, lo, hi, large[name]) for _ in range(repeats))
        per_rollout[name] = 1000 * (cpu_l - cpu_s) / max(1, roll_l - roll_s)
    return {
        "default ms/rollout": per_rollout["default"],
        "mc ms/rollout": per_rollout["mc"],
        "ratio": per_rollout["default"] / per_rollout["mc"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (minutes on a shared machine)")
    parser.add_argument("--skip-cli", action="store_true", help="leave out the `prm-synth run` ratio")
    parser.add_argument("--step-ms", type=float, default=10.0, help="modelled GPU decode step (ms)")
    parser.add_argument("--capacity", type=int, default=256, help="modelled GPU sequences in flight")
    from _report import ReportFlag, write_report  # benchmarks/ is on sys.path: run as a script

    parser.add_argument("--report", action=ReportFlag)
    args = parser.parse_args()
    q = args.quick
    out: dict[str, Any] = {}

    print("default labeler, CPU of its decisions (the annotators' own resumes), simulated policy, step error 2/n;")
    print("probed: one decision on a solution with 8 probed prefixes around an error at the middle")
    print(
        f"{'steps':>6}{'ms/decision':>13}{'decisions':>11}{'ms/solution':>13}{'rollouts':>10}{'probed ms/decision':>20}"
    )
    costs = {}
    # once per process, not per decision: the compiled loops load from numba's disk cache (~0.2 s;
    # compiled on the first run after an install or a change to them) and the first tables are built
    decisions_at(LENGTHS[0], 2)
    for n in LENGTHS:
        solutions = (4 if n >= 300 else 8) if q else (8 if n >= 300 else 24)
        c = costs[n] = decisions_at(n, solutions)
        c["probed"] = probed_decision_at(n)
        print(
            f"{n:>6}{c['ms/decision']:>13.2f}{c['decisions/solution']:>11.1f}{c['ms/solution']:>13.1f}"
            f"{c['rollouts/solution']:>10.1f}{c['probed']:>20.2f}",
            flush=True,
        )
        out[f"ms_per_decision_{n}"] = round(c["ms/decision"], 3)
        out[f"ms_per_probed_decision_{n}"] = round(c["probed"], 3)
        out[f"ms_per_solution_{n}"] = round(c["ms/solution"], 2)
    lo, hi = LENGTHS[0], LENGTHS[-1]
    # growth of a decision with evidence (the driven ones at 300+ steps are a search that stopped at once)
    out["growth_exponent"] = round(math.log(costs[hi]["probed"] / costs[lo]["probed"]) / math.log(hi / lo), 3)

    problems = 200 if q else 1000
    print(
        f"\nwhole pipeline, {problems} problems of 3-12 steps (benchmarks/pipeline_overhead.py; both methods"
        " first run once on 50 other problems: the process's one-time costs are neither's)"
    )
    pipeline_warm_up()
    for name, method in (("default", "binary"), ("mc", "mc")):
        m = pipeline_measure(method, problems)
        print(f"{name:<8} {json.dumps(m)}", flush=True)
        out[f"pipeline_problems_per_s_per_core_{name}"] = m["problems/s/core"]

    # Enough solutions to fill every slot (about two rollouts in flight each). --quick: a quarter of the
    # slots at four times the speed, the same rollouts a second with a quarter of the solutions in flight.
    capacity, step_ms = (args.capacity // 4, args.step_ms / 4) if q else (args.capacity, args.step_ms)
    occ_problems = capacity * (1 if q else 2)
    o = occupancy_at(100, occ_problems, step_ms, capacity)
    print(
        f"\noccupancy: TimedEngine in real time, {capacity} sequences, {step_ms} ms a step, "
        f"{occ_problems} solutions of 100 steps, default labeler: {json.dumps({k: round(v, 3) for k, v in o.items()})}"
    )
    out["occupancy_100_steps"] = round(o["occupancy"], 3)
    # The same run on the modelled clock alone (a labeler that takes no time): the occupancy the run's
    # own shape allows. The difference is what the labeler's CPU costs the engine.
    free = occupancy_at(100, occ_problems, None, capacity)["occupancy"]
    print(f"the same run with a labeler that takes no time: occupancy {free:.3f}")
    out["occupancy_100_steps_labeler_free"] = round(free, 3)
    out["cpu_ms_per_rollout_100_steps"] = round(o["cpu_ms_per_rollout"], 3)
    # Cores a GPU's rollouts need at this length: the labeling CPU per rollout times the GPU's rollout rate.
    out["cores_per_gpu_100_steps"] = round(o["cpu_ms_per_rollout"] * o["gpu_rollouts_per_s"] / 1000, 2)

    if not args.skip_cli:
        small, scale, repeats = (20, 1, 1) if q else (50, 2, 2)
        print(
            f"\nmarginal CPU per rollout through `prm-synth run`, runs of {small} problems and of "
            + ", ".join(f"{m} {n * scale}" for m, n in CLI_LARGE["3_12"].items())
            + " (3-12 steps), "
            + ", ".join(f"{m} {n * scale}" for m, n in CLI_LARGE["40"].items())
            + f" (40 steps) differenced, the least CPU of {repeats} run(s) of each size"
        )
        for label, (a, b) in (("3_12", (3, 12)), ("40", (40, 40))):
            r = marginal_ratio(a, b, small, {m: n * scale for m, n in CLI_LARGE[label].items()}, repeats)
            print(f"{a}-{b} steps: {json.dumps({k: round(v, 3) for k, v in r.items()})}", flush=True)
            out[f"marginal_cpu_ratio_{label}"] = round(r["ratio"], 3)
            out[f"marginal_ms_per_rollout_default_{label}"] = round(r["default ms/rollout"], 3)
            out[f"marginal_ms_per_rollout_mc_{label}"] = round(r["mc ms/rollout"], 3)
    out["load_average"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out))
    write_report("labeler_cost", out)


if __name__ == "__main__":
    main()
