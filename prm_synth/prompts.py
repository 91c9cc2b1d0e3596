"""Prompt text for the policy. Versioned: a change of wording is a change of the data."""

from __future__ import annotations

POLICY_PROMPT_VERSION = "policy-v1"

POLICY_SYSTEM = "You are a careful math tutor. Solve problems step by step."

POLICY_TEMPLATE = (
    "Solve the following math problem step by step. Write each step as its own paragraph, "
    "separated by a blank line. End with a line of the form 'The answer is \\boxed{{ANSWER}}.'\n\n"
    "{question}"
)


def policy_user_prompt(question: str) -> str:
    """The user turn of a policy request; continuation prompts add the prefix in the assistant turn."""
    return POLICY_TEMPLATE.format(question=question)
