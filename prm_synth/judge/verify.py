"""Verification chains: data for generative verifiers that agrees with the measured step labels.

Generative verifiers (ThinkPRM, Khalifa et al. 2025; GenPRM, Zhao et al. 2025; the critic models
ProcessBench evaluates) write a chain of thought that checks each step and ends it with a verdict.
ThinkPRM trains one from about 1K synthetic chains, each kept only when its verdicts agree with
PRM800K's human labels. Here the labels are the run's own, measured by rollouts (with a confidence
where the method gives one), so the same filter runs on machine labels at any scale.

For every row that survived consensus, `votes` chains are sampled with the verifier prompt
(prompts.render_verify_prompt). Each chain must read as

    Step 1: <check> \\boxed{correct}
    ...
    Step k: <check> \\boxed{incorrect}        (stopping at the first incorrect step)

or reach the last step with every verdict correct. A chain that runs out of tokens, does not parse,
or stops early without a verdict is dropped with its reason, never guessed (`parse_chain`, grading/chain.py). A
readable chain is kept only when its verdicts agree with the row's labels (`compare`):

- the steps compared are the labeled steps up to the row's first error (`first_error_mc`), and with
  `min_confidence` > 0 only those whose `p_good` clears it (annotate.labels.confident_labels);
- rule `every-step`: a compared step whose verdict is missing or differs from its label is a
  disagreement, and so is a chain's incorrect verdict on a step the labels do not show bad (a chain
  never teaches an error nobody measured); at most `tolerance` disagreements are allowed (0: none);
- rule `first-error`: the chain's first incorrect step (-1: none) and the compared labels' first bad
  step (-1: none) agree within `tolerance` steps, -1 agreeing only with -1 (consensus.agrees).
A row with no compared step keeps no chain (`no_labels`). Rows are never dropped by this stage for their
content: a row keeps its kept chains in `verify_chains` and, per dropped chain, the reason in
`verify_dropped`. A row none of whose chains is in the verifier's format at all (UNREADABLE_CHAIN) is left
open (`verify_unreadable`): the verifier failed, and the next run verifies that row again (like the
judge's `judge_unreadable`).

Model output is untrusted: a chain longer than MAX_CHAIN_CHARS is dropped unread, and the parser
makes a bounded number of linear passes over the rest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from prm_synth.config import VerifyConfig
from prm_synth.engines.base import Completion, Engine, GenerationRequest, RequestRefused, SamplingOptions
from prm_synth.grading.chain import ParsedChain, parse_chain
from prm_synth.judge.ask import UNPARSEABLE, JudgePrompt, ask
from prm_synth.judge.consensus import agrees
from prm_synth.prompting.prompts import VERIFY_SYSTEM, render_verify_prompt
from prm_synth.records import ChainDropReason, LabeledRecord, RejectedRecord, VerifyStats
from prm_synth.records.labels import confident_labels
from prm_synth.records.stage import StageResult
from prm_synth.store.left_open import answer_sample, leave_open


@dataclass(frozen=True)
class Agreement:
    keep: bool
    reason: ChainDropReason | None
    detail: str | None
    compared: int  # labeled steps the chain was compared on
    agreed: int  # of those, where its verdict equals the label


def chain_first_error(text: str, n_steps: int) -> int:
    """A chain read as a judge's answer: its first incorrect step, -1 if none, UNPARSEABLE if unreadable."""
    verdicts = parse_chain(text, n_steps).verdicts
    if verdicts is None:
        return UNPARSEABLE
    return verdicts.index(False) if False in verdicts else -1


# A verifier trained on the `verifier` view, asked as it was trained, scored like a critic on ProcessBench.
VERIFIER_PROMPT = JudgePrompt(render=render_verify_prompt, parse=chain_first_error, system=VERIFY_SYSTEM)


def compared_labels(record: LabeledRecord, min_confidence: float) -> dict[int, bool]:
    """step -> label for the labeled (and confident enough) steps up to the row's first error."""
    sure = confident_labels(record.labels, record.p_good, min_confidence)
    end = record.first_error_mc if record.first_error_mc >= 0 else len(record.labels) - 1
    return {i: label for i, label in enumerate(sure[: end + 1]) if label is not None}


def compare(verdicts: Sequence[bool], labels: dict[int, bool], rule: str, tolerance: int) -> Agreement:
    """Whether a readable chain agrees with the compared labels under `rule` (module docstring)."""
    agreed = sum(1 for i, label in labels.items() if i < len(verdicts) and verdicts[i] == label)
    if not labels:
        return Agreement(False, "no_labels", "no labeled step up to the first error to compare with", 0, 0)
    chain_first = next((i for i, ok in enumerate(verdicts) if not ok), -1)
    if rule == "first-error":
        label_first = next((i for i, label in sorted(labels.items()) if not label), -1)
        if agrees(label_first, chain_first, tolerance):
            return Agreement(True, None, None, len(labels), agreed)
        detail = f"chain's first error {chain_first}, labels' {label_first} (tolerance {tolerance})"
        return Agreement(False, "disagree", detail, len(labels), agreed)
    wrong = [i for i, label in labels.items() if i >= len(verdicts) or verdicts[i] != label]
    if chain_first >= 0 and labels.get(chain_first) is not False and chain_first not in wrong:
        wrong.append(chain_first)  # an error the labels do not show
    if len(wrong) <= tolerance:
        return Agreement(True, None, None, len(labels), agreed)
    detail = f"steps {sorted(wrong)[:8]} disagree with the labels (tolerance {tolerance})"
    return Agreement(False, "disagree", detail, len(labels), agreed)


# Chains that are not in the verifier format at all: a verifier answering so fails, not the row. A chain cut
# by max_tokens, or one that breaks off or goes on wrongly, reads as a chain and is the row's drop reason.
UNREADABLE_CHAIN: frozenset[str | None] = frozenset({"no_steps", "missing_verdict", "step_order"})


def verify_requests(
    records: Sequence[LabeledRecord], config: VerifyConfig, first_samples: Sequence[int] | None = None
) -> list[GenerationRequest]:
    """One request (n=votes) per row; `first_samples`: per row, its first sample index (a row verified
    again after unreadable chains gets indices no earlier run used, as the judge's do)."""
    sampling = SamplingOptions(max_tokens=config.max_tokens, temperature=config.temperature)
    firsts = first_samples if first_samples is not None else [0] * len(records)
    return [
        GenerationRequest(
            user=render_verify_prompt(r.question, r.steps),
            system=VERIFY_SYSTEM,
            n=config.votes,
            sampling=sampling,
            first_sample_index=first,
        )
        for r, first in zip(records, firsts, strict=True)
    ]


def judge_chain(completion: Completion, record: LabeledRecord, config: VerifyConfig) -> tuple[ParsedChain, Agreement]:
    """A chain read and compared with its row; a chain that does not parse compares on nothing."""
    parsed = parse_chain(completion.text, len(record.steps), completion.finish_reason)
    if parsed.verdicts is None:
        return parsed, Agreement(False, parsed.reason, parsed.detail, 0, 0)
    labels = compared_labels(record, config.min_confidence)
    return parsed, compare(parsed.verdicts, labels, config.rule, config.tolerance)


def verify_records(
    engine: Engine,
    records: list[LabeledRecord],
    config: VerifyConfig,
    max_batch_requests: int,
    first_samples: Sequence[int] | None = None,
) -> StageResult[LabeledRecord, VerifyStats]:
    """The verify stage: sample `votes` chains per row, keep those that agree with its labels. Returns
    (the rows with their verify fields filled, the rejected, its counters) under the stage contract of
    judge.judge_records: the input rows are not changed, the rows returned are copies. This stage never
    rejects a row for its content: a row whose chains all went keeps why in `verify_dropped`. Only a row
    none of whose chains could be read at all is left open ("verify_unreadable", the row as it came in as
    its payload): the verifier failed, not the row, and the next run verifies it again.

    Requests go through judge.ask, the judge's request loop: a request the engine refuses costs its row
    its chains (each dropped as `engine_refused`), never the row or the shard. The verifier's tokens are
    added to the row's `tokens` (what making this row cost)."""
    answers, calls = ask(engine, verify_requests(records, config, first_samples), max_batch_requests, "verify")
    stats = VerifyStats(engine_calls=calls)
    dropped: Counter[str] = Counter()
    out: list[LabeledRecord] = []
    left_open: list[RejectedRecord] = []
    for record, answer in zip(records, answers, strict=True):
        stats.rows += 1
        stats.chains += config.votes
        chains: list[str] = []
        drops: list[dict[str, str]] = []
        tokens = 0
        if isinstance(answer, RequestRefused):
            drops = [{"reason": "engine_refused", "detail": str(answer)} for _ in range(config.votes)]
            dropped["engine_refused"] += config.votes
            stats.refused += 1
        else:
            parsed_chains = [judge_chain(completion, record, config) for completion in answer.completions]
            if parsed_chains and all(parsed.reason in UNREADABLE_CHAIN for parsed, _ in parsed_chains):
                detail = (
                    f"none of the verifier's {len(parsed_chains)} chains could be read "
                    f"({parsed_chains[0][0].reason}), e.g. {answer_sample([c.text for c in answer.completions])}: "
                    "the verifier failed, not the row; verified again next run"
                )
                left_open.append(leave_open(record, "verify", "verify_unreadable", detail))
                stats.unreadable_rows += 1
                stats.unreadable_chains += len(parsed_chains)
                stats.tokens += answer.prompt_tokens + answer.generated_tokens
                continue
            for completion, (parsed, agreement) in zip(answer.completions, parsed_chains, strict=True):
                stats.unreadable_chains += parsed.reason in UNREADABLE_CHAIN
                stats.steps_compared += agreement.compared
                stats.steps_agreed += agreement.agreed
                if agreement.keep:
                    chains.append(completion.text)
                    stats.chain_tokens_kept += completion.generated_tokens
                else:
                    assert agreement.reason is not None
                    drops.append({"reason": agreement.reason, "detail": agreement.detail or ""})
                    dropped[agreement.reason] += 1
            tokens = answer.prompt_tokens + answer.generated_tokens
            stats.rows_with_chain += bool(chains)
            stats.kept += len(chains)
            stats.tokens += tokens
        out.append(
            replace(
                record,
                verify_chains=chains,
                verify_dropped=drops,
                verify_model=engine.model_name,
                verify_prompt_version=config.prompt_version,
                tokens=record.tokens + tokens,
            )
        )
    stats.dropped_by_reason = dict(dropped)
    return StageResult(out, left_open, stats)
