"""What the PRM tests share: a tiny fresh causal LM, and where ProcessBench is."""

from __future__ import annotations

import tempfile
from pathlib import Path

from _tokenizers import qwen_like_bpe

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
