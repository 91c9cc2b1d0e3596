"""What a run's canaries measured (counts only; prm_synth/shard/canaries.py). A shard marker holds them as
a dict (`ShardStats.canaries`, summed key by key over shards); `CanaryStats.read` gives them back.

Per answer class of the canary ("right": the planted error hides behind a right answer; "wrong"):
- the rollouts' first error against the planted step: `mc_at`, `mc_before`, `mc_after`, `mc_clean`;
  the bad labels that placement gives (`mc_bad_labels`: the placed step and the labeled steps after it)
  and how many of them are wrong (`mc_bad_wrong`: before the planted step), the bad-label precision the
  labeler reaches on this run, measured and not modelled (precision_report);
- the judge's readable votes: `named` (the planted step), `missed` (-1), `before`/`after` (another step),
  `offset_sum` (the summed distance of those step votes), `unreadable`;
- vote dependence within a row: `pairs` of readable votes on one row and how many of them are equal
  (`pairs_agree`); `vote_keys` counts each vote by its reading (offset from the planted step, or "miss")
  over all rows, the chance level a row's pairs are compared with;
- late placement (the policy repaired the planted slip, so its rollouts put the error later): `mc_late_steps`
  (summed steps the placement is after the planted step), and per rate L of LATE_GRID the summed log
  likelihood of the planted steps under the rollouts' prior mixed with L (`late_ll:<L>`,
  posterior.late_mixture): floats summed over shards like the counts; `late_rate` is the rate they make
  likeliest on average (their posterior mean).

Clean controls (`controls`): rows the rollouts found clean at the pinned level, judged with every sample
like the canaries: how many (`rows`), their readable votes, how many said "no error" (`said_clean`) and
how many named a step (`false_alarms`), and unreadable votes: the judge's false alarms, measured.
`judge_requests`: the judge requests the canaries and the controls cost (beside the data's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

CLASS_KEYS = (
    "canaries",
    "mc_at",
    "mc_before",
    "mc_after",
    "mc_clean",
    "mc_bad_labels",
    "mc_bad_wrong",
    "votes",
    "named",
    "missed",
    "before",
    "after",
    "offset_sum",
    "unreadable",
    "pairs",
    "pairs_agree",
    "pairs_missed",
    "mc_late_steps",
)
CONTROL_KEYS = ("rows", "votes", "said_clean", "false_alarms", "unreadable")
# the late-placement rates whose likelihood the canaries sum (posterior.late_prior): 0, 0.05, ..., 0.9
LATE_GRID = tuple(round(0.05 * i, 2) for i in range(19))


def late_key(rate: float) -> str:
    return f"late_ll:{rate:.2f}"


@dataclass
class CanaryStats:
    planted: int = 0
    rollouts: int = 0  # what labeling the canaries cost
    tokens: int = 0  # rollout and judge tokens spent on canaries
    by_answer: dict[str, dict[str, int]] = field(default_factory=dict)
    vote_keys: dict[str, int] = field(default_factory=dict)
    controls: dict[str, int] = field(default_factory=dict)  # clean controls' votes (CONTROL_KEYS)
    judge_requests: int = 0  # judge requests spent on the canaries and the controls

    @classmethod
    def read(cls, data: dict[str, Any] | None) -> CanaryStats | None:
        """The counts as ShardStats.canaries holds them (summed key by key); None where none were planted."""
        if not data:
            return None
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def of(self, answer: str) -> dict[str, int]:
        return {k: 0 for k in CLASS_KEYS} | self.by_answer.get(answer, {})

    def late_rate(self, answer: str) -> float:
        """How often the rollouts put a planted error after its step, beyond what their own prior allows:
        the mixture weight L of posterior.late_mixture, its posterior mean over LATE_GRID (each rate as likely
        before the canaries) given the class's canaries' planted steps, so a few canaries that saw no late
        placement leave some doubt, and many pin it; 0 without canaries of the class."""
        c = self.by_answer.get(answer, {})
        scored = [(c[late_key(rate)], rate) for rate in LATE_GRID if late_key(rate) in c]
        if not scored or not c.get("canaries"):
            return 0.0
        top = max(x for x, _ in scored)
        weights = [(math.exp(x - top), rate) for x, rate in scored]
        return sum(w * rate for w, rate in weights) / sum(w for w, _ in weights)

    def late_distance(self, answer: str) -> float:
        """How many steps after the planted step the class's late placements fell, on average (0: none)."""
        c = self.of(answer)
        return c["mc_late_steps"] / c["mc_after"] if c["mc_after"] else 0.0

    def control_counts(self) -> dict[str, int]:
        return {k: 0 for k in CONTROL_KEYS} | self.controls

    def false_alarm_rate(self) -> float | None:
        """The share of the clean controls' readable votes that named a step (None: no votes)."""
        c = self.control_counts()
        return c["false_alarms"] / c["votes"] if c["votes"] else None

    def judge_recall(self, answer: str) -> tuple[int, int]:
        """(votes naming the planted step, readable votes) on canaries of the class."""
        c = self.of(answer)
        return c["named"], c["votes"]

    def agreement_beyond_chance(self) -> float | None:
        """Cohen-style kappa of the votes within a row: 0 when a row's votes agree no more than votes
        drawn from the run's pooled readings would, 1 when every row repeats one reading."""
        pairs = sum(self.of(a)["pairs"] for a in ("right", "wrong"))
        agree = sum(self.of(a)["pairs_agree"] for a in ("right", "wrong"))
        total = sum(self.vote_keys.values())
        if not pairs or not total:
            return None
        chance = sum((n / total) ** 2 for n in self.vote_keys.values())
        if chance >= 1.0:
            return None
        return max(0.0, min(1.0, (agree / pairs - chance) / (1.0 - chance)))

    def miss_dependence(self) -> float:
        """How much a row's misses come together (the intraclass correlation of "says -1" among the votes
        on one canary, per answer class, weighed by pairs; 0 when misses are independent): what a run of
        -1 votes is worth as evidence of a clean row (consensus.JudgeAccuracy.dependence)."""
        weighted = pairs_total = 0.0
        for answer in ("right", "wrong"):
            c = self.of(answer)
            if not c["pairs"] or not c["votes"]:
                continue
            p = c["missed"] / c["votes"]
            if 0.0 < p < 1.0:
                rho = (c["pairs_missed"] / c["pairs"] - p * p) / (p * (1.0 - p))
                weighted += c["pairs"] * max(0.0, min(1.0, rho))
                pairs_total += c["pairs"]
        return weighted / pairs_total if pairs_total else 0.0

    def summary(self) -> dict[str, Any]:
        """The derived rates (inspect --json, the summary, the card)."""
        out: dict[str, Any] = {
            "planted": self.planted,
            "rollouts": self.rollouts,  # their cost, beside the data's (the engine served both)
            "tokens": self.tokens,
            "vote_agreement_beyond_chance": self.agreement_beyond_chance(),
            "miss_dependence": round(self.miss_dependence(), 4),
            "judge_requests": self.judge_requests,
            "controls": {
                "rows": self.control_counts()["rows"],
                "judge_votes": self.control_counts()["votes"],
                "judge_false_alarm": self.false_alarm_rate(),
            },
        }
        for answer in ("right", "wrong"):
            c = self.of(answer)
            n, v = c["canaries"], c["votes"]
            steps = c["before"] + c["after"] + c["named"]
            out[answer] = {
                "canaries": n,
                "rollouts": {k: c[f"mc_{k}"] / n if n else None for k in ("at", "before", "after", "clean")}
                | {"missed": c["mc_clean"] / n if n else None},
                # the mixture weight of a late placement the posterior reads (late_rate), and how late
                "rollouts_late_rate": self.late_rate(answer) if n else None,
                "rollouts_mean_steps_late": c["mc_late_steps"] / c["mc_after"] if c["mc_after"] else None,
                # the share of the bad labels the rollouts' placement gives that are right (precision_report)
                "rollouts_bad_precision": 1.0 - c["mc_bad_wrong"] / c["mc_bad_labels"] if c["mc_bad_labels"] else None,
                "judge_recall": c["named"] / v if v else None,
                "judge_missed": c["missed"] / v if v else None,
                "judge_mean_location_error": c["offset_sum"] / steps if steps else None,
                "judge_votes": v,
            }
        return out

    def text(self) -> str:
        """One line in words: how many planted errors, and how the rollouts and the judge found them."""
        s = self.summary()
        parts = [f"{self.planted} planted errors"]
        for answer in ("right", "wrong"):
            c = s[answer]
            if not c["canaries"]:
                continue
            r = c["rollouts"]
            bit = (
                f"{c['canaries']} behind a {answer} answer: rollouts placed {r['at']:.0%} at the step, "
                f"{r['before']:.0%} before, {r['after']:.0%} after, missed {r['missed']:.0%}"
            )
            if c["judge_recall"] is not None:
                bit += f", the judge named {c['judge_recall']:.0%} of {c['judge_votes']} votes"
            parts.append(bit)
        if (alarm := s["controls"]["judge_false_alarm"]) is not None:
            parts.append(f"the judge named a step on {alarm:.0%} of {s['controls']['rows']} clean controls' votes")
        if (kappa := s["vote_agreement_beyond_chance"]) is not None:
            parts.append(f"a row's votes agree {kappa:.2f} beyond chance")
        return "; ".join(parts)


Z = 1.96  # the intervals' normal quantile (95%)


def wilson(hits: float, total: float, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval of a proportion (0..1 where nothing was counted)."""
    if total <= 0:
        return 0.0, 1.0
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def canary_bad_counts(canaries: CanaryStats | None, answers: tuple[str, ...]) -> tuple[int, int]:
    """(right, all) bad labels the rollouts' placement gave the canaries of `answers` (a bad label is right
    when it is at or after the planted step): the bad-label precision measured, not modelled."""
    if canaries is None:
        return 0, 0
    labels = sum(canaries.of(a)["mc_bad_labels"] for a in answers)
    return labels - sum(canaries.of(a)["mc_bad_wrong"] for a in answers), labels


def precision_report(sums: dict[str, float], canaries: CanaryStats | None = None) -> dict[str, object]:
    """`estimated_precision` from the summed expectations (ConsensusStats.estimate): good and bad, point
    and interval, overall and per answer class. The point is the posterior's. The bad labels' interval
    also holds the 95% Wilson interval of the posterior's expected right labels pooled with the canaries'
    measured ones (`canary_bad_counts`): the posterior trusts the rollouts' own confidence, optimistic
    where they fail from a clean prefix more often than it says, and the canaries measure that directly.
    Pooled, a few canaries that saw no wrong label do not widen a well-measured run to nothing, and many
    that saw some pull the low end down to what they saw."""

    def one(prefix: str, kind: str, answers: tuple[str, ...]) -> dict[str, float | int] | None:
        labels = sums.get(f"{prefix}{kind}_labels", 0.0)
        if labels <= 0:
            return None
        point = sums.get(f"{prefix}{kind}_expected", 0.0) / labels
        # the spread of the right count under the posterior, at the judge's worse end where it is wider
        var = max(sums.get(f"{prefix}{kind}_var", 0.0), sums.get(f"{prefix}{kind}_var_low", 0.0))
        spread = Z * math.sqrt(var) / labels
        ends = [sums.get(f"{prefix}{kind}_{end}", point * labels) / labels for end in ("low", "high")]
        low, high = min([point, *ends]) - spread, max([point, *ends]) + spread
        right, counted = canary_bad_counts(canaries, answers) if kind == "bad" else (0, 0)
        if counted:
            pooled = wilson(point * labels + right, labels + counted)
            low, high = min(low, pooled[0]), max(high, pooled[1])
        return {
            "point": round(point, 4),
            "low": round(max(0.0, low), 4),
            "high": round(min(1.0, high), 4),
            "labels": int(labels),
        }

    both = ("right", "wrong")
    out: dict[str, object] = {"good": one("", "good", both), "bad": one("", "bad", both)}
    out["by_answer"] = {c: {"good": one(f"{c}:", "good", (c,)), "bad": one(f"{c}:", "bad", (c,))} for c in both}
    return out
