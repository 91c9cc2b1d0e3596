"""The name an engine reports (and rows record), from its config, without building it."""

from __future__ import annotations

from typing import Any

from prm_synth.config import SimulatedJudgeConfig, SimulatedPolicyConfig, VLLMConfig


def model_name(config: Any) -> str:
    """The name an engine built from `config` reports (and rows record), without building it."""
    if isinstance(config, SimulatedPolicyConfig | SimulatedJudgeConfig):
        return config.model_name
    if isinstance(config, VLLMConfig) and config.is_demo:
        from prm_synth.demo_model import DEMO_MODEL_NAME

        return DEMO_MODEL_NAME
    return config.model
