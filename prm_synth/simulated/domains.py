"""Simulated worlds with known truth beyond math: code with tests, multiple choice, and no gold.

A problem is a chain of operations on a start value ("start 7; ops: +3 *2 -4"); the policy applies them
one step at a time, each fresh step wrong with probability `step_error` (a wrong operand, so the value it
writes is wrong, and every later value with it). A continuation of a prefix whose value is already wrong
returns to the right value with probability `recover` (the luck of Monte Carlo labels). What the policy
writes depends on the world's `form`:

- `code`: a Python program, one top-level statement a step (`v = 7`, `v = v + 3`, ... then `def solve()`),
  run against the problem's test (`check(candidate)`: `solve()` equals the answer) in the real sandbox.
  A return to the right value is a statement `v = <right value>`: a bug that a later step hides, so the
  final program passes although a step of it was wrong.
- `choice`: one line a step ("7 + 3 = 10."), then "The answer is (X)." where X is the right option when
  the value reached is right, else the wrong option nearest to it.
- `math`: the same lines, then "The answer is N." With `trap` > 0, a share `trap` of the problems hold a
  misconception: one step where the policy writes the same wrong operand with probability `trap_error`,
  so its most common answer is wrong there (the no-gold world: the majority is wrong at a known rate).

`DomainJudge` judges the `math` and `choice` forms' solutions with a judge error profile (the realistic
one by default: not an oracle), its truth recomputed from the step text as the policy's is.

The truth of any written solution is recomputed from its steps (`true_first_error`), never taken from a
labeler. Randomness comes from (seed, prompt, prefix, sample index), as in the math simulation.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from prm_synth.config import JudgeErrorProfile, SimulatedJudgeConfig
from prm_synth.engines.base import Completion, GenerationRequest, GenerationResult
from prm_synth.records import Problem
from prm_synth.simulated.engines import JUDGE_PROFILES, SimulatedJudge, count_tokens, digest

Form = Literal["code", "choice", "math"]
LETTERS = "ABCD"
_SPEC = re.compile(r"start (-?\d+); ops: ((?:[-+*]\d+ ?)+)")
_CODE_START = re.compile(r"^v = (-?\d+)$")
_CODE_OP = re.compile(r"^v = v ([-+*]) (\d+)$")
_LINE_START = re.compile(r"^Start with (-?\d+)\.$")
_LINE_OP = re.compile(r"^(-?\d+) ([-+*]) (\d+) = (-?\d+)\.$")
CODE_INTRO = "I will apply the operations one statement at a time.\n\n"


@dataclass(frozen=True)
class Chain:
    start: int
    ops: tuple[tuple[str, int], ...]

    def values(self) -> list[int]:
        """The right value after 0, 1, ... len(ops) operations."""
        out = [self.start]
        for op, b in self.ops:
            out.append(apply(out[-1], op, b))
        return out

    @property
    def answer(self) -> int:
        return self.values()[-1]

    def spec(self) -> str:
        return f"start {self.start}; ops: " + " ".join(f"{op}{b}" for op, b in self.ops)

    def options(self) -> list[int]:
        """Four options around the answer; the right one's place is drawn from the chain."""
        rng = random.Random(digest("options", self.spec()))
        offsets = rng.choice([(0, 1, 2, 3), (-1, 0, 1, 2), (-2, -1, 0, 1), (-3, -2, -1, 0)])
        return [self.answer + d for d in offsets]


def apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def make_chain(rng: random.Random, min_ops: int, max_ops: int) -> Chain:
    ops = []
    for _ in range(rng.randint(min_ops, max_ops)):
        op = rng.choice("+-*" if len(ops) % 3 == 2 else "+-")  # few products: values stay small
        ops.append((op, rng.randint(2, 3) if op == "*" else rng.randint(1, 9)))
    return Chain(rng.randint(1, 20), tuple(ops))


def parse_chain(text: str) -> Chain | None:
    m = _SPEC.search(text)
    if m is None:
        return None
    ops = tuple((tok[0], int(tok[1:])) for tok in m.group(2).split())
    return Chain(int(m.group(1)), ops)


def world_problems(form: Form, count: int, seed: int, min_ops: int = 3, max_ops: int = 8) -> list[Problem]:
    """The world's problems, with what its grader needs (tests, options) in `grading`."""
    out = []
    for i in range(count):
        chain = make_chain(random.Random(f"{form}:{seed}:{i}"), min_ops, max_ops)
        pid = f"{form}-{seed}-{i:05d}"
        if form == "code":
            question = (
                f"Write a Python program: v starts at the start value and each operation is applied to it in "
                f"order, one statement each; then define solve() returning v. {chain.spec()}"
            )
            tests = f"def check(candidate):\n    assert candidate() == {chain.answer}\n"
            grading = json.dumps({"tests": tests, "entry_point": "solve"})
            out.append(Problem(pid, question, str(chain.answer), "sim-code", grading))
        elif form == "choice":
            options = [str(o) for o in chain.options()]
            question = f"Apply the operations in order. {chain.spec()}. What is the result?"
            answer = LETTERS[options.index(str(chain.answer))]
            out.append(Problem(pid, question, answer, "sim-choice", json.dumps({"options": options})))
        else:
            out.append(Problem(pid, f"Apply the operations in order. {chain.spec()}.", str(chain.answer), "sim-math"))
    return out


# ---------------------------------------------------------------- reading what was written
def events(form: Form, text: str) -> list[tuple[int, str, int]]:
    """(offset of the line's end, "start" | "op" | "reset", value after it) for each value-carrying line."""
    out: list[tuple[int, str, int]] = []
    pos = 0
    for raw in text.splitlines(keepends=True):
        pos += len(raw)
        line = raw.strip()
        if form == "code":
            if m := _CODE_START.match(line):
                out.append((pos, "reset" if out else "start", int(m.group(1))))
            elif (m := _CODE_OP.match(line)) and out:
                out.append((pos, "op", apply(out[-1][2], m.group(1), int(m.group(2)))))
        elif m := _LINE_START.match(line):
            out.append((pos, "start", int(m.group(1))))
        elif m := _LINE_OP.match(line):
            out.append((pos, "op", int(m.group(4))))
    return out


def written_state(form: Form, text: str) -> tuple[int, int] | None:
    """(operations written, value now) of a prefix; None before its start value."""
    evs = events(form, text)
    if not evs:
        return None
    return sum(1 for _, kind, _ in evs if kind == "op"), evs[-1][2]


def true_first_error(form: Form, chain: Chain, steps: list[str]) -> int:
    """Index of the first step holding a line whose value is wrong (-1: none). A reset to the right value
    after a bug does not undo the bug: the first error stays at the bug."""
    right = chain.values()
    ends, total = [], 0
    for step in steps:
        total += len(step)
        ends.append(total)
    done = 0
    for offset, kind, value in events(form, "".join(steps)):
        done += kind == "op"
        if value != right[min(done, len(right) - 1)] or done > len(chain.ops):
            return next(i for i, end in enumerate(ends) if end >= offset)
    return -1


# ---------------------------------------------------------------- the policy
@dataclass(frozen=True)
class DomainWorld:
    form: Form
    step_error: float = 0.1
    recover: float = 0.05
    trap: float = 0.0  # share of problems with a misconception step (form math: the no-gold world)
    trap_error: float = 0.8  # chance the policy writes the misconception at that step
    seed: int = 0


class DomainPolicy:
    """The policy of a `DomainWorld`, behind the engine protocol."""

    def __init__(self, world: DomainWorld) -> None:
        self.world = world

    @property
    def model_name(self) -> str:
        return f"simulated-{self.world.form}"

    def close(self) -> None:
        pass

    def trap_step(self, chain: Chain) -> int | None:
        """The operation (index) the policy misunderstands on this problem, or None."""
        rng = random.Random(digest("trap", self.world.seed, chain.spec()))
        return rng.randrange(len(chain.ops)) if rng.random() < self.world.trap else None

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        out = []
        for req in requests:
            chain = parse_chain(req.user)
            base = digest(self.world.seed, req.user, req.assistant_prefix)
            texts = [
                self._write(chain, req.assistant_prefix, random.Random(f"{base}:{req.first_sample_index + i}"))
                if chain is not None
                else "I cannot read this problem."
                for i in range(req.n)
            ]
            completions = tuple(Completion(t, count_tokens(t), "stop") for t in texts)
            out.append(GenerationResult(completions, count_tokens(req.user) + count_tokens(req.assistant_prefix)))
        return out

    def _write(self, chain: Chain, prefix: str, rng: random.Random) -> str:
        form, right = self.world.form, chain.values()
        lines: list[str] = []
        if form == "code" and "```python" not in prefix:
            lines.append(CODE_INTRO + "```python\n")
        state = written_state(form, prefix)
        if state is None:
            lines.append(f"v = {chain.start}\n" if form == "code" else f"Start with {chain.start}.\n")
            state = (0, chain.start)
        done, value = state
        done = min(done, len(chain.ops))
        if value != right[done] and rng.random() < self.world.recover:
            value = right[done]  # luck: back on the right value
            if form == "code":
                lines.append(f"v = {value}\n")  # a later step that hides the bug
        trap = self.trap_step(chain)
        for j in range(done, len(chain.ops)):
            op, b = chain.ops[j]
            used = b
            if j == trap and rng.random() < self.world.trap_error:
                used = b + 1  # the misconception: always the same wrong operand
            elif rng.random() < self.world.step_error:
                used = b + rng.choice([-1, 1, 2]) if b > 1 else b + rng.choice([1, 2])
            new = apply(value, op, used)
            lines.append(f"v = v {op} {used}\n" if form == "code" else f"{value} {op} {b} = {new}.\n")
            value = new
        lines.append(self._ending(chain, value))
        return "".join(lines)

    def _ending(self, chain: Chain, value: int) -> str:
        if self.world.form == "code":
            return "\ndef solve():\n    return v\n```\n"
        if self.world.form == "choice":
            options = chain.options()
            # A wrong value picks the nearest wrong option: only a right value (or luck) picks the right one.
            allowed = [i for i, o in enumerate(options) if value == chain.answer or o != chain.answer]
            nearest = min(allowed, key=lambda i: (abs(options[i] - value), i))
            return f"The answer is ({LETTERS[nearest]})."
        return f"The answer is {value}."


# ---------------------------------------------------------------- the judge
class DomainJudge(SimulatedJudge):
    """A judge of the line forms (`math`, `choice`) that errs as a `JudgeErrorProfile` says (the
    realistic profile by default), the truth recomputed from the step text. A misconception step is read
    with the profile's `recall_right_answer` whatever the final answer: the policy shares the
    misconception, and a judge is swayed by an answer everyone reaches as by a right one (the harder case,
    and the one no rollout can see)."""

    def __init__(self, world: DomainWorld, config: SimulatedJudgeConfig | None = None) -> None:
        super().__init__(config or JUDGE_PROFILES["realistic"].model_copy(update={"seed": world.seed}))
        self.world = world
        self.policy = DomainPolicy(world)

    def _named_error(self, question: str, steps: list[str], rng: random.Random) -> int | None:
        profile = self.config.errors or JudgeErrorProfile()
        chain = parse_chain(question)
        if rng.random() < profile.format_failure:
            return None
        lines = [s if s.endswith("\n") else s + "\n" for s in steps]  # the judge prompt strips each step
        truth = -1 if chain is None else true_first_error(self.world.form, chain, lines)
        if truth < 0 or chain is None:
            return rng.randrange(len(steps)) if rng.random() < profile.false_alarm else -1
        right_answer = _final_value(self.world.form, "".join(lines)) == chain.answer
        misconception = _op_at(self.world.form, lines, truth) == self.policy.trap_step(chain)
        recall = profile.recall_right_answer if right_answer or misconception else profile.recall_wrong_answer
        if rng.random() >= recall:
            return -1
        if rng.random() < profile.off_by:
            off = [i for i in range(truth - profile.max_offset, truth + profile.max_offset + 1) if i != truth]
            off = [i for i in off if 0 <= i < len(steps)]
            if off:
                return rng.choice(off)
        return truth


def _final_value(form: Form, text: str) -> int | None:
    evs = events(form, text)
    return evs[-1][2] if evs else None


def _op_at(form: Form, steps: list[str], step: int) -> int | None:
    """The index of the first operation a step writes (None: it writes none)."""
    before = sum(1 for _, kind, _ in events(form, "".join(steps[:step])) if kind == "op")
    here = [kind for _, kind, _ in events(form, steps[step])]
    return before if "op" in here else None
