"""The `grader` section: how a solution's final outcome is checked (prm_synth/grading/registry.py).

`kind: math` is the default and is left out of the config fingerprint at its defaults, so pipelines and
folders made before the section existed keep their fingerprint and resume. Every other kind is hashed.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from prm_synth.config.base import Strict
from prm_synth.config.domain_sources import CODE_SOURCES

GraderKind = Literal["math", "choice", "exact", "code", "majority"]
InnerKind = Literal["math", "choice", "exact"]
GRADER_KINDS: tuple[str, ...] = ("math", "choice", "exact", "code", "majority")


class SandboxLimits(Strict):
    """Limits on one run of a program under test (`kind: code`); a limit hit grades it unknown."""

    cpu_s: int = Field(10, ge=1, le=600)
    """CPU seconds (RLIMIT_CPU) the program may use."""
    wall_s: float = Field(20.0, gt=0, le=3600)
    """Wall-clock seconds before the sandbox is killed (the parent's timer)."""
    memory_mb: int = Field(1024, ge=64, le=65536)
    """MiB of memory: each process's address space (RLIMIT_AS), and the resident memory of all the
    program's processes together (watched by the parent, which kills the sandbox past it)."""
    processes: int = Field(32, ge=1, le=4096)
    """Processes and threads (RLIMIT_NPROC) of the program's user (`nobody` when the run is root's)."""
    output_bytes: int = Field(1 << 20, ge=1024, le=1 << 30)
    """Bytes of stdout and stderr read back; more is a limit hit ("output_limit")."""
    file_mb: int = Field(16, ge=1, le=4096)
    """Largest file (RLIMIT_FSIZE, MiB) the program may write in its temporary folder."""
    disk_mb: int = Field(256, ge=16, le=65536)
    """MiB the program may write in all: its folder, /tmp and /dev/shm are one tmpfs of this size (memory,
    never the host's disk)."""
    workers: int | None = Field(None, ge=1, le=256)
    """Sandboxed runs at once when a batch of programs is graded (each still in its own sandbox; results
    in the batch's order). None: min(4, CPUs). Changes no verdict, so it is left out of the fingerprint."""

    # added with the bounded tmpfs; at its default a folder written before keeps its fingerprint
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"disk_mb": 256}

    def fingerprint_part(self, transport: bool = False) -> dict[str, Any]:
        data = super().fingerprint_part(transport)
        data.pop("workers", None)  # how many at once, never what a program's verdict is
        return data


class GraderConfig(Strict):
    kind: GraderKind = "math"
    """`math` (boxed / final number against the gold answer), `choice` (a letter or an option's text),
    `exact` (normalized string match), `code` (the last fenced Python block run against the problem's
    tests in a sandbox) or `majority` (no gold: the policy's most common answer, graded by `of`)."""
    tolerance: float | None = Field(None, ge=0)
    """`exact`: two numeric answers within this absolute tolerance are equal (None: exact match only)."""
    case_sensitive: bool = False
    """`exact`: compare letter case too."""
    sandbox: SandboxLimits = SandboxLimits()
    """`code`: limits on each run of a program under test."""
    of: InnerKind = "math"
    """`majority`: the kind that reads and compares the votes' answers."""
    votes: int = Field(8, ge=2, le=1024)
    """`majority`: policy samples whose final answers vote for the pseudo-gold."""
    min_agreement: float = Field(0.5, gt=0, le=1)
    """`majority`: share of the votes the most common answer needs, else the problem is rejected
    (`no_majority`)."""

    @model_validator(mode="after")
    def _knobs_of_its_kind(self) -> GraderConfig:
        # A knob the chosen kind never reads is a typo or a misunderstanding, not a setting.
        inner = self.of if self.kind == "majority" else self.kind
        if inner != "exact" and (self.tolerance is not None or self.case_sensitive):
            raise ValueError(f"tolerance and case_sensitive are `exact` settings, not {self.kind!r} ones")
        return self

    @property
    def inner_kind(self) -> str:
        """The kind that reads answers: `of` under majority, else `kind`."""
        return self.of if self.kind == "majority" else self.kind


def check_grader(grader: GraderConfig, problems_kind: str) -> None:
    """Refuse a grader the problems cannot feed, before any work (a ValueError pydantic reports)."""
    if grader.kind == "code" and problems_kind not in CODE_SOURCES:
        raise ValueError(
            f"grader.kind 'code' needs problems with tests (problems.kind {sorted(CODE_SOURCES)}), "
            f"not problems.kind {problems_kind!r}"
        )
    if problems_kind == "choice-file" and grader.inner_kind != "choice":
        raise ValueError(
            f"problems.kind 'choice-file' needs grader.kind 'choice' (or majority of choice), not {grader.kind!r}"
        )
    if problems_kind in CODE_SOURCES and grader.kind != "code":
        raise ValueError(f"problems.kind {problems_kind!r} needs grader.kind 'code', not {grader.kind!r}")
