"""Every text a model sees: the policy prompt and the judge prompt (with its parser).

Versioned: a change of wording is a change of the data, so the versions are part of the config
fingerprint (config.PipelineConfig.fingerprint) and the judge's version is stored in every row.
`render_judge_prompt` and `parse_judge_prompt` are a pair: the simulated judge reads its own prompt
back to recompute the truth from the step text, so it runs through exactly the same requests,
batching and parsing as a real judge.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
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


def parse_judge_prompt(prompt: str) -> tuple[str, list[str]] | None:
    """(question, stripped steps) from a prompt made by `render_judge_prompt`; None for other text."""
    if len(prompt) > MAX_PROMPT_CHARS or not prompt.startswith(_PREAMBLE) or not prompt.endswith(_INSTRUCTION):
        return None
    body = prompt[len(_PREAMBLE) : -len(_INSTRUCTION)]
    # The first paragraph tag right after the header ends the question (questions hold no tags).
    cut = body.find(_SOLUTION_HEADER + "<paragraph_0>\n")
    if cut < 0:
        return None
    question, solution = body[:cut], body[cut + len(_SOLUTION_HEADER) :]
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
    return question, steps
