"""What every engine's settings share: the thinking markers of a reasoning model, and the marking of each
field as changing the rows or as transport (left out of the fingerprint)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from prm_synth.config.base import Strict


class ThinkingConfig(Strict):
    """A reasoning model that writes a thinking trace before its answer (prm_synth/prompting/thinking.py).

    A prefix inside the trace is rendered so the model goes on thinking, one past the close marker so it
    goes on with the answer; the grader reads only the text after the close marker, and a completion
    that never closes its trace is unknown ("truncated_thinking")."""

    open: str | None = Field(None, min_length=1)
    """The marker that opens the trace (None: the one the tokenizer's chat template names, else `<think>`)."""
    close: str | None = Field(None, min_length=1)
    """The marker that closes the trace (None: the one the tokenizer's chat template names, else `</think>`)."""
    forced_open: bool | None = None
    """Whether the chat template's generation prompt already opens the trace (DeepSeek-R1 distills end it
    with `<think>\\n`), so the model's text starts inside it; None: found by rendering the template."""


class EngineFields(Strict):
    """An engine's settings, each marked as changing the rows or not (as vLLM's `compute_hash` hashes
    only the factors that change outputs): `ROW_FIELDS` are hashed into the config fingerprint,
    `TRANSPORT_FIELDS` (where the server is, how long to wait, how often to retry, how many requests
    at once, which variable holds the key) are not, so a server that moved resumes its folder.

    Every field is in exactly one of the two sets: a subclass with a field in neither, or both, fails at
    import, so a new field cannot slip into (or out of) the fingerprint unmarked."""

    ROW_FIELDS: ClassVar[frozenset[str]] = frozenset()
    TRANSPORT_FIELDS: ClassVar[frozenset[str]] = frozenset()
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"thinking": None}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        fields = set(cls.model_fields)
        unmarked = fields - cls.ROW_FIELDS - cls.TRANSPORT_FIELDS
        both = cls.ROW_FIELDS & cls.TRANSPORT_FIELDS
        stale = (cls.ROW_FIELDS | cls.TRANSPORT_FIELDS) - fields
        if unmarked or both or stale:
            raise TypeError(
                f"{cls.__name__}: every field is marked once in ROW_FIELDS or TRANSPORT_FIELDS "
                f"(unmarked {sorted(unmarked)}, in both {sorted(both)}, not fields {sorted(stale)})"
            )

    def row_dump(self) -> dict[str, Any]:
        """The settings as hashed: transport fields at their defaults, so that they change no
        fingerprint, and a folder made with the default transport keeps the fingerprint it had."""
        data = self.model_dump(mode="json")
        for name in self.TRANSPORT_FIELDS:
            data[name] = type(self).model_fields[name].default
        return data

    def fingerprint_part(self, transport: bool = False) -> dict[str, Any]:
        """The row fields (`row_dump`); with `transport`, every field as set (the legacy fingerprint)."""
        return self.without_added(self.model_dump(mode="json") if transport else self.row_dump())

    def transport_dump(self) -> dict[str, Any]:
        """The transport settings alone (no key: only the name of the variable that holds it)."""
        return {name: getattr(self, name) for name in sorted(self.TRANSPORT_FIELDS)}
