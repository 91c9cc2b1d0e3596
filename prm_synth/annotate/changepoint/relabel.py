"""Relabel: every solution of a shard labeled again, once all its searches are done, under the priors
pooled from all of them (pooling.py), each with what its problem's other solutions say about the
problem's luck, and with the shard's measurement of what right answers hide (right_answers.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.changepoint.engine import Q_GRID, Evidence, Posterior, Priors
from prm_synth.annotate.changepoint.pooling import luck_loglik, pool_priors
from prm_synth.annotate.changepoint.right_answers import (
    hidden_error_positions,
    process_error_rate,
    unmodelled_error_rate,
)
from prm_synth.annotate.changepoint.rules import label
from prm_synth.annotate.changepoint.settings import ChangepointSettings


def _shared_prefixes(a: Sequence[str], b: Sequence[str]) -> int:
    """The last prefix two solutions share: prefixes 0..m (m steps each) are the same text, so the
    scheduler answered both from the same rollouts."""
    m = 0
    while m < min(len(a), len(b)) and a[m] == b[m]:
        m += 1
    return m


def _without(ev: Evidence, upto: int) -> Evidence:
    """The evidence with prefixes 0..upto left out (measured for another solution already)."""
    correct, graded = ev.correct.copy(), ev.graded.copy()
    correct[: upto + 1] = 0
    graded[: upto + 1] = 0
    return Evidence(ev.n, correct, graded, ev.verdict, ev.stop, ev.checked)


def _siblings_loglik(
    i: int, group: list[int], evidence: list[Evidence], steps: list[list[str]], priors: Priors
) -> np.ndarray:
    """[luck]: what the other solutions of solution i's problem say about its luck, every prefix
    counted once: a sibling's prefixes that solution i, or a sibling before it, also has are left
    out (they hold the same rollouts)."""
    total = np.zeros(len(Q_GRID))
    seen = [i]
    for j in group:
        if j == i:
            continue
        if any(steps[j] == steps[k] for k in seen):
            continue  # the same text again: its rollouts and its verdict are already counted
        shared = max(_shared_prefixes(steps[j], steps[k]) for k in seen)
        total += luck_loglik(_without(evidence[j], shared), priors)
        seen.append(j)
    return total


def relabel(
    anns: Sequence[Annotation],
    settings: ChangepointSettings,
    problems: Sequence[tuple[str, list[str]]] | None = None,
) -> Priors:
    """Label every annotation again under the priors pooled from all of them (the shard's). Solutions
    of one problem (`problems`: each annotation's problem id and steps) share its luck: each is
    labeled under the shard's prior times what its siblings' evidence says about it."""
    keys = list(problems) if problems is not None else [(str(i), []) for i in range(len(anns))]
    kept = [(a, key) for a, key in zip(anns, keys, strict=True) if isinstance(a.evidence, Evidence)]
    evidence = [a.evidence for a, _ in kept]
    steps = [key[1] for _, key in kept]
    priors = pool_priors(evidence, settings, settings.recent_choices)
    by_problem: dict[str, list[int]] = {}
    for i, (_, (problem, _)) in enumerate(kept):
        by_problem.setdefault(problem, []).append(i)
    owns = []
    for i, (_, (problem, _)) in enumerate(kept):
        group = by_problem[problem]
        owns.append(
            priors if len(group) == 1 else replace(priors, siblings=_siblings_loglik(i, group, evidence, steps, priors))
        )
    # Solutions whose searches measured the same counts under the same priors (a third of a shard of
    # short ones: correct answers the first probes decided) share one posterior, and its model check
    built: dict[tuple[object, ...], Posterior] = {}
    posts = []
    for ev, own in zip(evidence, owns, strict=True):
        same = (own.token, ev.n, ev.verdict, ev.checked, ev.correct.tobytes(), ev.graded.tobytes())
        if same not in built:
            built[same] = post = Posterior(ev, own)
        posts.append(built[same])
    checked = [p for p in posts if p.evidence.checked]
    rate = process_error_rate(checked, settings)
    positions = hidden_error_positions(checked, settings)
    unmodelled = unmodelled_error_rate(len(checked), len(positions), settings.tested_share_prior)
    for (ann, _), ev, post in zip(kept, evidence, posts, strict=True):
        label(ann, post, settings, ev.stop, ev.verdict, rate, positions, unmodelled)
    return priors
