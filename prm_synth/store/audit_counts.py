"""What a run's audit found (counts and additive sums only; prm_synth/shard/audit.py makes them per shard),
and the precision it certifies (`audit_report`): the run's `estimated_precision` and `target_met`.

A shard marker holds its audit as a dict (`ShardStats.audit`, summed key by key over shards). Per stratum
`<part>/<group>:<kind>` (part `first`: the first shard, drawn at its own rate; `rest`: every shard
after it, drawn at `audit.share`; group right / flagged / wrong, the draw's: shard/audit_draw.py; kind
good / bad labels) a shard adds raw
sums only: the kept labels of the kind (`labels`) and kept rows holding some (`rows`), the posterior's
expected wrong labels among them (`predicted`), the audited rows (`audited`) and their labels
(`audited_labels`, `audited_labels_sq`), the wrong labels the audit found in them (`wrong`, `wrong_sq`,
`wrong_labels`) and their audit-minus-posterior residuals (`resid`, `resid_sq`). The wrong labels among
ALL the kept labels of a stratum are estimated two ways (`estimate`):

- `direct` (a ratio estimator, the row the unit: a row's labels stand or fall together): the audited rows'
  wrong share times the kept labels; what an audit by the run's own judge rests on, since that judge shares
  the errors the selection already made;
- `difference` (prediction-powered: the posterior's expected wrong labels over all kept rows, corrected by
  the audited rows' audit-minus-posterior residuals): what an independent audit judge (or gold) rests on.

Strata's estimates and variances add (`pooled`); the difference estimator's variance is never below the
posterior's own spread (`predicted_var`). The interval is Clopper-Pearson on the effective binomial
(share, share(1-share)/variance; where the variance is 0, the audited rows' effective number for
`direct`, the kept labels for `difference`, each divided by the unaudited share), or, for `difference`
where the audit found no wrong label, the estimate's normal interval (prediction-powered), then moved by the
audit judge's own error as the canaries measure it (`interval`). Its high end falls below 1 as soon as
the audit finds a wrong label, and its low end below the target as soon as the audit cannot rule it out.
"""

from __future__ import annotations

import math
from typing import Any

from prm_synth.records.canaries import wilson
from prm_synth.store.intervals import NORMAL_Z, certifiable, clopper_pearson

CLASSES = ("right", "wrong")
# the audit's draw groups (prm_synth/shard/audit_draw.py), each a stratum: right answers, right answers
# whose labels hold a bad one (`flagged`), wrong answers; and the groups of each answer class
GROUPS = ("right", "flagged", "wrong")
ANSWER_GROUPS = {"right": ("right", "flagged"), "wrong": ("wrong",)}
KINDS = ("good", "bad")
STRATUM_KEYS = (
    "labels",
    "rows",
    "audited",
    "audited_labels",
    "audited_labels_sq",
    "wrong",
    "wrong_sq",
    "wrong_labels",
    "resid",
    "resid_sq",
    "predicted",
    "predicted_var",
)
# The strata of the draw: the first shard audits at least `audit.rows`, every shard after it `audit.share`
# of its kept rows (one sampling rate: those shards are one stratum however many there are).
PARTS = ("first", "rest")
CAUTIOUS_Z = 1.0  # the audit judge's rates, one standard error towards the pessimistic end (estimate.py's)


def stratum(data: dict[str, Any], key: str) -> dict[str, float]:
    return {k: 0.0 for k in STRATUM_KEYS} | (data.get("strata", {}).get(key) or {})


def estimate(s: dict[str, float], estimator: str) -> tuple[float, float]:
    """One stratum's estimate of the wrong labels among its kept labels, and its variance (the row the
    unit, finite population: a stratum audited whole has no sampling error). `direct`: the audited rows'
    wrong share times the kept labels; `difference`: the posterior's expected wrong labels plus the
    audited rows' mean audit-minus-posterior residual times the kept rows. With one audited row the rows'
    variance is a quarter of its labels squared (they could be all right or all wrong)."""
    n, big_n = s["audited"], max(s["rows"], s["audited"], 1.0)
    keep, mean_l = 1.0 - n / big_n, s["audited_labels"] / n
    if estimator == "direct":
        share = s["wrong"] / s["audited_labels"] if s["audited_labels"] else 0.0
        spread = s["wrong_sq"] - 2 * share * s["wrong_labels"] + share**2 * s["audited_labels_sq"]
        s2 = max(0.0, spread) / (n - 1) if n >= 2 else (mean_l / 2) ** 2
        return share * s["labels"], s["labels"] ** 2 * keep * s2 / (n * mean_l**2)
    s2 = max(0.0, s["resid_sq"] - s["resid"] ** 2 / n) / (n - 1) if n >= 2 else (mean_l / 2) ** 2
    # no surer than the posterior itself: an audit that found nothing has residuals of the posterior's
    # expected errors alone, whose spread understates what a row's labels may hide
    s2 = max(s2, s["predicted_var"] / big_n)
    return s["predicted"] + big_n / n * s["resid"], big_n**2 * keep * s2 / n


def pooled(data: dict[str, Any], kind: str, groups: tuple[str, ...], estimator: str) -> dict[str, float]:
    """The strata of `groups` (each in its parts) for labels of `kind`, together: their raw sums, and the
    summed estimates and variances (`estimate`, `variance`). A group whose part holds kept labels but no
    audited row is read as one stratum (its parts' rates differ a little; nothing else covers it)."""
    out = {k: 0.0 for k in STRATUM_KEYS} | {"estimate": 0.0, "variance": 0.0, "found": 0.0}
    for c in groups:
        parts = [stratum(data, f"{p}/{c}:{kind}") for p in PARTS]
        whole = {k: sum(part[k] for part in parts) for k in STRATUM_KEYS}
        for k in STRATUM_KEYS:
            out[k] += whole[k]
        if not whole["audited"]:
            continue
        blind = any(part["labels"] > 0 and not part["audited"] for part in parts)
        for part in [whole] if blind else [p for p in parts if p["audited"]]:
            wrong, var = estimate(part, estimator)
            out["estimate"] += wrong
            out["variance"] += var
            out["found"] += estimate(part, "direct")[0]  # from what the audit found alone
    return out


def audit_rates(data: dict[str, Any]) -> dict[str, Any]:
    """The audit judge's verdict recall (it names the planted step) and false alarms (it names a step before
    it: a clean prefix flagged), measured on canaries (`canary_named`, `canary_early` of `canary_audited`),
    at their point and one standard error either side; an unmeasured judge (or gold alone) is taken as it
    says (r 1, a 0), and the report says it is uncorrected."""
    n = float(data.get("canary_audited", 0))
    if n <= 0:
        return {
            "recall": 1.0,
            "false_alarm": 0.0,
            "recall_ends": (1.0, 1.0),
            "false_alarm_ends": (0.0, 0.0),
            "measured_on": 0,
        }
    named, early = float(data.get("canary_named", 0)), float(data.get("canary_early", 0))
    return {
        "recall": named / n,
        "false_alarm": early / n,
        "recall_ends": wilson(named, n, CAUTIOUS_Z),
        "false_alarm_ends": wilson(early, n, CAUTIOUS_Z),
        "measured_on": round(n, 1),
    }


def corrected(seen: float, recall: float, false_alarm: float, kind: str) -> float:
    """The true wrong share behind the share the audit judge saw wrong (Rogan-Gladen), clipped to 0..1. A
    good label is seen wrong when the judge names an error at or before it: a real one (recall r) or a
    false alarm (a); a bad label is seen wrong when the judge names none there: it missed a real error
    (1 - r) or rightly saw none (1 - a). Either way: wrong = (seen - base) / (r - a)."""
    base = false_alarm if kind == "good" else 1.0 - recall
    if recall - false_alarm <= 1e-9:
        return 1.0 if seen > base else 0.0
    return min(1.0, max(0.0, (seen - base) / (recall - false_alarm)))


def interval(s: dict[str, float], estimator: str, rates: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """Precision of the kept labels of one stratum (or pool): point, low, high, on what.

    The seen wrong share's interval is Clopper-Pearson on an effective binomial (its estimate and variance;
    where the variance is 0, the audited rows' effective number, `direct`, or the kept labels,
    `difference`, either divided by the unaudited share: a stratum audited whole has no sampling error).
    The audit judge's error then moves the ends, each the way that widens the interval: on good labels the
    low end reads the judge's findings through its recall at one standard error low (it may have missed
    more), the high end takes them as they are; on bad labels the low end counts every one it saw wrong as
    wrong, the high end credits its misses at that recall. The point is Rogan-Gladen at the measured
    recall, held inside the two. (Recall on canaries may read low where their rows hide natural errors:
    a verdict naming the hidden one is not the planted step; the ends stay on the safe side of that.)"""
    labels = s["labels"]
    if labels <= 0:
        return None
    if s["audited"] <= 0:  # labels kept, none audited: nothing certifies them
        return {"point": None, "low": 0.0, "high": 1.0, "labels": int(labels), "rows_audited": 0}
    share = min(1.0, max(0.0, s["estimate"] / labels))
    var = s["variance"] / labels**2
    rows_effective = s["audited_labels"] ** 2 / s["audited_labels_sq"] if s["audited_labels_sq"] else s["audited"]
    unaudited = max(1e-6, 1.0 - s["audited"] / s["rows"]) if s["rows"] else 1.0
    most = (rows_effective if estimator == "direct" else labels) / unaudited
    n_eff = share * (1 - share) / var if var > 0 and 0 < share < 1 else most
    n_eff = max(1.0, min(n_eff, most))
    if estimator == "difference" and s["found"] <= 0:
        # prediction-powered, the audit finding no wrong label: the estimate's normal interval (its variance
        # no smaller than the posterior's own spread, `estimate`); an effective binomial of a share near 0
        # would rest on the unaudited share alone
        seen_high = min(1.0, share + NORMAL_Z * math.sqrt(var))
    else:  # found errors skew the estimate: the exact binomial of its effective size
        seen_high = clopper_pearson(share * n_eff, n_eff)[1]
    # the low end of the wrong share from what the audit found alone: the posterior's expected wrong labels
    # on rows nobody audited are no evidence that any is wrong (and under one found draw, none may be)
    found = min(1.0, s["found"] / labels) * n_eff
    seen_low = clopper_pearson(found, n_eff)[0] if found >= 1.0 else 0.0
    # False alarms are reported, never subtracted: a canary's row was chosen clean by its rollouts, and a
    # verdict before the planted step may name an error the row hid (what right answers do), so the rate
    # measured there would explain real findings away. Counting every finding is the cautious side.
    r_lo, recall, false_alarm = rates["recall_ends"][0], rates["recall"], 0.0
    # what the audit judge's own measured error could hide in the rows it saw (all of them missed at once,
    # at 2.5%): the floor of the high end where sampling leaves little (an audit of every kept row)
    hides = 1.0 - recall if kind == "good" else rates["false_alarm"]
    hidden_rows = math.log(0.025) / math.log(hides) if 0.0 < hides < 1.0 else (s["audited"] if hides >= 1.0 else 0.0)
    floor = min(1.0, hidden_rows * s["audited_labels"] / max(s["audited"], 1.0) / labels)
    seen_high = max(seen_high, floor)
    # good labels: seen / recall at its low end; bad labels: every one seen wrong counted wrong
    wrong_high = min(1.0, seen_high / max(r_lo, 1e-6)) if kind == "good" else seen_high
    # the optimistic end: good labels, the judge missed nothing; bad ones, it missed as much as it may have
    wrong_low = min(wrong_high, seen_low if kind == "good" else corrected(seen_low, r_lo, false_alarm, kind))
    point = min(wrong_high, max(wrong_low, corrected(share, recall, false_alarm, kind)))
    return {
        "point": round(1.0 - point, 4),
        "low": round(1.0 - wrong_high, 4),
        "high": round(1.0 - wrong_low, 4),
        "labels": int(labels),
        "rows_audited": int(s["audited"]),
        "wrong_found": int(s["wrong"]),
    }


def audit_report(data: dict[str, Any] | None, target: float) -> dict[str, Any] | None:
    """The run's precision of kept good and bad labels from its audit (`ShardStats.audit` summed): overall
    and per answer class, `target_met` (both low ends at `target`), what it rests on in words, and the most
    an audit of its size by its own judge could certify. None where nothing was audited."""
    if not data or not data.get("rows_kept"):
        return None
    estimator = "difference" if data.get("independent") else "direct"
    rates = audit_rates(data)
    out: dict[str, Any] = {k: interval(pooled(data, k, GROUPS, estimator), estimator, rates, k) for k in KINDS}
    out["by_answer"] = {
        c: {k: interval(pooled(data, k, ANSWER_GROUPS[c], estimator), estimator, rates, k) for k in KINDS}
        for c in CLASSES
    }
    ends = [out[k]["low"] for k in KINDS if out[k] is not None]
    out["target"] = target
    out["target_met"] = bool(ends) and all(low >= target for low in ends)
    audited = int(data.get("audited_rows", 0))
    out["rows_audited"] = audited
    out["estimator"] = estimator
    out["audit_judge"] = data.get("auditor") or "the run's judge"
    out["audit_requests"] = int(data.get("requests", 0))
    out["audit_judge_rates"] = rates
    out["certifiable_by_own_judge"] = round(certifiable(audited), 4) if audited else 0.0
    out["rests_on"] = rests_on(out, data)
    out["below_target_shards"] = int(data.get("below_target_shards", 0))
    return out


def rests_on(report: dict[str, Any], data: dict[str, Any]) -> str:
    """What the audit interval rests on, in one sentence."""
    rates = report["audit_judge_rates"]
    gold = int(data.get("gold_rows", 0))
    by = f"{report['audit_judge']}" + (f" and given human labels on {gold} rows" if gold else "")
    corrected_by = (
        f"corrected for its error on {rates['measured_on']:g} canaries (recall {rates['recall']:.2f}, "
        f"false alarms {rates['false_alarm']:.2f})"
        if rates["measured_on"]
        else "not corrected for its own error (no canary measured it)"
    )
    how = (
        "the run's posterior corrected by the audited rows (a difference estimator)"
        if report["estimator"] == "difference"
        else f"the audited rows alone, the row the unit (at most {report['certifiable_by_own_judge']:.3f} "
        f"certifiable by an audit of {report['rows_audited']} rows all agreeing)"
    )
    return f"{report['rows_audited']} kept rows audited by {by}, {corrected_by}; {how}"


def miss_line(report: dict[str, Any] | None) -> str | None:
    """The ONE warning line of a run that does not certify its target (None where it does, or without an
    audit)."""
    if report is None or report["target_met"]:
        return None
    lows = ", ".join(f"{k} {report[k]['low']:.3f}" for k in KINDS if report[k] is not None) or "no labels"
    return (
        f"target_met false: the audit's low end ({lows}) does not reach consensus.target_precision "
        f"{report['target']} ({report['rows_audited']} rows audited by {report['audit_judge']}; "
        f"an audit of that size by the run's own judge certifies at most {report['certifiable_by_own_judge']:.3f})"
    )


def measured_below(report: dict[str, Any] | None) -> dict[str, float]:
    """Per kind, the audit's high end where even it is below the target: the shard is surely below (what
    "label until certified" feeds the keep rule of the shards after it); {} where none is. The high end,
    not the point: an audit of 30 rows is noisy, and a keep rule tightened on noise keeps too little."""
    if report is None:
        return {}
    return {k: report[k]["high"] for k in KINDS if report[k] is not None and report[k]["high"] < report["target"]}


def stricter_target(target: float, posterior_point: float, audit_point: float) -> float:
    """The keep rule's target for the shards after an audit found precision `audit_point` where the
    posterior expected `posterior_point`: the posterior's allowed error shrunk by the factor by which it
    under-stated the error, so that the audited error lands at the target (capped below 1)."""
    said, found = max(1e-4, 1.0 - posterior_point), max(1e-4, 1.0 - audit_point)
    if found <= said:
        return target
    return min(0.999, 1.0 - (1.0 - target) * said / found)
