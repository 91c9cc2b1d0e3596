"""The pipeline's configuration, one file per section (as vLLM's `vllm/config/`): problems, engines,
sampling (and steps, rollouts), annotate (and labels), judge (and consensus, verify), run (and output); the whole
config (pipeline.py), reading a file (loading.py), upgrades of older files (upgrade.py), and a dataset's identity
(identity.py: the fingerprint each section declares its part of, legacy fingerprints, the resume decision).

The sections and the loaders are imported from here (`from prm_synth.config import PipelineConfig`);
identity, upgrade and diff by their module.
"""

from __future__ import annotations

from prm_synth.config.annotate import (
    LABELER_REVISIONS,
    P_GOOD_TESTS,
    AnnotateConfig,
    BinaryConfig,
    LabelConfig,
    MCConfig,
    OmegaConfig,
    PosteriorConfig,
    SearchKnobs,
    SequentialTestConfig,
    rows_reconcile,
)
from prm_synth.config.audit import AuditConfig, AuditJudgeConfig
from prm_synth.config.base import (
    DEMO_MODEL,
    MAX_OPS,
    MAX_ROLLOUTS,
    MAX_SAMPLES,
    MAX_TEMPERATURE,
    MAX_TOKENS,
    ConfigError,
    RolloutCount,
    Strict,
    digest,
)
from prm_synth.config.engine_fields import EngineFields, ThinkingConfig
from prm_synth.config.engines import EngineConfig, JudgeEngineConfig, OpenAIConfig, VLLMConfig
from prm_synth.config.judge import (
    PINNED,
    ConsensusConfig,
    JudgeConfig,
    VerifyConfig,
)
from prm_synth.config.loading import (
    format_validation_error,
    load_config,
    load_judge_config,
    read_yaml_mapping,
    validate_config,
)
from prm_synth.config.pipeline import (
    PipelineConfig,
)
from prm_synth.config.problems import (
    PRESETS,
    BuiltinSource,
    FieldMapping,
    FileSource,
    HFSource,
    ProblemSource,
    SolutionFields,
    SolutionsSource,
)
from prm_synth.config.run import (
    OutputConfig,
    RunConfig,
)
from prm_synth.config.sampling import (
    RolloutConfig,
    SamplingConfig,
    StepsConfig,
)
from prm_synth.config.simulated import JudgeErrorProfile, SimulatedJudgeConfig, SimulatedPolicyConfig

__all__ = [
    "AuditConfig",
    "AuditJudgeConfig",
    "AnnotateConfig",
    "BinaryConfig",
    "BuiltinSource",
    "ConfigError",
    "ConsensusConfig",
    "DEMO_MODEL",
    "EngineConfig",
    "EngineFields",
    "FieldMapping",
    "FileSource",
    "HFSource",
    "JudgeConfig",
    "JudgeEngineConfig",
    "JudgeErrorProfile",
    "LABELER_REVISIONS",
    "LabelConfig",
    "MAX_OPS",
    "MAX_ROLLOUTS",
    "MAX_SAMPLES",
    "MAX_TEMPERATURE",
    "MAX_TOKENS",
    "MCConfig",
    "OmegaConfig",
    "OpenAIConfig",
    "OutputConfig",
    "PINNED",
    "PRESETS",
    "P_GOOD_TESTS",
    "PipelineConfig",
    "PosteriorConfig",
    "ProblemSource",
    "SolutionFields",
    "SolutionsSource",
    "RolloutConfig",
    "RolloutCount",
    "RunConfig",
    "SamplingConfig",
    "SearchKnobs",
    "SequentialTestConfig",
    "SimulatedJudgeConfig",
    "SimulatedPolicyConfig",
    "StepsConfig",
    "Strict",
    "ThinkingConfig",
    "VLLMConfig",
    "VerifyConfig",
    "digest",
    "format_validation_error",
    "load_config",
    "load_judge_config",
    "read_yaml_mapping",
    "rows_reconcile",
    "validate_config",
]
