"""Answer extraction and three-valued grading: correct, incorrect, or unknown.

Extraction is ours (last \\boxed{} wins, then "the answer is", then "####", then the last number);
equivalence is exact Fraction arithmetic when both sides are plain numbers, else math-verify.
Model text is never evaluated as code: the only parser that sees it is math-verify's LaTeX parser.

math-verify bounds its work with signal.alarm, which only works in the main thread, and grading
runs in worker threads. So off the main thread we call it without a timeout and bound the cost
ourselves: overlong answers and the few shapes that make sympy run for minutes (power towers,
huge exponents and factorials) are refused as unknown before math-verify sees them. The guard runs
in every thread, so a verdict does not depend on which thread computed it.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from math_verify import parse, verify
from math_verify.errors import TimeoutException

Status = Literal["correct", "incorrect", "unknown"]
MAX_ANSWER_CHARS = 1000  # longer extracted answers are unknown ("too_long"): bounds parser cost
CACHE_SIZE = 100_000


class _NoTimeoutNotice(logging.Filter):
    """math-verify warns once that running without a timeout is unsafe; we bound the cost ourselves."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_NoTimeoutNotice())


@dataclass(frozen=True)
class Verdict:
    status: Status
    extracted: str | None
    reason: str | None  # how it was decided (numeric, math_verify) or why it is unknown


# ---------------------------------------------------------------- extraction
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"\\[{}]|[{}]")  # escaped braces (\{ \}) are tokens too, so they never match
_ANSWER_IS = re.compile(r"\banswer\s*(?:is\b|:)", re.IGNORECASE)
_SENTENCE = re.compile(r"(.*?)\.(?:\s|$)")
# A number not glued to a word on either side ("x2", "3rd", "v1.2" hold none); "-" only when it
# cannot be a binary minus ("5-3" ends in 3, not -3).
_LAST_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?(?!\w)")
_WRAP_OPEN = ("**", "$", "\\(", "\\[", ":", "*")
_WRAP_CLOSE = ("**", "$", "\\)", "\\]", ".", "*")


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
    """Strip the wrappers people put around a final answer: $...$, **...**, \\(...\\), a period."""
    prev = None
    while prev != answer:
        prev = answer
        answer = answer.strip()
        for w in _WRAP_OPEN:
            answer = answer.removeprefix(w)
        for w in _WRAP_CLOSE:
            answer = answer.removesuffix(w)
    return answer


def _after_answer_is(text: str) -> str | None:
    last = None
    for last in _ANSWER_IS.finditer(text):  # noqa: B007 - we want the last match
        pass
    if last is None:
        return None
    line = text[last.end() :].split("\n", 1)[0]
    m = _SENTENCE.match(line)  # up to the first sentence end; "3.5" has no space after its dot
    return _clean(m.group(1) if m else line) or None


def _after_hashes(text: str) -> str | None:
    i = text.rfind("####")
    if i < 0:
        return None
    return _clean(text[i + 4 :].split("\n", 1)[0]) or None


def _last_number(text: str) -> str | None:
    last = None
    for last in _LAST_NUMBER.finditer(text):  # noqa: B007 - we want the last match
        pass
    return last.group() if last else None


def extract_answer(text: str, last_number_fallback: bool = True) -> str | None:
    """The final answer a solution states, or None. Earlier rules win over later ones."""
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    answer = _after_answer_is(text) or _after_hashes(text)
    if answer is not None:
        return answer
    return _last_number(text) if last_number_fallback else None


# ---------------------------------------------------------------- equivalence
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_SLASH = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")
_TEX_FRAC = re.compile(r"([+-]?)\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")


def as_number(s: str) -> Fraction | None:
    """A plain number (72, -3.5, 1,234, 3/4, \\frac{3}{4}, $5, 50%) as an exact Fraction, else None."""
    s = _clean(s).replace("\u2212", "-").replace("{,}", ",").replace("\\!", "")
    if len(s) > 100:
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
    """Shapes on which sympy can run for minutes: power towers, big symbolic powers, big factorials."""
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


def _for_math_verify(expr: str) -> str:
    """math-verify reads LaTeX inside a box or math delimiters; a box needs balanced braces."""
    depth = 0
    for m in _BRACE.finditer(expr):
        depth += {"{": 1, "}": -1}.get(m.group(), 0)
        if depth < 0:
            break
    return f"\\boxed{{{expr}}}" if depth == 0 else f"${expr}$"


@functools.lru_cache(maxsize=CACHE_SIZE)
def _parse(expr: str, timeout: int | None) -> list:
    return parse(_for_math_verify(expr), parsing_timeout=timeout, raise_on_error=True)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _judge(gold: str, extracted: str, timeout: int | None) -> Verdict:
    def unknown(reason: str) -> Verdict:
        return Verdict("unknown", extracted, reason)

    if len(extracted) > MAX_ANSWER_CHARS:
        return unknown("too_long")
    g, e = as_number(gold), as_number(extracted)
    if g is not None and e is not None:
        return Verdict("correct" if g == e else "incorrect", extracted, "numeric")
    if _too_complex(extracted) or _too_complex(gold):
        return unknown("too_complex")
    try:
        parsed_gold = _parse(gold, timeout)
        parsed = _parse(extracted, timeout)
        if not parsed_gold:
            return unknown("unparseable_gold")
        if not parsed:
            return unknown("unparseable")
        same = verify(parsed_gold, parsed, timeout_seconds=timeout, raise_on_error=True)
    except TimeoutException:
        return unknown("timeout")
    except Exception as exc:  # a parser or sympy failure is not a verdict
        return unknown(f"error:{type(exc).__name__}")
    return Verdict("correct" if same else "incorrect", extracted, "math_verify")


def _effective_timeout(timeout_s: float) -> int | None:
    # signal.alarm takes whole seconds and works only in the main thread.
    if timeout_s <= 0 or threading.current_thread() is not threading.main_thread():
        return None
    return max(1, math.ceil(timeout_s))


def grade(response_text: str, gold: str, *, last_number_fallback: bool = True, timeout_s: float = 2.0) -> Verdict:
    """Grade a full solution text against the gold answer; unknown is never counted as correct."""
    extracted = extract_answer(response_text, last_number_fallback)
    if extracted is None:
        return Verdict("unknown", None, "no_answer")
    return _judge(gold.strip(), extracted, _effective_timeout(timeout_s))


def grade_many(
    texts: Iterable[str], gold: str, *, last_number_fallback: bool = True, timeout_s: float = 2.0
) -> list[Verdict]:
    return [grade(t, gold, last_number_fallback=last_number_fallback, timeout_s=timeout_s) for t in texts]
