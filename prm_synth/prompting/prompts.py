"""Every text a model sees: the policy prompt, the judge prompt and the verifier prompt (with their parsers).

Versioned: a change of wording is a change of the data, so the versions are part of the config
fingerprint (config.PipelineConfig.fingerprint) and the judge's version is stored in every row.
`render_judge_prompt` and `parse_judge_prompt` are a pair: the simulated judge reads its own prompt
back to recompute the truth from the step text, so it runs through exactly the same requests,
batching and parsing as a real judge.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal, get_args

# ------------------------------------------------------------------ policy
POLICY_PROMPT_VERSION = "policy-v1"

POLICY_TEMPLATE = (
    "Solve the following math problem step by step. Write each step as its own paragraph, "
    "separated by a blank line. End with a line of the form 'The answer is \\boxed{{ANSWER}}.'\n\n"
    "{question}"
)


def policy_user_prompt(question: str) -> str:
    """The user turn of a policy request; continuation prompts add the prefix in the assistant turn."""
    return POLICY_TEMPLATE.format(question=question)


# ------------------------------------------------------------------ judge (ProcessBench's critique prompt)
JudgePromptVersion = Literal["v1"]
JUDGE_PROMPT_VERSION: JudgePromptVersion = "v1"
assert JUDGE_PROMPT_VERSION in get_args(JudgePromptVersion)

# The versions every config's fingerprint holds. The verifier's version enters it only when a config has
# a `verify` section (config.PipelineConfig.fingerprint), so runs without one keep their fingerprint.
PROMPT_VERSIONS = {"policy": POLICY_PROMPT_VERSION, "judge": JUDGE_PROMPT_VERSION}

MAX_PROMPT_CHARS = 1_000_000  # parse_judge_prompt reads untrusted text: bounded

_PREAMBLE = (
    "The following is a math problem and a solution (split into paragraphs, enclosed with tags and "
    "indexed from 0):\n\n[Math Problem]\n\n"
)
_SOLUTION_HEADER = "\n\n[Solution]\n\n"
_INSTRUCTION = (
    "\n\nYour task is to review and critique the solution paragraph by paragraph. Once you identify an "
    "error in a paragraph, return the index of the paragraph where the earliest error occurs. Otherwise, "
    'return the index of -1 (which typically denotes "not found").\n\n'
    "Please put your final answer (i.e., the index) in \\boxed{}."
)
_PARAGRAPH = re.compile(r"<paragraph_(\d+)>\n(.*?)\n</paragraph_\1>", re.DOTALL)


def render_judge_prompt(question: str, steps: Sequence[str]) -> str:
    """ProcessBench's critique prompt. Steps are shown stripped: the separators that a lossless
    split keeps inside each step are layout, and the tags already separate the paragraphs."""
    if not steps:
        raise ValueError("a solution to judge needs at least one step")
    paragraphs = "\n\n".join(f"<paragraph_{i}>\n{s.strip()}\n</paragraph_{i}>" for i, s in enumerate(steps))
    return _PREAMBLE + question.strip() + _SOLUTION_HEADER + paragraphs + _INSTRUCTION


def _parse_prompt(
    prompt: str,
    preamble: str,
    instruction: str,
    header: str,
    first_step: str,
    last: bool,
    read_steps: Callable[[str], list[str] | None],
) -> tuple[str, list[str]] | None:
    """(question, steps) of a prompt made as preamble + question + header + solution + instruction, where
    the solution starts with `first_step` and `read_steps` reads it; None for other text (or text too long
    to read). The header's `last` occurrence ends the question where a question may hold it, else the first."""
    if len(prompt) > MAX_PROMPT_CHARS or not prompt.startswith(preamble) or not prompt.endswith(instruction):
        return None
    body = prompt[len(preamble) : -len(instruction)]
    cut = (body.rfind if last else body.find)(header + first_step)
    if cut < 0:
        return None
    steps = read_steps(body[cut + len(header) :])
    return None if steps is None else (body[:cut], steps)


def parse_judge_prompt(prompt: str) -> tuple[str, list[str]] | None:
    """(question, stripped steps) from a prompt made by `render_judge_prompt`; None for other text."""
    # The first paragraph tag right after the header ends the question (questions hold no tags).
    return _parse_prompt(prompt, _PREAMBLE, _INSTRUCTION, _SOLUTION_HEADER, "<paragraph_0>\n", False, _paragraphs)


def _paragraphs(solution: str) -> list[str] | None:
    """The judge prompt's tagged paragraphs, numbered from 0 and one blank line apart; None otherwise."""
    steps: list[str] = []
    pos = 0
    for m in _PARAGRAPH.finditer(solution):
        expected_gap = "" if not steps else "\n\n"
        if int(m[1]) != len(steps) or solution[pos : m.start()] != expected_gap:
            return None
        steps.append(m[2])
        pos = m.end()
    if not steps or pos != len(solution):
        return None
    return steps


# ------------------------------------------------------------------ verifier (ThinkPRM-style verification chains)
# A generative verifier checks the solution step by step and ends every step with a verdict in a fixed
# form, stopping at the first incorrect step (ThinkPRM, Khalifa et al. 2025; GenPRM, Zhao et al. 2025):
#
#     Step 1: <its check of step 1> \boxed{correct}
#     Step 2: <its check of step 2> \boxed{incorrect}
#
# Steps are numbered from 1 in the prompt and in the chain, as ThinkPRM's chains number them.
VerifyPromptVersion = Literal["verify-v1"]
VERIFY_PROMPT_VERSION: VerifyPromptVersion = "verify-v1"
assert VERIFY_PROMPT_VERSION in get_args(VerifyPromptVersion)

VERDICT_CORRECT = "correct"
VERDICT_INCORRECT = "incorrect"

VERIFY_SYSTEM = "You are a careful math teacher who verifies solutions step by step."
_VERIFY_PREAMBLE = "You are given a math problem and a proposed step-by-step solution.\n\n[Math Problem]\n\n"
_VERIFY_SOLUTION_HEADER = "\n\n[Solution]\n\n"
_VERIFY_INSTRUCTION = (
    "\n\nReview and critique each step of the proposed solution, in order, to determine whether it is correct. "
    "For each step write `Step N:` followed by your check of that step, and end the step with "
    "\\boxed{correct} or \\boxed{incorrect}. Stop after the first incorrect step."
)
_NUMBERED_STEP = re.compile(r"Step (\d+): ([^\n]*)")


def render_verify_prompt(question: str, steps: Sequence[str]) -> str:
    """The verifier's user turn: the problem, then the steps numbered from 1, one a line, then the task.

    A step's inner line breaks become spaces: one line a step keeps the numbering unambiguous (and
    `parse_verify_prompt` exact). Steps are shown stripped, like the judge's paragraphs."""
    if not steps:
        raise ValueError("a solution to verify needs at least one step")
    lines = "\n".join(f"Step {i}: {' '.join(s.split())}" for i, s in enumerate(steps, start=1))
    return _VERIFY_PREAMBLE + question.strip() + _VERIFY_SOLUTION_HEADER + lines + _VERIFY_INSTRUCTION


def parse_verify_prompt(prompt: str) -> tuple[str, list[str]] | None:
    """(question, steps as shown) from a prompt made by `render_verify_prompt`; None for other text."""
    header, instruction = _VERIFY_SOLUTION_HEADER, _VERIFY_INSTRUCTION
    return _parse_prompt(prompt, _VERIFY_PREAMBLE, instruction, header, "Step 1: ", True, _numbered_steps)


def _numbered_steps(solution: str) -> list[str] | None:
    """The verifier prompt's `Step i: ...` lines, numbered from 1, one a line; None otherwise."""
    steps: list[str] = []
    for i, line in enumerate(solution.split("\n"), start=1):
        m = _NUMBERED_STEP.fullmatch(line)
        if m is None or int(m[1]) != i:
            return None
        steps.append(m[2])
    return steps


def render_chain_step(number: int, check: str, correct: bool) -> str:
    """One step of a verification chain in the form the parser reads (`number` counts from 1)."""
    verdict = VERDICT_CORRECT if correct else VERDICT_INCORRECT
    return f"Step {number}: {check} \\boxed{{{verdict}}}"
