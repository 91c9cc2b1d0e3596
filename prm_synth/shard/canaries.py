"""Canaries: planted errors whose first step is known, labeled and judged like the shard's own rows.

A canary is one of the shard's own solutions with one error planted in a chosen step (`plant`): the
step's result (the first number after its last "=", every later occurrence of that number in the step)
changed by a small amount, or one of its spaced operators swapped. Nothing is added that the policy did
not write, and the steps before the chosen one are the policy's own, so the chosen step is the canary's
true first error. Only solutions whose final answer is right and whose rollouts found no error are
planted (their prefixes are the likeliest to be clean). A canary planted in the last step (the one
stating the answer) changes the answer: its final answer turns wrong; one planted earlier keeps the
answer right, so the error hides behind it, as a policy's repaired slip does.

The canaries go through the same labeler (`Labeler.label_solutions`, its own scheduler, so no row of
the data shares a probe with them) and the same judge with every sample (`judge_records`), and are
measured against the planted step (`measure`; the counts: prm_synth.records.canaries). A canary's answer
class is its own graded final answer (planted in the answer step: "wrong"; earlier: "right"). They are rows of their own, written
apart (OUT/canaries/), never into data or rejected: a data row is the same with canaries on or off.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from prm_synth.annotate.labeler import make_labeler  # the stage that labels the data labels the canaries
from prm_synth.config import PipelineConfig
from prm_synth.config.canaries import CanariesConfig
from prm_synth.engines.base import Engine
from prm_synth.grading.math import grade_completion
from prm_synth.judge.accuracy import answer_class
from prm_synth.judge.ask import UNPARSEABLE, judge_records
from prm_synth.prompting.thinking import engine_markers
from prm_synth.records import LabeledRecord, Problem
from prm_synth.records.canaries import CLASS_KEYS, CanaryStats
from prm_synth.records.solutions import Solution
from prm_synth.records.stage import StageResult

# A number a step states (not part of a word or of a longer number); a spaced arithmetic operator.
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
OPERATOR = re.compile(r"(?<= )[+\-×÷*/](?= )")
SWAP = {"+": "-", "-": "+", "×": "÷", "÷": "×", "*": "/", "/": "*"}
CANARY_PREFIX = "canary:"  # a canary's row id: never the id of a data row
CANARY_INDEX = 1_000_000  # a canary's solution index: after every sampled one


@dataclass(frozen=True)
class Planted:
    """One planted error: the new steps, the step changed, and what was changed there."""

    steps: list[str]
    step: int
    change: str  # "number" or "operator"
    before: str
    after: str


def draw(*parts: object) -> random.Random:
    """A random stream fixed by its parts (no Python hash randomization): the same canaries on resume."""
    return random.Random(hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=16).hexdigest())


def _changed_number(text: str, rng: random.Random) -> str:
    """A different number in the same form (integer stays integer; a decimal keeps its places)."""
    if "." in text:
        whole, places = text.split(".")
        value = int(whole + places) + rng.choice((1, 2, 3))
        digits = str(value).rjust(len(places) + 1, "0")
        return f"{digits[: -len(places)]}.{digits[-len(places) :]}"
    value = int(text)
    delta = rng.choice((1, 2, 3, 10))
    return str(value - delta if value - delta > 0 and rng.random() < 0.5 else value + delta)


def result_span(step: str) -> tuple[str, list[tuple[int, int]]] | None:
    """The step's result and where it stands: the first number after the last "=" (else the step's last
    number), and each occurrence of that number from there on. None: the step states no number."""
    numbers = list(NUMBER.finditer(step))
    anchor = step.rfind("=")
    after = [m for m in numbers if m.start() > anchor] if anchor >= 0 else []
    first = after[0] if after else (numbers[-1] if numbers else None)
    if first is None:
        return None
    value = first.group()
    return value, [(m.start(), m.end()) for m in numbers if m.start() >= first.start() and m.group() == value]


def plant(steps: Sequence[str], step: int, rng: random.Random, operator: bool = False) -> Planted | None:
    """`steps` with one error planted in step `step`: its result changed (or, `operator`, one spaced
    operator swapped, where it has one). Every other step, and the step outside the change, is as
    written. None where the step states no number (nor operator)."""
    text = steps[step]
    if operator and (ops := list(OPERATOR.finditer(text))):
        m = ops[rng.randrange(len(ops))]
        new = text[: m.start()] + SWAP[m.group()] + text[m.end() :]
        return Planted([*steps[:step], new, *steps[step + 1 :]], step, "operator", m.group(), SWAP[m.group()])
    span = result_span(text)
    if span is None:
        return None
    value, places = span
    changed = _changed_number(value, rng)
    new = text
    for start, end in reversed(places):
        new = new[:start] + changed + new[end:]
    return Planted([*steps[:step], new, *steps[step + 1 :]], step, "number", value, changed)


def eligible(record: LabeledRecord) -> bool:
    """A solution a canary may be planted in: right answer, no error the rollouts found, two steps or more."""
    return record.final_correct is True and record.first_error_mc == -1 and len(record.steps) >= 2


def how_many(rows: int, eligible_rows: int, config: CanariesConfig) -> int:
    """Canaries of a shard: its share of the rows, at least `min_per_shard`, at most the eligible rows."""
    return min(eligible_rows, max(config.min_per_shard, round(config.share * rows)))


@dataclass(frozen=True)
class Canary:
    """A canary solution to label and judge, and the truth it carries."""

    solution: Solution
    source_id: str  # the data row it was planted in
    planted: Planted


def choose(
    records: Sequence[LabeledRecord],
    problems: Sequence[Problem],
    config: PipelineConfig,
    shard: int,
    markers_engine: Engine | None = None,
) -> list[Canary]:
    """The shard's canaries: a stable draw (seed, shard, row id) of eligible rows, each planted in its
    last step (`wrong_answer_share` of them: the answer turns wrong) or an earlier one (the answer stays)."""
    cfg = config.canaries
    if not cfg.enabled:
        return []
    by_id = {p.id: p for p in problems}
    pool = [r for r in records if eligible(r) and r.problem_id in by_id]
    pool.sort(key=lambda r: draw(cfg.seed, shard, r.id).random())
    markers = engine_markers(config.policy, markers_engine)
    out: list[Canary] = []
    for record in pool:
        if len(out) >= how_many(len(records), len(pool), cfg):
            break
        rng = draw(cfg.seed, shard, record.id, "plant")
        last = len(record.steps) - 1
        at = last if rng.random() < cfg.wrong_answer_share else rng.randrange(last)
        planted = plant(record.steps, at, rng, operator=at < last and rng.random() < 0.5)
        if planted is None:
            continue
        problem = by_id[record.problem_id]
        verdict = grade_completion("".join(planted.steps), problem.gold_answer, "stop", markers)
        index = CANARY_INDEX + len(out)
        out.append(Canary(Solution(problem, index, planted.steps, verdict, 0), record.id, planted))
    return out


def canary_rows(canaries: Sequence[Canary], labeled: Sequence[LabeledRecord]) -> list[LabeledRecord]:
    """The labeled canaries (judged or not), each with its canary id."""
    by_solution = {c.solution.id: c for c in canaries}
    return [replace(r, id=CANARY_PREFIX + by_solution[r.id].source_id) for r in labeled if r.id in by_solution]


# ------------------------------------------------------------------ what they measure
def vote_key(vote: int, planted: int) -> str:
    """A vote's reading relative to the planted step: "miss" for -1, else its offset."""
    return "miss" if vote == -1 else str(vote - planted)


def measure(rows: Sequence[tuple[LabeledRecord, int]]) -> CanaryStats:
    """Counts over (labeled and judged canary, planted step) pairs."""
    stats = CanaryStats(planted=len(rows))
    keys: Counter[str] = Counter()
    for record, planted in rows:
        c = stats.by_answer.setdefault(answer_class(record), {k: 0 for k in CLASS_KEYS})
        c["canaries"] += 1
        stats.rollouts += record.rollouts
        stats.tokens += record.tokens
        f = record.first_error_mc
        c["mc_clean" if f == -1 else "mc_at" if f == planted else "mc_before" if f < planted else "mc_after"] += 1
        if f >= 0:  # the bad labels the placement gives: it and the labeled steps after it
            bad = [f, *(i for i in range(f + 1, len(record.labels)) if record.labels[i] is not None)]
            c["mc_bad_labels"] += len(bad)
            c["mc_bad_wrong"] += sum(1 for i in bad if i < planted)
        votes = [v for v in record.judge_votes if v != UNPARSEABLE]
        c["unreadable"] += len(record.judge_votes) - len(votes)
        c["votes"] += len(votes)
        for v in votes:
            if v == planted:
                c["named"] += 1
            elif v == -1:
                c["missed"] += 1
            else:
                c["before" if v < planted else "after"] += 1
                c["offset_sum"] += abs(v - planted)
            keys[vote_key(v, planted)] += 1
        row_keys = Counter(vote_key(v, planted) for v in votes)
        c["pairs"] += len(votes) * (len(votes) - 1) // 2
        c["pairs_agree"] += sum(n * (n - 1) // 2 for n in row_keys.values())
        c["pairs_missed"] += row_keys["miss"] * (row_keys["miss"] - 1) // 2
    stats.vote_keys = dict(keys)
    return stats


@dataclass
class CanaryRun(StageResult[dict[str, object], CanaryStats]):
    """A shard's canaries as a `StageResult`: their rows as written apart (OUT/canaries/; `kept`, also
    `rows`), and what they measured (`counters`, also `stats`; None without canaries). Nothing is rejected:
    a canary is never data."""

    @property
    def rows(self) -> list[dict[str, object]]:
        return self.kept

    @property
    def stats(self) -> CanaryStats | None:
        return self.counters


def run_canaries(
    engine: Engine,
    judge_engine: Engine | None,
    config: PipelineConfig,
    records: Sequence[LabeledRecord],
    problems: Sequence[Problem],
    shard: int,
) -> CanaryRun:
    """Plant, label (the shard's labeler, its own scheduler) and judge (every sample) the shard's canaries."""
    canaries = choose(records, problems, config, shard, engine)
    if not canaries:
        return CanaryRun([])
    labeled = make_labeler(config).label_solutions(engine, [c.solution for c in canaries])
    rows = labeled.records
    if config.judge is not None and judge_engine is not None and rows:
        rows, _, _ = judge_records(judge_engine, rows, config.judge, config.run.max_batch_requests)
    by_solution = {c.solution.id: c for c in canaries}
    pairs = [(r, by_solution[r.id].planted.step) for r in rows]
    stats = measure(pairs)
    out: list[dict[str, object]] = []
    for record, _ in pairs:
        c = by_solution[record.id]
        row = replace(record, id=CANARY_PREFIX + c.source_id).to_row()
        out.append(row | {"planted_step": c.planted.step, "planted_change": f"{c.planted.before} -> {c.planted.after}"})
    return CanaryRun(out, counters=stats)
