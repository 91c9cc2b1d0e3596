"""Soft consensus's target: a row's decision, and the rule that keeps rows (or only their surest labels)
while the shard's kept labels stay at `consensus.target_precision` (`hold_to_target`, `pool_holds`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from prm_synth.config import ConsensusConfig
from prm_synth.judge.accuracy import ClassAccuracy
from prm_synth.judge.estimate import expectations, followed_labels, sure_labels
from prm_synth.judge.posterior import posterior
from prm_synth.records import LabeledRecord, RejectReason

# hold_to_target keeps a row while the kept labels' expected wrong count, plus POOL_Z standard deviations
# of it (pool_holds), stays within the target: a row's labels stand or fall together (one missed error makes every good
# label after it wrong), so a few long uncertain rows make a pool's precision lumpy, and at its bare
# expectation a pool held at 0.97 lands below it about as often as above. Chosen on seeds 0-3 of
# benchmarks/label_precision.py (repair world, realistic judge: 0 kept 50.8 rows at good precision .956,
# 1 kept 49.5 at .978; 2 keeps nothing but a shard's surest rows: one row alone cannot reach the target
# at two of its own deviations unless it is all but certain).
POOL_Z = 1.0


@dataclass(frozen=True)
class Decision:
    keep: bool
    reason: RejectReason | None = None
    detail: str | None = None
    first_error: int | None = None  # the labels follow this first error (-1: none); None: as measured
    prefix_confidence: list[float] | None = None  # soft: per step, P(prefix correct) (`consensus_p_good`)
    # soft under target_precision: a row kept with only the labels that reach it (hold_to_target), the
    # others unlabeled (`below_target`); None: the labels follow `first_error`
    labels: tuple[bool | None, ...] | None = None


def hold_to_target(
    records: Sequence[LabeledRecord],
    decisions: Sequence[Decision],
    rates: Sequence[ClassAccuracy],
    config: ConsensusConfig,
    min_confidence: float = 0.0,
) -> list[Decision]:
    """`consensus.target_precision`: the rows soft would keep, taken from the surest down (by the expected
    precision of their labels), each kept only while the kept good labels and the kept bad labels each
    stay at the target expected precision, read one standard error towards the pessimistic end of the
    judge's rates (`ClassAccuracy.cautious`). The target holds for the shard's kept labels together (and
    so for the run's), not row by row: a row whose labels are 0.95 sure may be kept beside surer ones,
    never below `confidence`.

    A row that misses (soft's whole-row decision is not sure enough, or its whole labels would take the
    pool below the target) keeps the labels that reach the target on their own (`sure_labels`: a good
    prefix, a bad step and the labeled ones after it, each at the target or more under the cautious
    rates), the others left unlabeled (`below_target`), where it has any such label and the pool still
    holds; else it is rejected with its reason."""
    out = list(decisions)
    level = max(config.target_precision, min_confidence)
    candidates = []
    for i, (record, decision) in enumerate(zip(records, decisions, strict=True)):
        if decision.keep and decision.first_error is not None:
            post = posterior(record, rates[i].cautious or rates[i].accuracy)
            labels = followed_labels(record, decision.first_error)
            candidates.append((-_precision(expectations(post, labels)), record.id, i, labels, post))
    kinds = ("labels", "expected", "var", "log_all_right")
    sums = {f"{kind}_{k}": 0.0 for kind in ("good", "bad") for k in kinds}

    def fits(expected: dict[str, float]) -> dict[str, float] | None:
        after = {k: sums[k] + expected[k] for k in sums}
        return after if all(pool_holds(after, kind, config.target_precision) for kind in ("good", "bad")) else None

    missed = [i for i, d in enumerate(decisions) if not d.keep and d.reason == "low_confidence"]
    for surest, _, i, labels, _post in sorted(candidates):
        if (after := fits(expectations(_post, labels))) is not None:
            sums = after
            continue
        missed.append(i)
        detail = (
            f"its labels' expected precision {-surest:.3f} would take the shard's kept labels below "
            f"consensus.target_precision {config.target_precision}"
        )
        out[i] = Decision(False, "low_confidence", detail, prefix_confidence=decisions[i].prefix_confidence)
    partial = []
    for i in missed:
        post = posterior(records[i], rates[i].cautious or rates[i].accuracy)
        labels = sure_labels(post, records[i].labels, level)
        if any(label is not None for label in labels):
            partial.append((-_precision(expectations(post, labels)), records[i].id, i, labels, post))
    for _, _, i, labels, post in sorted(partial):
        if (after := fits(expectations(post, labels))) is not None:
            sums = after
            out[i] = Decision(True, prefix_confidence=out[i].prefix_confidence, labels=tuple(labels))
    return out


def pool_holds(sums: dict[str, float], kind: str, target: float) -> bool:
    """The pooled labels of `kind` ("good" or "bad") are at `target`: their expected wrong count is at most
    the share 1 - target of them, and so is that count plus POOL_Z standard deviations of it, unless the
    pool is likely to hold no wrong label at all (P(none) >= target: a normal bound says nothing about a
    count that is almost surely 0, and one label sure at 0.999 must not be held to a share of itself)."""
    labels = sums[f"{kind}_labels"]
    wrong = max(0.0, labels - sums[f"{kind}_expected"])
    allowed = (1.0 - target) * labels + 1e-12
    spread = wrong + POOL_Z * sums[f"{kind}_var"] ** 0.5 <= allowed
    return wrong <= allowed and (spread or math.exp(sums[f"{kind}_log_all_right"]) >= target)


def _precision(expected: dict[str, float]) -> float:
    """The expected share of right labels among a row's labels (1 for a row without labels)."""
    labels = expected["good_labels"] + expected["bad_labels"]
    return (expected["good_expected"] + expected["bad_expected"]) / labels if labels else 1.0
