"""One probe-scheduler run's accounting: what each job's probes cost, and its token budget kept.

The scheduler (scheduler.py) asks the ledger before it sends a job's new rollouts and tells it what
each request brought back. A job gets no new rollouts once its rollouts have generated
`max_rollout_tokens` tokens, or once the rollouts a probe asks for would take it past the budget (each
expected as long as the rest of the solution after the probe's prefix, and as the longest of this job's
rollouts from a prefix no longer than the probe's: a rollout from a longer prefix writes less); each
rollout sent may write only its share of what is left (its `max_tokens` cut to it), so no job's
rollouts ever generate more than the budget, however long each runs. Such a job is in `out_of_tokens`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prm_synth.annotate.token_cost import TokenBudget
from prm_synth.engines.base import GenerationResult

# what one probe of a job needs: (its prefix, rollouts beyond those done or in flight; <= 0 for none)
Need = tuple[str, int]


@dataclass
class Spend:
    """What one job's probes caused: rollouts, and tokens (generated and prompt)."""

    rollouts: int = 0
    tokens: int = 0
    generated: int = 0  # of `tokens`, those the rollouts generated (what the token budget counts)


class TokenLedger:
    """Per-job spend and token budget of one scheduler run; see the module docstring."""

    def __init__(self, budget: TokenBudget, sampling_max: int) -> None:
        self.budget = budget
        self.sampling_max = sampling_max  # the sampling options' max_tokens: a rollout's cap without a budget
        # Per-job spend: rollouts and tokens that this job's probes caused.
        # (`rollouts` is settled when the run ends: see `settle`.)
        self.spend: dict[str, Spend] = {}
        self.out_of_tokens: set[str] = set()  # keys of jobs whose token budget is spent
        self._held: dict[str, int] = {}  # job -> tokens its requests in flight may still write
        self._lengths: dict[str, list[tuple[int, float]]] = {}  # job -> (prefix chars, tokens a rollout)

    def open(self, job: str) -> None:
        self.spend[job] = Spend()

    def admit(self, job: str, length: tuple[int, int] | None, needs: Sequence[Need]) -> int:
        """The `max_tokens` of each new rollout a job's probes need; the job is out of tokens when not one
        token is left for each, or when the rollouts would not fit in what is left of its budget."""
        if not self.budget.limited:
            return self.sampling_max
        cap = self._rollout_cap(job, needs)
        if cap < 1 or not self._affordable(job, length, needs):
            self.out_of_tokens.add(job)
        return cap

    def _rollout_cap(self, job: str, needs: Sequence[Need]) -> int:
        """What is left of the job's budget (its generated tokens and what its requests in flight may
        still write held back) shared among the new rollouts."""
        most: dict[str, int] = {}
        for prefix, n in needs:
            most[prefix] = max(most.get(prefix, 0), n)
        wanted = sum(n for n in most.values() if n > 0)
        if not wanted:
            return self.sampling_max
        spent = self.spend.setdefault(job, Spend()).generated + self._held.get(job, 0)
        return self.budget.rollout_cap(spent, wanted, self.sampling_max)

    def _affordable(self, job: str, length: tuple[int, int] | None, needs: Sequence[Need]) -> bool:
        """Whether the new rollouts fit in what is left of the job's token budget, each expected as long
        as the job's rollouts have been (`_rollout_cap` makes it a bound)."""
        assert self.budget.max_tokens is not None
        spent = self.spend.setdefault(job, Spend()).generated
        if spent >= self.budget.max_tokens:
            return False
        seen = self._lengths.get(job, [])
        expected = 0.0
        for prefix, new in needs:
            if new <= 0:
                continue
            longer = [tokens for chars, tokens in seen if chars <= len(prefix)]
            rest = 0.0
            if length is not None and length[0] > 0:
                rest = length[1] * max(0.0, 1.0 - len(prefix) / length[0])
            # nothing to judge by but longer prefixes: the longest rollout seen (one from here may write more)
            fallback = max((tokens for _, tokens in seen), default=0.0)
            expected += new * (max([rest, *longer]) if longer or rest else fallback)
        return spent + expected <= self.budget.max_tokens

    def hold(self, job: str, tokens: int) -> None:
        """A request sent: its rollouts may write up to `tokens` more of the job's budget."""
        self._held[job] = self._held.get(job, 0) + tokens

    def charge(self, job: str, held: int, prefix: str, result: GenerationResult) -> None:
        """A request of the job's back: release what it held, count what it cost."""
        spend = self.spend.setdefault(job, Spend())
        self._held[job] = self._held.get(job, 0) - held
        spend.rollouts += len(result.completions)
        spend.tokens += result.generated_tokens + result.prompt_tokens
        spend.generated += result.generated_tokens
        if result.completions:  # how long this job's rollouts from a prefix this long are (`_affordable`)
            per_rollout = result.generated_tokens / len(result.completions)
            self._lengths.setdefault(job, []).append((len(prefix), per_rollout))
        if self.budget.max_tokens is not None and spend.generated >= self.budget.max_tokens:
            self.out_of_tokens.add(job)

    def settle(self, samples: Iterable[tuple[Mapping[str, int], Mapping[int, str]]]) -> None:
        """Charge each sample of a shared prefix to the first job (by key) that read it, not to whichever
        asked first: which job asks first depends on timing, so rows' `rollouts` would depend on
        max_in_flight and batch sizes. Samples nobody read stay with the job that asked.
        `samples`: per prefix, (job -> how many samples it read, sample index -> job that asked)."""
        charged: dict[str, int] = {}
        for read_by, asked_by in samples:
            readers = sorted(read_by)
            for i, asker in asked_by.items():
                payer = next((job for job in readers if read_by[job] > i), asker)
                charged[payer] = charged.get(payer, 0) + 1
        for key, spend in self.spend.items():
            spend.rollouts = charged.get(key, 0)
