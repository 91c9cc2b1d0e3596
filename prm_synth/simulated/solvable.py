"""The refusal of problems the simulated policy cannot write solutions for, before any work starts."""

from __future__ import annotations

from collections.abc import Iterable

from prm_synth.config import EngineConfig
from prm_synth.errors import PrmSynthInputError
from prm_synth.simulated import arithmetic


class PolicyCannotSolveError(PrmSynthInputError):
    """Problems the policy cannot write solutions for; raised before any work."""


def check_policy_can_solve(policy: EngineConfig, questions: Iterable[tuple[str, str]]) -> None:
    """Refuse (problem id, question) pairs the policy cannot answer, before any work starts.

    Only the simulated policy has such a limit: it writes solutions for the arithmetic problems of
    prm_synth.simulated.arithmetic alone (builtin problems, or a file of their text). On any other text it
    could only write a non-answer, and labeling that would fill a dataset, or an evaluation, with
    rows that measure nothing.
    """
    if policy.kind != "simulated":
        return
    for problem_id, question in questions:
        if arithmetic.parse_question(question) is None:
            shown = " ".join(question.split())
            shown = shown[:60] + ("…" if len(shown) > 60 else "")
            raise PolicyCannotSolveError(
                f"the simulated policy writes solutions only for its own arithmetic problems (problems: kind: "
                f"builtin), and problem {problem_id} is not one ({shown!r}): use a real policy (kind: vllm or openai)"
            )
