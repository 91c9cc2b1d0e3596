"""What the PRM tests share: a tiny fresh causal LM, where ProcessBench is, and a labeled row to build on."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from _tokenizers import qwen_like_bpe

from prm_synth.records import LabeledRecord

# ../shared/data/processbench beside the checkout (see ENVIRONMENT.md), else the machines' copy, else
# a stand-in folder with the four subset names, each a copy of the small fixture (3 erroneous, 3 correct).
PROCESSBENCH = next(
    (
        p
        for p in (
            Path(__file__).resolve().parents[2] / "shared" / "data" / "processbench",
            Path("/work/shared/data/processbench"),
        )
        if (p / "gsm8k.json").exists()
    ),
    None,
)
if PROCESSBENCH is None:
    PROCESSBENCH = Path(tempfile.mkdtemp(prefix="processbench-standin-"))
    small = (Path(__file__).parent / "fixtures" / "processbench_small.json").read_text()
    for subset in ("gsm8k", "math", "olympiadbench", "omnimath"):
        (PROCESSBENCH / f"{subset}.json").write_text(small)


def tiny_model(folder: Path) -> Path:
    """A fresh, tiny Llama causal LM with the test's byte-level BPE: trains in seconds on a CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = qwen_like_bpe()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def labeled_row(labels: list[bool | None], **fields: Any) -> LabeledRecord:
    """A hard-labeled row with these step labels and no rollout counts: its label sources and first error
    follow the labels, every other field is a plain stand-in; `fields` replace any of them."""
    n = len(labels)
    row: dict[str, Any] = {
        "id": "p0-s0",
        "problem_id": "p0",
        "source": "s",
        "question": "q",
        "gold_answer": "1",
        "steps": [f"step {i}\n" for i in range(n)],
        "final_answer": "1",
        "final_correct": False,
        "mc_values": [None] * n,
        "mc_correct": [0] * n,
        "mc_total": [0] * n,
        "labels": labels,
        "label_source": ["none" if lab is None else "mc" for lab in labels],
        "label_rule": "hard",
        "first_error_mc": next((i for i, lab in enumerate(labels) if lab is False), -1),
        "annotator": "binary",
        "policy_model": "sim",
        "config_fingerprint": "fp",
        "rollouts": 10,
        "tokens": 100,
    }
    return LabeledRecord(**(row | fields))
