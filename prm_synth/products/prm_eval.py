"""`prm-synth eval prm`: a trained PRM on ProcessBench, with ProcessBench's own metric.

The PRM scores each step: P(good) at the last token of the step's separator, the position it was
trained on (prm_synth.products.train.encode, TRL's rendering). The predicted earliest error is the first step
whose score is below a threshold (-1 when none is); ProcessBench's F1 is the harmonic mean of the
accuracy on erroneous samples (predicted index == label) and on correct ones (predicted -1)
(prm_synth.store.given_labels.processbench_metric).

The threshold is 0.5, or tuned on one subset you name (`tune_on`) and then applied to every subset;
the tuned subset's own F1 is then optimistic, and the result says which subset it was.
ProcessBench is an evaluation set: tune on it only to compare PRMs on equal terms, and say so.

Any token-classification PRM works (ours, or one trained with TRL's PRMTrainer): a model folder or
Hub name whose head has two labels, 1 meaning good. ProcessBench comes from a folder of
`<subset>.json` / `.jsonl` files (the layout of ../shared/data/processbench), one such file, or the Hub
(`Qwen/ProcessBench`, one split per subset).
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prm_synth.errors import PrmSynthInputError
from prm_synth.products.evaluate import BenchSample, load_processbench
from prm_synth.products.train import PRM_CONFIG, STEP_SEPARATOR, encode
from prm_synth.store.given_labels import processbench_metric
from prm_synth.telemetry import Countdown

logger = logging.getLogger(__name__)

SUBSETS = ("gsm8k", "math", "olympiadbench", "omnimath")
THRESHOLD_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))


class PRMEvalError(PrmSynthInputError):
    """Bad input to the evaluation (no such subset, a model without two labels, ...)."""


# ---------------------------------------------------------------- the benchmark
def load_bench(
    source: str | Path, subsets: Sequence[str] | None = None, limit: int | None = None
) -> dict[str, list[BenchSample]]:
    """ProcessBench subsets (name -> samples), each cut to `limit` samples (see `balanced`)."""
    path = Path(source)
    if path.is_file():
        return {path.stem: balanced(load_processbench(path), limit)}
    if path.is_dir():
        files = {f.stem: f for f in sorted(path.iterdir()) if f.suffix in (".json", ".jsonl")}
        names = list(subsets) if subsets else [s for s in SUBSETS if s in files] or sorted(files)
        missing = [s for s in names if s not in files]
        if missing or not names:
            raise PRMEvalError(f"{path}: no subset file for {missing or 'any subset'} (found {sorted(files)})")
        return {name: balanced(load_processbench(files[name]), limit) for name in names}
    return {
        name: balanced(samples, limit) for name, samples in _from_hub(str(source), list(subsets or SUBSETS)).items()
    }


def balanced(samples: list[BenchSample], limit: int | None) -> list[BenchSample]:
    """The first `limit` samples, half of them erroneous and half correct (the first of each, in file
    order), so that both accuracies and the F1 are defined; where one kind runs out, the other fills.
    A subset's files open with runs of erroneous samples, so its plain first N often have no correct one."""
    if limit is None or limit >= len(samples):
        return samples
    errors = [s for s in samples if s.label != -1]
    correct = [s for s in samples if s.label == -1]
    n_correct = min(len(correct), max(limit // 2, limit - len(errors)))
    chosen = {id(s) for s in errors[: limit - n_correct] + correct[:n_correct]}
    return [s for s in samples if id(s) in chosen]  # file order kept


def _from_hub(name: str, subsets: list[str]) -> dict[str, list[BenchSample]]:
    from datasets import load_dataset

    out = {}
    with tempfile.TemporaryDirectory(prefix="prm-synth-bench-") as tmp:
        for subset in subsets:
            try:
                rows = load_dataset(name, split=subset)
            except Exception as e:  # noqa: BLE001 - any loading failure is one clear message
                raise PRMEvalError(f"cannot load ProcessBench subset {subset!r} from {name}: {e}") from None
            file = Path(tmp) / f"{subset}.jsonl"
            with file.open("w") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
            out[subset] = load_processbench(file)  # the same validation as a local file
    return out


# ---------------------------------------------------------------- scoring
def load_prm(model: str | Path) -> tuple[Any, Any, str]:
    """(model, tokenizer, step separator) of a token-classification PRM with two labels (1: good)."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    try:
        prm = AutoModelForTokenClassification.from_pretrained(str(model))
    except ValueError as e:  # transformers' word for a folder that holds no model of a known kind
        raise PRMEvalError(f"cannot load {model} as a token-classification model: {e}") from None
    if prm.config.num_labels != 2:
        raise PRMEvalError(f"{model}: a PRM head has 2 labels (bad, good), this one has {prm.config.num_labels}")
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    meta = Path(model) / PRM_CONFIG
    separator = json.loads(meta.read_text()).get("step_separator", STEP_SEPARATOR) if meta.exists() else STEP_SEPARATOR
    prm.eval()
    return prm, tokenizer, separator


def score_steps(
    prm: Any,
    tokenizer: Any,
    samples: Sequence[BenchSample],
    separator: str,
    max_length: int,
    batch_size: int = 4,
    on_batch: Callable[[int], None] | None = None,
) -> list[list[float]]:
    """P(good) of each step of each sample; steps cut off by max_length get no score.

    on_batch: called with the number of samples scored after each forward pass (progress)."""
    import torch

    scores: list[list[float]] = []
    device = next(prm.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for start in range(0, len(samples), batch_size):
        batch = [
            encode(tokenizer, s.problem, [step.strip() for step in s.steps], None, separator, max_length)
            for s in samples[start : start + batch_size]
        ]
        width = max(len(b["input_ids"]) for b in batch)
        ids = torch.tensor([b["input_ids"] + [pad] * (width - len(b["input_ids"])) for b in batch], device=device)
        mask = torch.tensor(
            [[1] * len(b["input_ids"]) + [0] * (width - len(b["input_ids"])) for b in batch], device=device
        )
        with torch.no_grad():
            probs = prm(input_ids=ids, attention_mask=mask).logits.float().softmax(-1)[..., 1]
        for row, b in zip(probs.tolist(), batch, strict=True):
            scores.append([row[p] for p in b["step_positions"]])
        if on_batch is not None:
            on_batch(len(batch))
    return scores


def first_error(scores: Sequence[float], threshold: float) -> int:
    return next((i for i, s in enumerate(scores) if s < threshold), -1)


def tune_threshold(scores: Sequence[Sequence[float]], labels: Sequence[int]) -> float:
    """The grid threshold with the best ProcessBench F1 on these samples (ties: the one closest to 0.5)."""

    def f1(t: float) -> float:
        return processbench_metric(labels, [first_error(s, t) for s in scores])["f1"] or 0.0

    return max(THRESHOLD_GRID, key=lambda t: (f1(t), -abs(t - 0.5)))


def evaluate_prm(
    model: str | Path,
    bench: str | Path,
    subsets: Sequence[str] | None = None,
    limit: int | None = None,
    threshold: float = 0.5,
    tune_on: str | None = None,
    max_length: int = 2048,
    batch_size: int = 4,
) -> dict[str, Any]:
    """ProcessBench's metric per subset for the PRM in `model`; `f1` maps subset -> F1."""
    data = load_bench(bench, subsets, limit)
    if tune_on is not None and tune_on not in data:
        raise PRMEvalError(f"--tune-on {tune_on!r} is not among the subsets evaluated: {sorted(data)}")
    logger.info("loading %s", model)
    prm, tokenizer, separator = load_prm(model)
    countdown = Countdown(sum(len(samples) for samples in data.values()), "samples")
    scored = 0
    scores = {}
    for name, samples in data.items():

        def report(n: int, name: str = name) -> None:
            nonlocal scored
            scored += n
            logger.info("scoring %s: %s", name, countdown.line(scored))

        scores[name] = score_steps(prm, tokenizer, samples, separator, max_length, batch_size, report)
    if tune_on is not None:
        threshold = tune_threshold(scores[tune_on], [s.label for s in data[tune_on]])
    results = {}
    for name, samples in data.items():
        metric = processbench_metric([s.label for s in samples], [first_error(sc, threshold) for sc in scores[name]])
        metric["truncated_samples"] = sum(len(sc) < len(s.steps) for sc, s in zip(scores[name], samples, strict=True))
        metric["flagged"] = sum(first_error(sc, threshold) != -1 for sc in scores[name])  # samples called wrong
        results[name] = metric
    return {
        "model": str(model),
        "threshold": threshold,
        "tuned_on": tune_on,
        "limit": limit,
        "f1": {name: m["f1"] for name, m in results.items()},
        "subsets": results,
        "note": one_class_note(results, threshold, tune_on),
    }


def one_class_note(results: dict[str, dict[str, Any]], threshold: float, tune_on: str | None) -> str | None:
    """What to say when the PRM gives one answer to every sample: an F1 that says nothing about its scores.

    An undertrained PRM calls every step good (the majority class in training data): no sample is
    flagged, every error accuracy is 0 and so is every F1, although its scores may still rank steps."""
    flagged = sum(m["flagged"] for m in results.values())
    samples = sum(m["n_error"] + m["n_correct"] for m in results.values())
    if not samples or 0 < flagged < samples:
        return None
    verdict = "calls every step good" if flagged == 0 else "finds an error in every sample"
    hint = (
        "a threshold tuned on another subset may not carry over"
        if tune_on
        else "--tune-on SUBSET picks the threshold from one subset's scores"
    )
    return (
        f"at threshold {threshold} the PRM {verdict} (one answer for every sample), so the F1 says nothing "
        f"about its scores: train longer or on more rows; {hint}"
    )
