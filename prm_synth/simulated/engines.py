"""The simulated policy and judge: test and benchmark instruments with known ground truth.

It writes real text for builtin problems (prm_synth.simulated.arithmetic): one equation `a <op> b = c` per
step, the running value carried forward, ending with "The answer is N.". Each freshly written step
is wrong with probability `step_error` (a wrong `c`); a continuation of a prefix that already holds a
wrong step carries the wrong value on, except that with probability `recover` it silently goes back
to the right value and reaches the gold answer. The true first error of any solution is therefore
recomputable from its text alone (arithmetic.true_first_error).

Two options make it more like a real policy: `step_error_range` draws each problem's step error
(its difficulty) uniformly from a range, and `recover_in_sample` lets a completion that makes a
fresh error still end on the gold answer, with probability `recover` (its last equation lands on it):
sampled solutions can then be right by luck, and every prefix between the error and the end still
reaches the answer only at the luck rate.

Worlds that break one assumption of a labeler's model each (all off by default; the fidelity
benchmark documents them): per-problem luck (`recover_range`, or populations: `recover_choices`), one
hard step per problem (`hard_step_error`), ungradable completions (`ungradable`: cut off at
max_tokens, or no answer), continuations that skip or add a step (`step_drift`), luck that depends on how recent the error is
(`recent_recover`), rollouts of one prefix that share their fortune (`correlation`), and slips the policy
repairs (`repair`; with `repair_goes_on` in wrong-answer solutions as much as in right ones). Each draws
its randomness only when it is on, so the default policy writes what it always wrote.

Randomness is derived from (seed, prompt, prefix, sample index), so results do not depend on how
requests are batched or ordered, and a re-run reproduces every sample.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from prm_synth.config import JudgeErrorProfile, SimulatedJudgeConfig, SimulatedPolicyConfig
from prm_synth.engines.base import Completion, GenerationRequest, GenerationResult
from prm_synth.prompting.prompts import parse_judge_prompt, parse_verify_prompt, render_chain_step
from prm_synth.simulated import arithmetic


def digest(*parts: object) -> str:
    """A stable hex digest of the parts: the seed of a simulated sample (no Python hash randomization)."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(str(part).encode())
        h.update(b"\x00")
    return h.hexdigest()


def count_tokens(text: str) -> int:
    """A stand-in tokenizer: whitespace words (the benchmarks compare costs, not exact counts)."""
    return len(text.split())


class _SimulatedEngine:
    """What both simulated engines share: each sample's randomness comes from (its seed parts, sample
    index), so batching and order change nothing and re-runs repeat; tokens are whitespace words."""

    config: SimulatedPolicyConfig | SimulatedJudgeConfig

    @property
    def model_name(self) -> str:
        return self.config.model_name

    def close(self) -> None:
        pass

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        out = []
        for req in requests:
            sample = self._sampler(req)
            base = digest(*self._seed_parts(req))
            texts = [sample(random.Random(f"{base}:{req.first_sample_index + i}")) for i in range(req.n)]
            completions = tuple(self._completion(req, t) for t in texts)
            out.append(GenerationResult(completions, count_tokens(req.user) + count_tokens(req.assistant_prefix)))
        return out

    def _seed_parts(self, req: GenerationRequest) -> tuple[object, ...]:
        raise NotImplementedError

    def _sampler(self, req: GenerationRequest) -> Callable[[random.Random], str | tuple[str, str]]:
        """A sample's text, or (text, finish reason) when it did not stop on its own."""
        raise NotImplementedError

    def _completion(self, req: GenerationRequest, text: str | tuple[str, str]) -> Completion:
        """A sample's completion; (text, finish reason) when it did not stop on its own."""
        if isinstance(text, tuple):
            return Completion(text[0], count_tokens(text[0]), text[1])
        return Completion(text, count_tokens(text), "stop")


@dataclass(frozen=True)
class _Prefix:
    """What every continuation of one (question, prefix) shares: read once per request, not per sample,
    so a request's cost is its samples' text, not k re-readings of a long prefix."""

    problem: arithmetic.ChainProblem
    truth: list[int]  # the correct running values
    done: int  # equations the prefix already holds
    value: int  # the running value it carries on
    wrong: bool  # it already holds a wrong step
    luck: float  # a continuation's chance to go back to the right value (when wrong)
    error_at: list[float]  # each operation's chance of a fresh error
    first_wrong: int  # the prefix's first wrong line (-1: none)
    slip: bool  # the prefix ends on a fresh error in the first half of the chain (one a continuation may repair)


# A problem's prefixes are probed many times (one request each): parse its question once. Small on
# purpose: a bounded cache of every problem seen would still grow a run's memory by 1024 problems
# (tests/system/test_memory.py); a miss costs only a re-parse, which is what every request paid before.
_parse_question = functools.lru_cache(maxsize=64)(arithmetic.parse_question)


class SimulatedPolicy(_SimulatedEngine):
    def __init__(self, config: SimulatedPolicyConfig | None = None) -> None:
        self.config = config or SimulatedPolicyConfig()
        thinking = self.config.thinking
        # A thinking policy writes `<think>`, one equation a paragraph, `</think>`, then a boxed answer.
        self.markers = None if thinking is None else (thinking.open or "<think>", thinking.close or "</think>")
        self.sep = "\n" if self.config.step_format == "line" and self.markers is None else "\n\n"

    def _seed_parts(self, req: GenerationRequest) -> tuple[object, ...]:
        return (self.config.seed, req.user, req.assistant_prefix)

    def _sampler(self, req: GenerationRequest) -> Callable[[random.Random], str | tuple[str, str]]:
        problem = _parse_question(req.user)
        prefix = req.assistant_prefix
        if problem is None:
            text = "I do not know how to solve this problem."
        elif arithmetic.count_equations(prefix) >= len(problem.ops):
            text = self._ending(prefix)
        else:
            return partial(self._sample, partial(self._continue, self._read_prefix(req.user, problem, prefix), prefix))
        return partial(self._sample, lambda _rng: text)

    def _sample(self, write: Callable[[random.Random], str], rng: random.Random) -> str | tuple[str, str]:
        """One sample: the text `write` gives, or (ungradable) that text cut off or without an answer."""
        cfg = self.config
        ungradable = cfg.ungradable > 0 and rng.random() < cfg.ungradable
        text = write(rng)
        if not ungradable:
            return text
        if rng.random() < 0.5:  # cut off by max_tokens: ungradable whatever it says
            return text[: len(text) // 2], "length"
        if self.markers is not None:  # the trace never closes
            return text.split(self.markers[1], 1)[0] + "I am not able to finish this one."
        body = text.rsplit(". The answer is", 1)[0]
        return body + self.sep + "I am not able to finish this one."

    def _ending(self, prefix: str) -> str:
        """What a continuation of a prefix that holds every equation writes: the answer (after closing
        the trace, for a thinking policy), or nothing when the prefix holds it already."""
        if "The answer is" in prefix:
            return ""
        value = arithmetic.last_value(prefix)
        if self.markers is None:
            return f" The answer is {value}."
        if self.markers[1] in prefix:
            return f"The answer is \\boxed{{{value}}}."
        return ("" if prefix.endswith("\n") else "\n") + self._answer_section(value)

    def _answer_section(self, value: int) -> str:
        assert self.markers is not None
        return f"{self.markers[1]}\n\nThe answer is \\boxed{{{value}}}."

    def _read_prefix(self, user: str, problem: arithmetic.ChainProblem, prefix: str) -> _Prefix:
        """The state a continuation of `prefix` starts from (the prefix leaves steps to write)."""
        done = arithmetic.count_equations(prefix)
        truth = problem.values()
        value = problem.start if done == 0 else arithmetic.last_value(prefix)
        assert value is not None
        mood = self._mood(user, prefix)
        luck = self._scaled_odds(self.luck(problem), mood)
        lines = prefix.split("\n")
        first_wrong = arithmetic.true_first_error(lines)
        wrong = first_wrong >= 0 or bool(done and value != truth[done - 1])
        slip = first_wrong == done - 1 and 2 * (done - 1) < len(problem.ops)  # an early error just written
        if self.config.repair_goes_on and self.config.repair > 0:
            # only the running value tells a wrong prefix (a repaired slip left the chain clean), and any
            # fresh early error just written is a slip to repair, not only the prefix's first
            wrong = bool(done and value != truth[done - 1])
            slip = wrong and 2 * (done - 1) < len(problem.ops) and _last_equation_wrong(prefix)
        if wrong and self.config.recent_recover > 0:  # a recent error is noticed more often
            after = arithmetic.count_equations("\n".join(lines[first_wrong + 1 :])) if first_wrong >= 0 else 0
            luck = min(1.0, luck + self.config.recent_recover * 0.5**after)
        return _Prefix(problem, truth, done, value, wrong, luck, self._errors(problem, mood), first_wrong, slip)

    def _continue(self, state: _Prefix, prefix: str, rng: random.Random) -> str:
        problem, truth, value, luck, error_at = state.problem, state.truth, state.value, state.luck, state.error_at
        wrong, done, slip = state.wrong, state.done, state.slip
        if wrong and self.config.repair > 0 and slip and rng.random() < self.config.repair:
            value, wrong = truth[done - 1], False  # the slip just written is noticed and repaired
            fresh_errors = True
        elif wrong and rng.random() < luck:
            value, wrong = truth[done - 1], False
            fresh_errors = False  # a recovered continuation reaches the gold answer
        else:
            fresh_errors = not wrong
        equations = []
        lucky = False  # recover_in_sample: this completion's own error will end on the gold answer
        for j in range(done, len(problem.ops)):
            op, b = problem.ops[j]
            try:
                c = arithmetic.apply(value, op, b)
            except ValueError:  # a foreign prefix made the division inexact: the step is wrong
                c = value // b
            repaired = False
            if fresh_errors and rng.random() < error_at[j]:
                c = self._wrong_value(c, problem, j, rng)
                fresh_errors = False  # from now on the wrong value is carried on
                repaired = self.config.repair > 0 and 2 * j < len(problem.ops) and rng.random() < self.config.repair
                fresh_errors = repaired and self.config.repair_goes_on  # a repaired slip left the chain clean
                lucky = not repaired and self.config.recover_in_sample and rng.random() < luck
            if lucky and j == len(problem.ops) - 1:
                c = truth[-1]  # the last (false) equation happens to land on the gold answer
            equations.append(arithmetic.equation_text(value, op, b, c))
            value = truth[j] if repaired else c  # a repaired slip: the chain goes on from the right value
        lines = self._drift(equations, rng) if self.config.step_drift > 0 else equations
        if self.markers is not None:
            text = self.sep.join(lines) + "\n" + self._answer_section(value)
            if not prefix:
                return self.markers[0] + "\n" + text
        else:
            text = self.sep.join(lines) + ". " + arithmetic.answer_text(value)
        if prefix and not prefix.endswith("\n"):
            text = self.sep + text
        return text

    def _drift(self, equations: list[str], rng: random.Random) -> list[str]:
        """Lines from equations, some merged (a skipped step) and some followed by a remark (an extra one)."""
        lines: list[str] = []
        merge = False
        for eq in equations:
            if merge:
                lines[-1] += f", then {eq}"
            else:
                lines.append(eq)
            u = rng.random()
            merge = u < self.config.step_drift / 2
            if self.config.step_drift / 2 <= u < self.config.step_drift:
                lines.append("Let me keep going with that value.")
        return lines

    def step_error(self, problem: arithmetic.ChainProblem) -> float:
        """This problem's step error: fixed, or drawn once per problem from `step_error_range`."""
        if self.config.step_error_range is None:
            return self.config.step_error
        lo, hi = self.config.step_error_range
        return random.Random(digest(self.config.seed, "difficulty", problem)).uniform(lo, hi)

    def luck(self, problem: arithmetic.ChainProblem) -> float:
        """This problem's luck rate: `recover`, or drawn once per problem from `recover_range` or
        `recover_choices`."""
        if self.config.recover_choices is not None:
            return random.Random(digest(self.config.seed, "luck", problem)).choice(self.config.recover_choices)
        if self.config.recover_range is None:
            return self.config.recover
        lo, hi = self.config.recover_range
        return random.Random(digest(self.config.seed, "luck", problem)).uniform(lo, hi)

    def hard_step(self, problem: arithmetic.ChainProblem) -> int | None:
        """The index of this problem's hard step (None when the world has none)."""
        if self.config.hard_step_error is None:
            return None
        return random.Random(digest(self.config.seed, "hard", problem)).randrange(len(problem.ops))

    def _errors(self, problem: arithmetic.ChainProblem, mood: float) -> list[float]:
        """Each operation's chance of a fresh error for this prefix's continuations."""
        base = min(0.95, self.step_error(problem) * mood)
        out = [base] * len(problem.ops)
        hard = self.hard_step(problem)
        if hard is not None:
            assert self.config.hard_step_error is not None
            out[hard] = min(0.95, self.config.hard_step_error * mood)
        return out

    def _mood(self, user: str, prefix: str) -> float:
        """The factor all continuations of one prefix share (1 unless rollouts are correlated)."""
        if self.config.correlation <= 0:
            return 1.0
        z = random.Random(digest(self.config.seed, "mood", user, prefix)).gauss(0.0, 1.0)
        return math.exp(self.config.correlation * z)

    @staticmethod
    def _scaled_odds(rate: float, factor: float) -> float:
        if factor == 1.0 or rate <= 0.0 or rate >= 1.0:
            return rate
        odds = rate / (1.0 - rate) * factor
        return odds / (1.0 + odds)

    @staticmethod
    def _wrong_value(c: int, problem: arithmetic.ChainProblem, j: int, rng: random.Random) -> int:
        """A wrong result that keeps every later division exact and never returns to the truth.

        The error is a nonzero multiple of the product of all later divisors: + and - keep the
        difference, × multiplies it, ÷ divides it by a factor it holds, so it never becomes 0.
        """
        unit = math.prod(b for op, b in problem.ops[j + 1 :] if op == "÷")
        delta = unit * rng.choice((1, 2, 3))
        return c + delta if rng.random() < 0.5 or c - delta <= 0 else c - delta


class SimulatedJudge(_SimulatedEngine):
    """A judge engine that knows the truth: an instrument for measuring the consensus and verify filters.

    It reads its own prompt back, recomputes the true first error from the step text
    (arithmetic.true_first_error), and errs by one of two models:
    - uniform (`accuracy`): names the truth with probability `accuracy`, else another index in
      [-1, len(steps) - 1], uniformly, whatever the solution;
    - an error profile (`errors`, config.JudgeErrorProfile), the way judges err on ProcessBench: on a
      solution with an error it flags one with a recall that depends on whether the final answer is right
      anyway (a miss says -1, so with a low `recall_right_answer` its misses fall where rollouts are blind
      too), names a step 1..`max_offset` off with `off_by`; on a clean solution it raises a false alarm at
      a uniform step with `false_alarm`; with `format_failure` it answers without a readable box; with
      `early_miss` it misses errors in the first half more (where the policy repairs slips); with
      `vote_correlation` a sample repeats the row's one shared reading instead of drawing its own.
    Each sample's randomness comes from (seed, prompt, sample index), so batching and order change
    nothing and re-runs repeat.

    Asked with the verifier prompt (prompts.render_verify_prompt), it writes a verification chain
    with the same error model: every step up to the index it names checked and found correct, that
    step found incorrect, and there it stops (-1: every step correct); a format failure is a chain
    whose last step has no verdict. A chain longer than the request's `max_tokens` words is cut there
    and ends with finish reason "length", as a model's would.
    """

    def __init__(self, config: SimulatedJudgeConfig | None = None) -> None:
        self.config = config or SimulatedJudgeConfig()

    def _seed_parts(self, req: GenerationRequest) -> tuple[object, ...]:
        return (self.config.seed, req.user)

    def _sampler(self, req: GenerationRequest) -> Callable[[random.Random], str]:
        chain_of = parse_verify_prompt(req.user)
        if chain_of is not None:
            return partial(self._chain, *chain_of)
        return partial(self._answer, parse_judge_prompt(req.user))

    def _completion(self, req: GenerationRequest, text: str) -> Completion:
        limit = req.sampling.max_tokens
        if count_tokens(text) <= limit or parse_verify_prompt(req.user) is None:
            return Completion(text, count_tokens(text), "stop")
        end = list(itertools.islice(re.finditer(r"\S+", text), limit))[-1].end()
        return Completion(text[:end], limit, "length")

    def _named_error(self, question: str, steps: list[str], rng: random.Random) -> int | None:
        """The index this sample names (-1: no error), or None for an answer it garbles."""
        truth = arithmetic.true_first_error(steps)
        profile = self.config.errors
        if profile is not None and profile.vote_correlation > 0 and rng.random() < profile.vote_correlation:
            rng = random.Random(digest(self.config.seed, "one reading", question, *steps))  # every vote shares it
        if profile is None:
            if rng.random() < self.config.accuracy:
                return truth
            return rng.choice([i for i in range(-1, len(steps)) if i != truth])
        if rng.random() < profile.format_failure:
            return None
        if truth < 0:
            return rng.randrange(len(steps)) if rng.random() < profile.false_alarm else -1
        recall = profile.recall_right_answer if _right_answer(question, steps) else profile.recall_wrong_answer
        if 2 * truth < len(steps):  # an early error: the policy's repairs (and so its rollouts) hide it too
            recall *= 1.0 - profile.early_miss
        if rng.random() >= recall:
            return -1  # a miss: "every step is right"
        if rng.random() < profile.off_by:
            off = [truth + d for d in range(-profile.max_offset, profile.max_offset + 1) if d]
            off = [i for i in off if 0 <= i < len(steps)]
            if off:
                return rng.choice(off)
        return truth

    def _chain(self, question: str, steps: list[str], rng: random.Random) -> str:
        named = self._named_error(question, steps, rng)
        garbled = named is None
        named = -1 if named is None else named
        last = named if named >= 0 else len(steps) - 1
        lines = []
        for i, step in enumerate(steps[: last + 1]):
            finding = "this is wrong" if i == named else "this holds"
            lines.append(
                render_chain_step(i + 1, f"The step states: {step.strip()} Recomputing it, {finding}.", i != named)
            )
        if garbled:  # the last step's verdict is lost: the chain does not parse
            lines[-1] = lines[-1].rsplit(" \\boxed", 1)[0] + " I think so."
        return "\n".join(lines)

    def _answer(self, parsed: tuple[str, list[str]] | None, rng: random.Random) -> str:
        if parsed is None:
            return "I cannot read this solution."
        index = self._named_error(parsed[0], parsed[1], rng)
        if index is None:
            return "The arithmetic looks mostly fine to me, though one paragraph may be off."
        if index == -1:
            return "Every paragraph's arithmetic checks out.\n\n\\boxed{-1}"
        return f"The arithmetic in paragraph {index} is wrong.\n\n\\boxed{{{index}}}"


# Judges the benchmarks measure consensus and verification against (benchmarks/consensus_quality.py,
# benchmarks/verifier_data.py): always right; the uniform errors of earlier versions; errors like those
# ProcessBench measures (misses more often when the final answer is right, a step or two off, false
# alarms, unreadable answers); one whose misses fall where the rollouts are blind too; and one whose
# misses follow the rollouts' blind spots and whose votes on one row are correlated.
JUDGE_PROFILES: dict[str, SimulatedJudgeConfig] = {
    "oracle": SimulatedJudgeConfig(accuracy=1.0),
    "uniform-0.8": SimulatedJudgeConfig(accuracy=0.8),
    "realistic": SimulatedJudgeConfig(
        errors=JudgeErrorProfile(
            recall_wrong_answer=0.85, recall_right_answer=0.6, off_by=0.1, false_alarm=0.1, format_failure=0.05
        )
    ),
    "blind-spot": SimulatedJudgeConfig(
        errors=JudgeErrorProfile(
            recall_wrong_answer=0.85, recall_right_answer=0.1, off_by=0.1, false_alarm=0.1, format_failure=0.05
        )
    ),
    # errs like a real judge in two more ways: its misses gather where the rollouts are blind (right
    # answers, and early slips the policy repairs), and the votes of one row repeat one reading
    "correlated": SimulatedJudgeConfig(
        errors=JudgeErrorProfile(
            recall_wrong_answer=0.85,
            recall_right_answer=0.4,
            off_by=0.1,
            false_alarm=0.1,
            format_failure=0.05,
            early_miss=0.3,
            vote_correlation=0.5,
        )
    ),
}


def _last_equation_wrong(prefix: str) -> bool:
    """The prefix's last line with an equation is itself false (a fresh error, not a carried value)."""
    line = next((x for x in reversed(prefix.split("\n")) if arithmetic.count_equations(x)), "")
    return bool(arithmetic.step_is_wrong(line))


def _right_answer(question: str, steps: list[str]) -> bool:
    """Whether the solution's last equation lands on the gold answer (False when either is unknown)."""
    problem = arithmetic.parse_question(question)
    if problem is None:
        return False
    return arithmetic.last_value("\n".join(steps)) == problem.values()[-1]
