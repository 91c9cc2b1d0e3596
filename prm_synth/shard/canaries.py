"""Canaries: planted errors whose first step is known, labeled and judged like the shard's own rows.

A canary (`planter: continued`, the default) is one of the shard's own solutions cut at a chosen step k:
steps 0..k-1 as the policy wrote them, step k up to its result with that result changed (the first
number after its last "=", `plant_in_prefix`), and the rest written by the POLICY from there (one
sampled continuation, like any rollout, all of a shard's in batched engine calls: `continue_canaries`).
The policy carries the planted error on or repairs it, as it does with its own slips, and the canary's
final answer (graded like any solution) decides its answer class. Step k is a step where a natural
error could stand (`plantable`: it states a result that is not a number of the question, so no
restatement of the problem is changed), and it is cut right after the changed result, so no step states
the old result beside the new one. Sources are rows of both answer classes whose steps before k the
rollouts found clean; k is drawn where the shard's rollouts found their first errors (`natural_step`).
Since steps 0..k-1 are the policy's own and believed clean, step k is the canary's true first error.

`planter: in_place` is the former planter (`plant`): one number or operator of a step changed, every
other step as written, planted in right-answer rows whose rollouts found no error (the chain is whole
again right after the planted step, so the rollouts never face the policy's own recovery).

Clean controls (`controls`): a share of rows the rollouts found clean (every prefix at p_good >= 0.9), judged with
every sample beside the canaries: the judge's false alarms, measured.

The canaries go through the same labeler (`Labeler.label_solutions`, its own scheduler, so no row of
the data shares a probe with them) and the same judge with every sample (`judge_solutions`), and are
measured against the planted step (`measure`; the counts: prm_synth.records.canaries), including how
often the rollouts put the error after its step (the late-placement rate the posterior reads). They are
rows of their own, written apart (OUT/canaries/), never into data or rejected: a data row is the same
with canaries on or off.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from prm_synth.annotate.labeler import make_labeler  # the stage that labels the data labels the canaries
from prm_synth.config import PipelineConfig
from prm_synth.config.canaries import CanariesConfig
from prm_synth.engines.base import Engine, GenerationRequest, GenerationResult, RequestRefused, SamplingOptions
from prm_synth.grading.math import grade_completion, is_truncated
from prm_synth.grading.registry import grade_completions, make_grader
from prm_synth.judge.accuracy import answer_class, pinned_first_error
from prm_synth.judge.ask import UNPARSEABLE, Drawn, apply_verdicts, judge_solutions
from prm_synth.judge.posterior import first_error_prior, late_mixture
from prm_synth.prompting.prompts import policy_user_prompt
from prm_synth.prompting.steps import splitter
from prm_synth.prompting.thinking import engine_markers
from prm_synth.records import LabeledRecord, Problem
from prm_synth.records.canaries import CLASS_KEYS, CONTROL_KEYS, LATE_GRID, CanaryStats, late_key
from prm_synth.records.solutions import Solution
from prm_synth.records.stage import StageResult

# A number a step states (not part of a word or of a longer number); a spaced arithmetic operator.
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
OPERATOR = re.compile(r"(?<= )[+\-×÷*/](?= )")
BELIEVED_CLEAN = 0.9  # a prefix a canary may keep: the rollouts put it correct at this or more (p_good)
LATE_FLOOR = 1e-6  # the least likelihood a planted step has under a rate: one canary never rules a rate out
SWAP = {"+": "-", "-": "+", "×": "÷", "÷": "×", "*": "/", "/": "*"}
CANARY_PREFIX = "canary:"  # a canary's row id: never the id of a data row
CANARY_INDEX = 1_000_000  # a canary's solution index: after every sampled one
# the sample index of a canary's continuation: never one a rollout of the same prefix draws first (a
# rollout from the planted prefix must not repeat the continuation it is measuring)
CONTINUATION_SAMPLE = 1_000_000
# after the changed result, the characters kept before the policy writes on: spaces and punctuation,
# never a digit (the policy must not extend the planted number) nor a word
AFTER_RESULT = re.compile(r"[^\w]*")


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


def plant_in_prefix(steps: Sequence[str], step: int, rng: random.Random) -> Planted | None:
    """The prefix through step `step`, its result changed and the step cut right after it (the spaces and
    punctuation that follow kept): the policy writes the rest, so no step states the old result beside
    the new one. `Planted.steps` holds the prefix only. None where the step states no number."""
    text = steps[step]
    span = result_span(text)
    if span is None:
        return None
    value, places = span
    start, end = places[0]
    changed = _changed_number(value, rng)
    end += AFTER_RESULT.match(text, end).end() - end  # type: ignore[union-attr]  # [^\w]* always matches
    cut = text[:start] + changed + text[start + len(value) : end]
    return Planted([*steps[:step], cut], step, "number", value, changed)


def plantable(steps: Sequence[str], question: str, end: int) -> list[int]:
    """The steps before `end` where a natural error could stand: each states a result (`result_span`) that
    is not a number the question gives (a step that restates the problem is never changed)."""
    given = set(NUMBER.findall(question))
    return [i for i in range(min(end, len(steps))) if (span := result_span(steps[i])) and span[0] not in given]


def clean_end(record: LabeledRecord, level: float = BELIEVED_CLEAN) -> int:
    """The steps of a row the rollouts found clean: those before its first bad label (all without one)
    and before its first step whose prefix they put below `level` (`p_good`, where the labeler gives it)."""
    end = record.first_error_mc if record.first_error_mc >= 0 else len(record.steps)
    if record.p_good is not None and len(record.p_good) == len(record.steps):
        end = min(end, next((i for i, p in enumerate(record.p_good) if p < level), end))
    return end


def natural_step(candidates: Sequence[int], n: int, found: Sequence[float], rng: random.Random) -> int | None:
    """A step of `candidates` (of a row of n steps) where the shard's own first errors stand: a share of
    the row drawn from `found` (the shares at which the rollouts placed them, each spread over its step),
    uniform while the shard found fewer than 5; the candidate nearest it (the earlier on a tie)."""
    if not candidates:
        return None
    share = rng.choice(found) + rng.random() / n if len(found) >= 5 else rng.random()
    at = min(int(share * n), n - 1)
    return min(candidates, key=lambda i: (abs(i - at), i))


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


def choose_continued(
    records: Sequence[LabeledRecord], problems: Sequence[Problem], config: PipelineConfig, shard: int
) -> list[tuple[Problem, str, Planted]]:
    """The shard's planted prefixes (`planter: continued`): a stable draw (seed, shard, row id) of rows of
    both answer classes, each cut at a `plantable` step before its first bad label, drawn where the shard's
    first errors stand (`natural_step`). (problem, source row id, planted prefix) each."""
    cfg = config.canaries
    by_id = {p.id: p for p in problems}
    found = [r.first_error_mc / len(r.steps) for r in records if r.first_error_mc >= 0 and r.steps]
    pool = [r for r in records if r.final_correct is not None and len(r.steps) >= 2 and r.problem_id in by_id]
    pool.sort(key=lambda r: draw(cfg.seed, shard, r.id).random())
    out: list[tuple[Problem, str, Planted]] = []
    for record in pool:
        if len(out) >= how_many(len(records), len(pool), cfg):
            break
        problem = by_id[record.problem_id]
        rng = draw(cfg.seed, shard, record.id, "plant")
        at = natural_step(plantable(record.steps, problem.question, clean_end(record)), len(record.steps), found, rng)
        planted = None if at is None else plant_in_prefix(record.steps, at, rng)
        if planted is not None:
            out.append((problem, record.id, planted))
    return out


def _continuation_request(problem: Problem, planted: Planted, config: PipelineConfig) -> GenerationRequest:
    r = config.rollouts  # a canary's rest is written as a rollout's is
    return GenerationRequest(
        user=policy_user_prompt(problem.question),
        assistant_prefix="".join(planted.steps),
        n=1,
        sampling=SamplingOptions(max_tokens=r.max_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k),
        first_sample_index=CONTINUATION_SAMPLE,
    )


def continue_canaries(
    engine: Engine, config: PipelineConfig, chosen: Sequence[tuple[Problem, str, Planted]]
) -> list[Canary]:
    """The policy writes the rest of each planted prefix: one sampled continuation each, the shard's in
    batched engine calls (`run.max_batch_requests` a call). A canary is its prefix and continuation split
    and graded as a sampled solution is; one the engine refused, cut off at max_tokens, or whose split
    does not keep the planted step where it was planted is left out (a canary is never data)."""
    markers = engine_markers(config.policy, engine)
    split = splitter(config.steps, markers)
    grader = make_grader(config.grader)
    requests = [_continuation_request(p, planted, config) for p, _, planted in chosen]
    results: list[GenerationResult | None] = []
    step = max(1, config.run.max_batch_requests)
    for start in range(0, len(requests), step):
        batch = requests[start : start + step]
        try:
            results += engine.generate(batch)
        except RequestRefused:  # one refused request refuses its batch here: those canaries are left out
            results += [None] * len(batch)
    out: list[Canary] = []
    for (problem, source, planted), result in zip(chosen, results, strict=True):
        if result is None or not result.completions or is_truncated(result.completions[0].finish_reason):
            continue
        completion = result.completions[0]
        text = "".join(planted.steps) + completion.text
        steps = split(text)
        k = planted.step
        if len(steps) <= k or steps[:k] != planted.steps[:k] or not steps[k].startswith(planted.steps[k]):
            continue
        (verdict,) = grade_completions(grader, [(text, completion.finish_reason)], grader.key(problem), markers)
        solution = Solution(problem, CANARY_INDEX + len(out), steps, verdict, completion.generated_tokens)
        out.append(Canary(solution, source, replace(planted, steps=steps)))
    return out


def controls(
    records: Sequence[LabeledRecord], config: PipelineConfig, shard: int, canaries: int
) -> list[LabeledRecord]:
    """The shard's clean controls: `control_share` as many as its canaries, a stable draw of the rows the
    rollouts found clean (right answer, every step labeled good, every prefix at p_good >= BELIEVED_CLEAN)."""
    cfg = config.canaries
    pool = [r for r in records if r.final_correct is True and pinned_first_error(r, BELIEVED_CLEAN) == -1]
    pool.sort(key=lambda r: draw(cfg.seed, shard, r.id, "control").random())
    return pool[: min(len(pool), round(cfg.control_share * canaries))]


def choose(
    records: Sequence[LabeledRecord],
    problems: Sequence[Problem],
    config: PipelineConfig,
    shard: int,
    markers_engine: Engine | None = None,
) -> list[Canary]:
    """The shard's in-place canaries (`planter: in_place`): a stable draw (seed, shard, row id) of eligible
    rows, each planted in its last step (`wrong_answer_share` of them: the answer turns wrong) or an
    earlier one (the answer stays)."""
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


def measure(rows: Sequence[tuple[LabeledRecord, int]], continued: bool = True) -> CanaryStats:
    """Counts over (labeled and judged canary, planted step) pairs. The late-placement likelihoods only
    for canaries the policy `continued`: an in-place canary's chain is whole again right after its
    planted step, so how its rollouts place it says nothing of the policy's recovery from a slip."""
    stats = CanaryStats(planted=len(rows))
    keys: Counter[str] = Counter()
    for record, planted in rows:
        c = stats.by_answer.setdefault(answer_class(record), {k: 0 for k in CLASS_KEYS})
        c["canaries"] += 1
        stats.rollouts += record.rollouts
        stats.tokens += record.tokens
        f = record.first_error_mc
        c["mc_clean" if f == -1 else "mc_at" if f == planted else "mc_before" if f < planted else "mc_after"] += 1
        c["mc_late_steps"] += max(0, f - planted) if f >= 0 else 0
        # the planted step's likelihood under each late-placement rate, where the rollouts placed an error
        # at all (one they missed is the hidden share's, estimate.fit_hidden: late_prior leaves "none" alone)
        if continued and f >= 0 and planted < len(record.labels):
            prior = first_error_prior(record)
            for rate in LATE_GRID:
                key = late_key(rate)
                c[key] = c.get(key, 0.0) + math.log(max(late_mixture(prior, rate)[planted], LATE_FLOOR))
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


def measure_controls(stats: CanaryStats, rows: Sequence[LabeledRecord]) -> None:
    """Add the judged clean controls' votes to `stats.controls`: "no error" said, or a step named."""
    c = stats.controls = {k: 0 for k in CONTROL_KEYS} | stats.controls
    for record in rows:
        votes = [v for v in record.judge_votes if v != UNPARSEABLE]
        c["rows"] += 1
        c["votes"] += len(votes)
        c["said_clean"] += votes.count(-1)
        c["false_alarms"] += len(votes) - votes.count(-1)
        c["unreadable"] += len(record.judge_votes) - len(votes)


@dataclass
class CanaryRun(StageResult[dict[str, object], CanaryStats]):
    """A shard's canaries as a `StageResult`: their rows as written apart (OUT/canaries/; `kept`, also
    `rows`), and what they measured (`counters`, also `stats`; None without canaries). Nothing is rejected:
    a canary is never data."""

    @property
    def rows(self) -> list[dict[str, object]]:
        return self.kept

    # the clean controls' judge samples by row id and sample index: data rows the judge stage would ask
    # the same prompt at the same indices, so it reads these instead (judge/ask.judge_solutions `known`)
    drawn: dict[str, dict[int, Drawn]] = field(default_factory=dict)

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
    """Plant (and, `planter: continued`, let the policy write on from the plant), label (the shard's
    labeler, its own scheduler) and judge (every sample, with the clean controls) the shard's canaries."""
    if not config.canaries.enabled:
        return CanaryRun([], None)
    if config.canaries.planter == "continued":
        canaries = continue_canaries(engine, config, choose_continued(records, problems, config, shard))
        checks = controls(records, config, shard, len(canaries))
    else:
        canaries, checks = choose(records, problems, config, shard, engine), []
    if not canaries:
        return CanaryRun([])
    labeled = make_labeler(config).label_solutions(engine, [c.solution for c in canaries])
    rows = labeled.records
    requests = 0
    drawn: dict[str, dict[int, Drawn]] = {}
    if config.judge is not None and judge_engine is not None and rows:
        asked = rows + checks
        verdicts, judge_stats = judge_solutions(
            judge_engine, [(r.question, r.steps) for r in asked], config.judge, config.run.max_batch_requests
        )
        judged, _ = apply_verdicts(judge_engine, asked, verdicts, config.judge, judge_stats)
        drawn = {r.id: v.drawn for r, v in zip(checks, verdicts[len(rows) :], strict=True) if v is not None and v.drawn}
        requests = judge_stats.samples
    by_solution = {c.solution.id: c for c in canaries}
    if requests:  # a refused row is left out of `judged`: split by id, not by place
        rows, checks = [r for r in judged if r.id in by_solution], [r for r in judged if r.id not in by_solution]
    pairs = [(r, by_solution[r.id].planted.step) for r in rows]
    stats = measure(pairs, continued=config.canaries.planter == "continued")
    stats.judge_requests = requests
    if config.judge is not None and judge_engine is not None and checks:
        measure_controls(stats, checks)
    out: list[dict[str, object]] = []
    for record, _ in pairs:
        c = by_solution[record.id]
        row = replace(record, id=CANARY_PREFIX + c.source_id).to_row()
        out.append(row | {"planted_step": c.planted.step, "planted_change": f"{c.planted.before} -> {c.planted.after}"})
    return CanaryRun(out, counters=stats, drawn=drawn)
