"""What each row-changing setting and rule of the default labeler earns: removed one at a time.

Every entry of `ABLATIONS` is one setting of the change-point search set to its plainest value (a
share 0, a cap equal to the budget, two thresholds made one) or one special-case rule switched off
(benchmarks/labeler_settings.py: `RULES`). Each runs benchmarks/fidelity.py on the same worlds,
seeds and problems as the unmodified labeler: development seeds (fidelity.py `dev`, the default 0-1),
since a screening chooses what to remove; the pruned labeler is then reported on held-out seeds
(`heldout`, 1008-1029), which no choice looks at. A world's sampled solutions do not depend on
the labeler, so the comparison is paired per world-seed. Per entry: the paired difference (removed
minus default; mean and standard error) of
- min good / bad precision: the worst world's, per seed (mean and standard error over seeds);
- mean good / bad precision, first-error accuracy, coverage, rollouts a question: over world-seeds.
Verdict: "within noise" when every difference is under 2 standard errors and no precision figure
drops by more than 0.005 and more than one standard error (a drop within one standard error is
noise, however large); "removal better" when what moves beyond noise moves the right way (more
accuracy or coverage, fewer rollouts) and no precision drops so; else "earns its place", followed by
the figures that got worse beyond noise or dropped.

Each run's figures go to --out (NAME.json, fidelity's `--per-seed`); a run whose file is there
already is not run again, so an interrupted ablation resumes. At most --jobs runs at once, each
under `nice`. Prints a Markdown table, then one JSON line; `--report` also writes it as a dated page,
benchmarks/results/ablation-seeds-SEEDS-DATE.md (the tuning table's verdicts point to these).

    python benchmarks/ablation.py --seeds 0-1 --problems 75 [--only NAME ...] [--jobs 2]
    python benchmarks/ablation.py --pair BASE.json OTHER.json   # two revisions' fidelity --per-seed files
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

# name -> (plainest value for `--set`, what setting it removes). Rules first by how much code they
# carry; settings of ChangepointSettings and module constants after.
ABLATIONS: dict[str, tuple[str, str]] = {
    "rule_right_answer_cap": ("off", "right answers' steps capped by the shard's measured hidden-error rate"),
    "check_correct": ("0.0", "no right answers' early prefixes tested (the shard's process-error measurement)"),
    "recent_choices": ("()", "no reading of an error with a fresh error's extra luck"),
    "recent_share_prior": ("0.5", "no lean against a fresh error's extra luck before the shard speaks"),
    "pool_after": ("1000000", "one phase: no search goes on under the shard's first-phase pooled priors"),
    "rule_lone_bad": ("off", "a lone bad label need not hold under the default / each luck mode"),
    "rule_repaired_slip": ("off", "no dip test for a repaired slip on tested right answers"),
    "localize_max_rollouts": ("56", "one budget (max_rollouts) while the first error is not pinned"),
    "rule_open_interval": ("off", "no probing inside the open interval between last good and first bad"),
    "rule_unbacked_bad": ("off", "a first bad label needs no measurement of its own prefix"),
    "rule_probe_value_priors": ("off", "probes valued under the shard's k, not capped at the default's"),
    "mode_rise": ("1e9", "the luck prior is one mode (no per-mode check of wrong answers' lone bad labels)"),
    "rule_main_mode_only": (
        "off",
        "restores mode_share 0.25: a wrong answer's lone bad label holds under each luck mode of a quarter or more",
    ),
    "k_choices": ("(60.0,)", "one overdispersion k, none chosen per shard"),
    "second_phase_localize_min_gain": ("0.006", "one localization threshold in both phases"),
    "localize_min_gain": ("0.01", "one gain threshold (min_gain) while localizing"),
    "localize_cap": ("56", "no higher cap a prefix while localizing than outside it (max_rollouts)"),
    "bad_confidence": ("0.9", "one confidence for good and bad labels"),
    "check_prefixes": ("1000", "every early prefix of a checked solution tested, no cap"),
    "pool_rounds": ("1", "one EM round of the shard's pooled priors"),
    "pool_strength": ("0.0", "no default priors in the pooled ones"),
    "slip_significance": ("0.0", "no dip test finds a repaired slip"),
    "slip_min_later": ("1000000", "no prefix read by the dip test"),
    "process_error_odds": ("1.0", "a tested right answer holds a process error only when certain"),
    "tested_share_prior": ("(0.0,1e-9)", "no prior on the shares measured on tested right answers"),
    "probe_levels": ("(0.5,)", "one probe level"),
    "ambiguous_clean": ("(0.5,0.5)", "a probed prefix is never a candidate again"),
    "batch": ("2", "two rollouts a probe"),
    "max_rollouts": ("128", "one budget (localize_max_rollouts) for every solution"),
    "confidence": ("0.95", "one confidence for good and bad labels, bad_confidence's"),
    "min_gain": ("0.0", "no gain threshold outside pinning: a search spends its budget"),
    "prefix_batch_min": ("1", "OmegaPRM's bisection asks a prefix probe_batch rollouts at a time"),
}
# Settings read by another labeling method than the default: screened on that method's rows (fidelity.py
# --methods), against that method's unmodified rows (baseline run `default-METHOD`).
METHOD_OF: dict[str, str] = {"prefix_batch_min": "omegaprm-changepoint"}
FIGURES = ("good_precision", "bad_precision", "first_error_accuracy", "coverage", "rollouts_per_question")
PRECISION = ("good_precision", "bad_precision")
BETTER_UP = {"good_precision", "bad_precision", "first_error_accuracy", "coverage"}
DROP = 0.005  # a precision drop beyond this is never noise


def run_args(args: argparse.Namespace, out: Path, override: str | None, method: str = "default") -> list[str]:
    cmd = [
        *(["nice", "-n", str(args.nice)] if args.nice else []),
        sys.executable,
        str(HERE / "fidelity.py"),
        "--worlds",
        *args.worlds,
        "--seeds",
        args.seeds,
        "--problems",
        str(args.problems),
        "--knob-problems",
        "0",
        "--per-seed",
        str(out),
        "--png",
        str(out.with_suffix(".png")),
        "--domain-problems",
        "0",
        *(["--methods", method] if method != "default" else []),
    ]
    return cmd + (["--set", override] if override else [])


def baseline(name: str) -> str:
    """The run an ablation is compared with: the unmodified labeler of its method."""
    method = METHOD_OF.get(name, "default")
    return "default" if method == "default" else f"default-{method}"


def run_all(args: argparse.Namespace, names: list[str]) -> None:
    """Run the baseline and every named ablation not run yet, at most `args.jobs` at once."""
    bases = list(dict.fromkeys(["default", *(baseline(n) for n in names)]))
    todo = [(b, None) for b in bases] + [(n, f"{n}={ABLATIONS[n][0]}") for n in names]
    todo = [(n, o) for n, o in todo if not (args.out / f"{n}.json").exists()]
    running: list[tuple[str, subprocess.Popen[bytes], float]] = []
    env = os.environ | {"PYTHONPATH": str(HERE.parent)}
    while todo or running:
        while todo and len(running) < args.jobs:
            name, override = todo.pop(0)
            log = (args.out / f"{name}.log").open("wb")
            method = METHOD_OF.get(name, name.removeprefix("default-") if name.startswith("default-") else "default")
            cmd = run_args(args, args.out / f"{name}.json", override, method)
            running.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), time.time()))
            print(f"started {name}", file=sys.stderr, flush=True)
        for item in list(running):
            name, proc, started = item
            if proc.poll() is not None:
                running.remove(item)
                state = "done" if proc.returncode == 0 else f"FAILED ({proc.returncode}; see {name}.log)"
                print(f"{name}: {state} in {time.time() - started:.0f} s", file=sys.stderr, flush=True)
        time.sleep(2)


def figures(path: Path, method: str = "default") -> dict[tuple[str, str], dict[str, float | None]]:
    """(seed, world) -> one method's figures, from a fidelity `--per-seed` file."""
    data = json.loads(path.read_text())["seeds"]
    return {(seed, world): by[method] for seed, worlds in data.items() for world, by in worlds.items()}


def mean_se(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values))


def compare(base: dict[tuple[str, str], Any], other: dict[tuple[str, str], Any]) -> dict[str, Any]:
    """Paired differences (other - base) and the verdict."""
    keys = sorted(base.keys() & other.keys())
    out: dict[str, Any] = {"world_seeds": len(keys)}
    for fig in FIGURES:
        diffs = [other[k][fig] - base[k][fig] for k in keys if base[k][fig] is not None and other[k][fig] is not None]
        out[f"mean_{fig}"] = mean_se(diffs)
    seeds = sorted({s for s, _ in keys})
    for fig in PRECISION:
        diffs = []
        for seed in seeds:
            b = [base[k][fig] for k in keys if k[0] == seed and base[k][fig] is not None]
            o = [other[k][fig] for k in keys if k[0] == seed and other[k][fig] is not None]
            if b and o:
                diffs.append(min(o) - min(b))
        out[f"min_{fig}"] = mean_se(diffs)
    moved, worse, drops = [], [], []
    for key, value in out.items():
        if key == "world_seeds" or math.isnan(value[0]):
            continue
        m, se = value
        fig = key.split("_", 1)[1]
        if fig in PRECISION and m < -DROP and -m > se:  # a drop within one standard error is noise
            drops.append(key)
        if abs(m) >= 2 * se and abs(m) > 1e-12:
            moved.append(key)
            if (m > 0) != (fig in BETTER_UP):
                worse.append(key)
    if not moved and not drops:
        out["verdict"] = "within noise"
    elif not worse and not drops:
        out["verdict"] = "removal better: " + ", ".join(moved)
    else:
        out["verdict"] = "earns its place: " + ", ".join(dict.fromkeys(worse + drops))
    return out


def cell(x: tuple[float, float], digits: int = 3) -> str:
    m, se = x
    return "-" if math.isnan(m) else f"{m:+.{digits}f} ± {se:.{digits}f}"


def table(rows: dict[str, dict[str, Any]]) -> str:
    import labeler_settings  # beside this file; it imports the labeler

    head = (
        "| setting | value | plainest | what removing it removes | Δ min good prec | Δ min bad prec | Δ mean good prec | Δ mean bad prec "
        "| Δ first-error acc | Δ coverage | Δ rollouts/question | verdict |"
    )
    lines = [head, "|" + "---|" * 12]
    for name, r in rows.items():
        lines.append(
            f"| `{name}` | `{labeler_settings.current(name)}` | `{ABLATIONS[name][0]}` | {ABLATIONS[name][1]} "
            f"| {cell(r['min_good_precision'])} | {cell(r['min_bad_precision'])} "
            f"| {cell(r['mean_good_precision'])} | {cell(r['mean_bad_precision'])} "
            f"| {cell(r['mean_first_error_accuracy'])} | {cell(r['mean_coverage'])} "
            f"| {cell(r['mean_rollouts_per_question'], 2)} | {r['verdict']} |"
        )
    return "\n".join(lines)


def main() -> None:
    from _report import ReportFlag, write_report  # beside this file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-1", help="development seeds (fidelity.py --seeds): a screening chooses")
    parser.add_argument("--problems", type=int, default=75)
    parser.add_argument("--worlds", nargs="*", default=["all"])
    parser.add_argument("--only", nargs="*", default=None, help=f"names from {list(ABLATIONS)}")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    parser.add_argument("--nice", type=int, default=10, help="nice level of each run (0: none)")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "ablation")
    parser.add_argument("--no-run", action="store_true", help="only read the runs in --out")
    parser.add_argument(
        "--pair",
        nargs=2,
        type=Path,
        metavar=("BASE", "OTHER"),
        help="only compare two fidelity --per-seed files (two labeler revisions on the same seeds), paired",
    )
    parser.add_argument(
        "--page",
        default=None,
        help="the results page's name before its date (default ablation-seeds-SEEDS; one a day replaces another)",
    )
    parser.add_argument("--report", action=ReportFlag)
    args = parser.parse_args()
    if args.pair:
        paired = compare(figures(args.pair[0]), figures(args.pair[1]))
        for key, value in paired.items():
            print(f"{key}: {cell(value) if isinstance(value, tuple) else value}")
        print(json.dumps({"base": str(args.pair[0]), "other": str(args.pair[1]), "paired": paired}))
        write_report(
            "ablation", {"pair": [str(p) for p in args.pair], "paired": paired}, page=args.page or "revisions-paired"
        )
        return
    names = args.only if args.only is not None else list(ABLATIONS)
    for name in names:
        if name not in ABLATIONS:
            parser.error(f"unknown ablation {name!r}; choose from {list(ABLATIONS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.no_run:
        run_all(args, names)
    base_path = args.out / "default.json"
    if not base_path.exists():
        sys.exit(f"error: no baseline run in {base_path}")
    base = figures(base_path)
    rows = {}
    for n in names:
        method, path, base_of = METHOD_OF.get(n, "default"), args.out / f"{n}.json", args.out / f"{baseline(n)}.json"
        if path.exists() and base_of.exists():
            rows[n] = compare(figures(base_of, method), figures(path, method))
    missing = [n for n in names if n not in rows]
    worlds = len({w for _, w in base})
    print(
        f"Paired differences, removed minus default: seeds {args.seeds}, {worlds} worlds x {args.problems} problems\n"
    )
    print(table(rows))
    if missing:
        print(f"\nnot measured: {', '.join(missing)}")
    head = {
        "seeds": args.seeds,
        "problems": args.problems,
        "ablations": {n: r | {"plain": ABLATIONS[n][0]} for n, r in rows.items()},
        "not_measured": missing,
    }
    print(json.dumps(head))
    # one page per seed range: the screenings on development seeds and their confirmations apart
    write_report("ablation", head, page=args.page or f"ablation-seeds-{args.seeds}")


if __name__ == "__main__":
    main()
