"""The change-point posterior: where a solution's first error is, under a model of how a policy
writes a solution, with little else assumed. The search that uses it is `changepoint.py`.

One solution of n steps; its first error is at step e (e = n: no error); prefix j is steps 0..j-1
(j = 0: the question alone), so prefix j is clean iff j <= e. The policy that wrote the solution
also writes the rollouts, and both go wrong the same way:
- every step j has a hazard h_j, the chance the policy gets it wrong having got everything before
  it right. The sampled solution's first error follows them: P(e = j) = (1 - h_0) ... (1 - h_{j-1}) h_j;
- a clean prefix j finishes without an error with chance c_j = (1 - h_j) ... (1 - h_{n-1}), so the
  curve of c rises to c_n = 1 and is steepest where the hard steps are, the same steps where an error
  is likeliest. Its rollouts reach the gold answer at q + (1 - q) c_j;
- a prefix that holds the error reaches the answer at the luck rate q, this solution's own, on a grid
  that reaches 0.94; the solution's own verdict: correct for sure when clean, at q when not;
- hazards are drawn per step from the solution's difficulty class (a typical hazard, spread around
  it, and now and then a hard step: P_GRID, SPREAD, SPIKE), so no curve shape is assumed: a hard step,
  uneven difficulty, solutions of any length fit;
- the rollouts of one prefix share more than their rate (its wording, an error the policy may
  notice): counts are beta-binomial around the model's rate with overdispersion k (`K_CHOICES`).
Rollouts that cannot be graded are left out of the evidence: unknown is not failure.

The luck prior, the classes' weights and k are the shard's: the search runs under a weak default,
and once every search of the shard is done, `relabel` pools them from all the evidence at once (EM
on the grid weights for each k, the likeliest k wins, more overdispersion paying BIC's price:
`pool_priors`) and labels every solution again. Pooling over the finished set, never online, keeps
rows independent of the order the searches finished in (run.max_in_flight, batch sizes).

Everything is summed exactly (one forward pass over the prefixes, the curve's level on a grid as the
state; the levels after the error do not touch the evidence, so their part is a table; a run of
unprobed prefixes is crossed in one product of precomputed kernel powers), so `p_good` is the
posterior probability that a step's prefix is still correct. `probe_gains` scores candidate
probes by how much uncertainty about the first error each removes per rollout, computing the posterior after each
possible outcome: an outcome changes one prefix, so the rows of errors before it are the base
posterior's reweighted and the rest is carried forward from the base pass's state there, every
outcome of every candidate in one sweep whose rows meet only at probed prefixes (`_row_log_masses`);
the model check reads each count's evidence from forward states and one backward pass
(`_row_log_evidence`). Runs of unprobed prefixes use tables that depend on the steps left alone
(`_reach`), shared by every solution. These are the same sums as building each outcome's posterior
from scratch (tests/test_changepoint_posterior.py), at a cost that grows less than linearly with the
length (benchmarks/labeler_cost.py). The passes over the states at each probed prefix are compiled
(`changepoint_loops.py`: numpy's call overhead on these small arrays was most of a decision); the level
products between them are numpy's BLAS.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from prm_synth.annotate import changepoint_loops as _loops

_T = TypeVar("_T")

Q_GRID = np.array(
    [0.001, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.26, 0.32, 0.39, 0.46, 0.53, 0.6, 0.67, 0.74, 0.81, 0.88, 0.94]
)
# Levels of the clean-finish chance c (a clean prefix's rollouts write the rest without an error with
# chance c, and reach the answer at q + (1 - q) c). Fine near 1, where the last steps live, and
# logarithmic towards 0, where long hard solutions start.
C_GRID = np.array(
    [1.0, 0.97, 0.93, 0.88, 0.82, 0.75, 0.68, 0.6, 0.52, 0.44, 0.37, 0.3, 0.24, 0.19, 0.15, 0.11, 0.08]
    + [0.055, 0.035, 0.02, 0.01, 0.004, 0.001]
)
H_GRID = np.array([0.0003, 0.001, 0.003, 0.01, 0.02, 0.035, 0.055, 0.08, 0.11, 0.15, 0.2, 0.27, 0.35, 0.45, 0.57, 0.7, 0.85])
# A solution's difficulty class: its steps' hazards spread (log-sd SPREAD) around a typical one, and
# any step is a hard one (hazard >= 0.2) with chance SPIKE, or the class's typical hazard where that is
# lower (a fixed chance of hard steps would put a floor of about 0.013 under every class's hazard, and
# a solution of hundreds of steps could never be clean). The shard pools the classes' weights.
# The two lowest classes are long solutions' (hundreds to thousands of steps): without them a clean
# prefix far from the end would finish cleanly with chance near 0 under every class, its rollouts
# would look like luck alone, and no probe of a long solution would be worth its rollouts.
P_GRID = np.array([0.001, 0.003, 0.01, 0.03, 0.07, 0.14, 0.25, 0.4])
SPREAD = 0.3
SPIKE = 0.03
_LOG_Q = np.log(Q_GRID)
_LOG_1Q = np.log1p(-Q_GRID)
# Rollouts of one prefix may share more than their rate (the prefix's own wording, a recent error the
# policy may notice): each prefix's rate varies around its model value as Beta(k m, k (1 - m)), so
# counts are beta-binomial. How much they share is the shard's to say: pooling picks the k under
# which the shard's evidence is likeliest (`pool_priors`); the search runs under the first.
K_CHOICES = (60.0, 12.0, 400.0)
# A policy may notice an error it has just written more often than an old one: then the first
# prefixes that hold the error reach the answer more often than the luck rate, at q + (1 - q) r / 2^m
# m steps past the error's own prefix (m < RECENT_STEPS), at q after. Without that reading the prefix
# right after such an error read as clean, and the pair of labels that pins the first error sat one
# step late with its good label on the error (fidelity `recent_luck`: good precision 0.92-0.94). A
# solution's error is read either way, the second with the shard's share w (`Priors.recent_share`):
# a rigid r for every error put the error one step early where a hard step, not luck, raised the
# prefix before it (fidelity `hard_step_luck`: bad precision 0.2). Pooling picks r from RECENT_CHOICES
# and w by EM, or neither (`pool_priors`); the search scores its probes without it.
RECENT_CHOICES = (0.5,)
RECENT_STEPS = 4
MAX_COUNT = 1024
MAX_STEPS = 512  # the bad stretch's level tables are kept this long; longer solutions reuse the last


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
class _CountTables:
    """The rate tables of every clean rate [q * level] and every luck rate, one k."""

    clean: _RateTables
    bad: _RateTables

    @classmethod
    @functools.cache
    def of(cls, k: float) -> _CountTables:
        return cls(_RateTables.at(k, _CLEAN_RATE), _RateTables.at(k, Q_GRID))

    def loglik(self, clean: bool, c: np.ndarray, f: np.ndarray) -> np.ndarray:
        """[j, rate]: log beta-binomial likelihood (without the binomial coefficient) of c hits, f misses."""
        return (self.clean if clean else self.bad).loglik(c, f)


@functools.cache
def _recent_tables(k: float, r: float) -> tuple[_RateTables, ...]:
    """Per m < RECENT_STEPS: the rate tables of a prefix m steps past the error's own prefix, at rate
    q + (1 - q) r / 2^m for every luck q (`RECENT_CHOICES`)."""
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
    spike = (H_GRID >= 0.2).astype(float)
    chance = min(SPIKE, p)
    return (1.0 - chance) * w / w.sum() + chance * spike / spike.sum()


def _clean_weights(k: float, correct: np.ndarray, graded: np.ndarray, js: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The clean likelihood of each row's counts (correct, graded) scaled to maximum 1 over level,
    exp(loglik - top) [row, q, level], and top [row, q]. Rows come in blocks of one prefix (js sorted:
    a candidate's outcomes, or every count the model check tries), and the same blocks of counts come
    back decision after decision: each block is computed once (`_clean_block`)."""
    starts = _block_starts(js).tolist()
    cs, gs = correct.tolist(), graded.tolist()
    blocks = [
        _clean_block(k, tuple(cs[a:b]), tuple(gs[a:b])) for a, b in zip(starts, [*starts[1:], len(js)], strict=True)
    ]
    if len(blocks) == 1:
        return blocks[0]
    return np.concatenate([w for w, _ in blocks]), np.concatenate([t for _, t in blocks])


def _block_starts(js: np.ndarray) -> np.ndarray:
    """Where each block of equal values of the sorted `js` starts."""
    return np.flatnonzero(np.concatenate(([True], js[1:] != js[:-1])))


@functools.lru_cache(maxsize=256)  # a block is 16 kB (a candidate's 5 outcomes) to 110 kB
def _clean_block(k: float, correct: tuple[int, ...], graded: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    c, g = np.array(correct), np.array(graded)
    lik = _CountTables.of(k).loglik(True, c, g - c).reshape(len(c), len(Q_GRID), len(C_GRID))
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


_CLEAN_T, _SIGMA = _class_kernels()  # _CLEAN_T[d, a, b]: forward, from level a at j to b at j + 1


@dataclass(frozen=True)
class Priors:
    """Prior weights on the luck grid and on the difficulty classes, and the rollouts' overdispersion
    k (a shard pools them)."""

    q: np.ndarray = field(default_factory=lambda: _default_q())
    p: np.ndarray = field(default_factory=lambda: np.full(len(P_GRID), 1.0 / len(P_GRID)))
    k: float = K_CHOICES[0]
    # [luck]: log-likelihood of the same problem's other solutions (they share its luck); None for a
    # solution labeled on its own
    siblings: np.ndarray | None = None
    recent: float = 0.0  # a fresh error's extra luck r (`RECENT_CHOICES`)
    recent_share: float = 0.0  # the share of errors read with it
    # A number no other priors object of this process gets (`replace`, a copy and an unpickled one get
    # new ones: another process's numbers mean nothing here): what names this object in the search's
    # decision memo (`decision_memo.py`), where an `id` could be reused
    token: int = field(init=False, compare=False, repr=False, default_factory=lambda: next(_PRIORS_TOKENS))

    def __getstate__(self) -> dict[str, object]:
        return {name: value for name, value in self.__dict__.items() if name not in ("token", "_log_prior")}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "token", next(_PRIORS_TOKENS))

    @property
    def mixed(self) -> bool:
        """Errors are read both ways, with and without a fresh error's extra luck (`_mixed_log_joint`)."""
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
    w = np.diff(edges) * (1.0 - Q_GRID) ** 4
    return w / w.sum()


def _default_priors() -> Priors:
    priors = Priors()
    priors.q.flags.writeable = False
    priors.p.flags.writeable = False
    return priors


# The weak default every search starts under: one object, so the searches' first decisions, the same
# for every solution of a length, are remembered across solutions and shards (`decision_memo.py`)
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


def _sigma(m: int) -> np.ndarray:
    return _SIGMA[min(m, MAX_STEPS - 1)]


ForwardState = tuple[np.ndarray, np.ndarray]  # (msg [d, q, level], log scale [d, q]) before prefix j


def _powers() -> tuple[np.ndarray, np.ndarray]:
    """The clean stretch's transition over m unprobed steps, m = 0..MAX_STEPS: POWERS[m, d] is the
    m-th power of class d's one-step kernel, scaled to sum 1 (LOG_SCALE[m, d] is the log scale), so a
    run of unprobed prefixes is crossed in one product instead of a step at a time."""
    powers = np.empty((MAX_STEPS + 1, len(P_GRID), len(C_GRID), len(C_GRID)))
    log_scale = np.zeros((MAX_STEPS + 1, len(P_GRID)))
    powers[0] = np.eye(len(C_GRID))[None]
    for m in range(1, MAX_STEPS + 1):
        step = np.matmul(powers[m - 1], _CLEAN_T)
        scale = step.sum(axis=(1, 2))
        powers[m] = step / scale[:, None, None]
        log_scale[m] = log_scale[m - 1] + np.log(scale)
    return powers, log_scale


_POWERS, _LOG_SCALE = _powers()


_ALWAYS_KEPT = 64  # run tables for runs with fewer steps after them than this are all kept (~3 MB a family)
# the most recent larger run tables kept, per family (up to 750 kB each: three families, up to 144 MB in
# all, only on solutions of hundreds of steps). 32 was enough while the search probed few prefixes of a
# long solution; choosing probes by the first error's entropy spreads them over more (1000 steps: 41.7 ms
# a decision at 32, 26.0 at 64, 23.2 at 128)
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
def _reach(r: int) -> np.ndarray:
    """REACH[i, d, a]: for a run of unprobed prefixes whose first one, j, has r steps after it
    (r = n - j - 1), the weight of 'prefix j + i is the last clean one' given prefix j at level a
    (POWERS[i] carries the level i steps on, SIGMA sums the bad stretch after it), i = 0..min(r,
    MAX_STEPS - 1). It depends on r alone, so every run, candidate and solution with the same r
    shares one table: a decision no longer rebuilds it (O(n) products) for every pass."""
    m = min(r + 1, MAX_STEPS)
    sig = _SIGMA[np.minimum(r - np.arange(m), MAX_STEPS - 1)]  # [i, d, level]
    table = np.matmul(_POWERS[:m], sig[..., None])[..., 0]
    table.flags.writeable = False
    return table


@_run_table_cache
def _reach_flat(r: int) -> tuple[np.ndarray, np.ndarray]:
    """`_reach(r)` with each class's log scale folded in, flattened to [i, (d, level)] for one matrix
    product over class and level, scaled per i to a maximum of 1 (the log scale per i comes second)."""
    table = _reach(r) * np.exp(_LOG_SCALE[: min(r + 1, MAX_STEPS)])[:, :, None]
    top = table.max(axis=(1, 2))
    table = (table / top[:, None, None]).reshape(len(table), -1)
    table[table < 1e-290] = 0.0  # subnormal numbers would make every product with it many times slower
    table.flags.writeable = False
    return table, np.log(top)


_NO_SCALE = np.zeros(len(P_GRID))  # the one-step kernel's log scale (it is not rescaled)


def _advance(msg: np.ndarray, log_acc: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The forward state m unprobed steps on (msg [b, d, q, level]), renormalised."""
    while m > 0:
        k = min(m, MAX_STEPS)
        msg = np.matmul(msg, _POWERS[k])
        log_acc = log_acc.copy()
        _loops.normalise(msg, log_acc, _LOG_SCALE[k])
        m -= k
    return msg, log_acc


@dataclass
class ForwardCache:
    """The base evidence's forward pass, kept where it was materialised (each probed prefix and each
    run of unprobed ones): the state before any prefix is one product away (`at`)."""

    marks: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)

    def at(self, j: int) -> ForwardState:
        # the latest mark at or before j (marks come in the order of their prefixes; of two at one
        # prefix, the first)
        positions = [m[0] for m in self.marks]
        i = bisect.bisect_right(positions, j) - 1
        i = bisect.bisect_left(positions, positions[i], 0, i)
        pos, msg, log_acc = self.marks[i]
        if pos == j:
            return msg, log_acc
        msg, log_acc = _advance(msg[None], log_acc[None], j - pos)
        return msg[0], log_acc[0]


@dataclass(frozen=True)
class _Terms:
    """A batch of evidence's likelihood terms: what the forward pass multiplies in."""

    cols: np.ndarray  # the prefixes probed in any row (an unprobed prefix scores 0)
    clean: np.ndarray  # [b, col, q, level]: log-likelihood of the column's counts, prefix clean
    bad: np.ndarray  # [b, j, q]: log-likelihood of prefix j's counts, prefix holding the error
    # [b, j, q]: log P(rollouts of prefixes j..n-1, verdict | prefix j is the first holding the error)
    bad_after: np.ndarray
    v_clean: float  # log P(verdict | the solution is clean)

    @classmethod
    def of(cls, correct: np.ndarray, graded: np.ndarray, verdict: str, k: float, recent: float = 0.0) -> _Terms:
        batch, n = correct.shape
        tables = _CountTables.of(k)
        cols = np.flatnonzero(graded.any(axis=0))
        c, f = correct[:, cols], graded[:, cols] - correct[:, cols]
        clean = tables.loglik(True, c, f).reshape(batch, len(cols), len(Q_GRID), len(C_GRID))
        bad = np.zeros((batch, n, len(Q_GRID)))
        bad[:, cols] = tables.loglik(False, c, f)
        if verdict == "correct":
            v_clean, v_bad = 0.0, _LOG_Q
        elif verdict == "incorrect":
            v_clean, v_bad = -np.inf, _LOG_1Q
        else:
            v_clean, v_bad = 0.0, np.zeros(len(Q_GRID))
        after = np.concatenate([bad[:, ::-1].cumsum(axis=1)[:, ::-1], np.zeros((batch, 1, len(Q_GRID)))], axis=1)
        if recent > 0:  # the first RECENT_STEPS prefixes of the bad stretch at their raised rates
            for m in range(RECENT_STEPS):
                at = cols[cols >= m]
                raised = _recent_tables(k, recent)[m].loglik(correct[:, at], graded[:, at] - correct[:, at])
                after[:, at - m] += raised - bad[:, at]
        return cls(cols, clean, bad, after + v_bad, v_clean)


def _log_joint(
    correct: np.ndarray,
    graded: np.ndarray,
    verdict: str,
    priors: Priors,
    cache: ForwardCache | None = None,
    terms: _Terms | None = None,
) -> np.ndarray:
    """[b, e, d, q]: log P(first error e, class d, luck q, data) for a batch of evidence of one
    solution (rows of `correct` and `graded` are alternative measurements of the same n prefixes).

    The forward pass goes from probed prefix to probed prefix: a run of unprobed ones between is
    crossed in one product (`_POWERS`), its rows of e scored together (`_reach`), so the work is a
    few array operations per probed prefix plus O(n) in one vectorised pass. `cache`: keeps this
    pass's states (batch of one) for passes that start from them (`_row_log_masses`)."""
    batch, n = correct.shape
    terms = terms or _Terms.of(correct, graded, verdict, priors.k)
    column = {int(k): i for i, k in enumerate(terms.cols)}
    bad_after = terms.bad_after
    # forward over the clean stretch: msg[b, d, q, level] = P(data of prefixes < j, prefix j clean at level)
    msg = np.ones((batch, len(P_GRID), len(Q_GRID), len(C_GRID)))
    log_acc = np.zeros((batch, len(P_GRID), len(Q_GRID)))
    log_e = np.empty((batch, n + 1, len(P_GRID), len(Q_GRID)))
    j = 0
    with np.errstate(divide="ignore"):
        for p in [*column, n]:
            if cache is not None:
                cache.marks.append((j, msg[0], log_acc[0]))
            while j < p:  # unprobed prefixes j..p-1, at most MAX_STEPS at a time
                m = min(p - j, MAX_STEPS)
                reach = _reach(n - j - 1)[:m]  # [i, d, level at j]: prefix j + i is the last clean one
                # switch[b, i, d, q] = sum over level of msg[b, d, q, level] reach[i, d, level] (BLAS)
                switch = np.matmul(msg.transpose(1, 0, 2, 3), reach.transpose(1, 2, 0)[:, None])  # [d, b, q, i]
                _loops.run_errors(switch, log_acc, _LOG_SCALE[:m], bad_after, j, log_e)
                msg, log_acc = _advance(msg, log_acc, m)
                j += m
            if p == n:
                break
            if cache is not None:
                cache.marks.append((p, msg[0], log_acc[0]))
            # the prefix's likelihood and its switch to the bad stretch (one compiled pass), one step on
            lik = terms.clean[:, column[p]]  # [b, q, level]
            absorbed, absorbed_acc = np.empty_like(msg), np.empty_like(log_acc)
            _loops.clean_prefix(msg, log_acc, lik, _sigma(n - p - 1), bad_after, p, log_e, absorbed, absorbed_acc)
            msg, log_acc = np.matmul(absorbed, _CLEAN_T), absorbed_acc
            _loops.normalise(msg, log_acc, _NO_SCALE)
            j = p + 1
        log_e[:, n] = log_acc + np.log(msg[..., 0]) + terms.v_clean
    return log_e + priors.log_prior()[None, None]


def _mixed_log_joint(
    correct: np.ndarray, graded: np.ndarray, verdict: str, priors: Priors, plain: np.ndarray | None = None
) -> np.ndarray:
    """`_log_joint` with every error read both ways: without a fresh error's extra luck, and with it
    (weight `priors.recent_share`). `plain`: the first reading's joint where it is known already; each
    reading is computed only where its weight is not 0."""
    share = priors.recent_share if priors.recent > 0 else 0.0
    if plain is None and share < 1.0:
        plain = _log_joint(correct, graded, verdict, priors)
    if share <= 0.0:
        assert plain is not None
        return plain
    raised = _log_joint(correct, graded, verdict, priors, terms=_Terms.of(correct, graded, verdict, priors.k, priors.recent))
    if share >= 1.0:
        return raised
    with np.errstate(divide="ignore"):
        return np.logaddexp(plain + math.log1p(-share), raised + math.log(share))


def cautious(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per step, the less sure of two p_good readings: the lower where both lean good, the higher
    where both lean bad, 0.5 where they disagree (non-increasing where both are)."""
    low, high = np.minimum(a, b), np.maximum(a, b)
    return np.where(low >= 0.5, low, np.where(high <= 0.5, high, 0.5))


def _logsumexp(x: np.ndarray, axis: int | tuple[int, ...]) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(x - top).sum(axis=axis)) + np.squeeze(top, axis=axis)


def _evidence_and_p_good(log_joint: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per batch row: the log evidence and p_good (P(prefix after step i is clean), i = 0..n-1)."""
    top = log_joint.max(axis=(1, 2, 3))
    w = np.exp(log_joint - top[:, None, None, None])
    total = w.sum(axis=(1, 2, 3))
    p_error = w.sum(axis=(2, 3)) / total[:, None]
    return top + np.log(total), np.clip(1.0 - np.cumsum(p_error, axis=1)[:, :-1], 0.0, 1.0)


def _masses_to_p_good(log_mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same from rows of log P(first error e, data) [b, e] (class and luck summed out)."""
    top = log_mass.max(axis=1)
    w = np.exp(log_mass - top[:, None])
    total = w.sum(axis=1)
    p_error = w / total[:, None]
    return top + np.log(total), np.clip(1.0 - np.cumsum(p_error, axis=1)[:, :-1], 0.0, 1.0)


_HELD_STATES = 64
_holding: deque[weakref.ref[Posterior]] = deque()


def _hold_states(post: Posterior) -> None:
    """Keep the forward states of the last `_HELD_STATES` posteriors only: a state is 20 kB a probed
    prefix, and a shard's relabeling builds a posterior for every solution before it reads any."""
    _holding.append(weakref.ref(post))
    while len(_holding) > _HELD_STATES:
        old = _holding.popleft()()
        if old is not None:
            old._cache = None


class Posterior:
    """The posterior over (first error e, luck q, difficulty class) of one solution, the curve summed out."""

    def __init__(self, ev: Evidence, priors: Priors) -> None:
        self.evidence = ev
        self.priors = priors
        self.terms = _Terms.of(ev.correct[None], ev.graded[None], ev.verdict, priors.k)  # the plain reading's
        self._cache: ForwardCache | None = ForwardCache()  # the pass's states (`cache`)
        self.gains: dict[int, dict[int, float]] = {}  # b -> candidate prefix -> gain (`probe_gains`)
        self._least_tail: float | None = None  # the model check's min p_j (`misfit`)
        self._plain: Posterior | None = None  # the plain reading's posterior, where the priors mix two
        self._under: dict[int, Posterior] = {}  # the same evidence under other priors (`under`), by token
        if priors.mixed:
            # its pass and forward states are the plain reading's posterior's; the mixture reuses its joint
            self._plain = Posterior(ev, replace(priors, recent_share=0.0))
            self._cache = None
            with np.errstate(divide="ignore"):
                plain = np.log(self._plain.by_class)[None] + self._plain.log_evidence
            joint = _mixed_log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors, plain)
        else:
            joint = _log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors, self._cache, self.terms)
        _hold_states(self)
        log_evidence, p_good = _evidence_and_p_good(joint)
        self.log_evidence = float(log_evidence[0])
        self.p_good = p_good[0]
        self.belief = self.p_good  # what the row says of each step (p_good is what labels need)
        if self._plain is not None:
            # A fresh error's extra luck and a hard step look alike on a few rollouts (both raise the
            # prefix before a fall): where the shard reads errors both ways, the labels (and the
            # search) go by the less sure of the two readings' p_good, so a label holds under either
            # (`cautious`); the row keeps the mixed reading's, a probability.
            self.p_good = cautious(self._plain.p_good, self.p_good)
        self.by_class = np.exp(joint[0] - self.log_evidence)  # [e, d, q]
        self.joint = self.by_class.sum(axis=1)  # [e, q]
        self.p_error = self.joint.sum(axis=1)

    @property
    def cache(self) -> ForwardCache:
        """The forward pass's states, where passes for changed evidence start (`probe_gains`, the model
        check). Only the most recent posteriors keep theirs (`_hold_states`); an older one runs its
        pass again when asked."""
        cache = self._cache
        if cache is None:
            cache = ForwardCache()
            ev = self.evidence
            _log_joint(ev.correct[None], ev.graded[None], ev.verdict, self.priors, cache, self.terms)
            self._cache = cache
        return cache

    def under(self, priors: Priors) -> Posterior:
        """This posterior's evidence under `priors` (itself where they are its own), built once: the
        search scores probes under other priors than it labels under (`probe_value_priors`)."""
        if priors is self.priors:
            return self
        other = self._under.get(priors.token)  # tokens are never reused (`Priors.token`)
        if other is None:
            other = self._under[priors.token] = Posterior(self.evidence, priors)
        return other

    @property
    def q_marginal(self) -> np.ndarray:
        return self.joint.sum(axis=0)

    def p_marginal(self) -> np.ndarray:
        """Posterior weights of the difficulty classes (for pooling the prior)."""
        return self.by_class.sum(axis=(0, 2))

    def uncertainty(self) -> float:
        """Bits of uncertainty about where the first error is (`first_error_entropy`)."""
        return float(first_error_entropy(self.p_good[None])[0])

    def misfit(self, level: float) -> bool:
        """Posterior predictive check, leave one out: each probed prefix's count against what the
        model predicts for it from everything else. A count at least as unlikely as the observed one
        has predictive probability p_j; the model fails this solution when min p_j < level / probes
        (Bonferroni), e.g. a prefix after the error that reaches the answer far more often than luck
        allows, or a clean stretch that falls and rises again. The labels and the shard's
        process-error measurement ask the same posterior more than once: min p_j is kept."""
        probed = int(np.count_nonzero(self.evidence.graded > 0))
        if probed < 3:
            return False
        if self._plain is not None:
            # the check's fast sums read a prefix the same for every error before it; a fresh error's
            # extra luck does not, so the check is the plain reading's (a solution it fails stays so)
            return self._plain.misfit(level)
        if self._least_tail is None:
            self._least_tail = self._tails().min()
        return bool(self._least_tail < level / probed)

    def _tails(self) -> np.ndarray:
        """[probed prefix]: p_j, the predictive probability of a count at least as unlikely as its own."""
        ev = self.evidence
        probed = np.flatnonzero(ev.graded > 0)
        # every count each probed prefix could have had (its other prefixes as they are), in one pass
        sizes = ev.graded[probed]
        js = np.repeat(probed, sizes + 1)
        counts = np.concatenate([np.arange(g + 1) for g in sizes])
        log_ev = _row_log_evidence(self, js, counts, ev.graded[js])
        tails = np.empty(len(probed))
        at = 0
        for i, (j, g) in enumerate(zip(probed, sizes, strict=True)):
            g, c = int(g), int(ev.correct[j])
            log_pmf = _log_combs(g) + log_ev[at : at + g + 1]
            at += g + 1
            pmf = np.exp(log_pmf - log_pmf.max())
            pmf /= pmf.sum()
            tails[i] = pmf[pmf <= pmf[c] * (1 + 1e-9)].sum()
        return tails


def _row_log_masses(post: Posterior, js: np.ndarray, correct: np.ndarray, graded: np.ndarray) -> np.ndarray:
    """[row, e]: log P(first error e, data) (class and luck summed out) under the posterior's priors,
    for the posterior's evidence with prefix js[r]'s counts replaced by (correct[r], graded[r]).

    Exact, without a pass per row: rows e < j differ from the posterior's joint only by prefix j's
    bad-stretch likelihood; rows e >= j are carried forward from the posterior's state before j
    (which prefix j does not touch), all rows in one sweep that each joins at its own j. Only the
    error's place is kept, so inside a run of unprobed prefixes the luck is summed out before the
    product with the `_reach` table (18 times less work than the full joint)."""
    ev, priors, terms = post.evidence, post.priors, post.terms
    n, rows = ev.n, len(js)
    tables = _CountTables.of(priors.k)
    # rows in the order of their prefixes (probe_gains asks in that order already)
    order = None if (js[1:] >= js[:-1]).all() else np.argsort(js, kind="stable")
    if order is not None:
        js, correct, graded = js[order], correct[order], graded[order]
    out = np.full((rows, n + 1), -np.inf)
    d_, q_, l_ = len(P_GRID), len(Q_GRID), len(C_GRID)
    with np.errstate(divide="ignore", under="ignore"):
        # e < j: the posterior's own rows, prefix j's bad-stretch likelihood swapped
        delta = tables.loglik(False, correct, graded - correct) - terms.bad[0, js]  # [row, q]
        top = delta.max(axis=1)
        before = np.log(np.exp(delta - top[:, None]) @ post.joint.T) + (top + post.log_evidence)[:, None]
        np.copyto(out, before, where=np.arange(n + 1)[None, :] < js[:, None])
        # e >= j, in three stages: (A) every row at its own j together: the state before j, the row's
        # own counts there, the error at j; (B) each candidate's rows across the unprobed prefixes
        # after j to the next probed one (or the end); (C) one sweep over the probed prefixes, rows
        # joining at the first one after their j. The whole batch meets only at the probed prefixes.
        new_weight, new_top = _clean_weights(priors.k, correct, graded, js)
        col_top = terms.clean[0].max(axis=2)  # [col, q]
        col_weight = np.exp(terms.clean[0] - col_top[:, :, None])
    prior = priors.log_prior()  # [d, q]
    bad_after = terms.bad_after[0]
    cols = terms.cols
    arrive = np.append(cols, n)[np.searchsorted(cols, js, side="right")]  # the first probed prefix after j
    msg = np.empty((d_, rows, q_, l_))
    acc = np.empty((d_, rows, q_))
    firsts = _block_starts(js)
    groups = [(int(js[a]), a, b) for a, b in zip(firsts, [*firsts[1:], rows], strict=True)]
    for j, a, b in groups:
        state, state_acc = post.cache.at(j)
        msg[:, a:b] = state[:, None]
        acc[:, a:b] = state_acc[:, None]
    sweep = _Sweep(n, prior, bad_after, terms.v_clean, np.empty((rows, d_, l_)), np.empty(rows))
    run = arrive - js - 1  # the unprobed prefixes after j, up to the next probed one or the end
    first = np.minimum(run, MAX_STEPS)
    _loops.absorb(
        msg,
        acc,
        0,
        rows,
        -1,
        -1,
        new_weight,
        new_top,
        _SIGMA[np.minimum(n - js - 1, MAX_STEPS - 1)],
        prior[None] + bad_after[js + 1][:, None, :],
        js,
        run > 0,
        _END_AFTER_STEP[first],
        prior[None] + terms.v_clean + _LOG_SCALE[first][:, :, None],
        (arrive == n) & (run <= MAX_STEPS),
        out,
        sweep.summed,
        sweep.shift,
    )
    waiting = np.empty_like(msg)  # the states where each candidate's rows join the sweep
    if (run <= MAX_STEPS).all() and rows == len(groups) * (groups[0][2] - groups[0][1]):
        # candidates of as many rows each (probe_gains): their runs' errors each from its own table,
        # then each candidate's level product with its own kernel straight into its rows of `waiting`,
        # and one renormalisation of them all. (Stacking the kernels for one batched product cost more
        # than it saved: the set of run lengths differs nearly every decision at 40 steps; the products
        # per class are the same, so are the results.)
        for j, a, b in groups:
            if first[a]:
                sweep.errors(out, a, b, j + 1, int(first[a]), _reach_flat_stepped(n - j - 2))
        flat_msg, flat_waiting = msg.reshape(d_, rows * q_, l_), waiting.reshape(d_, rows * q_, l_)
        for _, a, b in groups:
            m = int(first[a])
            kernel = _step_then_run(m) if m else _CLEAN_T
            np.matmul(flat_msg[:, a * q_ : b * q_], kernel, out=flat_waiting[:, a * q_ : b * q_])
        _loops.settle(waiting, acc, 0, rows, _LOG_SCALE[first], True)
    else:
        for j, a, b in groups:
            sweep.cross(msg, waiting, acc, out, a, b, j + 1, int(arrive[a]))
    # (C): what each probed prefix from the first arrival on reads, for all of them at once
    first_col = int(np.searchsorted(cols, arrive[0]))
    positions = cols[first_col:]
    ends = np.append(positions[1:], n)
    runs = ends - positions - 1
    steps = np.minimum(runs, MAX_STEPS)
    p_sig = _SIGMA[np.minimum(n - positions - 1, MAX_STEPS - 1)]
    p_base = prior[None] + bad_after[positions + 1][:, None, :]
    p_end_base = prior[None] + terms.v_clean + _LOG_SCALE[steps][:, :, None]
    p_ends = (ends == n) & (runs <= MAX_STEPS)
    p_has_run = runs > 0
    p_end_col = _END_AFTER_STEP[steps]
    joined = np.searchsorted(arrive, positions, side="right").tolist()  # rows that arrived by each
    cur, spare = waiting, msg
    hi = 0
    at, upto = positions.tolist(), ends.tolist()
    for idx in range(len(at)):
        lo, hi = hi, joined[idx]
        if cur is not waiting:
            cur[:, lo:hi] = waiting[:, lo:hi]
        _loops.absorb(
            cur,
            acc,
            0,
            hi,
            idx,
            first_col + idx,
            col_weight,
            col_top,
            p_sig,
            p_base,
            positions,
            p_has_run,
            p_end_col,
            p_end_base,
            p_ends,
            out,
            sweep.summed,
            sweep.shift,
        )
        if sweep.cross(cur, spare, acc, out, 0, hi, at[idx] + 1, upto[idx]):
            cur, spare = spare, cur
    if order is None:
        return out
    result = np.empty_like(out)
    result[order] = out
    return result


@functools.lru_cache(maxsize=MAX_STEPS + 1)
def _step_then_run(m: int) -> np.ndarray:
    """[d, level, level]: the step out of a probed prefix and then m unprobed ones, one kernel (its rows
    sum to at most 1, as both kernels' do, so the states need no renormalising between them)."""
    kernel = np.ascontiguousarray(np.matmul(_CLEAN_T, _POWERS[m]))
    kernel.flags.writeable = False
    return kernel


# [m, d, level]: the weight of ending at level 0 (c = 1) from each level: after the step out of a probed
# prefix and m unprobed ones (_END_AFTER_STEP), or after m unprobed ones alone (_END_AFTER_RUN). The
# last state of a row is read there alone: a vector product where a matrix product was.
_END_AFTER_STEP = np.einsum("dab,mdb->mda", _CLEAN_T, _POWERS[..., 0])
_END_AFTER_RUN = np.ascontiguousarray(_POWERS[..., 0])


@_run_table_cache
def _reach_flat_stepped(r: int) -> tuple[np.ndarray, np.ndarray]:
    """`_reach_flat(r)` with the step out of the probed prefix before the run folded in: it multiplies
    states taken before that step (`_loops.absorb` sums their luck out there)."""
    table, log_top = _reach_flat(r)
    m = len(table)
    by_class = table.reshape(m, len(P_GRID), len(C_GRID)).transpose(1, 0, 2)  # [d, i, level after the step]
    stepped = np.matmul(by_class, _CLEAN_T.transpose(0, 2, 1)).transpose(1, 0, 2).reshape(m, -1)
    stepped[stepped < 1e-290] = 0.0  # no subnormal numbers (see `_reach_flat`)
    stepped.flags.writeable = False
    return stepped, log_top


_SHORT_RUN = 16  # a run this short has its errors read in a compiled loop, a longer one in a BLAS product


@dataclass(frozen=True)
class _Sweep:
    """One solution's candidate sweep (`_row_log_masses`): what every row's run crossing reads."""

    n: int
    prior: np.ndarray  # [d, q]
    bad_after: np.ndarray  # [j, q]
    v_clean: float
    summed: np.ndarray  # [row, d, level]: each row's luck summed out before its run (`_loops.absorb`)
    shift: np.ndarray  # [row]: its scale

    def cross(
        self, src: np.ndarray, dst: np.ndarray, acc: np.ndarray, out: np.ndarray, a: int, b: int, start: int, end: int
    ) -> bool:
        """Rows a..b-1 of states src [d, row, q, level], absorbed at prefix start - 1 (its level step not
        taken), across the unprobed prefixes start..end-1 (their errors into out) to the states before
        prefix `end`, written into dst: True. At the solution's end `absorb` wrote the clean weight
        already and nothing is written: False. The step out of prefix start - 1 goes with the run's
        first product: one level product a probed prefix where there were two."""
        n = self.n
        m = min(end - start, MAX_STEPS)
        if m:
            self.errors(out, a, b, start, m, _reach_flat_stepped(n - start - 1))
        if end == n and end - start <= MAX_STEPS:
            return False
        _product(src, dst, acc, a, b, _step_then_run(m) if m else _CLEAN_T, _LOG_SCALE[m])
        s = start + m
        while s < end:  # a run longer than the tables: the rest in parts
            m = min(end - s, MAX_STEPS)
            _loops.luck_summed(dst, acc, a, b, self.prior + self.bad_after[end], self.summed, self.shift)
            self.errors(out, a, b, s, m, _reach_flat(n - s - 1))
            if s + m == n:
                base = self.prior + self.v_clean + _LOG_SCALE[m][:, None]
                _loops.clean_end(dst, acc, a, b, _END_AFTER_RUN[m], base, out)
                return False
            _product(dst, dst, acc, a, b, _POWERS[m], _LOG_SCALE[m])
            s += m
        return True

    def errors(self, out: np.ndarray, a: int, b: int, s: int, m: int, tables: tuple[np.ndarray, np.ndarray]) -> None:
        """out[a:b, s:s+m]: errors at the run's prefixes s..s+m-1, from each row's luck-summed state."""
        table, table_scale = tables
        d_, l_ = len(P_GRID), len(C_GRID)
        summed = self.summed.reshape(len(self.summed), d_ * l_)
        if m <= _SHORT_RUN:
            _loops.short_run_errors(summed, self.shift, table, table_scale, out, a, b, s, m)
            return
        switch = summed[a:b] @ table[:m].T  # [row, i]
        with np.errstate(divide="ignore"):
            out[a:b, s : s + m] = np.log(switch) + (self.shift[a:b, None] + table_scale[:m])


def _product(
    src: np.ndarray, dst: np.ndarray, acc: np.ndarray, a: int, b: int, kernel: np.ndarray, log_scale: np.ndarray
) -> None:
    """Rows a..b-1 of the states src [d, row, q, level] through a per-class level kernel [d, level,
    level] (one BLAS product per class) into dst (dst may be src), renormalised where needed, the
    kernel's log scale [d] added to acc."""
    d_, rows, q_, l_ = src.shape
    x = src.reshape(d_, rows * q_, l_)[:, a * q_ : b * q_]
    y = dst.reshape(d_, rows * q_, l_)[:, a * q_ : b * q_]
    if src is dst:
        y[...] = np.matmul(x, kernel)
    else:
        np.matmul(x, kernel, out=y)
    _loops.settle(dst, acc, a, b, log_scale[None], False)


Scaled = tuple[np.ndarray, np.ndarray]  # (vec [d, q, level] with maximum 1 over level, log scale [d, q])


def _backward(post: Posterior, at: set[int]) -> dict[int, Scaled]:
    """beta_j for each prefix j in `at`: the weight of everything from prefix j on (its switch to the
    bad stretch, the prefixes after it, the verdict) given prefix j clean at each level, its own
    likelihood left out; with the forward state before j it gives the evidence of any count at j
    (`_row_log_evidence`). One backward pass over the probed prefixes and `at`, runs crossed whole."""
    ev, terms = post.evidence, post.terms
    n = ev.n
    d_, q_, l_ = len(P_GRID), len(Q_GRID), len(C_GRID)
    base_clean = {int(k): terms.clean[0, i] for i, k in enumerate(terms.cols)}
    bad_after = terms.bad_after[0]
    positions = sorted({int(k) for k in terms.cols if k >= min(at)} | at)
    end_vec = np.zeros((d_, q_, l_))
    end_vec[..., 0] = 1.0
    gamma: Scaled = (end_vec, np.full((d_, q_), terms.v_clean))  # before prefix n: the verdict if clean
    gamma_scale = gamma[1]
    out: dict[int, Scaled] = {}
    end = n
    with np.errstate(divide="ignore", under="ignore"):
        for p in reversed(positions):
            t = end
            while t > p + 1:  # the unprobed run p+1..end-1, crossed back MAX_STEPS at a time
                start = max(p + 1, t - MAX_STEPS)
                m = t - start
                table, table_scale = _reach_flat(n - start - 1)
                top = table_scale[:m].max()
                run = (np.exp(table_scale[:m] - top) @ table[:m]).reshape(d_, l_)
                stay = np.matmul(gamma[0], _POWERS[m].transpose(0, 2, 1))
                gamma = _scaled_empty()
                _loops.plus_shared(run, top, bad_after[end], stay, gamma_scale, _LOG_SCALE[m], *gamma)
                gamma_scale = gamma[1]
                t = start
            step = np.matmul(gamma[0], _CLEAN_T_T)
            beta = _scaled_empty()
            _loops.plus_shared(_sigma(n - p - 1), 0.0, bad_after[p + 1], step, gamma_scale, _NO_SCALE, *beta)
            if p in at:
                out[p] = beta
            lik = base_clean.get(p)
            if lik is not None:
                absorbed = _scaled_empty()
                _loops.times_lik(beta[0], beta[1], lik, *absorbed)
                beta = absorbed
            gamma, gamma_scale, end = beta, beta[1], p
    return out


def _scaled_empty() -> Scaled:
    return np.empty((len(P_GRID), len(Q_GRID), len(C_GRID))), np.empty((len(P_GRID), len(Q_GRID)))


_CLEAN_T_T = np.ascontiguousarray(_CLEAN_T.transpose(0, 2, 1))  # the one-step kernel, backward


def _row_log_evidence(post: Posterior, js: np.ndarray, correct: np.ndarray, graded: np.ndarray) -> np.ndarray:
    """[row]: log P(data) for the posterior's evidence with prefix js[r]'s counts replaced by
    (correct[r], graded[r]): what `_row_log_masses` sums to, from the forward state before j and the
    backward weight after it (`_backward`), a few array operations per row."""
    priors, terms = post.priors, post.terms
    tables = _CountTables.of(priors.k)
    prior = priors.log_prior()
    with np.errstate(divide="ignore", under="ignore"):
        # e < j: the posterior's own rows, prefix j's bad-stretch likelihood swapped
        delta = tables.loglik(False, correct, graded - correct) - terms.bad[0, js]  # [row, q]
        top = delta.max(axis=1)
        below = np.concatenate([np.zeros((1, len(Q_GRID))), np.cumsum(post.joint, axis=0)])  # [j, q]: e < j
        before = np.log(np.einsum("rq,rq->r", np.exp(delta - top[:, None]), below[js])) + top + post.log_evidence
        # e >= j: forward state before j, the row's own likelihood at j, backward weight after it
        weight, lik_top = _clean_weights(priors.k, correct, graded, js)  # [row, q, level], [row, q]
        betas = _backward(post, {int(j) for j in js})
        after = np.empty(len(js))
        for j in np.unique(js):
            msg, acc = post.cache.at(int(j))
            beta, beta_scale = betas[int(j)]
            _loops.evidence_rows(msg * beta, acc + prior + beta_scale, weight, lik_top, np.flatnonzero(js == j), after)
    return np.logaddexp(before, after)


def first_error_entropy(p_good: np.ndarray) -> np.ndarray:
    """[row]: bits of uncertainty about where the first error is, from rows of p_good: the entropy of
    P(first error at step e), e = 0..n-1, or none (P(e) = p_good[e - 1] - p_good[e]).

    This is what a probe should reduce: the labels are read from where the first error is, and the
    steps after it never get one. The sum of the steps' own label entropies, the former objective,
    also counted the steps after the error, whose p_good mostly tracks the luck rate: the search
    spent a third of its rollouts on the last prefix measuring luck, and stopped early where the
    steps it could still pin mattered less in that sum than the steps after them."""
    edge = np.ones((len(p_good), 1))
    p = -np.diff(np.concatenate([edge, p_good, 0.0 * edge], axis=1), axis=1)
    p = np.clip(p, 1e-300, 1.0)
    return -(p * np.log2(p)).sum(axis=1)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


@functools.cache
def _log_combs(n: int) -> np.ndarray:
    """[k]: log C(n, k), k = 0..n."""
    return np.array([_log_comb(n, k) for k in range(n + 1)])


def probe_gains(post: Posterior, priors: Priors, chosen: Sequence[int], b: int) -> np.ndarray:
    """[candidate]: expected bits of first-error uncertainty removed per rollout by `b` more rollouts at each
    prefix in `chosen`; every outcome of every candidate is scored in one sweep (`_row_log_masses`).
    A candidate's gain depends on the posterior and b alone: the posterior keeps it, so a second look
    at the same candidates (the search's localizing pass) costs nothing."""
    if priors.mixed:
        raise ValueError("probe_gains scores probes under priors without a fresh error's extra luck")
    post = post.under(priors)
    known = post.gains.setdefault(b, {})
    new = [j for j in dict.fromkeys(int(j) for j in chosen) if j not in known]
    if new:
        ev = post.evidence
        # rows [candidate, outcome] flattened (np.tile, a Python-level function, cost more than the sums)
        js = np.repeat(np.asarray(new, dtype=np.int64), b + 1)
        outcome = np.arange(len(js)) % (b + 1)
        log_ev, p_good = _masses_to_p_good(_row_log_masses(post, js, ev.correct[js] + outcome, ev.graded[js] + b))
        shape = (len(new), b + 1)
        pred = np.exp(_log_combs(b) + log_ev.reshape(shape) - post.log_evidence)
        after = (pred * first_error_entropy(p_good).reshape(shape)).sum(axis=1)
        known.update(zip(new, ((post.uncertainty() - after) / b).tolist(), strict=True))
    return np.array([known[int(j)] for j in chosen])


def _class_luck_loglik(evidence: Sequence[Evidence], k: float, recent: float = 0.0) -> np.ndarray:
    """[solution, d, q]: log P(data | class d, luck q) of each solution (the first error summed out),
    under overdispersion k. Solutions of one length and verdict go through one batched pass."""
    out = np.empty((len(evidence), len(P_GRID), len(Q_GRID)))
    # log prior 0: the likelihood alone, every error read with extra luck `recent` (or none)
    flat = Priors(np.ones(len(Q_GRID)), np.ones(len(P_GRID)), k, recent=recent, recent_share=1.0)
    groups: dict[tuple[int, str], list[int]] = {}
    for i, ev in enumerate(evidence):
        groups.setdefault((ev.n, ev.verdict), []).append(i)
    for (_, verdict), members in groups.items():
        correct = np.stack([evidence[i].correct for i in members])
        graded = np.stack([evidence[i].graded for i in members])
        out[members] = _logsumexp(_mixed_log_joint(correct, graded, verdict, flat), axis=1)
    return out


def pool_priors(
    evidence: Sequence[Evidence],
    base: Priors | None = None,
    rounds: int = 8,
    strength: float = 8.0,
    recents: Sequence[float] = RECENT_CHOICES,
    dispersion_price: bool = True,
    k_strength: float | None = None,
) -> Priors:
    """The shard's priors on luck and the difficulty classes, estimated from every solution's evidence
    at once (EM on the grid weights; `strength` solutions' worth of the base prior keep a small shard
    from collapsing onto a few grid points), under each overdispersion k in K_CHOICES; the k under
    which the shard's evidence is likeliest wins. Depends on the set of evidence only, not on the
    order the searches finished in. The prior only reweights each solution's likelihood of (class,
    luck), so that is computed once per k (`_class_luck_loglik`) and the EM rounds are sums over it.

    `dispersion_price`: more overdispersion than the largest k (rollouts about as independent as a
    binomial's) must pay for itself: it wins only where its fit beats the largest k's by half
    ln(solutions), BIC's price of one parameter. Without it a shard the binomial describes took k 60
    on a fit 0.8 nats ahead (fidelity `in_model` seed 2, 150 solutions), whose labels stayed unpinned
    where the same rollouts read under k 400 pinned them (first-error accuracy 0.25 -> 0.30, bad
    precision 0.970 -> 0.979); where the rollouts share their fate the smaller k wins by 8-12 nats
    (`correlated`). The searches' second-phase priors do without it (`second_phase_priors`).

    `k_strength`: the base prior's weight while the k is chosen, where it differs from the weight the
    chosen k's luck and class weights are pooled with (`second_phase_priors`: a cautious choice of k).

    Then, under the chosen k, each r in `recents` (a fresh error's extra luck, `RECENT_CHOICES`): every
    error read both ways, the share read with r pooled by EM too; kept where its fit beats the plain
    one's by ln(solutions) (about BIC's price of its two parameters; at least ln(strength)), else the
    plain priors. `recents=()`
    for priors the search scores probes under (`probe_gains` reads no extra luck)."""
    base = base or Priors()
    if not evidence:
        return base
    fits: list[tuple[float, Priors, np.ndarray]] = []
    choosing = strength if k_strength is None else k_strength
    for k in K_CHOICES:
        loglik = _class_luck_loglik(evidence, k)  # [solution, d, q]
        fit, priors = _em(loglik[:, None], Priors(base.q, base.p, k), base, rounds, choosing)
        fits.append((fit, priors, loglik))
    price = 0.5 * math.log(max(len(evidence), choosing)) if dispersion_price else 0.0
    binomial_k = max(K_CHOICES)
    plain_fit, plain, plain_loglik = max(fits, key=lambda f: f[0] + (price if f[1].k == binomial_k else 0.0))
    if choosing != strength:  # the weights at `strength`, under the k chosen at `k_strength`
        plain_fit, plain = _em(plain_loglik[:, None], Priors(base.q, base.p, plain.k), base, rounds, strength)
    # a second reading must pay for itself (BIC-like), and a shard smaller than the base prior's weight
    # cannot show one (random shards of 1-3 solutions gained up to 2.0 nats from it, ln 8 = 2.08)
    chosen = (plain_fit + math.log(max(len(evidence), strength)), plain)
    for recent in recents:
        raised = _class_luck_loglik(evidence, plain.k, recent)
        start = replace(plain, q=base.q, p=base.p, recent=recent, recent_share=RECENT_SHARE_PRIOR)
        fit, priors = _em(np.stack([plain_loglik, raised], axis=1), start, base, rounds, strength)
        if fit > chosen[0]:
            chosen = (fit, priors)
    return chosen[1]


RECENT_SHARE_PRIOR = 0.1  # the share of errors read with extra luck before the shard says otherwise


def _em(loglik: np.ndarray, priors: Priors, base: Priors, rounds: int, strength: float) -> tuple[float, Priors]:
    """EM on the luck and class weights (and the share of the second reading, where loglik has two:
    [solution, reading, d, q]) from `priors`, `strength` solutions' worth of `base`; (fit, priors)."""
    def log_prior(pr: Priors) -> np.ndarray:  # [reading, d, q]
        share = np.array([1.0 - pr.recent_share, pr.recent_share])[: loglik.shape[1]]
        with np.errstate(divide="ignore"):
            return np.log(share)[:, None, None] + pr.log_prior()[None]

    for _ in range(rounds):
        joint = loglik + log_prior(priors)[None]
        post = np.exp(joint - _logsumexp(joint, axis=(1, 2, 3))[:, None, None, None])
        q = strength * base.q + post.sum(axis=(0, 1, 2))
        p = strength * base.p + post.sum(axis=(0, 1, 3))
        share = priors.recent_share
        if loglik.shape[1] > 1:
            share = (strength * RECENT_SHARE_PRIOR + post[:, 1].sum()) / (strength + len(loglik))
        priors = replace(priors, q=q / q.sum(), p=p / p.sum(), recent_share=float(share))
    return float(_logsumexp(loglik + log_prior(priors)[None], axis=(1, 2, 3)).sum()), priors


def luck_loglik(ev: Evidence, priors: Priors) -> np.ndarray:
    """[luck]: what one solution's evidence says about its problem's luck (its log-likelihood, the
    first error and the difficulty class summed out under the shard's prior, up to a constant).
    Only luck is shared between siblings: difficulty is poorly told apart from luck where luck is
    high, and sharing it there made the siblings' correct verdicts read as an easy problem
    (benchmarks/fidelity.py --samples 4, high_luck: good precision 0.92 -> 0.83)."""
    joint = _mixed_log_joint(ev.correct[None], ev.graded[None], ev.verdict, priors)[0]  # [e, d, q]
    top = joint.max()
    loglik = np.log(np.exp(joint - top).sum(axis=(0, 1))) - np.log(priors.q)
    return loglik - loglik.max()
