"""Right answers after a wrong step: what a correct answer may hide, measured per shard.

A stable share of the correct-answer solutions (`check_correct`) has its early prefixes tested first
(at most `check_prefixes`, spread: search.early_prefixes); a dip below the later prefixes, beyond the
rise a clean solution of its difficulty shows, is a slip the policy repaired (`repaired_slip`: the row
says `undecided_unlocated` from there on). On the tested ones the shard's rate of process errors among
correct answers (`process_error_rate`) and where they sit (`hidden_error_positions`) are measured; they
cap how far the untested correct-answer solutions' steps are trusted (`hidden_error_cap`), and the share
of errors the model does not describe (`unmodelled_error_rate`) caps the tested ones, whose test misses
some of them (`right_answer_cap`). Tuning: docs/design/changepoint-tuning.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prm_synth.annotate.changepoint.engine import P_GRID, Evidence, Posterior
from prm_synth.annotate.changepoint.settings import ChangepointSettings
from prm_synth.records.labels import binomial_cdf


def right_answer_cap(
    post: Posterior,
    final_status: str,
    rate: float,
    positions: Sequence[float],
    unmodelled_rate: float,
) -> np.ndarray | None:
    """The most p_good each step of a solution whose answer may be right can have, given what the shard
    measured of the errors right answers hide (None: no cap; a wrong answer, or no measurement yet).
    A step's p_good comes from evidence about it or from that measurement, never from the prior alone:
    - untested (and every ungradable answer, which is never tested): the shard's rate of process errors
      among correct answers, `rate` (`hidden_error_cap`): an ungradable answer whose rollouts say it is
      right hides errors as a right one does;
    - tested (`check_correct`): the share of errors the model does not describe, which its test may
      have missed (`unmodelled_error_rate`)."""
    if final_status == "incorrect":
        return None
    if not post.evidence.checked:
        return hidden_error_cap(post, rate, positions) if rate > 0 else None
    return hidden_error_cap(post, unmodelled_rate, positions) if unmodelled_rate > 0 else None


def hidden_error_p_good(post: Posterior, rate: float, positions: Sequence[float] = ()) -> np.ndarray:
    """The posterior's p_good under the cap `hidden_error_cap` puts on it."""
    return np.minimum(post.p_good, hidden_error_cap(post, rate, positions))


def hidden_error_cap(post: Posterior, rate: float, positions: Sequence[float] = ()) -> np.ndarray:
    """The most p_good of a correct-answer solution whose early steps were not tested may be, when a
    share `rate` of the shard's correct-answer solutions hold a process error: the error, if any, placed where the
    tested ones held theirs (`positions`, each a share of its solution's length: `hidden_error_positions`),
    each counted at the step it was found on (`found_errors_by`), with the posterior's own
    placement counted as one more; never more trusting than the posterior (whose placement alone is
    a prior, and put a slip the policy repaired late)."""
    n = post.evidence.n
    p_error = post.p_error[:n]
    total = p_error.sum()
    shape = np.cumsum(p_error) / total if total > 0 else np.linspace(1.0 / n, 1.0, n)
    placed = (found_errors_by(positions, n) + shape) / (len(positions) + 1.0)
    return 1.0 - rate * placed


def found_errors_by(positions: Sequence[float], n: int) -> np.ndarray:
    """[step i]: how many of the errors the tested solutions' tests found (`positions`, shares of their
    length) an n-step solution holds at step i or before, each at the step it falls on here, floor(x n).
    (Spreading each over the steps before it, for the slips a test misses early, was removed in revision
    2026-12-06.1: removal raised coverage, precision within noise, docs/design/changepoint-tuning.md.)"""
    last = np.floor(np.asarray(positions, dtype=float) * n + 1e-9)  # the step each one falls on here
    return (np.arange(n, dtype=float)[:, None] >= last[None, :]).sum(axis=1).astype(float)


def unmodelled_error_position(post: Posterior, settings: ChangepointSettings) -> float | None:
    """Where a tested correct-answer solution holds a process error the model does not describe, as a
    share of its length (step / n): the slipped step of a repaired slip; None otherwise. An error the model does describe (a
    wrong step and a lucky answer) is already in every solution's posterior, so only these place the
    hidden errors of the untested ones (`hidden_error_p_good`)."""
    ev = post.evidence
    slip = repaired_slip_of(post, settings)
    if slip is not None:
        return max(slip - 1, 0) / ev.n  # the dip's prefix ends on the slipped step
    return None


def typical_hazard(post: Posterior) -> float:
    """The solution's typical per-step hazard: its difficulty classes' hazards under its posterior."""
    return float(post.p_marginal() @ P_GRID)


def repaired_slip_of(post: Posterior, settings: ChangepointSettings) -> int | None:
    """`repaired_slip` of a solution's evidence at its typical hazard, with the settings' test."""
    hazard = typical_hazard(post)
    return repaired_slip(post.evidence, settings.slip_significance, hazard, settings.slip_min_later)


def repaired_slip(ev: Evidence, significance: float, hazard: float, min_later: int) -> int | None:
    """The first prefix of a correct-answer solution whose rollouts fall clearly below those of the
    prefixes after it (one-sided binomial test against their pooled rate, Bonferroni over the probed
    prefixes; read once the prefixes after it hold `min_later` graded rollouts), or None. A correct answer after such a dip: the policy slipped at the dip's last step
    and repaired it later, so the later prefixes look clean again.

    A clean prefix's rollouts finish less often the more steps are left (each step has its hazard),
    so a later prefix k's rate is discounted by (1 - hazard)^(k - j), the rise a clean solution of
    this difficulty shows between them (`typical_hazard`): without it the slow natural rise of a long
    solution read as a slip. A steep rise after a hard step still reads as a dip: that costs coverage
    of such solutions, never a wrong label."""
    probed = [j for j in range(ev.n) if ev.graded[j] > 0]
    for j in probed:
        later = [k for k in probed if k > j]
        total = sum(int(ev.graded[k]) for k in later)
        if total < min_later:
            break
        hits = sum(int(ev.correct[k]) * (1.0 - hazard) ** (k - j) for k in later)
        if binomial_cdf(int(ev.correct[j]), int(ev.graded[j]), hits / total) < significance / len(probed):
            return j
    return None


def process_error_rate(checked: Sequence[Posterior], settings: ChangepointSettings) -> float:
    """The shard's share of correct-answer solutions that hold a process error, measured on those whose
    early prefixes were tested: one counts when its posterior puts an error in it at least as likely
    as not, or when its rollouts dip and rise again (a repaired slip)."""
    odds = settings.process_error_odds
    found = sum(1 for p in checked if 1.0 - p.p_good[-1] >= odds or unmodelled_error_position(p, settings) is not None)
    return _tested_share(found, len(checked), settings.tested_share_prior)


def _tested_share(found: int, tested: int, prior: tuple[float, float]) -> float:
    """The share of the shard's tested solutions in which their test found something, under a Beta
    `prior` (`tested_share_prior`) that keeps a shard with few tested solutions from trusting them blindly."""
    a, b = prior
    return (found + a) / (tested + (a + b))


def unmodelled_error_rate(checked: int, found: int, prior: tuple[float, float]) -> float:
    """The chance that a tested correct-answer solution whose test found nothing still holds an error
    the model does not describe (a slip the policy repaired), from the shard's tested ones (`checked`)
    and those whose test found such an error (`found`, `unmodelled_error_position`). Of a true rate r
    a test of power w finds r w, and leaves r (1 - w) / (1 - r w) in the rest: about the found share
    itself where w is near one half. A test of more power only makes this cautious: coverage, never a
    wrong label."""
    return _tested_share(found, checked, prior)


def hidden_error_positions(checked: Sequence[Posterior], settings: ChangepointSettings) -> list[float]:
    """Where the tested correct-answer solutions hold the errors the model does not describe."""
    return [x for p in checked if (x := unmodelled_error_position(p, settings)) is not None]
