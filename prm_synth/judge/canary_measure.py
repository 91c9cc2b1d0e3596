"""What the canaries measure: the rollouts' and the judge's findings against each planted step.

See prm_synth.canary_stats for the counts. A canary's answer class is its own graded final answer (a
canary planted in the answer step reads "wrong", one planted earlier "right").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from prm_synth.canary_stats import CLASS_KEYS, CanaryStats
from prm_synth.judge.accuracy import answer_class
from prm_synth.judge.ask import UNPARSEABLE
from prm_synth.schema import LabeledRecord


def vote_key(vote: int, planted: int) -> str:
    """A vote's reading relative to the planted step: "miss" for -1, else its offset."""
    return "miss" if vote == -1 else str(vote - planted)


def measure(rows: Sequence[tuple[LabeledRecord, int]]) -> CanaryStats:
    """Counts over (labeled and judged canary, planted step) pairs."""
    stats = CanaryStats(planted=len(rows))
    keys: Counter[str] = Counter()
    for record, planted in rows:
        c = stats.by_answer.setdefault(answer_class(record), {k: 0 for k in CLASS_KEYS})
        c["canaries"] += 1
        stats.rollouts += record.rollouts
        stats.tokens += record.tokens
        f = record.first_error_mc
        c["mc_clean" if f == -1 else "mc_at" if f == planted else "mc_before" if f < planted else "mc_after"] += 1
        votes = [v for v in record.judge_votes if v != UNPARSEABLE]
        c["unreadable"] += len(record.judge_votes) - len(votes)
        c["votes"] += len(votes)
        for v in votes:
            if v == planted:
                c["named"] += 1
            elif v == -1:
                c["missed"] += 1
            else:
                c["before" if v < planted else "after"] += 1
                c["offset_sum"] += abs(v - planted)
            keys[vote_key(v, planted)] += 1
        row_keys = Counter(vote_key(v, planted) for v in votes)
        c["pairs"] += len(votes) * (len(votes) - 1) // 2
        c["pairs_agree"] += sum(n * (n - 1) // 2 for n in row_keys.values())
        c["pairs_missed"] += row_keys["miss"] * (row_keys["miss"] - 1) // 2
    stats.vote_keys = dict(keys)
    return stats
