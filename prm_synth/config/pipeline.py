"""The whole pipeline config: one field per section, the checks across sections, and the fingerprint
composed from what each section puts in it (config/identity.py says what a dataset's identity is)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from prm_synth.config.annotate import (
    LABELER_REVISIONS,
    P_GOOD_TESTS,
    AnnotateConfig,
    BinaryConfig,
    LabelConfig,
)
from prm_synth.config.audit import AuditConfig
from prm_synth.config.base import Strict, digest
from prm_synth.config.canaries import CanariesConfig
from prm_synth.config.engine_fields import EngineFields
from prm_synth.config.engines import EngineConfig
from prm_synth.config.grader import GraderConfig, check_grader
from prm_synth.config.judge import ConsensusConfig, JudgeConfig, VerifyConfig
from prm_synth.config.problems import ProblemSource
from prm_synth.config.run import OutputConfig, RunConfig
from prm_synth.config.sampling import RolloutConfig, SamplingConfig, StepsConfig
from prm_synth.config.upgrade import upgrade
from prm_synth.prompting.prompts import PROMPT_VERSIONS


class PipelineConfig(Strict):
    name: str = Field("prm-synth", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    """The run's name; the default output folder is runs/<name> (a plain folder name, never a path)."""
    problems: ProblemSource
    """Where the problems come from: `builtin`, `file`, `hf`, `humaneval`, `choice-file`, or `solutions` (solutions
    you already have, labeled without sampling) (by `kind`)."""
    grader: GraderConfig = GraderConfig()
    """How a solution's final outcome is checked: `math` (default), `choice`, `exact`, `code`, `majority`."""
    policy: EngineConfig
    """The model whose solutions are labeled: `simulated`, `vllm` or `openai` (by `kind`)."""
    sampling: SamplingConfig = SamplingConfig()
    """How solutions are sampled."""
    steps: StepsConfig = StepsConfig()
    """How solutions are split into steps."""
    rollouts: RolloutConfig = RolloutConfig()
    """How rollouts from a prefix are sampled."""
    annotate: AnnotateConfig = BinaryConfig(method="binary")
    """How steps are labeled: `binary` (default), `mc` or `omegaprm` (by `method`)."""
    labels: LabelConfig = LabelConfig()
    """How measurements become labels, and which labels are trusted."""
    judge: JudgeConfig | None = None
    """An LLM judge that names each solution's first error (None: no judge)."""
    consensus: ConsensusConfig | None = None
    """How the judge and the rollouts are combined. A file with a `judge` section that leaves `consensus` out
    gets the default (`soft`); `consensus: null` records the judge's verdicts without combining them."""
    verify: VerifyConfig | None = None
    """Verification chains for generative verifiers (None: none written)."""
    canaries: CanariesConfig = CanariesConfig()
    """Planted-error canaries that measure the labels on the run's own model (written apart, never data)."""
    audit: AuditConfig = AuditConfig()
    """A random sample of the kept rows re-examined by evidence the selection never used (only where a judge
    runs): what `estimated_precision` and `target_met` rest on."""
    output: OutputConfig = OutputConfig()
    """Shard size and what is written with a shard."""
    run: RunConfig = RunConfig()
    """How the run is executed (parallelism, retries, warnings); changes no row."""

    # A field added after datasets were written, at the value that means "as before" (Strict): a config
    # without a `verify` section, or with the default (math) grader, hashes as configs written before.
    # The default audit is left out too: it changes no row of the shard it audits (a shard it finds below
    # target tightens the keep rule of the shards after it, which the run then says).
    ADDED_FIELDS = {
        "verify": None,
        "grader": GraderConfig().fingerprint_part(),
        "audit": AuditConfig().fingerprint_part(),
    }

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return upgrade(data) if isinstance(data, dict) else data

    @model_validator(mode="before")
    @classmethod
    def _a_judge_brings_consensus(cls, data: Any) -> Any:
        # A judge whose verdicts nothing reads is spent for nothing; a stored config (a full dump) always
        # names `consensus`, so folders made when leaving it out meant none keep their meaning
        # (config/identity.py, with_former_defaults, resumes them).
        if isinstance(data, dict) and data.get("judge") is not None and "consensus" not in data:
            return data | {"consensus": {}}
        return data

    @model_validator(mode="after")
    def _consensus_needs_a_judge(self) -> PipelineConfig:
        if self.consensus is not None and self.consensus.policy != "mc-only" and self.judge is None:
            raise ValueError(f"consensus.policy {self.consensus.policy!r} needs a judge section")
        return self

    @model_validator(mode="after")
    def _grader_fits_problems(self) -> PipelineConfig:
        check_grader(self.grader, self.problems.kind)
        return self

    @model_validator(mode="after")
    def _given_solutions_are_labeled_per_solution(self) -> PipelineConfig:
        # given solutions skip sampling: a method that draws its own (omegaprm), or a gold the policy's own
        # samples would vote on (majority), has nothing to work on
        if self.problems.kind == "solutions" and (self.annotate.method == "omegaprm" or self.grader.kind == "majority"):
            what = "annotate.method omegaprm" if self.annotate.method == "omegaprm" else "grader.kind majority"
            raise ValueError(
                f"problems.kind solutions labels the solutions given; {what} samples its own: use annotate.method "
                "binary or mc, and a gold answer (the answer column, or problems.gold_answers)"
            )
        return self

    @model_validator(mode="after")
    def _min_confidence_needs_p_good(self) -> PipelineConfig:
        # Without p_good no label reaches a threshold: every row would be rejected or left unlabeled.
        if self.labels.min_confidence > 0 and getattr(self.annotate, "search_test", None) not in P_GOOD_TESTS:
            raise ValueError(
                f"labels.min_confidence needs per-step p_good, which only `search_test: changepoint` "
                f"estimates (annotate.method {self.annotate.method}): set min_confidence to 0 or use that search"
            )
        return self

    def labeler_revision(self) -> str | None:
        """`<search> <revision>` of the search that labels (`LABELER_REVISIONS`), None for one that has
        none (its rows have not changed since folders began to record it)."""
        search = getattr(self.annotate, "search_test", None)
        return f"{search} {LABELER_REVISIONS[search]}" if search in LABELER_REVISIONS else None

    def engines(self) -> dict[str, EngineFields]:
        """The engines of the run by role: policy, and judge and verify where the config has them."""
        out: dict[str, EngineFields] = {"policy": self.policy}
        if self.judge is not None:
            out["judge"] = self.judge.engine
        if self.verify is not None:
            out["verify"] = self.verify.engine
        return out

    def transport_keys(self) -> set[str]:
        """Dotted keys of the engines' transport settings (`policy.base_url`, ...): never a reason to
        refuse a folder."""
        where = {"policy": "policy", "judge": "judge.engine", "verify": "verify.engine"}
        return {f"{where[role]}.{name}" for role, e in self.engines().items() for name in e.TRANSPORT_FIELDS}

    def fingerprint(self) -> str:
        """Hash of everything that changes the rows (config/identity.py): each section as it declares
        (`fingerprint_part`: `run` and the engines' transport settings left out), the prompts' versions and
        the labeling search's revision (`labeler_revision`)."""
        return digest(self.fingerprint_part(transport=False))

    def legacy_fingerprint(self) -> str:
        """The fingerprint as it was before transport settings left it (each hashed as set): folders
        made then hold it, and resume under it (config/identity.py)."""
        return digest(self.fingerprint_part(transport=True))

    def fingerprint_part(self, transport: bool = False) -> dict[str, Any]:
        """The hashed form: every section's part, the prompts' versions (the verifier's only with a
        `verify` section), the labeler revision, and what only the `soft` policy reads only under it
        (each section's `SOFT_ONLY`: configs of the other policies hash as before those fields existed)."""
        data = super().fingerprint_part(transport)
        versions = dict(PROMPT_VERSIONS)
        if self.verify is not None:
            versions["verify"] = self.verify.prompt_version
        data["prompt_versions"] = versions
        if (revision := self.labeler_revision()) is not None:
            data["labeler_revision"] = revision
        if self.judge is None or self.consensus is None or self.consensus.policy != "soft":
            data.pop("canaries", None)  # only soft reads what canaries measure; elsewhere they change no row
            data.pop("audit", None)  # nor what an audit finds
        if self.consensus is None or self.consensus.policy != "soft":
            for name in ("judge", "consensus"):
                if (section := getattr(self, name)) is not None:
                    for key in section.SOFT_ONLY:
                        data[name].pop(key, None)
        return data
