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

The tree is a networkx DiGraph whose nodes are prefixes; `OmegaResult.paths()` flattens it into one
entry per root-to-leaf path, with per-step counts in the shape of `Annotation` so the labeling rules
of `labels.apply_rule` apply unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import networkx as nx

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.calibration import (
    UNDECIDED_BUDGET,
    Evidence,
    Posterior,
    RunEstimates,
    labels_from_posterior,
)
from prm_synth.annotate.prefix_test import CalibratedTest, PrefixTest, decide, make_test
from prm_synth.annotate.protocol import Annotator, Probe, ProbeResult
from prm_synth.config import OmegaConfig
from prm_synth.schema import NodeKind, OmegaStop, VerdictStatus

METHOD = "omegaprm"
ROOT = 0  # node id of the empty prefix

Steps = tuple[str, ...]
Rollout = tuple[str, str, int]  # (completion text, verdict status, generated tokens)


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
class OmegaPath:
    """One root-to-leaf path of the tree: a (partial or complete) solution with per-step counts.

    `steps` joins to the leaf's prefix text exactly. Step i carries the counts of the tree node
    whose prefix ends with step i ("mc": measured by rollouts; "verdict": the leaf is a complete
    rollout and its own grade is the one sample); steps inside an edge were never probed ("none",
    total 0), or "inferred" good when `paths(infer_good=True)` was asked for.
    """

    steps: list[str]
    mc_correct: list[int]
    mc_total: list[int]
    label_source: list[str]
    final_status: VerdictStatus | None  # the leaf rollout's verdict when the leaf is a complete rollout
    nodes: list[int]  # node ids from the root (excluded) to the leaf
    annotation: Annotation

    @property
    def text(self) -> str:
        return "".join(self.steps)


@dataclass
class OmegaResult:
    tree: nx.DiGraph
    rollouts: int  # rollouts this question's probes asked for (never above the budget)
    tokens: int  # generated tokens of those rollouts
    selections: int
    selected: list[Candidate]  # in selection order; a rollout appears at most once
    screened_out: bool
    stop_reason: OmegaStop
    pruned_lucky: int = 0  # complete correct leaves dropped because they lay below a bad state
    # calibrated search: the run's estimates, and the confidence a step label needs (paths get p_good)
    estimates: RunEstimates | None = None
    confidence: float = 0.9

    def paths(self, infer_good: bool = False) -> list[OmegaPath]:
        """One entry per root-to-leaf path (leaves in node order); the bare root gives none.

        With `infer_good`, unprobed steps before the path's last good measurement are marked
        "inferred" good (decided True): the hard rule's own assumption that a prefix is good when a
        longer prefix is. Without it they stay "none" and no label is claimed for them.
        """
        out = []
        for leaf in sorted(self.tree.nodes):
            if leaf == ROOT or self.tree.out_degree(leaf):
                continue
            node_path = nx.shortest_path(self.tree, ROOT, leaf)[1:]
            path = _flatten(self.tree, node_path, infer_good)
            if self.estimates is not None:
                _label_by_posterior(self.tree, path, self.estimates, self.confidence)
            out.append(path)
        return out


def _label_by_posterior(tree: nx.DiGraph, path: OmegaPath, estimates: RunEstimates, confidence: float) -> None:
    """The calibrated search's labels for a path: the change-point posterior over its measured prefixes."""
    ann = path.annotation
    horizon = None
    if path.final_status is None:  # a partial path: its prefixes have as many steps ahead as a complete one
        lengths = sorted(len(a["steps"]) for _, a in tree.nodes(data=True) if a["kind"] == "rollout")
        horizon = lengths[len(lengths) // 2] if lengths else None
    post = Posterior(_evidence(tree, path.steps, path.final_status or "unknown", horizon=horizon), estimates)
    lab = labels_from_posterior(post.p_good.tolist(), confidence, UNDECIDED_BUDGET)
    ann.p_good = [float(p) for p in post.p_good]
    ann.unlabeled_reason = list(lab.reasons)
    ann.decided.clear()
    for i, label in enumerate(lab.labels):
        if label is None:
            ann.label_source[i] = "none"
        else:
            source = ann.label_source[i]
            ann.decide(i, label, "verdict" if source == "verdict" else "test" if ann.mc_total[i] else "inferred")


def _evidence(
    tree: nx.DiGraph,
    steps: Sequence[str],
    verdict: VerdictStatus,
    known: dict[str, ProbeResult] | None = None,
    horizon: int | None = None,
) -> Evidence:
    """Counts of every measured prefix along `steps` (index j: the first j steps; 0 is the question),
    from the tree's states or, during the search, from every prefix measured so far (`known`)."""
    counts = (
        {prefix: (r.correct, r.total) for prefix, r in known.items()}
        if known is not None
        else {a["prefix"]: (a["correct"], a["total"]) for _, a in tree.nodes(data=True) if a["kind"] != "rollout"}
    )
    ev = Evidence.empty(len(steps), verdict, horizon)
    for j in range(len(steps)):
        c, t = counts.get("".join(steps[:j]), (0, 0))
        ev.correct[j], ev.total[j] = c, t
    return ev


def _flatten(tree: nx.DiGraph, node_path: list[int], infer_good: bool) -> OmegaPath:
    leaf = tree.nodes[node_path[-1]]
    steps = list(leaf["steps"])
    n = len(steps)
    correct, total, source = [0] * n, [0] * n, ["none"] * n
    for node_id in node_path:
        node = tree.nodes[node_id]
        i = len(node["steps"]) - 1
        correct[i], total[i] = node["correct"], node["total"]
        source[i] = "verdict" if node["kind"] == "rollout" else "mc"
    ann = Annotation(METHOD, correct, total, source)
    for node_id in node_path:
        node = tree.nodes[node_id]
        if node.get("decided") is not None:
            ann.decide(len(node["steps"]) - 1, node["decided"], "test")
    if infer_good:
        last_good = max((i for i in range(n) if source[i] != "none" and correct[i] > 0), default=-1)
        for i in range(last_good):
            if source[i] == "none":
                ann.decide(i, True, "inferred")
    final_status = leaf["final_status"] if leaf["kind"] == "rollout" else None
    return OmegaPath(steps, correct, total, ann.label_source, final_status, node_path, ann)


# ------------------------------------------------------------------ the search
class OmegaSearch:
    """The state of one question's search; `run()` is the annotator generator."""

    def __init__(
        self,
        config: OmegaConfig,
        split: Callable[[str], list[str]],
        correct_leaves: int = 1,
        estimates: RunEstimates | None = None,
    ) -> None:
        self.config = config
        self._test = make_test(config)
        calibrated = isinstance(self._test, CalibratedTest)
        self.estimates = (estimates or RunEstimates()) if calibrated else None
        self.split = split
        self.correct_leaves = correct_leaves
        self.tree = nx.DiGraph()
        self.tree.add_node(ROOT, **_node_attrs("", (), "root"))
        self._by_text: dict[str, int] = {"": ROOT}
        self._known: dict[str, ProbeResult] = {}  # every prefix measured in this question
        self._seen_complete: set[str] = set()  # complete texts already pooled, selected or in the tree
        self.pool: list[Candidate] = []
        self.selected: list[Candidate] = []
        self.spent = 0
        self.tokens = 0
        self.pruned_lucky = 0  # correct leaves dropped because they lie below a bad state

    # ---------------------------------------------------------- main loop
    def run(self) -> Annotator[OmegaResult]:
        cfg = self.config
        root = yield from self._measure("", -1)
        assert root is not None  # the budget is at least 1 and nothing was spent yet
        self._set_measurement(ROOT, root)
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
            if not finished:
                stop_reason = "budget"
                break
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
        """Bisect the rollout for its first prefix with MC = 0; False when the budget ran out first.

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
            # Interrupted by the budget: the first error is somewhere in (lo, hi]; a bad state at hi
            # would claim it is at hi, so the unresolved bad probes stay out of the tree.
            return False
        if hi == len(steps) - 1:
            self._add_complete(base, state["prefix"], candidate.text, "incorrect", candidate.tokens)
        else:
            self._add_state(base + tuple(steps[: hi + 1]), bad[hi], good=False)
        return True

    def _decide(
        self, prefix: str, step: int, rollout_steps: Steps = ()
    ) -> Generator[list[Probe], list[ProbeResult], tuple[bool, ProbeResult] | None]:
        """Good or bad, with the measurement behind it; None when the test gives up or the budget ran
        out first. The test is the config's (`prefix_test.py`); a calibrated one decides this prefix by
        the change-point posterior of the whole rollout."""
        test: PrefixTest = self._test
        if isinstance(self._test, CalibratedTest):
            test = self._test.for_prefix(partial(self._posterior, rollout_steps), step)
        return (yield from decide(test, self._known.get(prefix), partial(self._measure, prefix, step)))

    def _posterior(self, rollout_steps: Steps) -> Posterior:
        """The posterior of a selected rollout from every prefix measured so far, pooled into the run's
        estimates (the rollout is known incorrect)."""
        assert self.estimates is not None
        post = Posterior(_evidence(self.tree, rollout_steps, "incorrect", self._known), self.estimates)
        self.estimates.update(f"omega-{id(self)}-{rollout_steps!r}", post)
        return post

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
        # The scheduler reads k as "at least k in total": asking have_total + new draws `new` at most.
        (result,) = yield [Probe(prefix, have_total + new, step)]
        self.spent += new
        self.tokens += sum(tokens for _, _, tokens in result.rollouts[have_total : have_total + new])
        self._known[prefix] = result
        return result

    # ---------------------------------------------------------- tree and pool
    def _add_state(self, steps: Steps, result: ProbeResult, good: bool) -> int:
        prefix = "".join(steps)
        if prefix in self._by_text:
            return self._by_text[prefix]  # reached again through another rollout: already harvested
        node = self._insert(prefix, steps, "state")
        self._set_measurement(node, result)
        if self._test.source == "test":
            # The test's decision is the label (MC alone would call a lucky wrong prefix good).
            self.tree.nodes[node]["decided"] = good
        if self._is_bad(node):
            self._prune_lucky_leaves(node)
        self._harvest(node)
        return node

    def _add_complete(self, base: Steps, base_prefix: str, text: str, status: VerdictStatus, tokens: int) -> int:
        """A complete rollout as a leaf: its verdict is its one sample (MC 1/1 or 0/1)."""
        full = base_prefix + text
        self._seen_complete.add(full)
        if full in self._by_text:
            return self._by_text[full]
        steps = base + tuple(self.split(text))
        if status == "correct" and self._is_bad(self._deepest_prefix(steps)):
            return -1  # a correct ending below a bad state got there by luck: not an all-good path
        node = self._insert(full, steps, "rollout")
        self.tree.nodes[node].update(
            correct=int(status == "correct"),
            total=1,
            mc=float(status == "correct"),
            tokens=tokens,
            final_status=status,
        )
        return node

    def _insert(self, prefix: str, steps: Steps, kind: NodeKind) -> int:
        """Add a node under the deepest node whose steps are a proper prefix of its steps.

        Nodes come in bisection order (a middle position before a shallower one), so a new node
        can fall inside an existing edge: the parent's children that extend it move under it.
        The tree stays a prefix tree: along every edge the parent's steps begin the child's.
        """
        parent = self._deepest_prefix(steps)
        node = max(self.tree.nodes) + 1  # ids stay unique when lucky leaves are pruned
        self.tree.add_node(node, **_node_attrs(prefix, steps, kind))
        for child in list(self.tree.successors(parent)):
            if self.tree.nodes[child]["steps"][: len(steps)] == steps:
                self.tree.remove_edge(parent, child)
                self.tree.add_edge(node, child)
        self.tree.add_edge(parent, node)
        self._by_text[prefix] = node
        return node

    def _deepest_prefix(self, steps: Steps) -> int:
        """The deepest node whose steps are a proper prefix of `steps`."""
        parent = ROOT
        descended = True
        while descended:
            descended = False
            for child in self.tree.successors(parent):
                child_steps = self.tree.nodes[child]["steps"]
                if len(child_steps) < len(steps) and steps[: len(child_steps)] == child_steps:
                    parent, descended = child, True
                    break
        return parent

    def _is_bad(self, node: int) -> bool:
        """A state labeled bad: decided so by a test, or (the paper's rule) measured with MC = 0."""
        attrs = self.tree.nodes[node]
        if node == ROOT or attrs["kind"] != "state":
            return False
        if attrs["decided"] is not None:
            return not attrs["decided"]
        return attrs["total"] > 0 and attrs["correct"] == 0

    def _prune_lucky_leaves(self, node: int) -> None:
        """Drop the complete correct leaves below a bad state (they moved there when it was inserted).

        Their rows would say "the answer is right" after a step measured bad: either the state's
        measurement or the leaf's all-good path is wrong, and with a luck rate above 0 it is the leaf
        (a wrong prefix that reached the answer by luck). Without them the state is a leaf itself,
        and its path names the first error.
        """
        for below in list(nx.descendants(self.tree, node)):
            attrs = self.tree.nodes[below]
            if attrs["kind"] == "rollout" and attrs["final_status"] == "correct" and not self.tree.out_degree(below):
                self.tree.remove_node(below)
                del self._by_text[attrs["prefix"]]
                self.pruned_lucky += 1

    def _set_measurement(self, node: int, result: ProbeResult) -> None:
        self.tree.nodes[node].update(
            correct=result.correct,
            total=result.total,
            unknown=result.unknown,
            tokens=result.tokens,
            mc=result.mc,
            rollouts=list(result.rollouts),
        )

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
            rollouts=self.spent,
            tokens=self.tokens,
            selections=len(self.selected),
            selected=self.selected,
            screened_out=screened_out,
            stop_reason=stop_reason,
            pruned_lucky=self.pruned_lucky,
            estimates=self.estimates,
            confidence=self.config.confidence,
        )


def _node_attrs(prefix: str, steps: Steps, kind: NodeKind) -> dict[str, Any]:
    """Every node carries the same keys (kind: root | state | rollout, a complete rollout leaf)."""
    return {
        "prefix": prefix,
        "steps": steps,
        "kind": kind,
        "N": 0,
        "correct": 0,
        "total": 0,
        "unknown": 0,
        "tokens": 0,
        "mc": None,
        "rollouts": [],
        "final_status": None,
        "decided": None,  # the sequential test's label of a state (search_test: sprt)
    }


def omegaprm(
    config: OmegaConfig,
    split: Callable[[str], list[str]],
    correct_leaves: int = 1,
    estimates: RunEstimates | None = None,
) -> Annotator[OmegaResult]:
    """The OmegaPRM annotator for one question (drive it with the ProbeScheduler).

    `split` cuts a text into lossless steps (e.g. `functools.partial(split_steps, strategy=...)`).
    `correct_leaves`: how many complete correct rollouts of each state become leaves (all-good
    paths); 0 keeps only what the search measured. `estimates`: the run's shared luck and difficulty
    estimates (search_test: calibrated; one object for every question of a run).
    """
    if correct_leaves < 0:
        raise ValueError("correct_leaves must be >= 0")
    return OmegaSearch(config, split, correct_leaves, estimates).run()


# ------------------------------------------------------------------ saving trees
def tree_to_json(tree: nx.DiGraph) -> dict[str, Any]:
    """Node-link data of the tree: plain JSON types (tuples become lists)."""
    return json.loads(json.dumps(nx.node_link_data(tree, edges="edges")))
