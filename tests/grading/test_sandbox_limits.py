"""The documented limits of in-process tests (docs/guides/other-domains.md, "The limits of in-process
tests"), shown so the page cannot drift from the code: a wrong program that forges the harness's pass
line from inside its own interpreter, and one that returns an object equal to everything, both pass.
Should either test ever fail, the hole is closed: update the page with it."""

from __future__ import annotations

import pytest

from prm_synth.config.grader import SandboxLimits
from prm_synth.grading import sandbox
from prm_synth.grading.code import CodeGrader
from prm_synth.grading.keys import dump_key

pytestmark = pytest.mark.skipif(sandbox.bwrap_binary() is None, reason="bubblewrap is not installed")

LIMITS = SandboxLimits(cpu_s=5, wall_s=120, memory_mb=512, processes=16)
KEY = dump_key({"tests": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "inc"})

FORGER = """import os, sys
frame = sys._getframe()
while frame is not None and "nonce" not in frame.f_locals:
    frame = frame.f_back
found = frame.f_locals
os.write(found["report"], f"\\nPRM_SYNTH_PASS {found['nonce']}\\n".encode())
os._exit(0)
def inc(x):
    return x
"""

EQUALS_EVERYTHING = """class Anything:
    def __eq__(self, other):
        return True
def inc(x):
    return Anything()
"""


def grade(program: str) -> tuple[str, str | None]:
    verdict = CodeGrader(LIMITS).grade(f"```python\n{program}```\n", KEY)
    return verdict.status, verdict.reason


def test_a_program_can_forge_the_pass_line_from_inside_its_interpreter() -> None:
    assert grade(FORGER) == ("correct", "passed")


def test_an_object_equal_to_everything_passes_equality_asserts() -> None:
    assert grade(EQUALS_EVERYTHING) == ("correct", "passed")
    assert grade("def inc(x):\n    return x\n")[0] == "incorrect"  # a plainly wrong one is still wrong
