"""What a run's audit found (counts and additive sums only; prm_synth/judge/audit.py makes them per shard),
and the precision it certifies (`audit_report`): the run's `estimated_precision` and `target_met`.

A shard marker holds its audit as a dict (`ShardStats.audit`, summed key by key over shards). Per stratum
`<answer class>:<kind>` (answer class right / wrong, kind good / bad labels) a shard adds: the kept labels
of the kind (`labels`) and kept rows holding some (`rows`), the audited rows (`audited`) and their labels
(`audited_labels`, `audited_labels_sq`: for the rows' effective number), the wrong labels the audit found
in them (`wrong`, and the sums the rows' variance is pooled from), and the shard's estimate of the wrong
labels among ALL its kept labels, two ways, each with what multiplies the rows' variance in it (`_coef`):

- `direct` (a ratio estimator, the row the unit: a row's labels stand or fall together): the audited rows'
  wrong share times the kept labels; what an audit by the run's own judge rests on, since that judge shares
  the errors the selection already made;
- `difference` (prediction-powered: the posterior's expected wrong labels over all kept rows, corrected by
  the audited rows' audit-minus-posterior residuals): what an independent audit judge (or gold) rests on.

Shards are strata: their estimates and their coefficients add, and the rows' variance is pooled over them
(a shard's class may hold one audited row). The interval is Clopper-Pearson on the effective binomial
(share, share(1-share)/variance; where the variance is 0, the audited rows' effective number for
`direct`, the kept labels for `difference`, each divided by the unaudited share), then moved by the
audit judge's own error as the canaries measure it (`interval`). Its high end falls below 1 as soon as
the audit finds a wrong label, and its low end below the target as soon as the audit cannot rule it out.
"""

from __future__ import annotations

import math
from typing import Any

from prm_synth.store.canary_counts import wilson
from prm_synth.store.intervals import certifiable, clopper_pearson

CLASSES = ("right", "wrong")
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
    "direct",
    "direct_coef",
    "difference",
    "difference_coef",
)
CAUTIOUS_Z = 1.0  # the audit judge's rates, one standard error towards the pessimistic end (estimate.py's)


def stratum(data: dict[str, Any], key: str) -> dict[str, float]:
    return {k: 0.0 for k in STRATUM_KEYS} | (data.get("strata", {}).get(key) or {})


def _pooled(data: dict[str, Any], kind: str, classes: tuple[str, ...]) -> dict[str, float]:
    out = {k: 0.0 for k in STRATUM_KEYS}
    for c in classes:
        for k, v in stratum(data, f"{c}:{kind}").items():
            out[k] += v
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


def row_variance(s: dict[str, float], estimator: str, share: float) -> float:
    """The variance between audited rows, pooled over shards: of a row's wrong labels less the share of its
    labels (`direct`), or of its audit-minus-posterior residual (`difference`); with one audited row, a
    quarter of its labels squared (it could be all right or all wrong)."""
    n = s["audited"]
    if n < 2:
        return (s["audited_labels"] / max(n, 1.0) / 2) ** 2
    if estimator == "direct":
        spread = s["wrong_sq"] - 2 * share * s["wrong_labels"] + share**2 * s["audited_labels_sq"]
    else:
        spread = s["resid_sq"] - s["resid"] ** 2 / n
    return max(0.0, spread) / (n - 1)


def interval(s: dict[str, float], estimator: str, rates: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """Precision of the kept labels of one stratum (or pool): point, low, high, on what.

    The seen wrong share's interval is Clopper-Pearson on an effective binomial (its estimate and variance;
    where the variance is 0, the audited rows' effective number, `direct`, or the kept labels,
    `difference`, either divided by the unaudited share: a stratum audited whole has no sampling error).
    The audit judge's error then moves the ends, never past what the audit saw: the low end credits the
    judge with no false alarm and no miss it did not make on canaries (good labels: seen / recall at its
    low end; bad labels: seen as wrong), the high end with its measured rates at their optimistic end, and
    the point is Rogan-Gladen at the measured rates, held inside the two."""
    labels = s["labels"]
    if labels <= 0:
        return None
    if s["audited"] <= 0:  # labels kept, none audited: nothing certifies them
        return {"point": None, "low": 0.0, "high": 1.0, "labels": int(labels), "rows_audited": 0}
    share = min(1.0, max(0.0, s[estimator] / labels))
    var = s[f"{estimator}_coef"] * row_variance(s, estimator, share) / labels**2
    rows_effective = s["audited_labels"] ** 2 / s["audited_labels_sq"] if s["audited_labels_sq"] else s["audited"]
    unaudited = max(1e-6, 1.0 - s["audited"] / s["rows"]) if s["rows"] else 1.0
    most = (rows_effective if estimator == "direct" else labels) / unaudited
    n_eff = share * (1 - share) / var if var > 0 and 0 < share < 1 else most
    n_eff = max(1.0, min(n_eff, most))
    seen_low, seen_high = clopper_pearson(share * n_eff, n_eff)
    r_lo, a_hi = rates["recall_ends"][0], rates["false_alarm_ends"][1]
    # what the audit judge's own measured error could hide in the rows it saw (all of them missed at once,
    # at 2.5%): the floor of the high end where sampling leaves little (an audit of every kept row)
    hides = 1.0 - rates["recall"] if kind == "good" else rates["false_alarm"]
    hidden_rows = math.log(0.025) / math.log(hides) if 0.0 < hides < 1.0 else (s["audited"] if hides >= 1.0 else 0.0)
    floor = min(1.0, hidden_rows * s["audited_labels"] / max(s["audited"], 1.0) / labels)
    seen_high = max(seen_high, floor)
    if kind == "good":
        wrong_high = min(1.0, seen_high / max(r_lo, 1e-6))
        wrong_low = max(0.0, (seen_low - a_hi) / max(1.0 - a_hi, 1e-6))
    else:
        wrong_high = seen_high
        wrong_low = corrected(seen_low, r_lo, a_hi, kind)
    point = min(wrong_high, max(wrong_low, corrected(share, rates["recall"], rates["false_alarm"], kind)))
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
    out: dict[str, Any] = {k: interval(_pooled(data, k, CLASSES), estimator, rates, k) for k in KINDS}
    out["by_answer"] = {
        c: {k: interval(stratum(data, f"{c}:{k}"), estimator, rates, k) for k in KINDS} for c in CLASSES
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
