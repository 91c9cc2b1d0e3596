"""Answer extraction and three-valued grading: correct, incorrect, or unknown.

Extraction is ours; earlier rules win over later ones:
1. the last top-level \\boxed{} (or \\fbox{});
2. the last "answer is ..." / "answer: ..." up to the end of its sentence, then the text after the last "####";
3. the last-number fallback, which reads only the text's *final line*, and only when that line reads as an
   answer sentence: at most `FALLBACK_LINE_CHARS` characters, nothing that looks like code or LaTeX
   (`_`, backticks, braces, brackets, backslashes, quotes, `name(`), and the number ends the line: either
   nothing but closing punctuation follows it ("total 7.", "= -4", "**18**") or at most four words and a
   full stop do ("So she has 1,234 marbles."). A number anywhere else in the text (a path, an unfinished
   sentence, an earlier step of off-topic text) is never an answer, so such text is unknown, not correct.

A completion that stopped because it hit `max_tokens` (finish reason "length") is unknown ("truncated")
whatever it says: use `grade_completion` wherever an engine's completion is graded. A thinking model's
text (`thinking` markers, prm_synth/prompting/thinking.py) is graded on its answer after the close marker alone:
a `\\boxed{}` written while thinking is never the answer, and a trace that never closes is unknown
("truncated_thinking").

Equivalence is exact Fraction arithmetic when both sides are plain numbers (in-process, microseconds),
else math-verify (sympy). Model text is never evaluated as code: the only parser that sees it is
math-verify's LaTeX parser.

The time bound is hard and the same in every thread: math-verify runs in worker processes (grading_pool.py),
and a comparison that is not answered within `timeout_s` is unknown ("timeout"). A cheap in-process guard
still refuses the shapes known to run for minutes ("too_complex") so they do not cost a worker. Every length
limit applies before any loop over the text, so extraction is linear in the text's length.

Verdicts are cached for the process's life, except the transient ones (a timeout, a worker that died or
answered garbage, an exception in the worker): those are unknown this time, and asked again next time.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Any

from prm_synth.grading import pool as grading_pool
from prm_synth.prompting.thinking import TRUNCATED_THINKING, ThinkingMarkers
from prm_synth.records.solutions import Verdict

MAX_ANSWER_CHARS = 1000  # longer extracted (or gold) answers are unknown ("too_long"): bounds parser cost
FALLBACK_LINE_CHARS = 200  # a longer final line is not an answer sentence
CACHE_SIZE = 100_000
TRUNCATED_FINISH_REASONS = frozenset({"length"})  # vLLM and the OpenAI API: the max_tokens limit was hit
# Why a verdict is unknown: this module's reasons, then math-verify's (grading_pool.py; "error:<name>" too).
UNKNOWN_REASONS = (
    "no_answer",
    "truncated",
    TRUNCATED_THINKING,
    "too_long",
    "gold_too_long",
    "too_complex",
    "partial_path",
    "timeout",
    "unparseable",
    "unparseable_gold",
    "worker_died",
    "worker_garbage",
)


# ---------------------------------------------------------------- extraction
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"\\[{}]|[{}]")  # escaped braces (\{ \}) are tokens too, so they never match
_ANSWER_IS = re.compile(r"\banswer\s*(?:is\b|:)", re.IGNORECASE)
_SENTENCE = re.compile(r"(.*?)\.(?:\s|$)")
# A number not glued to a word on either side ("x2", "3rd", "v1.2" hold none); "-" only when it
# cannot be a binary minus ("5-3" ends in 3, not -3).
_LAST_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?(?!\w)")
# What may follow the fallback's number: closing punctuation only, or up to four words (a unit) and a full stop.
_BARE_TAIL = re.compile(r"[\s%$*).!]*")
_UNIT_TAIL = re.compile(r"\s*%?(?:\s+[A-Za-z][A-Za-z'\u2019]*){1,4}\s*[*)$]*[.!][\s*)$]*")
_NOT_PROSE = re.compile(r"[_`{}\[\]<>|\\;\"@#~]|[A-Za-z]\(")
_WRAP_OPEN = ("**", "$", "\\(", "\\[", ":", "*")
_WRAP_CLOSE = ("**", "$", "\\)", "\\]", ".", "*")
# An answer line is read this far at most: anything longer is too long to be an answer anyway.
_ANSWER_LINE_CHARS = 2 * MAX_ANSWER_CHARS + 16


def last_boxed(text: str) -> str | None:
    """Content of the last top-level \\boxed{...} (or \\fbox{...}), nested braces included."""
    opens = [m.end() - 1 for m in _BOX_OPEN.finditer(text)]
    if not opens:
        return None
    # One pass of brace matching from the first box keeps this linear even with many boxes.
    close: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE.finditer(text, opens[0]):
        if m.group() == "{":
            stack.append(m.start())
        elif m.group() == "}" and stack:
            close[stack.pop()] = m.start()
    best: tuple[int, int] | None = None
    for start in opens:
        if best is not None and start < best[1]:
            continue  # a box inside the previous one
        end = close.get(start)
        if end is not None:
            best = (start, end)
    return text[best[0] + 1 : best[1]] if best else None


def _clean(answer: str) -> str:
    """Strip the wrappers people put around a final answer: $...$, **...**, \\(...\\), a period.

    Moves two indices instead of re-slicing, so it is linear however many wrappers there are."""
    start, end = 0, len(answer)
    changed = True
    while changed:
        changed = False
        while start < end and answer[start].isspace():
            start += 1
        while end > start and answer[end - 1].isspace():
            end -= 1
        for w in _WRAP_OPEN:
            if answer.startswith(w, start, end):
                start += len(w)
                changed = True
        for w in _WRAP_CLOSE:
            if end - start >= len(w) and answer.endswith(w, start, end):
                end -= len(w)
                changed = True
    return answer[start:end]


def _answer_line(text: str, start: int) -> str:
    """The rest of the line from `start`, read at most `_ANSWER_LINE_CHARS` far."""
    return text[start : start + _ANSWER_LINE_CHARS].split("\n", 1)[0]


def _after_answer_is(text: str) -> str | None:
    last = None
    for last in _ANSWER_IS.finditer(text):  # noqa: B007 - we want the last match
        pass
    if last is None:
        return None
    line = _answer_line(text, last.end())
    m = _SENTENCE.match(line)  # up to the first sentence end; "3.5" has no space after its dot
    if m is None and len(line) == _ANSWER_LINE_CHARS:
        return line  # no sentence end within the bound: too long to be an answer (graded too_long)
    return _clean(m.group(1) if m else line) or None


def _after_hashes(text: str) -> str | None:
    i = text.rfind("####")
    if i < 0:
        return None
    line = _answer_line(text, i + 4)
    if len(line) == _ANSWER_LINE_CHARS:
        return line  # too long to be an answer (graded too_long)
    return _clean(line) or None


def _final_line_number(text: str) -> str | None:
    """The fallback: the number that ends the text's final line, when that line reads as an answer sentence."""
    end = len(text)
    while end and text[end - 1].isspace():
        end -= 1
    start = text.rfind("\n", max(0, end - FALLBACK_LINE_CHARS - 1), end) + 1
    if start == 0 and end > FALLBACK_LINE_CHARS:
        return None  # the final line is longer than an answer sentence
    line = text[start:end]
    if _NOT_PROSE.search(line):
        return None
    last = None
    for last in _LAST_NUMBER.finditer(line):  # noqa: B007 - we want the last match
        pass
    if last is None:
        return None
    tail = line[last.end() :]
    if _BARE_TAIL.fullmatch(tail) or _UNIT_TAIL.fullmatch(tail):
        return last.group()
    return None


def extract_answer(text: str, last_number_fallback: bool = True) -> str | None:
    """The final answer a solution states, or None. Earlier rules win over later ones (module doc)."""
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    answer = _after_answer_is(text) or _after_hashes(text)
    if answer is not None:
        return answer
    return _final_line_number(text) if last_number_fallback else None


# ---------------------------------------------------------------- equivalence
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_SLASH = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")
_TEX_FRAC = re.compile(r"([+-]?)\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_NUMBER_CHARS = 100  # a plain number longer than this is not worth the fast path


def as_number(s: str) -> Fraction | None:
    """A plain number (72, -3.5, 1,234, 3/4, \\frac{3}{4}, $5, 50%) as an exact Fraction, else None."""
    if len(s) > 4 * _NUMBER_CHARS:
        return None
    s = _clean(s).replace("\u2212", "-").replace("{,}", ",").replace("\\!", "")
    if len(s) > _NUMBER_CHARS:
        return None
    for prefix in ("\\$", "$"):
        s = s.removeprefix(prefix)
    for suffix in ("\\%", "%"):
        s = s.removesuffix(suffix)
    s = s.strip()
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    if _DECIMAL.fullmatch(s):
        return Fraction(s)
    m = _SLASH.fullmatch(s) or _TEX_FRAC.fullmatch(s)
    if m is None:
        return None
    if m.re is _TEX_FRAC:
        num, den = int(m[1] + m[2]), int(m[3])
    else:
        num, den = int(m[1]), int(m[2])
    return Fraction(num, den) if den else None


_EXPONENT = re.compile(r"\^\s*(\{|\d+|.)")
_BIG_FACTORIAL = re.compile(r"(?:\d{5,}|[)}\]])\s*!")
_BINOM = re.compile(r"\\[dt]?binom\s*\{\s*(\d+)")


def _too_complex(expr: str) -> bool:
    """Shapes on which sympy runs for minutes (power towers, big symbolic powers, big factorials): refused
    up front so they do not cost a worker its deadline. Only a shortcut: the worker deadline is the bound."""
    if _BIG_FACTORIAL.search(expr):
        return True
    if any(len(m[1]) > 5 for m in _BINOM.finditer(expr)):
        return True
    for m in _EXPONENT.finditer(expr):
        if m[1] == "{":
            depth, j = 1, m.end()
            while j < len(expr) and depth:
                depth += {"{": 1, "}": -1}.get(expr[j], 0)
                j += 1
            exponent = expr[m.end() : j - 1]
        else:
            exponent = m[1]
        if "^" in exponent or "**" in exponent:
            return True
        # An integer base raised to a big power is cheap; (1+x)^1000 is not.
        numbers = [int(d) for d in re.findall(r"\d{1,7}", exponent)]
        base_is_integer = re.search(r"(?:^|[^\w}).])\d+\s*$", expr[: m.start()]) is not None
        if any(n > 200 for n in numbers) and not (base_is_integer and all(n <= 100_000 for n in numbers)):
            return True
    return False


class _NotCached(Exception):
    """Carries a transient verdict out of the cached function (lru_cache keeps no exception)."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict


def _verdict(gold: str, extracted: str, timeout_s: float) -> Verdict:
    try:
        return _judge(gold, extracted, timeout_s)
    except _NotCached as transient:
        return transient.verdict


@functools.lru_cache(maxsize=CACHE_SIZE)
def _judge(gold: str, extracted: str, timeout_s: float) -> Verdict:
    def unknown(reason: str) -> Verdict:
        return Verdict("unknown", extracted, reason)

    if len(extracted) > MAX_ANSWER_CHARS:
        return unknown("too_long")
    if len(gold) > MAX_ANSWER_CHARS:
        return unknown("gold_too_long")
    g, e = as_number(gold), as_number(extracted)
    if g is not None and e is not None:
        return Verdict("correct" if g == e else "incorrect", extracted, "numeric")
    if _too_complex(extracted) or _too_complex(gold):
        return unknown("too_complex")
    status, reason = grading_pool.compare(gold, extracted, timeout_s)
    verdict = Verdict(status, extracted, reason)  # type: ignore[arg-type]
    if grading_pool.is_transient(reason):
        raise _NotCached(verdict)
    return verdict


def grade(response_text: str, gold: str, *, last_number_fallback: bool = True, timeout_s: float = 2.0) -> Verdict:
    """Grade a full solution text against the gold answer; unknown is never counted as correct.

    `timeout_s` bounds one math-verify comparison (worker start-up and waiting for a free worker excluded)."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, not {timeout_s!r}")
    extracted = extract_answer(response_text, last_number_fallback)
    if extracted is None:
        return Verdict("unknown", None, "no_answer")
    return _verdict(gold.strip(), extracted, float(timeout_s))


def is_truncated(finish_reason: str | None) -> bool:
    """Did the engine stop this completion because it hit `max_tokens`?"""
    return finish_reason in TRUNCATED_FINISH_REASONS


def grade_completion(
    text: str, gold: str, finish_reason: str | None, thinking: ThinkingMarkers | None = None, **kwargs: Any
) -> Verdict:
    """Grade an engine's completion: one cut off by `max_tokens` is unknown ("truncated"), never correct;
    with `thinking` markers only the answer after the trace is read (`grade_answer`)."""
    if thinking is not None and thinking.answer_section(text) is None:
        return Verdict("unknown", None, TRUNCATED_THINKING)
    if is_truncated(finish_reason):
        return Verdict("unknown", None, "truncated")
    return grade_answer(text, gold, thinking, **kwargs)


def grade_answer(text: str, gold: str, thinking: ThinkingMarkers | None = None, **kwargs: Any) -> Verdict:
    """`grade` of a solution's answer: with `thinking` markers the text after the close marker alone, and
    unknown ("truncated_thinking") when the trace never closes."""
    if thinking is not None:
        answer = thinking.answer_section(text)
        if answer is None:
            return Verdict("unknown", None, TRUNCATED_THINKING)
        text = answer
    return grade(text, gold, **kwargs)
