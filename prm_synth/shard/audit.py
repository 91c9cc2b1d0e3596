"""The audit (the `audit` section): a seeded random sample of a shard's KEPT rows, re-examined after the
shard's keep decisions by evidence the selection never saw, and what it found as additive sums
(store/audit_counts.py turns them into `estimated_precision` and `target_met`).

Evidence, per audited row: its given human first error where the row carries one (`given_first_error`,
the gold), else the audit judge's majority verdict: `audit.judge` (default the run's judge engine), its
votes drawn at sample indices the selection never uses (`AUDIT_FIRST_SAMPLE` on), asked one at a time
until the majority cannot change. The verdict never changes a row or whether it is kept; a shard whose
audit finds its labels below the target makes the keep rule of the shards after it stricter
(`carried_target`, "label until certified").

The audit judge's own error: an audit judge other than the run's judges up to `audit.canary_rows` of the
first shard's canaries and `audit.share` of a later shard's (planted errors whose step is known): recall
is its verdict naming the planted step, a false alarm its verdict naming a step before it (a clean prefix
flagged). The run's own judge's are
the canaries' measured per-vote rates (records/canaries.CanaryStats), read through that interface.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prm_synth.config import PipelineConfig
from prm_synth.engines.base import Engine
from prm_synth.judge.ask import UNPARSEABLE, judge_solutions
from prm_synth.records import LabeledRecord, ShardStats
from prm_synth.records.canaries import CanaryStats
from prm_synth.shard.audit_draw import audit_group, draw_rows
from prm_synth.shard.canaries import CanaryRun
from prm_synth.store.audit_counts import CLASSES, GROUPS, KINDS, audit_report, measured_below, stricter_target

# Sample indices the selection never draws (it uses 0 .. samples x runs): the audit's votes are fresh.
AUDIT_FIRST_SAMPLE = 1_000_000


@dataclass(frozen=True)
class AuditRun:
    """What a shard's audit needs from the run beyond the config: the named `audit.judge` engine (None: the
    run's judge), and the keep rule's stricter target where earlier shards' audit found them below target."""

    engine: Engine | None = None
    target: float | None = None


def certifying(config: PipelineConfig, run: AuditRun | None) -> PipelineConfig:
    """`config` with the keep rule's target `run.target` ("label until certified"), else as it is."""
    if run is None or run.target is None or config.consensus is None:
        return config
    return config.model_copy(update={"consensus": config.consensus.model_copy(update={"target_precision": run.target})})


def same_model(a: Any, b: Any) -> bool:
    """Whether two judge engine configs name the same model: their row fields but the seed (a server that
    moved, or another seed, is the same judge, whose errors the selection already shares)."""
    return {k: v for k, v in a.fingerprint_part().items() if k != "seed"} == {
        k: v for k, v in b.fingerprint_part().items() if k != "seed"
    }


def given_first_error(record: LabeledRecord) -> int | None:
    """A row's gold first error from given human labels (-1: none), or None where it carries none. The
    `given_first_error` column, where the row schema has it (given solutions with human labels); a
    `given_labels` list of step verdicts gives its first False."""
    first = getattr(record, "given_first_error", None)
    if isinstance(first, int) and not isinstance(first, bool):
        return first
    labels = getattr(record, "given_labels", None)  # None entries: steps the human left unlabeled
    readable = isinstance(labels, list) and all(x is None or isinstance(x, bool) for x in labels)
    if readable and any(isinstance(x, bool) for x in labels):
        return next((i for i, x in enumerate(labels) if x is False), -1)
    return None


def audit_size(kept: int, shard: int, rows: int, share: float) -> int:
    """How many of a shard's kept rows are audited: `share` of them, at least `rows` in the first shard."""
    return min(kept, max(math.ceil(share * kept), rows if shard == 0 else 0))


def majority_settled(samples: int):  # noqa: ANN201 - a judge_solutions callback
    """Close a row once its leading vote cannot be overtaken by the votes left."""

    def settled(votes: list[list[int]], rows: list[int]) -> list[bool]:
        out = []
        for i in rows:
            readable = [v for v in votes[i] if v != UNPARSEABLE]
            counts = sorted((readable.count(v) for v in set(readable)), reverse=True) + [0, 0]
            left = samples - len(votes[i])
            out.append(counts[0] > counts[1] + left)
        return out

    return settled


def agrees(labels: Sequence[bool | None], first_error: int) -> bool:
    """Whether a verdict naming `first_error` leaves every kept label of the row right."""
    return all(wrong_labels(labels, first_error, kind)[1] == 0 for kind in KINDS)


def escalating_settled(samples: int, claims: Sequence[Sequence[bool | None]]):  # noqa: ANN201 - a callback
    """Close a row at its first readable vote where that vote agrees with the row's kept labels (`claims`,
    one list per row); a vote that disagrees asks for more, up to `samples`, and the majority decides. Most
    kept rows are right, so most rows cost one vote; a finding is confirmed before it counts. The verdict's
    rates follow from a vote's (`escalated`)."""
    majority = majority_settled(samples)

    def settled(votes: list[list[int]], rows: list[int]) -> list[bool]:
        by_majority = dict(zip(rows, majority(votes, rows), strict=True))
        out = []
        for i in rows:
            readable = [v for v in votes[i] if v != UNPARSEABLE]
            first_agrees = bool(readable) and len(set(readable)) == 1 and agrees(claims[i], readable[0])
            out.append(first_agrees or by_majority[i])
        return out

    return settled


def wrong_labels(labels: Sequence[bool | None], first_error: int, kind: str) -> tuple[int, int]:
    """(labels of the kind, how many of them are wrong if the true first error is `first_error`)."""
    n, wrong = 0, 0
    for i, label in enumerate(labels):
        if label is None or label != (kind == "good"):
            continue
        n += 1
        erred = first_error != -1 and i >= first_error
        wrong += erred if kind == "good" else not erred
    return n, wrong


def stratum_sums(
    kept: Sequence[LabeledRecord],
    verdicts: Mapping[str, int],
    predicted: Mapping[str, Mapping[str, float]],
    group: str,
    kind: str,
) -> dict[str, float]:
    """One shard's sums for stratum (draw group, kind): see store/audit_counts.py. `verdicts`: the audited
    rows' first errors by id; `predicted`: the posterior's expected right labels per kept row."""
    rows = [r for r in kept if audit_group(r) == group and (kind == "good") in r.labels]
    total = sum(sum(1 for x in r.labels if x is (kind == "good")) for r in rows)
    g_all = {
        r.id: max(
            0.0,
            predicted.get(r.id, {}).get(f"{kind}_labels", 0.0) - predicted.get(r.id, {}).get(f"{kind}_expected", 0.0),
        )
        for r in rows
    }
    audited = [(r, *wrong_labels(r.labels, verdicts[r.id], kind)) for r in rows if r.id in verdicts]
    n, big_n = len(audited), len(rows)
    spread = sum(predicted.get(r.id, {}).get(f"{kind}_var", 0.0) for r in rows)  # the posterior's own
    out = {
        "labels": float(total),
        "rows": float(big_n),
        "audited": float(n),
        "predicted": sum(g_all.values()),
        "predicted_var": spread,
    }
    if not n:
        return out
    ls = [float(lab) for _, lab, _ in audited]
    ws = [float(w) for _, _, w in audited]
    es = [w - g_all[r.id] for (r, _, _), w in zip(audited, ws, strict=True)]  # audit minus posterior
    return out | {
        "audited_labels": sum(ls),
        "audited_labels_sq": sum(x * x for x in ls),
        "wrong": sum(ws),
        "wrong_sq": sum(w * w for w in ws),
        "wrong_labels": sum(w * lab for w, lab in zip(ws, ls, strict=True)),
        "resid": sum(es),
        "resid_sq": sum(e * e for e in es),
    }


def audit_shard(
    config: PipelineConfig,
    kept: Sequence[LabeledRecord],
    predicted: Mapping[str, Mapping[str, float]],
    shard: int,
    judge_engine: Engine | None,
    run: AuditRun | None = None,
    canary_run: CanaryRun | None = None,
) -> dict[str, Any]:
    """Audit one shard's kept rows; the sums `ShardStats.audit` holds ({} where no audit runs)."""
    cfg = config.audit
    audit_engine = run.engine if run is not None else None
    canary_rows = canary_run.rows if canary_run is not None else []
    canaries = canary_run.stats if canary_run is not None else None
    if not cfg.enabled or config.judge is None or judge_engine is None:
        return {}
    if config.consensus is None or config.consensus.policy != "soft":  # only soft holds rows to a target
        return {}
    independent = cfg.judge.engine is not None and not same_model(cfg.judge.engine, config.judge.engine)
    engine = audit_engine if independent and audit_engine is not None else judge_engine
    sample = draw_rows(kept, audit_size(len(kept), shard, cfg.rows, cfg.share), cfg.seed, shard, predicted)
    verdicts = {r.id: g for r in sample if (g := given_first_error(r)) is not None and -1 <= g < len(r.steps)}
    gold = len(verdicts)
    ask = [r for r in sample if r.id not in verdicts]
    judge_cfg = config.judge.model_copy(
        update={
            "engine": cfg.judge.engine or config.judge.engine,
            "samples": cfg.judge.samples,
            "temperature": cfg.judge.temperature,
            "max_tokens": cfg.judge.max_tokens,
        }
    )
    first = AUDIT_FIRST_SAMPLE + cfg.seed * 10_000
    requests = tokens = undecided = 0
    if ask:
        found, stats = judge_solutions(
            engine,
            [(r.question, r.steps) for r in ask],
            judge_cfg,
            config.run.max_batch_requests,
            settled=escalating_settled(cfg.judge.samples, [r.labels for r in ask]),
            first_samples=[first] * len(ask),
        )
        requests, tokens = requests + stats.samples, stats.tokens
        for r, v in zip(ask, found, strict=True):
            if v is not None and v.first_error is not None:
                verdicts[r.id] = v.first_error
            else:
                undecided += 1
    out: dict[str, Any] = {
        "rows_kept": len(kept),
        "audited_rows": len(verdicts),
        "gold_rows": gold,
        "undecided": undecided,
        "requests": requests,
        "tokens": tokens,
        "auditor": engine.model_name if independent else None,
        "independent": int(independent or (gold > 0 and gold == len(verdicts))),
        "strata": {
            f"{'first' if shard == 0 else 'rest'}/{g}:{k}": stratum_sums(kept, verdicts, predicted, g, k)
            for g in GROUPS
            for k in KINDS
        },
    }
    out |= audit_of_canaries(engine, judge_cfg, config, canary_rows, canaries, independent, first, shard)
    for kind in KINDS:  # what the posterior said of the same kept labels (stricter_target reads it)
        out[f"posterior_{kind}_labels"] = sum(p.get(f"{kind}_labels", 0.0) for p in predicted.values())
        out[f"posterior_{kind}_expected"] = sum(p.get(f"{kind}_expected", 0.0) for p in predicted.values())
    report = audit_report(out, config.consensus.target_precision)
    out["below_target_shards"] = int(bool(measured_below(report)))
    return out


def escalated(p: float, k: int) -> float:
    """P(an audit verdict finds what one vote finds with probability p): its first vote must find it (the
    row's labels say otherwise, so the audit asks on), then more than half of `k` votes (escalating_settled).
    Votes of one row agree more than independent ones: the canaries' counts say how much."""
    need = k // 2  # of the k - 1 votes after the first
    rest = sum(math.comb(k - 1, j) * p**j * (1 - p) ** (k - 1 - j) for j in range(need, k))
    return p * rest


def audit_of_canaries(
    engine: Engine,
    judge_cfg: Any,
    config: PipelineConfig,
    canary_rows: Sequence[Mapping[str, Any]],
    canaries: CanaryStats | None,
    independent: bool,
    first: int,
    shard: int = 0,
) -> dict[str, Any]:
    """The audit judge's verdict recall and false alarms on planted errors (`canary_audited`,
    `canary_named`, `canary_early`, and what asking cost: `canary_requests`): the run's own judge's from
    the canaries' measured votes, read as an audit verdict's through `escalated`; another judge's verdicts
    on up to `audit.canary_rows` canaries in the first shard and `audit.share` of a later shard's (what
    they measure is summed over the run), asked as the audit asks."""
    k = judge_cfg.samples
    if not independent:
        if canaries is None:
            return {}
        rows = sum(canaries.of(a)["canaries"] for a in CLASSES)
        votes = sum(canaries.of(a)["votes"] for a in CLASSES)
        if not votes:
            return {}
        named = sum(canaries.of(a)["named"] for a in CLASSES) / votes
        early = sum(canaries.of(a)["before"] for a in CLASSES) / votes
        return {
            "canary_audited": rows,
            "canary_named": rows * escalated(named, k),
            "canary_early": rows * escalated(early, k),
        }
    planted = [r for r in canary_rows if isinstance(r.get("planted_step"), int)]
    rows = planted[: audit_size(len(planted), shard, config.audit.canary_rows, config.audit.share)]
    if not rows:
        return {}
    # asked as a kept row whose labels missed the planted error would be (claimed clean): the verdict's
    # recall is the one the audit reads a missed error with
    found, stats = judge_solutions(
        engine,
        [(str(r["question"]), list(r["steps"])) for r in rows],
        judge_cfg,
        config.run.max_batch_requests,
        settled=escalating_settled(k, [[True] * len(list(r["steps"])) for r in rows]),
        first_samples=[first] * len(rows),
    )
    named = early = audited = 0
    for r, v in zip(rows, found, strict=True):
        if v is None or v.first_error is None:
            continue
        audited += 1
        named += v.first_error == r["planted_step"]
        early += 0 <= v.first_error < r["planted_step"]
    return {"canary_audited": audited, "canary_named": named, "canary_early": early, "canary_requests": stats.samples}


def carried_target(config: PipelineConfig, earlier: Sequence[ShardStats]) -> float | None:
    """ "Label until certified": where the audit of the shards before this one (their stats, summed) found
    kept labels below `consensus.target_precision`, the keep rule's stricter target for this shard (the
    posterior's allowed error shrunk by how much it under-stated the audited error); None where none did."""
    if config.consensus is None or not earlier:
        return None
    audit = sum(earlier, start=ShardStats()).audit
    target = config.consensus.target_precision
    below = measured_below(audit_report(audit, target))
    if not below:
        return None
    stricter = [
        stricter_target(target, audit[f"posterior_{k}_expected"] / audit[f"posterior_{k}_labels"], point)
        for k, point in below.items()
        if audit.get(f"posterior_{k}_labels")
    ]
    return max([target, *stricter])
