"""`prm-synth train`: a process reward model trained on our data with `transformers`' Trainer.

TRL removed its PRMTrainer in 1.14; this is the maintained path. The model is a token classifier
(two labels: 0 bad, 1 good) on top of any causal-LM checkpoint
(`AutoModelForTokenClassification` builds the head for Llama, Qwen2, Mistral, ... families).

A row is rendered exactly as TRL's `PRMTrainer.tokenize_row` did (so a PRM trained with TRL on our
`trl` view scores the same way): BOS (if the tokenizer has one), the question, then each step
tokenized on its own followed by the step separator ("\\n"). The step's label sits on the last token
of its separator; every other position is -100 and carries no loss. Which steps a row holds is the
views' rule (`supervised_steps`: stop after the first error, before an unlabeled step).

Input: a run folder (the records; train/test split by a hash of the problem id, as the export does),
or an exported `trl` or `qwen` view (a repo folder from `prm-synth export --to-dir`, or the view's own
folder), whose train/test splits are used as they are. Output: a folder that
`AutoModelForTokenClassification.from_pretrained` loads, with the tokenizer and `prm_synth_prm.json`
(the separator and label meaning, which `prm-synth eval prm` reads).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prm_synth.errors import PrmSynthInputError
from prm_synth.export.rows import SkipRow, supervised_steps
from prm_synth.export.writing import iter_record_rows, split_of
from prm_synth.telemetry import Countdown

logger = logging.getLogger(__name__)

STEP_SEPARATOR = "\n"
IGNORE = -100
PRM_CONFIG = "prm_synth_prm.json"
LABELS = {0: "bad", 1: "good"}
SCORING_LINE_S = 10.0  # while the held-out rows are scored, a progress line at most this often
# The attention and MLP projections of the Llama, Qwen2 and Mistral families.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class TrainError(PrmSynthInputError):
    """Bad input to training (no rows, unknown folder layout, missing optional dependency)."""


@dataclass(frozen=True)
class Example:
    problem_id: str
    prompt: str
    steps: list[str]
    labels: list[bool]


@dataclass
class TrainSettings:
    """CPU-friendly defaults; a GPU user raises batch size and max length and adds --bf16."""

    max_steps: int = -1  # -1: `epochs` passes over the data
    epochs: float = 1.0
    lr: float = 5e-5
    batch_size: int = 4
    grad_accum: int = 1
    max_length: int = 512
    bf16: bool = False
    lora: bool = False
    lora_r: int = 16
    test_fraction: float = 0.1
    seed: int = 0


# ---------------------------------------------------------------- data
def _from_records(run_dir: Path, test_fraction: float, seed: int) -> dict[str, list[Example]]:
    splits: dict[str, list[Example]] = {"train": [], "test": []}
    for rows in iter_record_rows(run_dir):
        for row in rows:
            try:
                steps, labels = supervised_steps(row)
            except SkipRow:
                continue
            example = Example(row["problem_id"], row["question"].strip(), steps, labels)
            splits[split_of(row["problem_id"], test_fraction, seed)].append(example)
    return splits


def _view_folder(path: Path) -> Path | None:
    for candidate in (path, path / "trl", path / "qwen"):
        if any(candidate.glob("train-*.parquet")):
            return candidate
    return None


def _from_view(folder: Path) -> dict[str, list[Example]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    splits: dict[str, list[Example]] = {"train": [], "test": []}
    for split in splits:
        for file in sorted(folder.glob(f"{split}-*.parquet")):
            label_type = pq.read_schema(file).field("labels").type if "labels" in pq.read_schema(file).names else None
            if label_type is not None and pa.types.is_floating(label_type.value_type):
                raise TrainError(f"{file}: soft (float) labels (export --soft); train reads good/bad labels")
            for row in pq.read_table(file).to_pylist():
                if "completions" in row:  # trl
                    example = Example(row["problem_id"], row["prompt"], row["completions"], list(row["labels"]))
                elif "response" in row and isinstance(row["response"], list):  # qwen
                    labels = [bool(x) for x in row["labels"]]
                    example = Example(row["problem_id"], row["query"], row["response"], labels)
                else:
                    raise TrainError(f"{file}: not a trl or qwen view (columns {sorted(row)})")
                splits[split].append(example)
    return splits


def load_examples(source: str | Path, test_fraction: float = 0.1, seed: int = 0) -> dict[str, list[Example]]:
    """{"train": [...], "test": [...]} from a run folder or an exported trl / qwen view."""
    path = Path(source)
    if (path / "manifest.json").exists():
        splits = _from_records(path, test_fraction, seed)
    elif (folder := _view_folder(path)) is not None:
        splits = _from_view(folder)
    else:
        raise TrainError(f"{path} is neither a run folder (manifest.json) nor an exported trl or qwen view")
    if not splits["train"]:
        raise TrainError(f"{path}: no training rows (every row was skipped or in the test split)")
    return splits


def encode(
    tokenizer: Any,
    prompt: str,
    steps: Sequence[str],
    labels: Sequence[bool] | None = None,
    separator: str = STEP_SEPARATOR,
    max_length: int | None = None,
) -> dict[str, list[int]]:
    """input_ids, labels (-100 but at each step's last separator token) and step_positions.

    TRL's tokenize_row rendering. Truncated to max_length: steps cut off lose their position.
    """
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id, *ids]
    separator_ids = tokenizer.encode(separator, add_special_tokens=False)
    positions: list[int] = []
    for step in steps:
        ids += tokenizer(step, add_special_tokens=False)["input_ids"] + separator_ids
        positions.append(len(ids) - 1)
    if max_length is not None and len(ids) > max_length:
        ids = ids[:max_length]
        positions = [p for p in positions if p < max_length]
    out_labels = [IGNORE] * len(ids)
    if labels is not None:
        for pos, label in zip(positions, labels, strict=False):
            out_labels[pos] = int(label)
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": out_labels, "step_positions": positions}


def _dataset(tokenizer: Any, examples: Iterable[Example], max_length: int) -> Any:
    from datasets import Dataset

    rows = []
    for ex in examples:
        enc = encode(tokenizer, ex.prompt, ex.steps, ex.labels, max_length=max_length)
        if any(x != IGNORE for x in enc["labels"]):  # a row truncated before its first step teaches nothing
            rows.append({k: enc[k] for k in ("input_ids", "attention_mask", "labels")})
    return Dataset.from_list(rows)


# ---------------------------------------------------------------- metrics
def step_metrics(predictions: Sequence[int], labels: Sequence[int]) -> dict[str, float | None]:
    """Accuracy over labeled steps and F1 of finding the bad ones (the minority class that matters)."""
    pairs = list(zip(predictions, labels, strict=True))
    if not pairs:
        return {"step_accuracy": None, "step_f1": None, "majority_accuracy": None, "predicted_bad_fraction": None}
    tp = sum(p == 0 and y == 0 for p, y in pairs)
    fp = sum(p == 0 and y == 1 for p, y in pairs)
    fn = sum(p == 1 and y == 0 for p, y in pairs)
    bad = sum(y == 0 for _, y in pairs)
    return {
        "step_accuracy": sum(p == y for p, y in pairs) / len(pairs),
        "step_f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None,
        "majority_accuracy": max(bad, len(pairs) - bad) / len(pairs),
        # 0.0: the model calls every step good (the majority class); its F1 is then 0 whatever it learned.
        "predicted_bad_fraction": (tp + fp) / len(pairs),
    }


def _compute_metrics(eval_pred: Any) -> dict[str, float]:
    import numpy as np

    logits, labels = eval_pred
    mask = labels != IGNORE
    predictions = np.argmax(logits, axis=-1)[mask].tolist()
    metrics = step_metrics(predictions, labels[mask].tolist())
    return {k: (float("nan") if v is None else v) for k, v in metrics.items()}


# ---------------------------------------------------------------- training
@dataclass
class TrainResult:
    loss_first: float | None
    loss_last: float | None
    eval_step_f1: float | None
    eval_step_accuracy: float | None
    eval_majority_accuracy: float | None
    eval_predicted_bad_fraction: float | None
    steps: int
    seconds: float
    train_rows: int
    test_rows: int
    out: str
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (step, seconds, loss)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def only_one_class(self) -> str | None:
        """The class ("good" or "bad") the model predicts for every held-out step, or None if it predicts both."""
        share = self.eval_predicted_bad_fraction
        return None if share is None or 0.0 < share < 1.0 else ("bad" if share else "good")


def _nan_to_none(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _load_model(model_name: str, settings: TrainSettings) -> tuple[Any, Any]:
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_name)
    if tokenizer.pad_token is None:  # padding is masked out; any known token will do
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForTokenClassification.from_pretrained(
        model_name, num_labels=2, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}
    )
    model.config.pad_token_id = tokenizer.pad_token_id
    if settings.lora:
        try:
            from peft import LoraConfig, TaskType, get_peft_model
        except ImportError:
            raise TrainError("--lora needs peft: pip install 'prm-synth[train]'") from None
        # TOKEN_CLS keeps the new classification head fully trainable (modules_to_save), so the adapters
        # go on the transformer's projections only ("all-linear" would also wrap the head).
        config = LoraConfig(
            task_type=TaskType.TOKEN_CLS,
            r=settings.lora_r,
            lora_alpha=2 * settings.lora_r,
            target_modules=list(LORA_TARGETS),
        )
        model = get_peft_model(model, config)
    return model, tokenizer


def train_prm(
    source: str | Path, model_name: str, out: str | Path, settings: TrainSettings | None = None
) -> TrainResult:
    """Train a token-classification PRM on `source` starting from `model_name`; save it to `out`."""
    from transformers import DataCollatorForTokenClassification, PrinterCallback, Trainer, TrainerCallback

    settings = settings or TrainSettings()
    splits = load_examples(source, settings.test_fraction, settings.seed)
    logger.info("loading %s (a checkpoint without a two-label head gets a new one: MISSING below)", model_name)
    model, tokenizer = _load_model(model_name, settings)
    train = _dataset(tokenizer, splits["train"], settings.max_length)
    test = _dataset(tokenizer, splits["test"], settings.max_length) if splits["test"] else None
    out = Path(out)
    curve: list[tuple[int, float, float]] = []
    started = time.time()

    rows_per_step = settings.batch_size * settings.grad_accum

    class Report(TrainerCallback):
        """The loss curve, and what a person plans by: steps done, rows seen, time left."""

        countdown = Countdown(0, "steps")

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.countdown = Countdown(state.max_steps, "steps")
            logger.info(
                "training %d steps of %d rows on %d rows (%d held out)",
                state.max_steps,
                rows_per_step,
                len(train),
                len(test) if test is not None else 0,
            )

        scoring: Countdown | None = None
        scored = 0
        last_said = 0.0

        def on_prediction_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            """Scoring the held-out rows takes a while on a CPU: a line at most every SCORING_LINE_S seconds."""
            if self.scoring is None:
                batches = math.ceil(len(test) / settings.batch_size) if test is not None else 0
                self.scoring, self.scored, self.last_said = Countdown(batches, "batches"), 0, time.monotonic()
            self.scored += 1
            if time.monotonic() - self.last_said >= SCORING_LINE_S or self.scored == self.scoring.total:
                self.last_said = time.monotonic()
                logger.info("scoring the held-out rows: %s", self.scoring.line(self.scored))

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Mapping[str, float] | None = None, **kw: Any
        ) -> None:
            if logs and "loss" in logs:
                curve.append((state.global_step, round(time.time() - started, 2), float(logs["loss"])))
                logger.info(
                    "step %s, %d rows seen, loss %.4f",
                    self.countdown.line(state.global_step),
                    state.global_step * rows_per_step,
                    logs["loss"],
                )

    args = _training_arguments(out, settings)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=test,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        compute_metrics=_compute_metrics,
        callbacks=[Report()],
    )
    trainer.remove_callback(PrinterCallback)  # stdout is for the report; the curve goes to the log
    state = trainer.train()
    metrics = {}
    if test is not None and len(test):
        logger.info("scoring the %d held-out rows", len(test))
        metrics = trainer.evaluate()
    _save(trainer.model, tokenizer, out, model_name, settings)
    return _result(curve, metrics, state.global_step, started, len(train), len(test) if test is not None else 0, out)


def _training_arguments(out: Path, settings: TrainSettings) -> Any:
    """The Trainer's arguments from our settings: no checkpoints, no evaluation during training, no
    reporting, a log line every step (the loss curve)."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out / "checkpoints"),
        max_steps=settings.max_steps,
        num_train_epochs=settings.epochs,
        learning_rate=settings.lr,
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        bf16=settings.bf16,
        logging_steps=1,
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        seed=settings.seed,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,  # pinning needs an accelerator; on a CPU it only warns
        disable_tqdm=True,
    )


def _result(
    curve: list[tuple[int, float, float]],
    metrics: Mapping[str, float],
    steps: int,
    started: float,
    train_rows: int,
    test_rows: int,
    out: Path,
) -> TrainResult:
    """What a training run reports: the loss curve's ends, the held-out scores, the size and the time."""
    return TrainResult(
        loss_first=curve[0][2] if curve else None,
        loss_last=curve[-1][2] if curve else None,
        eval_step_f1=_nan_to_none(metrics.get("eval_step_f1")),
        eval_step_accuracy=_nan_to_none(metrics.get("eval_step_accuracy")),
        eval_majority_accuracy=_nan_to_none(metrics.get("eval_majority_accuracy")),
        eval_predicted_bad_fraction=_nan_to_none(metrics.get("eval_predicted_bad_fraction")),
        steps=steps,
        seconds=round(time.time() - started, 2),
        train_rows=train_rows,
        test_rows=test_rows,
        out=str(out),
        curve=curve,
    )


def _save(model: Any, tokenizer: Any, out: Path, base: str, settings: TrainSettings) -> None:
    if hasattr(model, "merge_and_unload"):  # LoRA: fold the adapters in, so plain transformers loads it
        model = model.merge_and_unload()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {"step_separator": STEP_SEPARATOR, "labels": LABELS, "base_model": base, "settings": asdict(settings)}
    (out / PRM_CONFIG).write_text(json.dumps(meta, indent=2) + "\n")
