"""Which keys differ between two configs, as dotted paths (`annotate.k`, `problems.count`).

Used to say *why* an output folder is refused: "made with another config (differs in annotate.k)"
tells the user what to change, two fingerprints do not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

_MISSING = object()


def differing_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths where `old` and `new` differ: a key present in one only, or unequal leaves.

    Mappings are compared key by key; anything else (lists included) is a leaf compared whole.
    """
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = sorted(set(old) | set(new), key=str)
        out: list[str] = []
        for key in keys:
            path = f"{prefix}.{key}" if prefix else str(key)
            out += differing_keys(old.get(key, _MISSING), new.get(key, _MISSING), path)
        return out
    return [] if old == new else [prefix or "(the whole config)"]


def without_sections(keys: Iterable[str], sections: Iterable[str]) -> list[str]:
    """Drop keys under the given top-level sections (e.g. `run`, which does not change the rows)."""
    skip = tuple(sections)
    return [k for k in keys if k.split(".", 1)[0] not in skip]
