"""Multi-step arithmetic word problems with exact integer answers, and the text of their solutions.

This module is the single definition of the "builtin" problems and of the simulated policy's
solution format, so anyone can recompute the true first error of a solution from its text alone:
each solution step holds exactly one equation `a <op> b = c`, and a step is wrong when `c` is not
`a <op> b`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from fractions import Fraction

from prm_synth.config import MAX_OPS

NAMES = ("Mia", "Noah", "Ava", "Liam", "Zoe", "Omar", "Iris", "Kofi", "Lena", "Ravi")
ITEMS = ("marbles", "apples", "stickers", "coins", "shells", "cards", "beads", "stamps")

# One sentence per operation; the parser below reads exactly these.
_OP_SENTENCE = {
    "+": "Then {name} gets {b} more {item}.",
    "-": "Then {name} gives away {b} {item}.",
    "×": "Then the number of {item} is multiplied by {b}.",
    "÷": "Then {name} shares the {item} equally among {b} friends and keeps one share.",
}
_START = re.compile(r"(?P<name>[A-Z][a-z]+) has (?P<a>\d+) (?P<item>[a-z]+)\.")
_OP_PATTERNS = (
    ("+", re.compile(r"Then [A-Z][a-z]+ gets (\d+) more [a-z]+\.")),
    ("-", re.compile(r"Then [A-Z][a-z]+ gives away (\d+) [a-z]+\.")),
    ("×", re.compile(r"Then the number of [a-z]+ is multiplied by (\d+)\.")),
    ("÷", re.compile(r"Then [A-Z][a-z]+ shares the [a-z]+ equally among (\d+) friends and keeps one share\.")),
)
_EQUATION = re.compile(r"(-?\d+) ([+\-×÷]) (-?\d+) = (-?\d+)")
# A builtin problem has up to MAX_OPS operations (long chain-of-thought lengths: a solution of that many
# steps); every sentence of its question is under 100 characters. Parsing is linear, but never unbounded
# on untrusted text.
MAX_QUESTION_CHARS = 100 * (MAX_OPS + 2)


@dataclass(frozen=True)
class ChainProblem:
    """start, then a list of (op, operand); every intermediate value is a positive integer."""

    start: int
    ops: tuple[tuple[str, int], ...]
    name: str = "Mia"
    item: str = "marbles"

    def values(self) -> list[int]:
        """Running values after each operation (the correct `c` of each step)."""
        out, v = [], self.start
        for op, b in self.ops:
            v = apply(v, op, b)
            out.append(v)
        return out

    @property
    def answer(self) -> int:
        return self.values()[-1]

    def question(self) -> str:
        parts = [f"{self.name} has {self.start} {self.item}."]
        parts += [_OP_SENTENCE[op].format(name=self.name, b=b, item=self.item) for op, b in self.ops]
        parts.append(f"How many {self.item} does {self.name} have at the end?")
        return " ".join(parts)


def apply(a: int, op: str, b: int) -> int:
    """Exact integer arithmetic; division must be exact (callers guarantee it)."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "×":
        return a * b
    if op == "÷":
        q, r = divmod(a, b)
        if r:
            raise ValueError(f"{a} ÷ {b} is not exact")
        return q
    raise ValueError(f"unknown operation {op!r}")


def generate(rng: random.Random, min_ops: int = 2, max_ops: int = 8) -> ChainProblem:
    """A random chain whose values stay positive and small, with exact divisions (at most 3)."""
    n_ops = rng.randint(min_ops, max_ops)
    start = rng.randint(2, 60)
    v, ops, divisions = start, [], 0
    for _ in range(n_ops):
        choices = ["+", "-", "×"]
        divisors = [d for d in (2, 3, 4, 5) if v % d == 0 and v // d >= 2]
        if divisors and divisions < 3:
            choices.append("÷")
        if v <= 3:
            choices.remove("-")
        if v > 500:
            choices.remove("×")
        op = rng.choice(choices)
        if op == "+":
            b = rng.randint(1, 40)
        elif op == "-":
            b = rng.randint(1, min(40, v - 1))
        elif op == "×":
            b = rng.randint(2, 5)
        else:
            b = rng.choice(divisors)
            divisions += 1
        v = apply(v, op, b)
        ops.append((op, b))
    return ChainProblem(start, tuple(ops), rng.choice(NAMES), rng.choice(ITEMS))


def parse_question(question: str) -> ChainProblem | None:
    """Read a builtin question back into its chain; None when the text is not one of ours."""
    if len(question) > MAX_QUESTION_CHARS:
        return None
    m = _START.search(question)
    if not m:
        return None
    ops: list[tuple[str, int]] = []
    for sentence in re.findall(r"Then [^.]*\.", question):
        for op, pattern in _OP_PATTERNS:
            om = pattern.fullmatch(sentence)
            if om:
                ops.append((op, int(om.group(1))))
                break
        else:
            return None
    if not ops:
        return None
    problem = ChainProblem(int(m["a"]), tuple(ops), m["name"], m["item"])
    try:
        problem.values()
    except ValueError:
        return None
    return problem


def equation_text(a: int, op: str, b: int, c: int) -> str:
    return f"{a} {op} {b} = {c}"


def answer_text(value: int) -> str:
    return f"The answer is {value}."


def step_is_wrong(step_text: str) -> bool | None:
    """True when one of the step's equations is false (a step may hold two: a skipped step),
    False when all are true, None when it holds none."""
    found = _EQUATION.findall(step_text)
    if not found:
        return None
    for a, op, b, c in found:
        try:
            if Fraction(apply_fraction(int(a), op, int(b))) != int(c):
                return True
        except ZeroDivisionError:
            return True
    return False


def apply_fraction(a: int, op: str, b: int) -> Fraction:
    if op == "÷":
        return Fraction(a, b)
    return Fraction(apply(a, op, b))


def true_first_error(steps: list[str]) -> int:
    """Index of the first step whose equation is false, −1 if none: the ground truth from text alone."""
    for i, step in enumerate(steps):
        if step_is_wrong(step):
            return i
    return -1


def last_value(text: str) -> int | None:
    """The `c` of the last equation in `text` (the running value a continuation carries on)."""
    found = _EQUATION.findall(text)
    return int(found[-1][3]) if found else None


def count_equations(text: str) -> int:
    return len(_EQUATION.findall(text))
