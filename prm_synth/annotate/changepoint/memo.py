"""The change-point search's decisions, remembered: the same state decided once.

A decision of the search (search.py's `decide`: stop, wait for the pooled priors, or which prefix to
probe and with how many rollouts) is a pure function of the priors, the solution's evidence counts, the
rollouts asked per prefix, and the search's settings. States repeat: every search's first phase runs
under the one default `Priors` instance (`DEFAULT_PRIORS`), so its first decisions form a small tree per
solution length (no evidence yet: the same first probe for every solution of that length), and the
searches of one shard go on under one pooled priors object (docs/design/changepoint-tuning.md has how
often a decision comes back). A remembered decision costs a dict look-up instead of a posterior and a
probe sweep.

Decisions are kept per priors object, in a table that goes when the object does (a shard's pooled
priors with its shard), so memory does not grow with the shards done; a table keeps its `capacity`
most recently used decisions (an LRU), so it does not grow with a shard's size either. A table is named
by `Priors.token`, a number no other priors object of the process gets (never reused, unlike `id`), so
two priors never share one. The state is copied into its key, one bytes object (the search updates its
arrays in place).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from prm_synth.annotate.changepoint.engine import Evidence, Priors

_VERDICT_CODES = {"correct": 0, "incorrect": 1}  # anything else reads as unknown, as the posterior reads it


@dataclass(frozen=True, slots=True)
class Decision:
    """What the search does next from one state."""

    stop: str = ""  # why the search stops ("decided", or the reason its undecided steps get); "" goes on
    wait: bool = False  # the first phase is over: hand in the evidence, go on under the pooled priors
    prefix: int = -1  # the prefix to probe next
    want: int = 0  # the rollouts of that prefix asked in all (those asked before included)


def state_key(ev: Evidence, samples: np.ndarray, spent: int, may_wait: bool) -> bytes:
    """The search's state as a key: a copy of its counts at the prefixes it has asked rollouts of (or has
    graded counts at), sparse so a long solution's key stays small. A fixed header, then four arrays of
    one length: two different states never give the same bytes."""
    at = np.flatnonzero((samples != 0) | (ev.graded != 0) | (ev.correct != 0))
    header = [ev.n, _VERDICT_CODES.get(ev.verdict, 2), int(ev.checked), spent, int(may_wait)]
    return np.concatenate([header, at, ev.correct[at], ev.graded[at], samples[at]]).astype(np.int64).tobytes()


def _forget(memo: weakref.ref[DecisionMemo], token: int) -> None:
    """A priors object is gone: so are its decisions (no state can ask for them again)."""
    owner = memo()
    if owner is not None:
        owner.forget(token)


class DecisionMemo:
    """Decisions per (priors object, settings): the `capacity` most recently used of each; thread-safe."""

    def __init__(self, capacity: int = 16384) -> None:
        if capacity < 1:
            raise ValueError(f"a decision memo holds at least one decision, not {capacity}")
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._tables: dict[tuple[int, Hashable], OrderedDict[bytes, Decision]] = {}
        # reentrant: a garbage collection inside a locked section may run `_forget` on this thread
        self._lock = threading.RLock()

    def __len__(self) -> int:
        """The decisions held, all tables together."""
        with self._lock:
            return sum(len(table) for table in self._tables.values())

    def get(self, priors: Priors, settings: Hashable, state: bytes) -> Decision | None:
        with self._lock:
            table = self._tables.get((priors.token, settings))
            decision = table.get(state) if table is not None else None
            if decision is None:
                self.misses += 1
                return None
            table.move_to_end(state)  # type: ignore[union-attr]
            self.hits += 1
            return decision

    def put(self, priors: Priors, settings: Hashable, state: bytes, decision: Decision) -> None:
        with self._lock:
            table = self._tables.get((priors.token, settings))
            if table is None:
                table = self._tables[(priors.token, settings)] = OrderedDict()
                weakref.finalize(priors, _forget, weakref.ref(self), priors.token)
            table[state] = decision
            table.move_to_end(state)
            while len(table) > self.capacity:
                table.popitem(last=False)

    def forget(self, token: int) -> None:
        """Drop the decisions of the priors object with this token (`Priors.token`)."""
        with self._lock:
            for key in [key for key in self._tables if key[0] == token]:
                del self._tables[key]

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self.hits = self.misses = 0


# The process's memo, shared by every search (and every shard) that does not bring its own.
DECISIONS = DecisionMemo()
