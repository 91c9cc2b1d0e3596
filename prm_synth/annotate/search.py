"""The first-error searches, one class per `search_test`, found by name in `SEARCHES`: the one place that
reads `search_test` and the only dispatch on the search's kind (the third registry, after `LABELERS`
and export's `VIEWS`).

A labeler builds its search once (`make_search(config)`) and asks it everything the search decides:
- `annotator(...)`: the first-error search for one sampled solution (binary method; OmegaPRM's
  `annotate_given`);
- `checks(key)`: whether this solution is drawn for the shard's process-error measurement;
- `first_phase_pool(problem_ids)` / `relabel(...)`: the shard-wide steps (the change-point search's
  two phases and its relabeling; nothing for the bisections);
- `prefix_test(posterior, step)` / `omega_priors()` / `source`: how OmegaPRM's bisection decides one
  prefix, and whether that decision is the label;
- `describe()` (the budget line's words) and `card_text()` (the dataset card's paragraph).

`fixed` and `sprt` bisect (bisection.py); `changepoint` is prm_synth/annotate/changepoint/. Adding a
search is one class here and one entry in `SEARCHES` (and its name in config.SearchTestName).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.bisection import FixedTest, PrefixTest, SequentialTest, bisection_search
from prm_synth.annotate.changepoint import (
    ChangepointSettings,
    FirstPhasePool,
    Posterior,
    Priors,
    changepoint_search,
    relabel,
)
from prm_synth.annotate.protocol import Annotator
from prm_synth.annotate.token_cost import NO_TOKEN_BUDGET, TokenBudget
from prm_synth.config import BinaryConfig, OmegaConfig
from prm_synth.records import LabelSource, VerdictStatus

SearchConfig = BinaryConfig | OmegaConfig


def sampled_share(key: str, share: float) -> bool:
    """A stable pseudo-random choice of `share` of the keys (same choice on every re-run)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < share


@dataclass(frozen=True)
class SolutionRun:
    """How one solution's search runs under its labeler: `verify` (bisections: check a correct answer by
    per-step MC), `check` (the change-point search: test its early prefixes first), `pool` (its shard's
    `FirstPhasePool`, its `key` there) and `relabeled` (the labeler labels it again, so the search does not)."""

    verify: bool = False
    check: bool = False
    pool: FirstPhasePool | None = None
    key: str = ""
    relabeled: bool = False


ALONE = SolutionRun()  # a solution searched on its own (no shard, no check)


class _Bisection:
    """fixed and sprt: a bisection with a test per prefix (bisection.py); no shard-wide steps."""

    test: FixedTest | SequentialTest

    def __init__(self, config: SearchConfig, budget: TokenBudget = NO_TOKEN_BUDGET) -> None:
        self.recheck = config.recheck if isinstance(config, BinaryConfig) else False
        self.verify_k = config.k

    def annotator(
        self, steps: list[str], final_status: VerdictStatus, run: SolutionRun = ALONE
    ) -> Annotator[Annotation]:
        """The bisection for one solution (`run.verify`: a correct one is checked by per-step MC)."""
        verify_k = self.verify_k if run.verify else None
        return bisection_search(steps, final_status, self.test, recheck=self.recheck, verify_k=verify_k)

    @property
    def source(self) -> LabelSource:
        """The label source of a prefix the test decided ("test": its decision is the label; "mc")."""
        return self.test.source

    def checks(self, key: str) -> bool:
        return False

    def first_phase_pool(self, problem_ids: Sequence[str]) -> FirstPhasePool | None:
        return None

    def relabel(self, annotations: Sequence[Annotation], problems: Sequence[tuple[str, list[str]]]) -> None:
        return None

    def prefix_test(self, posterior: Callable[[], Posterior], step: int) -> PrefixTest:
        return self.test

    def omega_priors(self) -> Priors | None:
        return None

    def describe(self) -> str:
        return self.test.describe()

    def card_text(self) -> str:
        return self.test.card_text()


class FixedSearch(_Bisection):
    """search_test fixed: k rollouts a prefix, good when MC > 0."""

    name: ClassVar[str] = "fixed"

    def __init__(self, config: SearchConfig, budget: TokenBudget = NO_TOKEN_BUDGET) -> None:
        super().__init__(config)
        self.test = FixedTest(config.k)


class SprtSearch(_Bisection):
    """search_test sprt: Wald's sequential test decides each prefix."""

    name: ClassVar[str] = "sprt"

    def __init__(self, config: SearchConfig, budget: TokenBudget = NO_TOKEN_BUDGET) -> None:
        super().__init__(config)
        self.test = SequentialTest.of(
            config.bad_rate, config.good_rate, config.sprt_error, config.probe_batch, config.probe_max_rollouts
        )


@dataclass(frozen=True)
class PosteriorTest:
    """One prefix (`step`) of a solution decided by the change-point posterior of all of it (OmegaPRM's
    bisection under search_test changepoint). `posterior()` is recomputed on every verdict (it reads
    everything measured so far); the prefix is decided when its P(good) or P(bad) reaches `confidence`,
    given up at `max_rollouts`."""

    posterior: Callable[[], Posterior]
    step: int
    confidence: float
    batch: int
    max_rollouts: int
    source: LabelSource = "test"

    def want(self, total: int) -> int | None:
        return None if total >= self.max_rollouts else total + self.batch

    def verdict(self, correct: int, total: int, final: bool = False) -> bool | None:
        p_good = float(self.posterior().p_good[self.step])
        if total > 0 and max(p_good, 1.0 - p_good) >= self.confidence:
            return p_good >= self.confidence
        return None


class ChangepointSearch:
    """search_test changepoint (the binary method's default): prm_synth/annotate/changepoint/."""

    name: ClassVar[str] = "changepoint"
    source: ClassVar[LabelSource] = "test"  # a prefix OmegaPRM's bisection decides: the posterior's label

    def __init__(self, config: SearchConfig, budget: TokenBudget = NO_TOKEN_BUDGET) -> None:
        if isinstance(config, BinaryConfig):
            self.settings = ChangepointSettings.of(config)
            self.budget = budget  # probes ranked per expected token where it is set
        else:
            # OmegaPRM's bisection decides a prefix with the posterior alone and ranks no probes
            self.settings = ChangepointSettings.of_bisection(config)
            self.budget = NO_TOKEN_BUDGET
        # OmegaPRM's bisection: rollouts a prefix probe asks at a time, and at most
        self.prefix_batch = max(config.probe_batch, self.settings.prefix_batch_min)
        self.prefix_max_rollouts = config.probe_max_rollouts

    def annotator(
        self, steps: list[str], final_status: VerdictStatus, run: SolutionRun = ALONE
    ) -> Annotator[Annotation]:
        """The change-point search for one solution (`run.verify` is the bisections' and means nothing here)."""
        r = run
        return changepoint_search(
            steps,
            final_status,
            self.settings,
            check=r.check,
            pool=r.pool,
            key=r.key,
            relabeled=r.relabeled,
            budget=self.budget,
        )

    def checks(self, key: str) -> bool:
        """A stable share (`check_correct`) of the solutions measures the shard's rate of process errors."""
        return sampled_share(f"{key}/check", self.settings.check_correct)

    def first_phase_pool(self, problem_ids: Sequence[str]) -> FirstPhasePool:
        """The searches go on under priors pooled from the first phases of the solutions of the shard's
        first half of problems (`FirstPhasePool`)."""
        problems = list(dict.fromkeys(problem_ids))
        return FirstPhasePool(self.settings, problems[: (len(problems) + 1) // 2])

    def relabel(self, annotations: Sequence[Annotation], problems: Sequence[tuple[str, list[str]]]) -> None:
        """Every solution of the shard labeled again under the priors pooled from all of them."""
        relabel(annotations, self.settings, problems)

    def prefix_test(self, posterior: Callable[[], Posterior], step: int) -> PrefixTest:
        return PosteriorTest(posterior, step, self.settings.confidence, self.prefix_batch, self.prefix_max_rollouts)

    def omega_priors(self) -> Priors:
        """OmegaPRM's prefixes are decided under the weak default priors (nothing pooled across questions:
        rows do not depend on the order questions finish in)."""
        return Priors()

    def describe(self) -> str:
        s = self.settings
        return (
            f"a change-point posterior with per-step hazards and per-solution luck (labels at confidence "
            f"{s.confidence}; at most {s.most_rollouts()} rollouts a solution; priors pooled per shard)"
        )

    def card_text(self) -> str:
        s = self.settings
        return (
            "First-error search under a change-point model of how the policy writes: every step has a hazard (the "
            "chance the policy gets it wrong), which sets both where the sampled solution's first error is likely "
            "and how often a clean prefix's rollouts finish without one (no curve shape assumed: hard steps and "
            "uneven difficulty fit), a prefix holding the error reaches the answer at the solution's own luck rate "
            "(a shard-wide prior, up to 0.94), and rollouts of one prefix may share their fortune (beta-binomial "
            "counts, their spread chosen per shard). Every step gets its posterior probability of being "
            "still correct (p_good); the search probes the prefix whose rollouts most reduce the label "
            f"uncertainty and labels a step at confidence {s.confidence}, within {s.most_rollouts()} rollouts a "
            "solution. Steps it cannot decide stay unlabeled with the reason; ungradable rollouts are not evidence."
        )


Search = FixedSearch | SprtSearch | ChangepointSearch
# The search of each `search_test`: one entry per search.
SEARCHES: dict[str, type[FixedSearch] | type[SprtSearch] | type[ChangepointSearch]] = {
    cls.name: cls for cls in (FixedSearch, SprtSearch, ChangepointSearch)
}


def make_search(config: SearchConfig, budget: TokenBudget = NO_TOKEN_BUDGET) -> Search:
    """The search `config.search_test` names, built with the config's knobs and the labeler's token
    budget (`TokenBudget.of(config)`, read once by the labeler: the scheduler gets the same object)."""
    try:
        search = SEARCHES[config.search_test]
    except KeyError:
        raise ValueError(f"unknown search_test {config.search_test!r}") from None
    return search(config, budget)


def binary_search(
    steps: list[str],
    final_status: VerdictStatus,
    config: BinaryConfig,
    verify: bool = False,
    check: bool = False,
    pool: FirstPhasePool | None = None,
    key: str = "",
    relabeled: bool = False,
) -> Annotator[Annotation]:
    """The binary method's annotator for one solution under `config` (its search built afresh: a
    labeler builds its own once)."""
    run = SolutionRun(verify, check, pool, key, relabeled)
    return make_search(config, TokenBudget.of(config)).annotator(steps, final_status, run)
