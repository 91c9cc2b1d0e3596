"""The change-point search's decisions, remembered: the same state decided once.

A decision of the search (`changepoint._search`: stop, wait for the pooled priors, or which prefix to
probe and with how many rollouts) is a pure function of the priors, the solution's evidence counts, the
rollouts asked per prefix, and the search's settings. States repeat: every search's first phase runs
under the one default `Priors` instance (`DEFAULT_PRIORS`), so its first decisions form a small tree per
solution length (no evidence yet: the same first probe for every solution of that length), and the
searches of one shard go on under one pooled priors object. Measured on 500 problems of 3-12 steps, a
third of the posteriors the searches built were of a state built before. A remembered decision costs a
dict look-up instead of a posterior and a probe sweep.

Keys name the priors object by `Priors.token`, a number no other priors object of the process ever
gets (never reused, unlike `id`), so two priors can never share an entry; the evidence is copied into
the key (the search updates its arrays in place). The memo keeps the `capacity` most recently used
decisions (an LRU): its memory does not grow with the dataset, and the decisions of a shard's pooled
priors leave it once later shards' push them out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from prm_synth.annotate.changepoint_posterior import Evidence, Priors


@dataclass(frozen=True)
class Decision:
    """What the search does next from one state."""

    stop: str = ""  # why the search stops ("decided", or the reason its undecided steps get); "" goes on
    wait: bool = False  # the first phase is over: hand in the evidence, go on under the pooled priors
    prefix: int = -1  # the prefix to probe next
    want: int = 0  # the rollouts of that prefix asked in all (those asked before included)


def state_key(ev: Evidence, samples: np.ndarray, spent: int, may_wait: bool) -> Hashable:
    """The search's state as a key: copies of its counts at the prefixes it has asked rollouts of (or has
    graded counts at), sparse so a long solution's key stays small."""
    at = np.flatnonzero((samples != 0) | (ev.graded != 0) | (ev.correct != 0))
    return (
        ev.n,
        ev.verdict,
        ev.checked,
        spent,
        may_wait,
        at.tobytes(),
        ev.correct[at].tobytes(),
        ev.graded[at].tobytes(),
        samples[at].tobytes(),
    )


class DecisionMemo:
    """The `capacity` most recently used decisions, keyed by (priors, settings, state); thread-safe."""

    def __init__(self, capacity: int = 16384) -> None:
        if capacity < 1:
            raise ValueError(f"a decision memo holds at least one decision, not {capacity}")
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._decisions: OrderedDict[Hashable, Decision] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._decisions)

    def get(self, priors: Priors, settings: Hashable, state: Hashable) -> Decision | None:
        key = (priors.token, settings, state)
        with self._lock:
            decision = self._decisions.get(key)
            if decision is None:
                self.misses += 1
                return None
            self._decisions.move_to_end(key)
            self.hits += 1
            return decision

    def put(self, priors: Priors, settings: Hashable, state: Hashable, decision: Decision) -> None:
        key = (priors.token, settings, state)
        with self._lock:
            self._decisions[key] = decision
            self._decisions.move_to_end(key)
            while len(self._decisions) > self.capacity:
                self._decisions.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._decisions.clear()
            self.hits = self.misses = 0


# The process's memo, shared by every search (and every shard) that does not bring its own.
DECISIONS = DecisionMemo()
