"""Where the problems come from: the `problems` section (`builtin`, `file`, `hf`; `humaneval` and
`choice-file` in config/domain_sources.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

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


ProblemSource = Annotated[
    BuiltinSource | FileSource | HFSource | HumanEvalSource | ChoiceFileSource | CodeFileSource,
    Field(discriminator="kind"),
]
