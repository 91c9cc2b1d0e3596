"""OmegaPRM (Luo et al. 2024): grow a tree of solution prefixes per question, find errors by bisection.

One annotator per QUESTION, not per sampled solution. The root is the empty prefix; it is estimated
with k rollouts. Every measured prefix (a "state") with 0 < MC < 1 puts its incorrect rollouts into a
candidate pool: those are the rollouts most likely to hold an error after a still-solvable prefix.
Each iteration selects the (state, rollout) pair with the highest

    Q(s, r) + U(s),  Q = alpha^(1 - MC(s)) * beta^(len(r) / L),  U = c_puct * sqrt(sum_i N(s_i)) / (1 + N(s))

(len in generated tokens), bisects the rollout's steps for the first prefix with MC = 0 (MC > 0 moves
right, MC = 0 moves left), adds the measured good prefixes and the first bad one to the tree as new
states, and increments N of the selected state (the paper's maintenance). New states with
0 < MC < 1 feed the pool in turn.

What differs from the public implementation (openr), on purpose:
- a selected rollout leaves the pool for good (openr's maintenance re-inserts it, so the same
  rollout can be searched again and again);
- the rollout budget is a hard limit checked before every probe: a probe asks only for what still
  fits, and the search stops when nothing fits (openr checks it once per iteration and overshoots);
- the selected rollout is known incorrect: its own verdict stands for the complete rollout, which
  is never re-sampled (openr spends k rollouts on a text that already has an answer);
- a prefix already measured in this question is reused, never re-estimated (two rollouts of one
  state often share their first steps);
- each prefix is estimated once (openr estimates every new state twice).

The tree (`omega_tree.PrefixTree`, a networkx DiGraph whose nodes are prefixes) lives in
omega_tree.py with its flattening into rows: `OmegaResult.paths()` gives one entry per root-to-leaf
path, with per-step counts in the shape of `Annotation` so the labeling rules of `labels.apply_rule`
apply unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import partial

from prm_synth.annotate.bisection import decide
from prm_synth.annotate.changepoint import Posterior, Priors
from prm_synth.annotate.omega_tree import ROOT, OmegaPath, PrefixTree, Steps, evidence_along, tree_paths
from prm_synth.annotate.protocol import Annotator, Probe, ProbeResult
from prm_synth.annotate.search import make_search
from prm_synth.config import OmegaConfig
from prm_synth.records import OmegaStop, VerdictStatus


# ------------------------------------------------------------------ selection score
def q_value(mc: float, tokens: int, alpha: float, beta: float, length: int) -> float:
    """Q(s, r): high for a likely-good state (MC near 1) and a short rollout (few tokens)."""
    return alpha ** (1.0 - mc) * beta ** (tokens / length)


def u_value(visits: int, total_visits: int, c_puct: float) -> float:
    """U(s): the exploration bonus of a state selected `visits` times out of `total_visits`."""
    return c_puct * math.sqrt(total_visits) / (1 + visits)


# ------------------------------------------------------------------ results
@dataclass(frozen=True)
class Candidate:
    """An incorrect rollout of a state with 0 < MC < 1, waiting in the pool."""

    state: int  # node id of the state it was drawn from
    text: str  # the completion after the state's prefix
    tokens: int  # generated tokens: len(r) in Q


@dataclass
class OmegaResult:
    tree: PrefixTree
    screened_out: bool
    stop_reason: OmegaStop
    # search_test changepoint: the posterior's priors, and the confidence a step label needs (paths get p_good)
    priors: Priors | None = None
    confidence: float = 0.9
    # every prefix the search measured, the tree's states or not: (right, graded) (the posterior's evidence)
    measured: dict[str, tuple[int, int]] = field(default_factory=dict)
    # a bad state's node -> the selected rollout the bisection found it on (its steps, known incorrect)
    found_on: dict[int, Steps] = field(default_factory=dict)

    def paths(self) -> list[OmegaPath]:
        """One entry per root-to-leaf path (leaves in node order); the bare root gives none."""
        return tree_paths(self.tree, self.priors, self.confidence, self.measured, self.found_on)


# ------------------------------------------------------------------ the search
class OmegaSearch:
    """The state of one question's search; `run()` is the annotator generator."""

    def __init__(
        self,
        config: OmegaConfig,
        split: Callable[[str], list[str]],
        correct_leaves: int = 1,
    ) -> None:
        self.config = config
        self._search = make_search(config)
        # search_test changepoint: each prefix decided by the change-point posterior of its rollout,
        # under the weak default priors (None for the other tests)
        self.priors = self._search.omega_priors()
        self.split = split
        self.correct_leaves = correct_leaves
        self.tree = PrefixTree()
        self._known: dict[str, ProbeResult] = {}  # every prefix measured in this question
        self._seen_complete: set[str] = set()  # complete texts already pooled, selected or in the tree
        self.pool: list[Candidate] = []
        self.selected: list[Candidate] = []
        self.spent = 0  # rollouts this question's probes asked for (never above the budget)
        self.found_on: dict[int, Steps] = {}  # a bad state -> the rollout its bisection ran on

    # ---------------------------------------------------------- main loop
    def run(self) -> Annotator[OmegaResult]:
        cfg = self.config
        root = yield from self._measure("", -1)
        if root is None:  # a token budget no rollout of this question fits: nothing measured, nothing labeled
            return self._result(screened_out=False, stop_reason="budget")
        self.tree.set_measurement(ROOT, root)
        if cfg.screen and root.correct in (0, root.total):
            # All right or all wrong: the question teaches the PRM nothing at this policy's level.
            return self._result(screened_out=True, stop_reason="screened_out")
        self._harvest(ROOT)

        stop_reason: OmegaStop = "search_limit"
        while len(self.selected) < cfg.search_limit:
            if not self.pool:
                stop_reason = "pool_empty"
                break
            if self.spent >= cfg.rollout_budget:
                stop_reason = "budget"
                break
            candidate = self._select()
            finished = yield from self._binary_search(candidate)
            self.tree.nodes[candidate.state]["N"] += 1  # maintenance: the selected state was visited
            if not finished and self.spent >= cfg.rollout_budget:
                stop_reason = "budget"
                break
            # Unfinished with budget left: the test gave up on a prefix (one it cannot decide, or whose
            # rollouts cannot be graded). That ends this rollout's bisection, not the question's search.
        return self._result(screened_out=False, stop_reason=stop_reason)

    def _select(self) -> Candidate:
        """Pop the best candidate by Q + U (ties: the one pooled first). It never comes back."""
        total_visits = sum(n for _, n in self.tree.nodes(data="N"))
        cfg = self.config

        def score(c: Candidate) -> float:
            node = self.tree.nodes[c.state]
            q = q_value(node["mc"], c.tokens, cfg.alpha, cfg.beta, cfg.length)
            return q + u_value(node["N"], total_visits, cfg.c_puct)

        # Scores change with every visit, so they are recomputed here rather than kept in a heap;
        # the pool is bounded by the rollout budget, so a linear scan is cheap.
        best = max(range(len(self.pool)), key=lambda i: (score(self.pool[i]), -i))
        candidate = self.pool.pop(best)
        self.selected.append(candidate)
        return candidate

    def _binary_search(self, candidate: Candidate) -> Generator[list[Probe], list[ProbeResult], bool]:
        """Bisect the rollout for its first prefix with MC = 0; False when the budget ran out first or
        the test gave up on a prefix (the first error is then left unresolved).

        Invariant: position lo is good (−1 is the selected state itself, which has MC > 0) and
        position hi is bad (n−1 is the complete rollout: known incorrect, never re-sampled).
        """
        state = self.tree.nodes[candidate.state]
        base: Steps = state["steps"]
        steps = self.split(candidate.text)
        lo, hi = -1, len(steps) - 1
        good: list[tuple[int, ProbeResult]] = []
        bad: dict[int, ProbeResult] = {}
        while hi - lo > 1:
            mid = (lo + hi) // 2
            decision = yield from self._decide(
                state["prefix"] + "".join(steps[: mid + 1]), len(base) + mid, base + tuple(steps)
            )
            if decision is None:
                break
            is_good, result = decision
            if is_good:
                good.append((mid, result))
                lo = mid
            else:
                bad[mid] = result
                hi = mid
        # The measured good prefixes all lie before the first error: they become states either way.
        for mid, result in good:
            self._add_state(base + tuple(steps[: mid + 1]), result, good=True)
        if hi - lo > 1:
            # Interrupted (by the budget, or a prefix the test gave up on): the first error is somewhere
            # in (lo, hi]; a bad state at hi would claim it is at hi, so the unresolved bad probes stay
            # out of the tree.
            return False
        if hi == len(steps) - 1:
            self._add_complete(base, state["prefix"], candidate.text, "incorrect", candidate.tokens)
        else:
            node = self._add_state(base + tuple(steps[: hi + 1]), bad[hi], good=False)
            if self.tree.is_bad(node):  # not a state an earlier search already decided good
                self.found_on.setdefault(node, base + tuple(steps))
        return True

    def _decide(
        self, prefix: str, step: int, rollout_steps: Steps = ()
    ) -> Generator[list[Probe], list[ProbeResult], tuple[bool, ProbeResult] | None]:
        """Good or bad, with the measurement behind it; None when the test gives up or the budget ran
        out first. The test is the config's search's (search.py); a changepoint one decides this prefix
        by the change-point posterior of the whole rollout."""
        test = self._search.prefix_test(partial(self._posterior, rollout_steps), step)
        return (yield from decide(test, self._known.get(prefix), partial(self._measure, prefix, step)))

    def _posterior(self, rollout_steps: Steps) -> Posterior:
        """The posterior of a selected rollout from every prefix measured so far (the rollout is known
        incorrect)."""
        assert self.priors is not None
        return Posterior(evidence_along(self.tree, rollout_steps, "incorrect", self._known), self.priors)

    # ---------------------------------------------------------- probing under the budget
    def _measure(
        self, prefix: str, step: int, want: int | None = None
    ) -> Generator[list[Probe], list[ProbeResult], ProbeResult | None]:
        """`want` (default k) rollouts of `prefix` in total, or as many as the budget still allows;
        None if none fit."""
        want = self.config.k if want is None else want
        have = self._known.get(prefix)
        have_total = have.total if have else 0
        if have is not None and have_total >= want:
            return have  # measured earlier in this question: free
        room = self.config.rollout_budget - self.spent
        new = min(want - have_total, room)
        if new <= 0:
            return None
        # The scheduler reads k as "the first k samples": asking have_total + new draws `new` at most.
        (result,) = yield [Probe(prefix, have_total + new, step)]
        if result.total <= have_total:  # nothing new came back: the scheduler's token budget is spent
            self.spent = self.config.rollout_budget
            return None
        self.spent += new
        self._known[prefix] = result
        return result

    # ---------------------------------------------------------- tree and pool
    def _add_state(self, steps: Steps, result: ProbeResult, good: bool) -> int:
        prefix = "".join(steps)
        known = self.tree.node_of(prefix)
        if known is not None:
            return known  # reached again through another rollout: already harvested
        node = self.tree.insert(prefix, steps, "state")
        self.tree.set_measurement(node, result)
        if self._search.source == "test":
            # The test's decision is the label (MC alone would call a lucky wrong prefix good).
            self.tree.nodes[node]["decided"] = good
        if self.tree.is_bad(node):
            self.tree.prune_lucky_leaves(node)
        self._harvest(node)
        return node

    def _add_complete(self, base: Steps, base_prefix: str, text: str, status: VerdictStatus, tokens: int) -> int:
        """A complete rollout as a leaf: its verdict is its one sample (MC 1/1 or 0/1)."""
        full = base_prefix + text
        self._seen_complete.add(full)
        known = self.tree.node_of(full)
        if known is not None:
            return known
        steps = base + tuple(self.split(text))
        if status == "correct" and self.tree.is_bad(self.tree.deepest_prefix(steps)):
            return -1  # a correct ending below a bad state got there by luck: not an all-good path
        node = self.tree.insert(full, steps, "rollout")
        self.tree.nodes[node].update(
            correct=int(status == "correct"),
            total=1,
            mc=float(status == "correct"),
            tokens=tokens,
            final_status=status,
        )
        return node

    def _harvest(self, node: int) -> None:
        """Feed the pool from a new state (the paper: only states with 0 < MC < 1), add correct leaves.

        A state with MC = 0 is already wrong and one with MC = 1 shows no error to find. Rollouts
        that complete to a text already pooled or in the tree are skipped: searching them again
        would only repeat the same probes.
        """
        attrs = self.tree.nodes[node]
        prefix, steps = attrs["prefix"], attrs["steps"]
        if attrs["decided"] is not False and 0 < attrs["correct"] < attrs["total"]:
            for text, status, tokens in attrs["rollouts"]:
                if status == "incorrect" and text and prefix + text not in self._seen_complete:
                    self._seen_complete.add(prefix + text)
                    self.pool.append(Candidate(node, text, tokens))
        # Complete correct rollouts give the dataset its all-good paths (as openr keeps them): the
        # first `correct_leaves` of them in sample order. One whose text is already in the tree still
        # counts; skipping it for the next one would favour rollouts that differ from the common
        # clean text, i.e. lucky ones that hold an error.
        correct = [(text, tokens) for text, status, tokens in attrs["rollouts"] if status == "correct" and text]
        for text, tokens in correct[: self.correct_leaves]:
            self._add_complete(steps, prefix, text, "correct", tokens)

    def _result(self, screened_out: bool, stop_reason: OmegaStop) -> OmegaResult:
        return OmegaResult(
            tree=self.tree,
            screened_out=screened_out,
            stop_reason=stop_reason,
            priors=self.priors,
            confidence=self.config.confidence,
            measured={prefix: (r.correct, r.graded) for prefix, r in self._known.items()},
            found_on={node: steps for node, steps in self.found_on.items() if node in self.tree},
        )


def omegaprm(
    config: OmegaConfig,
    split: Callable[[str], list[str]],
    correct_leaves: int = 1,
) -> Annotator[OmegaResult]:
    """The OmegaPRM annotator for one question (drive it with the ProbeScheduler).

    `split` cuts a text into lossless steps (e.g. `functools.partial(split_steps, strategy=...)`).
    `correct_leaves`: how many complete correct rollouts of each state become leaves (all-good
    paths); 0 keeps only what the search measured.
    """
    if correct_leaves < 0:
        raise ValueError("correct_leaves must be >= 0")
    return OmegaSearch(config, split, correct_leaves).run()
