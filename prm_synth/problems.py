"""Problem sources: Hugging Face datasets, local files, and builtin arithmetic word problems."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    gold_answer: str
    source: str
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
