"""Engines behind one protocol (see base.py). One engine per process, built on first use and reused."""

from __future__ import annotations

import atexit
import threading
from typing import Any

from prm_synth.config import OpenAIConfig, SimulatedJudgeConfig, SimulatedPolicyConfig, VLLMConfig
from prm_synth.engines.base import Engine
from prm_synth.engines.names import model_name

__all__ = ["build_engine", "close_engines", "existing_engine", "get_engine", "model_name", "stop_engines"]

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def build_engine(config: Any) -> Engine:
    """A new engine for an engine config (imports the heavy backends only when asked for)."""
    if isinstance(config, SimulatedPolicyConfig):
        from prm_synth.simulated.engines import SimulatedPolicy

        return SimulatedPolicy(config)
    if isinstance(config, SimulatedJudgeConfig):
        from prm_synth.simulated.engines import SimulatedJudge

        return SimulatedJudge(config)
    if isinstance(config, VLLMConfig):
        from prm_synth.engines.vllm import VLLMEngine

        return VLLMEngine(config)
    if isinstance(config, OpenAIConfig):
        from prm_synth.engines.openai import OpenAIEngine

        return OpenAIEngine(config)
    raise TypeError(f"no engine for config {type(config).__name__}")


def _key(config: Any) -> str:
    return f"{type(config).__name__}:{config.model_dump_json()}"


def existing_engine(config: Any) -> Engine | None:
    """The process's engine for this config if one was built (None: never used; none is built here)."""
    with _lock:
        return _engines.get(_key(config))


def get_engine(config: Any) -> Engine:
    """The process's engine for this config: built once, shared by every shard task in the process."""
    key = _key(config)
    with _lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = build_engine(config)
        return engine


def stop_engines(reason: str) -> None:
    """A stop (SIGINT/SIGTERM): every waiter on an engine is released at once (its requests fail with
    `RunStopped`), nothing new is sent to any engine, and the engines that can cancel their requests in
    flight and their pending retries do (`cancel_all`). Never waits for an engine; `close_engines` then
    shuts them down."""
    from prm_synth.engines.stream import stop_streams

    stop_streams(reason)
    with _lock:
        engines = list(_engines.values())
    for engine in engines:
        cancel = getattr(engine, "cancel_all", None)
        if callable(cancel):
            cancel()


def close_engines() -> None:
    with _lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.close()


atexit.register(close_engines)
