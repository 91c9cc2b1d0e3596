"""Each view read the way its real consumer reads it, so an export is checked before it is written.

A PRM trainer supervises the token positions it finds; a label whose position it does not find is
silently dropped (OpenRLHF keeps only as many labels as it finds placeholders), and a step marker
that is not one token fails its assert. So for a given tokenizer every row of every view is
tokenized here exactly as the consumer does it, and the labels it would find are counted:

- OpenRLHF, `openrlhf/datasets/process_reward_dataset.py` (`ProcessRewardDataset.__getitem__`) and
  `openrlhf/utils/utils.py` (`convert_token_to_id`): the placeholder and each reward token must
  encode (without special tokens) to exactly one id; the input is tokenized without special tokens;
  the supervised positions are those whose id equals the placeholder's. OpenRLHF itself is not a
  dependency (it needs DeepSpeed and CUDA kernels), so its logic is mirrored here, line for line.
- Math-Shepherd (the `math-shepherd-mistral-7b-prm` model card): the step tag's id is looked up the
  same way and scored where `input_ids` equals it; checked with OpenRLHF's stricter single-token rule.
- Qwen2.5-Math-PRM (its model card): the assistant turn is `"<extra_0>".join(steps) + "<extra_0>"`
  inside the chat template, encoded with `tokenizer.encode`, scored where the id is `<extra_0>`'s.
  In base tokenizers `<extra_0>` is several tokens; it must be added as a special token first,
  which the check does on a copy and the card tells the user to do.
- TRL `PRMTrainer.tokenize_row` (TRL 1.0-1.13): each step is tokenized alone plus the separator,
  the label goes on the last token; it always finds every label, the check counts tokens per row.
- TRL `SFTTrainer` on the verifier view's `messages`: the conversation is rendered with the
  tokenizer's chat template (`apply_chat_template`) and tokenized; a tokenizer without a chat
  template cannot train on it, and the chain (the assistant turn) must appear whole in the rendering.

Each view declares which of these it is read with (prm_synth.export.views, `View.read_as_consumer`);
prm_synth.export.token_check runs them over every row and picks the step marker.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prm_synth.errors import PrmSynthInputError

QWEN_STEP_TOKEN = "<extra_0>"  # Qwen2.5-Math-PRM scores the hidden state at this token after each step
REWARD_TOKENS = ("+", "-")  # OpenRLHF's --reward_tokens for the good and bad label
TRL_STEP_SEPARATOR = "\n"
IGNORE = -100  # the label of a position no loss is computed on (PyTorch's cross-entropy default)


class TokenizationError(PrmSynthInputError):
    """A view cannot be read correctly by its consumer with this tokenizer (nothing was written)."""


def load_tokenizer(name_or_path: str | Path) -> Any:
    """A Hugging Face tokenizer from a folder, a Hub name, or a bare `tokenizer.json` file."""
    path = Path(name_or_path)
    try:
        if path.is_file() and path.suffix == ".json":
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast(tokenizer_file=str(path))
        from transformers import AutoTokenizer

        from prm_synth.engines.hub_reach import hub_unreachable, offline, offline_hint

        if path.exists() or (unreachable := hub_unreachable()) is None:
            return AutoTokenizer.from_pretrained(str(name_or_path))
        try:  # offline: the cached copy at once, or the error at once (no minute of retries)
            with offline():
                return AutoTokenizer.from_pretrained(str(name_or_path))
        except (OSError, ValueError):
            offline_error = offline_hint(unreachable, "it")
    except (OSError, ValueError) as e:
        raise TokenizationError(f"cannot load tokenizer {name_or_path}: {e}") from None
    raise TokenizationError(f"cannot load tokenizer {name_or_path}: {offline_error}")


def tokenizer_name(tokenizer: Any) -> str:
    """The tokenizer's Hub name, or a local folder's last part (a card must not publish local paths)."""
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    return Path(name).name if Path(name).exists() else name


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte (its `bytes_to_unicode`, inverted)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, shift = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + shift)] = b
            shift += 1
    return chars


_BYTE_OF = _byte_level_alphabet()


def _pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token as text, for messages. A byte-level BPE token's own string spells bytes as Latin-1
    characters ('ки' would read 'Ðº', 'Ð¸'), so tokens are decoded; a token that holds only part of a
    character shows its bytes (`\\xd0`) instead of U+FFFD."""
    out = []
    for i, piece in zip(ids, tokenizer.convert_ids_to_tokens(list(ids)), strict=True):
        text = tokenizer.decode([i])
        if "\ufffd" in text and all(c in _BYTE_OF for c in str(piece)):
            text = bytes(_BYTE_OF[c] for c in str(piece)).decode("utf-8", errors="backslashreplace")
        out.append(text)
    return out


def single_token_id(tokenizer: Any, text: str) -> int | None:
    """OpenRLHF's `convert_token_to_id`: the one id `text` encodes to, or None where it is not one."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


# ---------------------------------------------------------------- the consumers, mirrored
def openrlhf_labels(
    tokenizer: Any, text: str, values: Sequence[str | float], placeholder: str
) -> tuple[list[int], list[Any]]:
    """`ProcessRewardDataset.__getitem__` without truncation: (input_ids, labels), labels -100 except
    at placeholder positions, where they hold the reward token's id (or the number, for soft labels).

    Raises TokenizationError where OpenRLHF would assert, or would fail to place a label.
    """
    placeholder_id = single_token_id(tokenizer, placeholder)
    if placeholder_id is None:
        ids = tokenizer.encode(placeholder, add_special_tokens=False)
        raise TokenizationError(f"placeholder {placeholder!r} is {len(ids)} tokens {_pieces(tokenizer, ids)}")
    label_ids: list[Any] = []
    for value in values:
        if not isinstance(value, str):  # a number: OpenRLHF places it as is (a soft label for PRMLoss)
            label_ids.append(value)
            continue
        token = single_token_id(tokenizer, value)
        if token is None:
            raise TokenizationError(f"reward token {value!r} is not one token")
        label_ids.append(token)
    input_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    positions = [i for i, t in enumerate(input_ids) if t == placeholder_id]
    if len(positions) != len(label_ids):
        raise TokenizationError(f"found {len(positions)} placeholders for {len(label_ids)} labels")
    labels = [IGNORE] * len(input_ids)
    for pos, label in zip(positions, label_ids, strict=True):
        labels[pos] = label
    return input_ids, labels


def qwen_tokenizer(tokenizer: Any) -> tuple[Any, bool]:
    """The tokenizer Qwen's code needs: `<extra_0>` one token. Returns (tokenizer, whether it was added);
    an addition is made on a copy, as a special token, as the card tells the user to do."""
    if single_token_id(tokenizer, QWEN_STEP_TOKEN) is not None:
        return tokenizer, False
    extended = copy.deepcopy(tokenizer)
    extended.add_special_tokens({"additional_special_tokens": [QWEN_STEP_TOKEN]})
    return extended, True


def qwen_render(tokenizer: Any, row: Mapping[str, Any]) -> str:
    """The conversation of Qwen2.5-Math-PRM's model card (plain text where there is no chat template)."""
    response = QWEN_STEP_TOKEN.join(row["response"]) + QWEN_STEP_TOKEN
    if not getattr(tokenizer, "chat_template", None):
        return f"{row['system']}\n{row['query']}\n{response}"
    messages = [
        {"role": "system", "content": row["system"]},
        {"role": "user", "content": row["query"]},
        {"role": "assistant", "content": response},
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)


def qwen_step_positions(tokenizer: Any, row: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """(input_ids, positions of `<extra_0>`) as Qwen's code computes them (`tokenizer` already has it)."""
    step_sep_id = tokenizer.encode(QWEN_STEP_TOKEN)[0]
    input_ids = tokenizer.encode(qwen_render(tokenizer, row))
    return input_ids, [i for i, t in enumerate(input_ids) if t == step_sep_id]


def trl_labels(
    tokenizer: Any, row: Mapping[str, Any], separator: str = TRL_STEP_SEPARATOR
) -> tuple[list[int], list[int]]:
    """TRL 1.13 `PRMTrainer.tokenize_row` (no truncation): the label on each step's last token."""
    prompt_ids = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
    separator_ids = tokenizer.encode(separator, add_special_tokens=False)
    input_ids, labels = [], []
    for step, label in zip(row["completions"], row["labels"], strict=True):
        ids = tokenizer(step, add_special_tokens=False)["input_ids"] + separator_ids
        input_ids += ids
        labels += [IGNORE] * (len(ids) - 1) + [int(label)]
    if tokenizer.bos_token_id is not None:
        prompt_ids = [tokenizer.bos_token_id, *prompt_ids]
    return prompt_ids + input_ids, [IGNORE] * len(prompt_ids) + labels


def chat_tokens(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """SFTTrainer's tokenization of a conversational row: the chat template, rendered and tokenized.

    The assistant turn (the chain) must survive the template whole, or the model would learn another text."""
    if not getattr(tokenizer, "chat_template", None):
        raise TokenizationError("the tokenizer has no chat template, which SFTTrainer needs for `messages`")
    text = tokenizer.apply_chat_template(list(messages), tokenize=False)
    if messages[-1]["content"] not in text:
        raise TokenizationError("the chat template changes the assistant turn's text")
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------- checking a view
@dataclass
class ViewCheck:
    """What the consumer finds in one view: every label, or the first row where it does not."""

    view: str
    consumer: str
    rows: int = 0
    labels: int = 0
    found: int = 0
    tokens_total: int = 0
    tokens_max: int = 0
    failure: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None and self.found == self.labels

    def add(self, tokens: int, labels: int, found: int) -> None:
        self.rows += 1
        self.labels += labels
        self.found += found
        self.tokens_total += tokens
        self.tokens_max = max(self.tokens_max, tokens)

    def as_dict(self) -> dict[str, Any]:
        return {
            "view": self.view,
            "consumer": self.consumer,
            "rows": self.rows,
            "labels": self.labels,
            "labels_found": self.found,
            "tokens_per_row_mean": round(self.tokens_total / self.rows, 1) if self.rows else None,
            "tokens_per_row_max": self.tokens_max,
            "ok": self.ok,
            "failure": self.failure,
            "notes": list(self.notes),
        }
