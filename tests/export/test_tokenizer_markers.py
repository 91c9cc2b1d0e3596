"""A simulated run exported for two real tokenizers, each view read back the way its trainer reads it.

The consumers' logic is restated here from their sources, independently of prm_synth.export.consumers:
OpenRLHF `openrlhf/datasets/process_reward_dataset.py` (`__getitem__`: placeholder id from
`convert_token_to_id`, `mask = input_ids == placeholder_token_id`, `labels[mask] = label_tensor[:n]`)
and Qwen2.5-Math-PRM's model card (`<extra_0>` after each step in the chat template). OpenRLHF itself
cannot be installed on a CPU machine (DeepSpeed, flash-attn), so its dataset class is not imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from _tokenizers import ascii_only_bpe, demo_tokenizer, qwen_like_bpe
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.export.consumers import TokenizationError, openrlhf_labels
from prm_synth.export.hub import export_to_dir
from prm_synth.export.rows import Marker
from prm_synth.export.views import VIEW_NAMES

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 60


@pytest.fixture(scope="module")
def simulated_run(tmp_path_factory):
    """`prm-synth run pipelines/simulated.yaml --limit 60`: a real run of the simulated policy.

    In its own process: Prefect's console logging, set up in-process, would outlive pytest's captured streams.
    """
    out = tmp_path_factory.mktemp("run") / "simulated"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = ["run", str(ROOT / "pipelines" / "simulated.yaml"), "--out", str(out), "--limit", str(LIMIT)]
    done = subprocess.run(
        [sys.executable, "-m", "prm_synth.cli", *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module", params=["smollm2", "byte-bpe"])
def tokenizer(request):
    return demo_tokenizer(request.config.cache) if request.param == "smollm2" else qwen_like_bpe()


def _rows(folder: Path) -> list[dict]:
    return [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def openrlhf_getitem(tokenizer, text: str, values: list[str], placeholder: str) -> tuple[torch.Tensor, torch.Tensor]:
    """OpenRLHF ProcessRewardDataset.__getitem__, as in its source (without max_length truncation)."""

    def convert_token_to_id(token):
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1
        return ids[0]

    input_ids = tokenizer(text, padding=False, return_tensors="pt", add_special_tokens=False)["input_ids"]
    label_tensor = torch.tensor([convert_token_to_id(v) for v in values], dtype=input_ids.dtype)
    mask = input_ids == convert_token_to_id(placeholder)
    num_placeholders = mask.sum(dim=-1)
    truncated = label_tensor[..., : num_placeholders.max()]
    labels = torch.full_like(input_ids, -100)
    labels[mask] = truncated
    return input_ids, labels


def qwen_positions(tokenizer, row: dict) -> int:
    """Qwen2.5-Math-PRM's model card: steps joined by <extra_0> in the assistant turn, scored at <extra_0>."""
    if len(tokenizer.encode("<extra_0>", add_special_tokens=False)) != 1:
        tokenizer.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})  # what the card tells users
    messages = [
        {"role": "system", "content": row["system"]},
        {"role": "user", "content": row["query"]},
        {"role": "assistant", "content": "<extra_0>".join(row["response"]) + "<extra_0>"},
    ]
    conversation = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    input_ids = tokenizer.encode(conversation, return_tensors="pt")
    return int((input_ids == tokenizer.encode("<extra_0>")[0]).sum())


def test_every_label_is_found_by_each_views_trainer(simulated_run, tokenizer, tmp_path):
    import copy

    out = tmp_path / "export"
    result = export_to_dir(simulated_run, out, formats=VIEW_NAMES, tokenizer=tokenizer)
    marker = result.marker
    assert single_token(tokenizer, marker.placeholder)
    checks = result.token_checks
    truth = {r["id"]: r["labels"] for r in _rows(out / "trl")}  # bools, one a supervised step
    for fmt in VIEW_NAMES:
        config = json.loads((out / fmt / "view.json").read_text())
        assert config["token_check"]["ok"] and config["marker"] in (None, marker.as_dict())
        rows = _rows(out / fmt)
        assert len(rows) == checks[fmt]["rows"] == result.views[fmt].rows > 20
        labels = 0
        for row in rows:
            want = truth[row["id"]]
            if fmt in ("openrlhf", "math-shepherd"):
                signs = row["value"] if fmt == "openrlhf" else ["+" if x else "-" for x in want]
                assert row["input"].count(marker.placeholder) == len(want)
                _, lab = openrlhf_getitem(tokenizer, row["input"], signs, marker.placeholder)
                sign = {tokenizer.encode(s, add_special_tokens=False)[0]: s for s in "+-"}
                found = [sign[x] == "+" for x in lab[lab != -100].tolist()]
                assert found == want, row["id"]  # every label, at its step, in order
            elif fmt == "qwen":
                assert qwen_positions(copy.deepcopy(tokenizer), row) == len(row["response"]) == len(want)
                assert row["labels"] == [int(x) for x in want]
            labels += len(want)
        assert labels == checks[fmt]["labels"] == checks[fmt]["labels_found"]
    card = (out / "README.md").read_text()
    assert f"| problems | {LIMIT} read, {LIMIT} loaded (run with a limit of {LIMIT}) |" in card
    assert "**Label quality.** The policy is simulated" in card and "bad-label precision" in card


def single_token(tokenizer, text: str) -> bool:
    return len(tokenizer.encode(text, add_special_tokens=False)) == 1


def test_the_default_marker_is_refused_where_it_would_lose_labels(simulated_run, tmp_path):
    """Byte-level BPE: "ки" is one token alone, but " ки" in running text is another one; the
    placeholder's id would never be found and OpenRLHF would train on nothing, silently."""
    tok = qwen_like_bpe()
    assert single_token(tok, "ки") and tok.encode(" ки", add_special_tokens=False) != tok.encode("ки")
    result = export_to_dir(simulated_run, tmp_path, formats=["openrlhf"], tokenizer=tok)
    assert result.marker == Marker("ки", "\n")
    card = (tmp_path / "README.md").read_text()
    assert "marker ' ки' refused: openrlhf: row" in card and "found 0 placeholders" in card
    config = json.loads((tmp_path / "openrlhf" / "view.json").read_text())
    assert config["consumer"]["openrlhf_train_prm_args"][4:6] == ["--placeholder_token", "ки"]


def test_a_tokenizer_without_a_single_token_marker_fails_before_writing(simulated_run, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(TokenizationError) as e:
        export_to_dir(simulated_run, out, formats=["trl", "openrlhf"], tokenizer=ascii_only_bpe())
    message = str(e.value)
    assert "no step marker is one token in context" in message and "--marker" in message
    assert "placeholder 'ки' is 4 tokens" in message
    assert not out.exists()


def test_cli_error_for_an_unusable_marker_names_it_and_writes_nothing(simulated_run, tmp_path):
    path = tmp_path / "tokenizer.json"
    ascii_only_bpe().backend_tokenizer.save(str(path))
    out = tmp_path / "out"
    args = ["export", str(simulated_run), "--to-dir", str(out), "-f", "openrlhf", "--tokenizer", str(path)]
    result = CliRunner().invoke(app, [*args, "--marker", "§"])
    assert result.exit_code == 2
    assert "placeholder '§' is 2 tokens" in result.output and not out.exists()
    result = CliRunner().invoke(app, [*args, "--marker", "+"])  # a one-byte token: accepted
    assert result.exit_code == 0, result.output


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=40).filter(lambda s: "ки" not in s), min_size=1, max_size=6))
def test_a_placeholder_on_its_own_line_is_found_once_per_step_for_any_text(steps):
    """Byte-level BPE splits at a newline, so "\\nки" stays the token "ки" whatever the step text is."""
    tok = _BPE
    text = "Question?\n" + "\n".join(Marker("ки", "\n").after(s.strip() or "x") for s in steps)
    _, labels = openrlhf_labels(tok, text, ["+"] * len(steps), "ки")
    assert sum(x != -100 for x in labels) == len(steps)


_BPE = qwen_like_bpe()
