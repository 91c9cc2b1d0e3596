"""The `audit` section: a random sample of the KEPT rows re-examined by evidence the selection never used
(prm_synth/shard/audit.py), the source of the run's `estimated_precision` and of `target_met`.

Why apart from the consensus: the soft posterior chooses which rows to keep, so an estimate read from it
cannot fall below the target it kept them for. The audit asks an audit judge (by default the run's own
judge engine, at sample indices the selection never drew, with more samples) about a seeded sample of the
kept rows, after their shard's keep decisions are made: its verdicts never change which rows that shard
keeps. Where a row carries given human labels, they are the audit's gold for it.

Cost, in judge requests (one request is one sample): about `rows` x 1.1-1.3 (a row is asked one vote, and
more, up to `samples`, only where that vote disagrees with its kept labels) on runs of up to `rows` /
`share` kept rows, `share` of the kept rows beyond that; an audit judge other than the run's also judges
up to `canary_rows` of the first shard's canaries and `share` of a later shard's (to measure its own error),
about 2 votes each.
On by default whenever a judge and the (default) `soft` consensus run; a pipeline without a judge has no
audit and hashes as before.
"""

from __future__ import annotations

from pydantic import Field

from prm_synth.config.base import MAX_SAMPLES, MAX_TEMPERATURE, MAX_TOKENS, Strict
from prm_synth.config.engines import JudgeEngineConfig


class AuditJudgeConfig(Strict):
    """The audit judge: shaped like the `judge` section (`engine`, `samples`)."""

    engine: JudgeEngineConfig | None = None
    """The audit judge model (`simulated-judge`, `vllm` or `openai`, keys as in `judge.engine`); None: the
    run's judge engine. A stronger model than the run's judge may be named: only an audit judge other than
    the run's own may lend the run's posterior its power (a difference estimator), since the run's own
    judge shares the errors the selection already made."""
    samples: int = Field(3, ge=1, le=MAX_SAMPLES, strict=True)
    """Most votes per audited row: one, and where it disagrees with the row's kept labels more, one at a
    time until the majority cannot change."""
    temperature: float = Field(0.7, ge=0.0, le=MAX_TEMPERATURE)
    """Sampling temperature of the audit judge."""
    max_tokens: int = Field(1024, ge=1, le=MAX_TOKENS)
    """Tokens an audit judge answer may take."""


class AuditConfig(Strict):
    """Which kept rows are audited, by what, and with which seed."""

    enabled: bool = True
    """Audit the kept rows of every shard where a judge runs (off: `estimated_precision` is the posterior's
    own and `target_met` is false: nothing independent certifies the labels)."""
    rows: int = Field(30, ge=0, le=1_000_000)
    """The fewest kept rows a run audits (in its first shard; all of them where it keeps fewer)."""
    share: float = Field(0.05, ge=0.0, le=1.0)
    """The share of every shard's kept rows audited (at least `rows` in the first shard)."""
    canary_rows: int = Field(12, ge=0, le=100_000)
    """Canaries an audit judge other than the run's own also judges in the first shard (`share` of a later
    shard's), to measure its recall and false alarms, summed over the run (the run's own judge's are the
    canaries' measured rates)."""
    judge: AuditJudgeConfig = AuditJudgeConfig()
    """The audit judge (default: the run's judge engine, up to 3 votes at fresh sample indices)."""
    seed: int = 0
    """The seed of the draw of audited rows and of the audit judge's sample indices."""
