"""Where the problems come from: the `problems` section (`builtin`, `file`, `hf`, `solutions`; `humaneval`
and `choice-file` in config/domain_sources.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from prm_synth.config.base import MAX_OPS, Strict
from prm_synth.config.domain_sources import ChoiceFileSource, CodeFileSource, HumanEvalSource, existing_file


class FieldMapping(Strict):
    """Which columns hold the question and the gold answer, and how to read the answer."""

    question: str = "question"
    """Column holding the question text."""
    answer: str = "answer"
    """Column holding the gold answer."""
    id: str | None = None
    """Column holding a problem id (None: ids are made from the row's position)."""
    answer_format: Literal["plain", "gsm8k", "boxed"] = "plain"
    """How to read the answer column: `gsm8k` takes what follows "####", `boxed` the last \\boxed{}, `plain` it as is."""
    aliases: str | None = None
    """Column holding other accepted answers (a list of strings) for `grader.kind: exact` (None: none)."""

    ADDED_FIELDS = {"aliases": None}


PRESETS: dict[str, FieldMapping] = {
    "gsm8k": FieldMapping(question="question", answer="answer", answer_format="gsm8k"),
    "math": FieldMapping(question="problem", answer="answer", id="unique_id", answer_format="plain"),
}


class BuiltinSource(Strict):
    kind: Literal["builtin"] = "builtin"
    """Generated arithmetic word problems (no download)."""
    count: int = Field(100, ge=1)
    """Number of problems generated."""
    seed: int = 0
    """Seed of the problem generator."""
    min_ops: int = Field(2, ge=1, le=MAX_OPS)
    """Fewest operations (steps of the solution) a problem takes."""
    max_ops: int = Field(8, ge=1, le=MAX_OPS)
    """Most operations (steps of the solution) a problem takes."""

    @model_validator(mode="after")
    def _ops_range(self) -> BuiltinSource:
        if self.min_ops > self.max_ops:
            raise ValueError("min_ops must be <= max_ops")
        return self


class _MappedSource(Strict):
    preset: Literal["gsm8k", "math"] | None = None
    """Column mapping of a known data set (`gsm8k`, `math`); `fields` overrides it."""
    fields: FieldMapping | None = None
    """Which columns hold the question, the answer and the id (None: the preset's, or the defaults)."""

    def mapping(self) -> FieldMapping:
        if self.fields is not None:
            return self.fields
        return PRESETS[self.preset] if self.preset else FieldMapping()


class FileSource(_MappedSource):
    kind: Literal["file"] = "file"
    """Problems from a local JSONL file."""
    path: Path
    """The JSONL file; a relative path resolves against the pipeline file's folder."""

    _exists = field_validator("path")(classmethod(lambda cls, v, info: existing_file(v, info)))


class HFSource(_MappedSource):
    kind: Literal["hf"] = "hf"
    """Problems from a Hugging Face data set (`datasets.load_dataset`)."""
    path: str
    """The data set's Hub name or a builder such as `json` or `parquet`."""
    name: str | None = None
    """The data set's configuration name."""
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    """load_dataset's data_files: local or Hub files for a builder such as `json` or `parquet`
    (`path: json, data_files: gsm8k/test.jsonl, split: train`), a list of them, or {split: files}."""
    split: str = "test"
    """The split to read."""
    streaming: bool = True
    """Stream the rows instead of downloading the whole data set first."""


class SolutionFields(Strict):
    """Which columns of a solutions source hold what (`problems.kind: solutions`)."""

    question: str = "question"
    """Column holding the question text."""
    answer: str = "answer"
    """Column holding the gold answer (optional per row: `gold_answers` fills it by question)."""
    answer_format: Literal["plain", "gsm8k", "boxed"] = "plain"
    """How to read the answer column: `gsm8k` takes what follows "####", `boxed` the last \\boxed{}, `plain` it as is."""
    solution: str = "solution"
    """Column holding the solution as one text, split into steps by the `steps` section (losslessly)."""
    steps: str = "steps"
    """Column holding the solution as a list of steps, taken as given (used where a row has it)."""
    id: str = "id"
    """Column holding the row's id, kept as the labeled row's id (a row without one: `<file>-<row>`)."""
    problem_id: str = "problem_id"
    """Column holding the question's id: rows of one question are one problem's solutions (a row without
    one: an id made from the question's text, so equal questions share it)."""
    label: str = "label"
    """Column holding given labels: an int, the earliest wrong step (ProcessBench, -1 for none), or a list
    of per-step ratings -1/0/1 (PRM800K; 0, neutral, is no error). Optional: rows without carry none."""


class SolutionsSource(Strict):
    kind: Literal["solutions"] = "solutions"
    """Solutions you already have (RL rollouts, existing data sets, human-labeled sets), one a row,
    labeled as they are: sampling is skipped, everything after it runs as for sampled solutions."""
    path: Path | None = None
    """A local file of solutions (.jsonl, .json or .parquet), one a row, or a folder of them read in natural
    order (`2.jsonl` before `10.jsonl`: dumps named by step or date come in the order written, new ones last);
    a relative path resolves against the pipeline file's folder. Give `path` or `dataset`."""
    dataset: str | None = None
    """Instead of `path`: a Hugging Face data set's Hub name, or a builder such as `json` or `parquet`
    with `data_files` (read as `problems.kind: hf` reads one)."""
    name: str | None = None
    """With `dataset`: the data set's configuration name."""
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    """With `dataset`: load_dataset's data_files (local or Hub files for a builder such as `json`)."""
    split: str = "train"
    """With `dataset`: the split to read."""
    streaming: bool = True
    """With `dataset`: stream the rows instead of downloading the whole data set first."""
    fields: SolutionFields = SolutionFields()
    """Which columns hold the question, gold answer, solution (or steps), ids and given labels."""
    gold_answers: Path | None = None
    """A file of gold answers joined by question text to rows that carry none (JSON lines or a JSON list
    with `question` or `problem` and `answer`; GSM8K's "#### N" understood), as `eval labels
    --gold-answers` reads it; a relative path resolves against the pipeline file's folder."""
    step_separator: str = ""
    """Put back after every given step but the last, for sets that store steps without their separators
    (ProcessBench: "\\n\\n"), so a continuation prompt is the text as the policy would have written it."""

    @model_validator(mode="after")
    def _one_place(self) -> SolutionsSource:
        if (self.path is None) == (self.dataset is None):
            raise ValueError("problems.kind solutions needs exactly one of `path` (a local file) or `dataset`")
        return self

    @field_validator("path", "gold_answers")
    @classmethod
    def _exists(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        return None if v is None else existing_file(v, info)


ProblemSource = Annotated[
    BuiltinSource | FileSource | HFSource | HumanEvalSource | ChoiceFileSource | CodeFileSource | SolutionsSource,
    Field(discriminator="kind"),
]
