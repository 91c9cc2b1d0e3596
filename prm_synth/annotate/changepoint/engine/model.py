"""The change-point model of how a policy writes a solution, and the tables its sums use.

One solution of n steps; its first error is at step e (e = n: no error); prefix j is steps 0..j-1
(j = 0: the question alone), so prefix j is clean iff j <= e. The policy that wrote the solution
also writes the rollouts, and both go wrong the same way:
- every step j has a hazard h_j, the chance the policy gets it wrong having got everything before
  it right. The sampled solution's first error follows them: P(e = j) = (1 - h_0) ... (1 - h_{j-1}) h_j;
- a clean prefix j finishes without an error with chance c_j = (1 - h_j) ... (1 - h_{n-1}) (a level
  of `level_grid`), so its rollouts reach the gold answer at q + (1 - q) c_j;
- a prefix that holds the error reaches the answer at the luck rate q, this solution's own
  (`luck_grid`); the solution's own verdict: correct for sure when clean, at q when not;
- hazards are drawn per step from the solution's difficulty class (`class_grid`, `hazard_spread`,
  `hard_step_chance`), so no curve shape is assumed: a hard step, uneven difficulty, any length fit;
- the rollouts of one prefix share more than their rate: counts are beta-binomial around the model's
  rate with overdispersion k (`k_choices`); a fresh error may leave extra luck (`recent_choices`).
Rollouts that cannot be graded are left out of the evidence: unknown is not failure.

The tables here depend on the model's constants alone (below: its grids and hazards, read once): the levels' one-step
kernels per class, their powers (a run of unprobed prefixes is crossed in one product), and the run
tables (`run_reach`) every solution with the same steps left shares. Tuning: docs/design/changepoint-tuning.md.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

_T = TypeVar("_T")

# The model's constants: its grids and hazards. Every table below is built from them once, at import,
# so they are the model's shape rather than settings of a search (ChangepointSettings): changing one
# changes rows and needs a labeler revision. Why each has its value: docs/design/changepoint-tuning.md
# ("The model's constants").
# Luck rates q a solution may have (a prefix holding the error reaches the answer at q)
Q_GRID = np.array(
    (0.001, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.26, 0.32, 0.39, 0.46, 0.53, 0.6, 0.67, 0.74, 0.81, 0.88, 0.94)
)
# Levels of a clean prefix's chance to finish without an error: fine near 1 and towards 0
C_GRID = np.array(
    (
        1.0, 0.97, 0.93, 0.88, 0.82, 0.75, 0.68, 0.6, 0.52, 0.44, 0.37, 0.3, 0.24, 0.19, 0.15, 0.11, 0.08,
        0.055, 0.035, 0.02, 0.01, 0.004, 0.001,
    )
)  # fmt: skip
# Per-step hazards a step may have
H_GRID = np.array(
    (0.0003, 0.001, 0.003, 0.01, 0.02, 0.035, 0.055, 0.08, 0.11, 0.15, 0.2, 0.27, 0.35, 0.45, 0.57, 0.7, 0.85)
)
# Typical hazards of the difficulty classes (the two lowest: long solutions')
P_GRID = np.array((0.001, 0.003, 0.01, 0.03, 0.07, 0.14, 0.25, 0.4))
SPREAD = 0.3  # log-sd of a class's step hazards around its typical one
SPIKE = 0.03  # chance any step is a hard one (capped by the class's typical hazard)
HARD_STEP_HAZARD = 0.2  # the hazard from which a step counts as hard
DEFAULT_LUCK_TILT = 4  # exponent of (1 - q) in the default luck prior: little luck, room for a lot
RECENT_STEPS = 4  # prefixes past an error that carry a fresh error's extra luck (halving each step)
DEFAULT_K = 60.0  # the default priors' overdispersion k: every search starts under it
LOG_Q = np.log(Q_GRID)
LOG_1Q = np.log1p(-Q_GRID)
# numerics, not labeling choices: counts are read up to MAX_COUNT rollouts a prefix; the bad stretch's
# level tables are kept MAX_STEPS long (longer solutions reuse the last)
MAX_COUNT = 1024
MAX_STEPS = 512


def _rising(a: np.ndarray) -> np.ndarray:
    """R[k, i] = log(a_i (a_i + 1) ... (a_i + k - 1)), k = 0..MAX_COUNT."""
    steps = np.log(a[None, :] + np.arange(MAX_COUNT)[:, None])
    return np.concatenate([np.zeros((1, len(a))), np.cumsum(steps, axis=0)])


_CLEAN_RATE = (Q_GRID[:, None] + (1.0 - Q_GRID[:, None]) * C_GRID[None, :]).ravel()  # [q * level]


@dataclass(frozen=True)
class _RateTables:
    """log rising factorials for the beta-binomial likelihood of counts at each of a row of rates, one k."""

    hit: np.ndarray
    miss: np.ndarray
    total: np.ndarray

    @classmethod
    def at(cls, k: float, rates: np.ndarray) -> _RateTables:
        rates = np.clip(rates, 0.001, 0.995)
        return cls(_rising(k * rates), _rising(k * (1 - rates)), _rising(np.array([k]))[:, 0])

    def loglik(self, c: np.ndarray, f: np.ndarray) -> np.ndarray:
        """[..., rate]: log beta-binomial likelihood (without the binomial coefficient) of c hits, f misses."""
        c = np.minimum(c, MAX_COUNT)
        f = np.minimum(f, MAX_COUNT - c)
        return self.hit[c] + self.miss[f] - self.total[c + f][..., None]


@dataclass(frozen=True)
class CountTables:
    """The rate tables of every clean rate [q * level] and every luck rate, one k."""

    clean: _RateTables
    bad: _RateTables

    @classmethod
    @functools.cache
    def of(cls, k: float) -> CountTables:
        return cls(_RateTables.at(k, _CLEAN_RATE), _RateTables.at(k, Q_GRID))

    def loglik(self, clean: bool, c: np.ndarray, f: np.ndarray) -> np.ndarray:
        """[j, rate]: log beta-binomial likelihood (without the binomial coefficient) of c hits, f misses."""
        return (self.clean if clean else self.bad).loglik(c, f)


@functools.cache
def recent_tables(k: float, r: float) -> tuple[_RateTables, ...]:
    """Per m < RECENT_STEPS: the rate tables of a prefix m steps past the error's own prefix, at rate
    q + (1 - q) r / 2^m for every luck q (r: one of the settings' `recent_choices`)."""
    return tuple(_RateTables.at(k, Q_GRID + (1.0 - Q_GRID) * r / 2**m) for m in range(RECENT_STEPS))


def _level_kernel(h: float) -> np.ndarray:
    """K[b, a]: the level of prefix j given the level b of prefix j + 1 and step j's hazard h
    (c_j = c_{j+1} (1 - h), split between the two grid levels around it, in log space)."""
    log_c = np.log(C_GRID)
    k = np.zeros((len(C_GRID), len(C_GRID)))
    for b, top in enumerate(log_c):
        t = top + math.log1p(-h)
        lo = int(np.searchsorted(-log_c, -t))  # first level at or below t
        if lo >= len(C_GRID):
            k[b, -1] = 1.0
            continue
        hi = lo - 1
        w = (t - log_c[lo]) / (log_c[hi] - log_c[lo])
        k[b, hi], k[b, lo] = w, 1.0 - w
    return k


def _hazard_weights(p: float) -> np.ndarray:
    w = np.exp(-0.5 * ((np.log(H_GRID) - math.log(p)) / SPREAD) ** 2)
    spike = (HARD_STEP_HAZARD <= H_GRID).astype(float)
    chance = min(SPIKE, p)
    return (1.0 - chance) * w / w.sum() + chance * spike / spike.sum()


def clean_weights(k: float, correct: np.ndarray, graded: np.ndarray, js: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The clean likelihood of each row's counts (correct, graded) scaled to maximum 1 over level,
    exp(loglik - top) [row, q, level], and top [row, q]. Rows come in blocks of one prefix (js sorted:
    a candidate's outcomes, or every count the model check tries), and the same blocks of counts come
    back decision after decision: each block is computed once (`_clean_block`)."""
    starts = block_starts(js).tolist()
    cs, gs = correct.tolist(), graded.tolist()
    blocks = [
        _clean_block(k, tuple(cs[a:b]), tuple(gs[a:b])) for a, b in zip(starts, [*starts[1:], len(js)], strict=True)
    ]
    if len(blocks) == 1:
        return blocks[0]
    return np.concatenate([w for w, _ in blocks]), np.concatenate([t for _, t in blocks])


def block_starts(js: np.ndarray) -> np.ndarray:
    """Where each block of equal values of the sorted `js` starts."""
    return np.flatnonzero(np.concatenate(([True], js[1:] != js[:-1])))


@functools.lru_cache(maxsize=256)  # a block is 16 kB (a candidate's 5 outcomes) to 110 kB
def _clean_block(k: float, correct: tuple[int, ...], graded: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    c, g = np.array(correct), np.array(graded)
    lik = CountTables.of(k).loglik(True, c, g - c).reshape(len(c), len(Q_GRID), len(C_GRID))
    top = lik.max(axis=2)
    with np.errstate(under="ignore"):
        weight = np.exp(lik - top[..., None])
    weight.flags.writeable = False
    top.flags.writeable = False
    return weight, top


def _class_kernels() -> tuple[np.ndarray, np.ndarray]:
    """Per class d: the clean-to-clean transition (step j right: weight 1 - h) and the bad stretch's
    switch table SIGMA[m, d, a]: the weight of 'prefix j at level a is the last clean one' when m
    steps lie between prefix j + 1 and the end (bad prefixes' levels summed out: their rollouts
    do not depend on them)."""
    kernels = np.stack([_level_kernel(h) for h in H_GRID])  # [h, b, a]
    weights = np.stack([_hazard_weights(p) for p in P_GRID])  # [d, h]
    clean = np.einsum("dh,hba->dba", weights * (1.0 - H_GRID), kernels)
    switch = np.einsum("dh,hba->dba", weights * H_GRID, kernels)
    carry = np.einsum("dh,hba->dba", weights, kernels)
    level = np.zeros((len(P_GRID), len(C_GRID)))
    level[:, 0] = 1.0  # after the last step nothing is left to get wrong: c_n = 1
    sigma = np.empty((MAX_STEPS, len(P_GRID), len(C_GRID)))
    for m in range(MAX_STEPS):
        sigma[m] = np.einsum("db,dba->da", level, switch)
        level = np.einsum("db,dba->da", level, carry)
    return np.ascontiguousarray(clean.transpose(0, 2, 1)), sigma


CLEAN_T, SIGMA = _class_kernels()  # CLEAN_T[d, a, b]: forward, from level a at j to b at j + 1


@dataclass(frozen=True)
class Priors:
    """Prior weights on the luck grid and on the difficulty classes, and the rollouts' overdispersion
    k (a shard pools them)."""

    q: np.ndarray = field(default_factory=lambda: _default_q())
    p: np.ndarray = field(default_factory=lambda: np.full(len(P_GRID), 1.0 / len(P_GRID)))
    k: float = DEFAULT_K
    # [luck]: log-likelihood of the same problem's other solutions (they share its luck); None for a
    # solution labeled on its own
    siblings: np.ndarray | None = None
    recent: float = 0.0  # a fresh error's extra luck r (the settings' `recent_choices`)
    recent_share: float = 0.0  # the share of errors read with it
    # A number no other priors object of this process gets (`replace`, a copy and an unpickled one get
    # new ones: another process's numbers mean nothing here): what names this object in the search's
    # decision memo (memo.py), where an `id` could be reused
    token: int = field(init=False, compare=False, repr=False, default_factory=lambda: next(_PRIORS_TOKENS))

    def __getstate__(self) -> dict[str, object]:
        return {name: value for name, value in self.__dict__.items() if name not in ("token", "_log_prior")}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "token", next(_PRIORS_TOKENS))

    @property
    def mixed(self) -> bool:
        """Errors are read both ways, with and without a fresh error's extra luck (`mixed_log_joint`)."""
        return self.recent > 0 and self.recent_share > 0

    def log_prior(self) -> np.ndarray:
        """[class, luck]: the log prior one solution is labeled under (read-only). Every posterior pass
        and candidate sweep asks for it, so it is computed once per priors object (they are frozen)."""
        prior = self.__dict__.get("_log_prior")
        if prior is None:
            prior = np.log(self.p)[:, None] + np.log(self.q)[None, :]
            if self.siblings is not None:
                prior = prior + self.siblings[None, :]
            prior.flags.writeable = False
            object.__setattr__(self, "_log_prior", prior)
        return prior


_PRIORS_TOKENS = itertools.count()


def _default_q() -> np.ndarray:
    """A weak prior that leans towards little luck but leaves room for a lot (cell widths x (1 - q)^4)."""
    edges = np.concatenate([[0.0], (Q_GRID[1:] + Q_GRID[:-1]) / 2, [1.0]])
    w = np.diff(edges) * (1.0 - Q_GRID) ** DEFAULT_LUCK_TILT
    return w / w.sum()


def _default_priors() -> Priors:
    priors = Priors()
    priors.q.flags.writeable = False
    priors.p.flags.writeable = False
    return priors


# The weak default every search starts under: one object, so the searches' first decisions, the same
# for every solution of a length, are remembered across solutions and shards (memo.py)
DEFAULT_PRIORS = _default_priors()


@dataclass
class Evidence:
    """One solution's measurements: graded rollouts per prefix j = 0..n-1 and its own verdict."""

    n: int
    correct: np.ndarray
    graded: np.ndarray
    verdict: str  # correct | incorrect | unknown
    stop: str = ""  # why the search stopped (its reason for steps it left undecided)
    checked: bool = False  # a correct-answer solution whose early prefixes were all tested (`check_correct`)

    @classmethod
    def empty(cls, n: int, verdict: str) -> Evidence:
        return cls(n, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), verdict)

    def plus(self, j: int, correct: int, graded: int) -> Evidence:
        c, g = self.correct.copy(), self.graded.copy()
        c[j] += correct
        g[j] += graded
        return Evidence(self.n, c, g, self.verdict, self.stop, self.checked)


def sigma_at(m: int) -> np.ndarray:
    return SIGMA[min(m, MAX_STEPS - 1)]


def _powers() -> tuple[np.ndarray, np.ndarray]:
    """The clean stretch's transition over m unprobed steps, m = 0..MAX_STEPS: POWERS[m, d] is the
    m-th power of class d's one-step kernel, scaled to sum 1 (LOG_SCALE[m, d] is the log scale), so a
    run of unprobed prefixes is crossed in one product instead of a step at a time."""
    powers = np.empty((MAX_STEPS + 1, len(P_GRID), len(C_GRID), len(C_GRID)))
    log_scale = np.zeros((MAX_STEPS + 1, len(P_GRID)))
    powers[0] = np.eye(len(C_GRID))[None]
    for m in range(1, MAX_STEPS + 1):
        step = np.matmul(powers[m - 1], CLEAN_T)
        scale = step.sum(axis=(1, 2))
        powers[m] = step / scale[:, None, None]
        log_scale[m] = log_scale[m - 1] + np.log(scale)
    return powers, log_scale


POWERS, LOG_SCALE = _powers()


_ALWAYS_KEPT = 64  # run tables for runs with fewer steps after them than this are all kept (~3 MB a family)


# the most recent larger run tables kept, per family (up to 750 kB each: three families, up to 144 MB in
# all, only on solutions of hundreds of steps)
_LONG_KEPT = 64


def _run_table_cache(build: Callable[[int], _T]) -> Callable[[int], _T]:
    """Keep a family of run tables (one per r, the steps after the run's first prefix): every table
    of r < _ALWAYS_KEPT (a few kB each, and solutions of up to that many steps ask for all of them:
    an LRU of 32 thrashed at 40 steps), and the `_LONG_KEPT` most recent larger ones."""
    small = functools.cache(build)
    large = functools.lru_cache(maxsize=_LONG_KEPT)(build)

    @functools.wraps(build)
    def table(r: int) -> _T:
        return small(r) if r < _ALWAYS_KEPT else large(r)

    return table


@_run_table_cache
def run_reach(r: int) -> np.ndarray:
    """REACH[i, d, a]: for a run of unprobed prefixes whose first one, j, has r steps after it
    (r = n - j - 1), the weight of 'prefix j + i is the last clean one' given prefix j at level a
    (POWERS[i] carries the level i steps on, SIGMA sums the bad stretch after it), i = 0..min(r,
    MAX_STEPS - 1). It depends on r alone, so every run, candidate and solution with the same r
    shares one table: a decision no longer rebuilds it (O(n) products) for every pass."""
    m = min(r + 1, MAX_STEPS)
    sig = SIGMA[np.minimum(r - np.arange(m), MAX_STEPS - 1)]  # [i, d, level]
    table = np.matmul(POWERS[:m], sig[..., None])[..., 0]
    table.flags.writeable = False
    return table


@_run_table_cache
def run_reach_flat(r: int) -> tuple[np.ndarray, np.ndarray]:
    """`run_reach(r)` with each class's log scale folded in, flattened to [i, (d, level)] for one matrix
    product over class and level, scaled per i to a maximum of 1 (the log scale per i comes second)."""
    table = run_reach(r) * np.exp(LOG_SCALE[: min(r + 1, MAX_STEPS)])[:, :, None]
    top = table.max(axis=(1, 2))
    table = (table / top[:, None, None]).reshape(len(table), -1)
    table[table < 1e-290] = 0.0  # subnormal numbers would make every product with it many times slower
    table.flags.writeable = False
    return table, np.log(top)


@_run_table_cache
def run_reach_flat_stepped(r: int) -> tuple[np.ndarray, np.ndarray]:
    """`run_reach_flat(r)` with the step out of the probed prefix before the run folded in: it multiplies
    states taken before that step (`kernels.absorb` sums their luck out there)."""
    table, log_top = run_reach_flat(r)
    m = len(table)
    by_class = table.reshape(m, len(P_GRID), len(C_GRID)).transpose(1, 0, 2)  # [d, i, level after the step]
    stepped = np.matmul(by_class, CLEAN_T.transpose(0, 2, 1)).transpose(1, 0, 2).reshape(m, -1)
    stepped[stepped < 1e-290] = 0.0  # no subnormal numbers (see `run_reach_flat`)
    stepped.flags.writeable = False
    return stepped, log_top


@functools.lru_cache(maxsize=MAX_STEPS + 1)
def step_then_run(m: int) -> np.ndarray:
    """[d, level, level]: the step out of a probed prefix and then m unprobed ones, one kernel (its rows
    sum to at most 1, as both kernels' do, so the states need no renormalising between them)."""
    kernel = np.ascontiguousarray(np.matmul(CLEAN_T, POWERS[m]))
    kernel.flags.writeable = False
    return kernel


# [m, d, level]: the weight of ending at level 0 (c = 1) from each level: after the step out of a probed
# prefix and m unprobed ones (END_AFTER_STEP), or after m unprobed ones alone (END_AFTER_RUN). The
# last state of a row is read there alone: a vector product where a matrix product was.
END_AFTER_STEP = np.einsum("dab,mdb->mda", CLEAN_T, POWERS[..., 0])


END_AFTER_RUN = np.ascontiguousarray(POWERS[..., 0])


NO_SCALE = np.zeros(len(P_GRID))  # the one-step kernel's log scale (it is not rescaled)


_CLEAN_T_T = np.ascontiguousarray(CLEAN_T.transpose(0, 2, 1))  # the one-step kernel, backward


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


@functools.cache
def log_combs(n: int) -> np.ndarray:
    """[k]: log C(n, k), k = 0..n."""
    return np.array([_log_comb(n, k) for k in range(n + 1)])


def logsumexp(x: np.ndarray, axis: int | tuple[int, ...]) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(x - top).sum(axis=axis)) + np.squeeze(top, axis=axis)
