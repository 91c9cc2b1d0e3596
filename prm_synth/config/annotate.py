"""How steps are labeled: the `annotate` section (`mc`, `binary`, `omegaprm` by `method`, each search
taking its own knobs) and the `labels` section (how measurements become labels); the labeler revisions
hashed into the fingerprint (prm_synth/annotate/)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from prm_synth.config.base import MAX_ROLLOUTS, RolloutCount, Strict
from prm_synth.records import SearchTestName, ShardStats


class SequentialTestConfig(Strict):
    """Wald's sequential test of H_bad (MC <= bad_rate) against H_good (MC >= good_rate), sampling
    `probe_batch` rollouts at a time, at most `probe_max_rollouts` (binary search and OmegaPRM's bisection)."""

    bad_rate: float = Field(0.05, gt=0.0, lt=1.0)
    """`sprt`: a prefix whose MC (share of right rollouts) is at most this is bad."""
    good_rate: float = Field(0.3, gt=0.0, lt=1.0)
    """`sprt`: a prefix whose MC is at least this is good."""
    sprt_error: float = Field(0.1, gt=0.0, lt=0.5)
    """`sprt`: both error probabilities of each test."""
    probe_batch: int = Field(2, ge=1, le=MAX_ROLLOUTS)
    """Rollouts sampled at a time while a prefix is tested."""
    probe_max_rollouts: int = Field(32, ge=1, le=MAX_ROLLOUTS)
    """Rollouts one prefix's test may take at most."""

    @model_validator(mode="after")
    def _rates(self) -> SequentialTestConfig:
        if self.bad_rate >= self.good_rate:
            raise ValueError("annotate.bad_rate must be below annotate.good_rate")
        return self


class PosteriorConfig(Strict):
    """search_test changepoint (annotate/changepoint/): a change-point posterior over the first
    error gives every step its probability of being still correct (p_good); a step is labeled only
    when it says so with at least `confidence` (the steps left stay unlabeled, with the reason). In
    OmegaPRM's bisection the same posterior decides each prefix, `probe_batch` rollouts at a time."""

    confidence: float = Field(0.9, gt=0.5, lt=1.0)
    """`changepoint`: a step is labeled only when its label has at least this posterior probability."""


class RolloutTokens(Strict):
    """The one declaration of every method's token budget (read once: annotate/token_cost.py `TokenBudget`)."""

    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"max_rollout_tokens": None}  # added later; None: no limit, as before

    max_rollout_tokens: int | None = Field(None, ge=1, le=10**12)
    """Tokens the rollouts of one solution (OmegaPRM: of one question) may generate at most, beside the
    rollout budget (None: no limit): each rollout's max_tokens is cut to what is left, so none spends
    more; the change-point search weighs a probe's worth against its expected tokens; steps left
    undecided when it is spent are unlabeled with reason `token_budget`."""


class MCConfig(RolloutTokens):
    """Per-step Monte Carlo estimation (Math-Shepherd): k rollouts from every prefix."""

    ONE_ROW_PER_SOLUTION: ClassVar[bool] = True  # how its rows relate to its inputs (`rows_reconcile`)

    method: Literal["mc"] = "mc"
    """Per-step Monte Carlo: k rollouts from every prefix."""
    k: RolloutCount = 8
    """Rollouts per prefix."""
    stop_at_first_zero: bool = False
    """Stop probing after the first prefix with MC 0."""


_SPRT_KNOBS = frozenset({"bad_rate", "good_rate", "sprt_error", "probe_batch", "probe_max_rollouts"})


class SearchKnobs(Strict):
    """Each search takes exactly its own knobs (`SEARCH_KNOBS`): one it does not read, set away from its
    default, is a config error naming it (it would change nothing but the dataset's identity), and the
    fingerprint hashes
    the method's own fields and the chosen search's knobs only. A subclass lists, per search_test, the
    knobs that search reads, and the fields every search of the method reads (`ALWAYS`)."""

    SEARCH_KNOBS: ClassVar[dict[str, frozenset[str]]] = {}
    ALWAYS: ClassVar[frozenset[str]] = frozenset({"method", "search_test", "max_rollout_tokens"})
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"max_rollout_tokens": None}  # added later; None: no limit, as before
    search_test: SearchTestName  # each subclass sets its default
    """How a prefix is decided: `changepoint`, `fixed` or `sprt`."""

    @model_validator(mode="after")
    def _only_the_searchs_knobs(self) -> SearchKnobs:
        test = self.search_test
        used = self.SEARCH_KNOBS[test] | self.ALWAYS
        # A knob at its default changes nothing (a stored config is a full dump): only a value set
        # away from it is refused.
        ignored = sorted(
            key
            for key in self.model_fields_set - used
            if any(key in knobs for knobs in self.SEARCH_KNOBS.values())
            and getattr(self, key) != type(self).model_fields[key].default
        )
        if ignored:
            owners = {key: sorted(t for t, knobs in self.SEARCH_KNOBS.items() if key in knobs) for key in ignored}
            named = "; ".join(f"annotate.{key} (a knob of search_test {' / '.join(owners[key])})" for key in ignored)
            raise ValueError(f"search_test {test} does not use {named}: remove it, or choose a search that reads it")
        return self

    def row_fields(self) -> dict[str, Any]:
        """What changes the rows: the method's own fields and the chosen search's knobs."""
        used = self.SEARCH_KNOBS[self.search_test] | self.ALWAYS
        return self.model_dump(mode="json", include=set(used))

    def fingerprint_part(self, transport: bool = False) -> dict[str, Any]:
        """A knob the chosen search ignores changes no row: only `row_fields` are hashed."""
        return self.without_added(self.row_fields())


class BinaryConfig(SequentialTestConfig, PosteriorConfig, SearchKnobs, RolloutTokens):
    """Binary search for the first error, each prefix decided by a test.

    search_test changepoint (default): the change-point search (confidence, changepoint_max_rollouts);
    fixed: k rollouts, good when MC > 0 (plain bisection, the OmegaPRM paper's rule); sprt: the
    sequential test above. Each takes only its own knobs (`SEARCH_KNOBS`)."""

    SEARCH_KNOBS: ClassVar[dict[str, frozenset[str]]] = {
        "changepoint": frozenset({"confidence", "changepoint_max_rollouts"}),
        "fixed": frozenset({"k", "recheck", "verify_correct"}),
        "sprt": _SPRT_KNOBS | {"k", "recheck", "verify_correct"},  # k: verify_correct's per-step MC
    }

    ONE_ROW_PER_SOLUTION: ClassVar[bool] = True  # how its rows relate to its inputs (`rows_reconcile`)

    method: Literal["binary"]
    """Binary search for the first error (the default method)."""
    k: RolloutCount = 8
    """`fixed`: rollouts per prefix; `sprt`: rollouts per prefix of `verify_correct`'s per-step MC."""
    # The default (benchmarks/fidelity.py, docs/guides/labeling-methods.md): changepoint keeps label
    # precision about 0.9 or more across the benchmark's worlds (a hard step, luck per problem or up to
    # 0.6, ungradable rollouts, step drift), labelling less where the evidence is weak.
    search_test: SearchTestName = "changepoint"
    """How a prefix is decided: `changepoint` (the posterior, default), `fixed` (k rollouts, MC > 0 good) or `sprt`."""
    changepoint_max_rollouts: int = Field(128, ge=1, le=MAX_ROLLOUTS)
    """`changepoint`: the most rollouts one solution's search may take, pinning its first error and a checked
    solution's early prefixes included (the dataset card states it)."""
    recheck: bool = True
    """`fixed`/`sprt`: re-test the boundary more strictly and search again if it does not hold."""
    verify_correct: float = Field(0.0, ge=0.0, le=1.0)
    """`fixed`/`sprt`: share of correct solutions checked by per-step MC."""

    # `changepoint_max_rollouts` bounded only the rollouts a search spent outside pinning its first error
    # (default 56; pinning had 128 of its own) until it bounded them all (default 128, the same rows). Its
    # default is hashed as the old default was, so folders made before resume; any other value under a key
    # of its own, so a folder made when the knob meant the smaller budget (other rows) is never resumed as
    # one of today's.
    OLD_ROLLOUT_KNOB: ClassVar[tuple[str, int, int]] = ("changepoint_max_rollouts", 128, 56)

    def fingerprint_part(self, transport: bool = False) -> dict[str, Any]:
        data = super().fingerprint_part(transport)
        key, default, old_default = self.OLD_ROLLOUT_KNOB
        if key in data:
            value = data.pop(key)
            if value == default:
                data[key] = old_default
            else:
                data["changepoint_rollout_bound"] = value
        return data


class OmegaConfig(SequentialTestConfig, PosteriorConfig, SearchKnobs, RolloutTokens):
    """OmegaPRM (Luo et al. 2024) with the paper's defaults; lengths are measured in generated tokens."""

    SEARCH_KNOBS: ClassVar[dict[str, frozenset[str]]] = {
        "fixed": frozenset(),
        "sprt": _SPRT_KNOBS,
        "changepoint": frozenset({"confidence", "probe_batch", "probe_max_rollouts"}),
    }
    ALWAYS: ClassVar[frozenset[str]] = frozenset(
        {
            "method",
            "search_test",
            "k",
            "alpha",
            "beta",
            "length",
            "c_puct",
            "search_limit",
            "rollout_budget",
            "screen",
            "max_rollout_tokens",
        }
    )

    ONE_ROW_PER_SOLUTION: ClassVar[bool] = False  # a tree gives any number of rows (`rows_reconcile`)

    method: Literal["omegaprm"]
    """OmegaPRM's tree search over each question's rollouts."""
    k: RolloutCount = 16
    """Rollouts per state."""
    alpha: float = Field(0.5, gt=0.0, le=1.0)
    """Weight of the MC value in a rollout's selection score (the paper's alpha)."""
    beta: float = Field(0.9, gt=0.0, le=1.0)
    """Weight of the length penalty in a rollout's selection score (the paper's beta)."""
    length: int = Field(500, ge=1)
    """The length normaliser L of the selection score, in tokens."""
    c_puct: float = Field(0.125, ge=0.0)
    """Exploration constant of the selection."""
    search_limit: int = Field(100, ge=1, le=100_000)
    """Selections (MCTS iterations) per question."""
    rollout_budget: int = Field(400, ge=1, le=1_000_000)
    """Hard cap on rollouts per question."""
    search_test: SearchTestName = "fixed"
    """How the bisection decides a prefix: `fixed` is the paper (k rollouts, MC > 0 good), `sprt` the
    sequential test (bad_rate / good_rate), `changepoint` the posterior."""
    screen: bool = False
    """Keep a question only if its first rollouts are neither all right nor all wrong."""


P_GOOD_TESTS = ("changepoint",)  # the searches that estimate a per-step p_good
# The revision of each search whose labels have changed between releases for the same rollouts (its
# pooling, thresholds, rules): hashed into the config fingerprint and written to the manifest, so an
# output folder labeled by another revision is refused, never resumed into one dataset of two
# labelers' rows. Bump it with every change that changes a row of `benchmarks/fidelity.py`.
LABELER_REVISIONS = {"changepoint": "2026-12-06.3"}
AnnotateConfig = Annotated[MCConfig | BinaryConfig | OmegaConfig, Field(discriminator="method")]


def rows_reconcile(
    annotate: MCConfig | BinaryConfig | OmegaConfig,
    stats: ShardStats,
    rows: int,
    rejected: int,
    samples_per_problem: int,
) -> bool:
    """Every input is accounted for under the method's rule: one labeled row per sampled solution, or a
    rejection (`ONE_ROW_PER_SOLUTION`); or, a tree giving any number of rows, every problem has rows or a
    rejection. The labelers check it per shard, the summary of a finished folder on its totals."""
    if annotate.ONE_ROW_PER_SOLUTION:
        load_rejected = stats.inputs - stats.problems_loaded
        return rows + rejected == load_rejected + stats.problems_loaded * samples_per_problem
    return stats.problems_labeled + rejected >= stats.inputs


class LabelConfig(Strict):
    rule: Literal["hard", "majority", "relative"] = "hard"  # `soft` before: config/upgrade.py
    """How measured MC values become labels: `hard` (MC > 0 good), `majority` (MC >= 0.5 good), `relative`
    (bad when MC falls significantly below the previous prefix's, or is 0). Under every rule a step after
    the first bad step is bad whatever its MC (its prefix still holds that error)."""
    significance: float = Field(0.05, gt=0.0, lt=1.0)
    """`rule: relative`: significance of the one-sided binomial test against the previous prefix's MC."""
    min_confidence: float = Field(0.0, ge=0.0, le=1.0)
    """Labels whose p_good (or 1 - p_good for a bad one) is below this are not trusted: the consensus
    filter rejects such rows ("low_confidence") and the export's views stop before such a step.
    0 trusts every label (and rows of methods without p_good); `export --min-confidence` overrides it."""

    def fingerprint_part(self, transport: bool = False) -> dict[str, Any]:
        data = super().fingerprint_part(transport)
        if data["rule"] == "majority":  # hashed under its former name: folders made as `soft` resume
            data["rule"] = "soft"
        return data
