"""Which kept rows the audit reads (prm_synth/shard/audit.py): a seeded random sample in groups, each group
an estimation stratum of store/audit_counts.py (rows of one group are drawn at one rate, so the group's
audited rows stand for it).

Groups: `wrong` (the final answer is wrong or ungraded), `flagged` (a right answer whose labels still hold a
bad one: the rollouts and the judge disagree about it, the rows a posterior is least sure of), `right`
(every other right answer). Each group first gets its floor (`MIN_ROWS`, a row at a time to each in turn,
so a small audit still reads every group). Flagged rows are few and each may hold a wrong label, so they
are read next, all of them up to half the audit. The rest is shared between `right` and `wrong` in
proportion to each group's rows times the mean of two spreads: the posterior's own (its variance of a
row's wrong labels, Neyman's allocation: rows the posterior is unsure of teach the audit most) and the
spread over all kept rows (proportional allocation: a posterior sure of a group and wrong about it is what
an audit must still catch).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

from prm_synth.judge.accuracy import answer_class
from prm_synth.records import LabeledRecord
from prm_synth.store.audit_counts import GROUPS

# the fewest audited rows a group with that many gets: a stratum read on one or two rows leans on the
# one-row variance rule (store/audit_counts.estimate) rather than on what it found
MIN_ROWS = 5


def audit_group(record: LabeledRecord) -> str:
    """The row's group: `wrong`, `flagged` or `right` (see the module doc)."""
    if answer_class(record) == "wrong":
        return "wrong"
    return "flagged" if False in record.labels else "right"


def row_spread(predicted: Mapping[str, float] | None) -> float:
    """The posterior's variance of a row's wrong labels, good and bad together (0 where it said none)."""
    predicted = predicted or {}
    return max(0.0, predicted.get("good_var", 0.0)) + max(0.0, predicted.get("bad_var", 0.0))


def allocation(sizes: Mapping[str, int], spreads: Mapping[str, float], n: int) -> dict[str, int]:
    """Audited rows per group (`sizes`: rows, `spreads`: summed `row_spread`), n in all (the module doc).
    The floors first, a row at a time to each group in turn (so a small audit, a later shard's share,
    still reads every group), then the flagged rows up to half the audit, then the rest by weight."""
    take = dict.fromkeys(sizes, 0)
    left = min(n, sum(sizes.values()))
    for level in range(1, MIN_ROWS + 1):
        for g in ("wrong", "right", "flagged"):
            if left > 0 and take.get(g, 0) < min(sizes.get(g, 0), level):
                take[g] += 1
                left -= 1
    if sizes.get("flagged"):
        more = min(sizes["flagged"] - take["flagged"], max(0, math.ceil(n / 2) - take["flagged"]), left)
        take["flagged"] += more
        left -= more
    rest = [g for g in sizes if g != "flagged" and sizes[g]]
    total_rows = sum(sizes[g] for g in rest)
    overall = math.sqrt(sum(spreads.get(g, 0.0) for g in rest) / total_rows) if total_rows else 0.0
    weight = {g: sizes[g] * (math.sqrt(spreads.get(g, 0.0) / sizes[g]) + overall) / 2 for g in rest}
    if sum(weight.values()) <= 0:
        weight = {g: float(sizes[g]) for g in rest}
    while left > 0:  # one row at a time to the group furthest below its weighted share
        open_groups = [g for g in rest if take[g] < sizes[g]]
        if not open_groups:
            break
        g = max(open_groups, key=lambda g: weight[g] / (take[g] + 1))
        take[g] += 1
        left -= 1
    if left > 0 and sizes.get("flagged"):  # the other groups read whole: the rest of the flagged rows
        take["flagged"] = min(sizes["flagged"], take["flagged"] + left)
    return take


def draw_rows(
    records: Sequence[LabeledRecord],
    n: int,
    seed: int,
    shard: int,
    predicted: Mapping[str, Mapping[str, float]] | None = None,
) -> list[LabeledRecord]:
    """A seeded random sample of n rows in groups (a row's draw depends on the seed, the shard and its id,
    so a resumed shard audits the same rows), each group's size by `allocation`."""

    def key(r: LabeledRecord) -> bytes:
        return hashlib.blake2b(f"audit:{seed}:{shard}:{r.id}".encode(), digest_size=8).digest()

    predicted = predicted or {}
    by_group = {g: sorted((r for r in records if audit_group(r) == g), key=key) for g in GROUPS}
    sizes = {g: len(rows) for g, rows in by_group.items()}
    spreads = {g: sum(row_spread(predicted.get(r.id)) for r in rows) for g, rows in by_group.items()}
    take = allocation(sizes, spreads, n)
    return [r for g in GROUPS for r in by_group[g][: take[g]]]
