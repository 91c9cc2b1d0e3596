"""The votes of `grader.kind: majority` (prm_synth/grading/majority.py): each problem's pseudo-gold from
`grader.votes` policy samples, or its `no_majority` rejection, before labeling. A problem whose votes
the engine refuses (HTTP 400: a prompt past the model's context) is rejected `engine_refused` with the
server's words, as the other graders' sampling records it, and asked again by the next run."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from prm_synth.engines.base import GenerationRequest, GenerationResult, RequestRefused
from prm_synth.grading import math as math_grading
from prm_synth.grading.majority import MAX_VOTED_ANSWERS, MajorityAudit
from prm_synth.grading.registry import make_grader
from prm_synth.records import Problem, reject
from prm_synth.records.stage import StageResult
from prm_synth.sampling.sample import sampling_request


@dataclass
class MajorityOutcome(StageResult[Problem, MajorityAudit]):
    """The majority-gold stage's `StageResult`: the problems with a pseudo-gold (`kept`, also `problems`),
    the `no_majority` rejections, the votes' audit (`counters`, also `audit`), and the tokens spent."""

    counters: MajorityAudit = field(default_factory=MajorityAudit)
    tokens: int = 0

    @property
    def problems(self) -> list[Problem]:
        return self.kept

    @property
    def audit(self) -> MajorityAudit:
        return self.counters


def _generate_each(engine: Any, requests: list[GenerationRequest]) -> list[GenerationResult | RequestRefused]:
    """Each request's result, or the `RequestRefused` the engine answered it with: a batch call that is
    refused does not say which request was, so the batch is then asked one request at a time and only
    the refused ones fail (as the sampling stage's engine adapter does)."""
    try:
        return list(engine.generate(requests))
    except RequestRefused as refused:
        if len(requests) == 1:
            return [refused]
    out: list[GenerationResult | RequestRefused] = []
    for request in requests:
        try:
            out.append(engine.generate([request])[0])
        except RequestRefused as refused:
            out.append(refused)
    return out


def pseudo_gold(engine: Any, problems: list[Problem], config: Any) -> MajorityOutcome:
    """Each problem with its majority answer as gold (or its `no_majority` rejection), in input order."""
    g = config.grader
    grader = make_grader(g, inner=True)
    out = MajorityOutcome([], [], MajorityAudit())
    step = config.run.max_batch_requests
    for start in range(0, len(problems), step):
        batch = problems[start : start + step]
        requests = [replace(sampling_request(p, config), n=g.votes) for p in batch]
        for problem, result in zip(batch, _generate_each(engine, requests), strict=True):
            if isinstance(result, RequestRefused):  # rejected with the server's words; the rest go on
                out.rejected.append(
                    reject(
                        f"{problem.id}-majority", problem.id, problem.source, "sample", "engine_refused", str(result)
                    )
                )
                continue
            out.tokens += result.prompt_tokens + result.generated_tokens
            key = grader.key(problem)
            texts = [c.text for c in result.completions if not math_grading.is_truncated(c.finish_reason)]
            answers = [a for a in (grader.canonical(t, key) for t in texts) if a is not None]
            counts = Counter(answers).most_common()
            top, top_count = counts[0] if counts else (None, 0)
            tied = len(counts) > 1 and counts[1][1] == top_count
            share = top_count / g.votes
            if top is None or tied or share < g.min_agreement:
                out.audit.rejected += 1
                detail = f"the most common of {g.votes} answers has {top_count} votes ({share:.2f} < {g.min_agreement})"
                if tied:
                    detail = f"{top_count} votes each for two answers: no majority"
                out.rejected.append(
                    reject(
                        f"{problem.id}-majority",
                        problem.id,
                        problem.source,
                        "sample",
                        "no_majority",
                        detail,
                        {"answers": dict(counts[:10])},
                    )
                )
                continue
            right: bool | None = None
            if problem.gold_answer.strip():  # held out: measured, never shown to the labeler
                winner = next(t for t in texts if grader.canonical(t, key) == top)
                right = grader.grade(winner, key).status == "correct"
            out.audit.kept += 1
            out.audit.add(share, right)
            data = json.loads(problem.grading) if problem.grading else {}
            data |= {
                "pseudo_gold_share": round(share, 6),
                "held_out_gold": problem.gold_answer or None,
                "pseudo_gold_votes": dict(counts[:MAX_VOTED_ANSWERS]),  # what row_doubts reads
            }
            out.problems.append(
                replace(problem, gold_answer=top, grading=json.dumps(data, ensure_ascii=False, sort_keys=True))
            )
    return out
