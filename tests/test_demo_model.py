"""The demo model folder: converted once, atomically, never used half-written."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from prm_synth import demo_model as models


def _fake_convert(calls: list[Path]):
    def convert(gguf: Path, out: Path) -> None:
        calls.append(out)
        (out / "config.json").write_text(json.dumps({"model_type": "llama"}))
        (out / "model.safetensors").write_bytes(b"weights")

    return convert


def test_prepare_twice_second_is_noop(tmp_path, monkeypatch):
    calls: list[Path] = []
    monkeypatch.setattr(models, "_convert", _fake_convert(calls))
    target = tmp_path / "demo"
    assert models.prepare_demo_model(target) == target
    assert models.is_prepared(target) and (target / "config.json").is_file()
    mtime = (target / "model.safetensors").stat().st_mtime_ns
    assert models.prepare_demo_model(target) == target
    assert models.demo_model_path(target) == target
    assert len(calls) == 1
    assert (target / "model.safetensors").stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]  # no temporary folder left behind


def test_half_written_folder_is_never_used(tmp_path, monkeypatch):
    calls: list[Path] = []
    monkeypatch.setattr(models, "_convert", _fake_convert(calls))
    target = tmp_path / "demo"
    target.mkdir()
    (target / "config.json").write_text("{truncated")  # an interrupted copy: no marker
    assert not models.is_prepared(target)
    assert models.demo_model_path(target) == target
    assert len(calls) == 1
    assert json.loads((target / "config.json").read_text()) == {"model_type": "llama"}


def test_stale_temp_folder_is_ignored_and_cleaned(tmp_path, monkeypatch):
    calls: list[Path] = []
    monkeypatch.setattr(models, "_convert", _fake_convert(calls))
    stale = tmp_path / f"{models._TMP_PREFIX}dead"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    target = tmp_path / "demo"
    models.prepare_demo_model(target)
    assert not stale.exists()
    assert calls and calls[0] != stale
    assert (target / "model.safetensors").read_bytes() == b"weights"


def test_failed_conversion_leaves_nothing(tmp_path, monkeypatch):
    def boom(gguf: Path, out: Path) -> None:
        (out / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(models, "_convert", boom)
    target = tmp_path / "demo"
    with pytest.raises(RuntimeError, match="disk full"):
        models.prepare_demo_model(target)
    assert list(tmp_path.iterdir()) == []


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PRM_SYNTH_CACHE", str(tmp_path))
    assert models.default_cache_dir() == tmp_path / "models" / models.DEMO_MODEL_NAME


@pytest.mark.slow
def test_real_demo_model_prepared_once():
    """The real conversion into the shared cache (the vLLM tests use it); the second call is a no-op."""
    path = models.prepare_demo_model()
    for name in ("config.json", "model.safetensors", "tokenizer.json", models.MARKER):
        assert (path / name).is_file(), name
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    assert tok.chat_template
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert models.prepare_demo_model() == path
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime
