"""pipelines/qwen3-8b-thinking.yaml: a reasoning policy's run, validated without a GPU or the model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from prm_synth.config import PipelineConfig, load_config
from prm_synth.prompting.steps import splitter
from prm_synth.prompting.thinking import resolve_markers

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "pipelines" / "qwen3-8b-thinking.yaml"


def test_the_reasoning_pipeline_loads_with_the_settings_a_thinking_model_needs():
    config = load_config(PIPELINE)
    assert isinstance(config, PipelineConfig) and config.policy.kind == "vllm"
    assert config.policy.thinking is not None  # markers from the tokenizer's chat template
    for section in (config.sampling, config.rollouts):  # Qwen3's thinking-mode sampling
        assert (section.temperature, section.top_p, section.top_k) == (0.6, 0.95, 20)
        assert section.max_tokens == 32768
    assert config.policy.max_model_len >= 32768 + 4096
    assert config.steps.strategy == "thinking" and config.steps.max_steps is not None
    assert config.annotate.method == "binary" and config.annotate.max_rollout_tokens is not None
    # a trace of 300 paragraphs becomes at most max_steps steps, the answer the last
    trace = "<think>\n" + "".join(f"Paragraph {i}: " + "so far so good. " * 20 + "\n\n" for i in range(300))
    text = trace + "</think>\n\nThe answer is \\boxed{7}."
    steps = splitter(config.steps, resolve_markers(config.policy))(text)
    assert len(steps) == config.steps.max_steps and "".join(steps) == text
    assert steps[-1] == "</think>\n\nThe answer is \\boxed{7}."


def _dry_run(pipeline: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",  # what a machine without the Hub sees, at once
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    args = [sys.executable, "-m", "prm_synth.cli", "run", str(pipeline), "--dry-run", "--out", str(tmp_path / "o")]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)


def _errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error:")]


def _without_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return True
    return not torch.cuda.is_available()


@pytest.mark.slow
@pytest.mark.skipif(not _without_gpu(), reason="with a GPU the dry run would download and run the model")
def test_its_dry_run_refuses_only_for_want_of_the_hub_gpu_or_model_in_one_line(tmp_path):
    """As the qwen2.5-math-7b pipeline's dry run does here: without the Hub the problems cannot load, one
    `error:` line; with them on disk, vLLM cannot start the model (no GPU, no weights), one line too. No
    config, validation or steps error comes first."""
    done = _dry_run(PIPELINE, tmp_path)
    assert done.returncode != 0
    (line,) = _errors(done)
    assert "HuggingFaceH4/MATH-500" in line, line
    data = yaml.safe_load(PIPELINE.read_text())
    data["problems"] = {"kind": "file", "path": str(ROOT / "tests/fixtures/problems/math_mini.json"), "preset": "math"}
    local = tmp_path / "local.yaml"
    local.write_text(yaml.safe_dump(data))
    done = _dry_run(local, tmp_path)
    assert done.returncode != 0
    (line,) = _errors(done)
    assert "Qwen/Qwen3-8B" in line and ("vLLM" in line or "GPU" in line or "CUDA" in line), line
