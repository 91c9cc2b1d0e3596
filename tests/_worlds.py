"""Worlds of benchmarks/fidelity.py, copied here on purpose so the benchmark may change its worlds
without moving what the tests pin: the golden rows label two of them, the held-out check of the default
labels (tests/annotate/test_labels_vs_truth.py) all seventeen. A world is its policy's overrides and its problems' (min_ops, max_ops)."""

from __future__ import annotations

from typing import Any

from prm_synth.config import PipelineConfig

WORLDS: dict[str, tuple[dict[str, Any], tuple[int, int]]] = {
    "in_model": ({"step_error_range": (0.03, 0.2), "recover": 0.15}, (10, 20)),
    "hard_step": ({"step_error": 0.02, "hard_step_error": 0.5, "recover": 0.0}, (10, 20)),
    "hard_step_luck": ({"step_error": 0.02, "hard_step_error": 0.5, "recover": 0.15}, (10, 20)),
    "problem_luck": ({"step_error_range": (0.03, 0.2), "recover_range": (0.0, 0.7)}, (10, 20)),
    "high_luck": ({"step_error_range": (0.03, 0.2), "recover": 0.6}, (10, 20)),
    "very_hard": ({"step_error_range": (0.3, 0.5), "recover": 0.05}, (10, 20)),
    "ungradable": ({"step_error_range": (0.03, 0.2), "recover": 0.05, "ungradable": 0.15}, (10, 20)),
    "step_drift": ({"step_error_range": (0.03, 0.2), "recover": 0.1, "step_drift": 0.3}, (10, 20)),
    "lengths": ({"step_error_range": (0.01, 0.1), "recover": 0.1}, (3, 40)),
    "recent_luck": ({"step_error_range": (0.03, 0.2), "recover": 0.05, "recent_recover": 0.4}, (10, 20)),
    "correlated": ({"step_error_range": (0.03, 0.2), "recover": 0.15, "correlation": 0.7}, (10, 20)),
    "repair": ({"step_error_range": (0.03, 0.2), "recover": 0.05, "repair": 0.5}, (10, 20)),
    "two_lucks": ({"step_error": 0.02, "hard_step_error": 0.5, "recover_choices": (0.0, 0.6)}, (10, 20)),
    # the outside measurement's worlds (issue 29): every step wrong with chance 0.1, luck 0.05 / 0.15 / 0.3
    "luck_05": ({"step_error": 0.1, "recover": 0.05}, (10, 20)),
    "luck_15": ({"step_error": 0.1, "recover": 0.15}, (10, 20)),
    "luck_30": ({"step_error": 0.1, "recover": 0.3}, (10, 20)),
    "mixed": (
        {
            "step_error": 0.03,
            "hard_step_error": 0.4,
            "recover_range": (0.0, 0.5),
            "ungradable": 0.1,
            "step_drift": 0.1,
        },
        (10, 20),
    ),
}


def world_config(world: str, name: str, problems: int, seed: int) -> PipelineConfig:
    """The pipeline the benchmark runs a world with: one sample a problem, the binary search, hard labels."""
    policy, (lo, hi) = WORLDS[world]
    return PipelineConfig.model_validate(
        {
            "name": name,
            "problems": {"kind": "builtin", "count": problems, "seed": seed, "min_ops": lo, "max_ops": hi},
            "policy": {"kind": "simulated", "recover_in_sample": True, "seed": seed, **policy},
            "sampling": {"samples_per_problem": 1},
            "steps": {"strategy": "line"},
            "annotate": {"method": "binary"},
            "labels": {"rule": "hard"},
            "run": {"max_in_flight": 64, "max_batch_requests": 256},
        }
    )
