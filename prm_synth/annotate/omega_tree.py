"""OmegaPRM's prefix tree and its rows: the tree the search grows, flattened into one path per leaf.

Nodes are solution prefixes (node 0, `ROOT`, is the question alone); along every edge the parent's
steps begin the child's. Each node carries the same keys (`node_attrs`): its prefix and steps, its
kind (the root, a measured state, or a complete rollout as a leaf), its rollout counts, visits N, and
the test's decision. `tree_paths` flattens the tree into one `OmegaPath` per root-to-leaf path, with
per-step counts in the shape of `Annotation`, so the labeling rules of `labels.apply_rule` apply
unchanged; `tree_to_json` is the tree as saved with a shard (node-link JSON).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.changepoint import Evidence, Posterior, Priors
from prm_synth.annotate.protocol import ProbeResult
from prm_synth.records import NodeKind, VerdictStatus
from prm_synth.records.labels import UNDECIDED_BUDGET, labels_from_posterior

METHOD = "omegaprm"
ROOT = 0  # node id of the empty prefix

Steps = tuple[str, ...]


class PrefixTree(nx.DiGraph):
    """A networkx DiGraph of prefixes that also knows each prefix's node (one node per text)."""

    def __init__(self, incoming_graph_data: Any = None, **attr: Any) -> None:
        super().__init__(incoming_graph_data, **attr)
        self._by_text: dict[str, int] = {}
        if incoming_graph_data is None:
            self.add_node(ROOT, **node_attrs("", (), "root"))
            self._by_text[""] = ROOT

    def node_of(self, prefix: str) -> int | None:
        """The node of a prefix text, if the tree has one."""
        return self._by_text.get(prefix)

    def insert(self, prefix: str, steps: Steps, kind: NodeKind) -> int:
        """Add a node under the deepest node whose steps are a proper prefix of its steps.

        Nodes come in bisection order (a middle position before a shallower one), so a new node
        can fall inside an existing edge: the parent's children that extend it move under it.
        The tree stays a prefix tree: along every edge the parent's steps begin the child's.
        """
        parent = self.deepest_prefix(steps)
        node = max(self.nodes) + 1  # ids stay unique when lucky leaves are pruned
        self.add_node(node, **node_attrs(prefix, steps, kind))
        for child in list(self.successors(parent)):
            if self.nodes[child]["steps"][: len(steps)] == steps:
                self.remove_edge(parent, child)
                self.add_edge(node, child)
        self.add_edge(parent, node)
        self._by_text[prefix] = node
        return node

    def deepest_prefix(self, steps: Steps) -> int:
        """The deepest node whose steps are a proper prefix of `steps`."""
        parent = ROOT
        descended = True
        while descended:
            descended = False
            for child in self.successors(parent):
                child_steps = self.nodes[child]["steps"]
                if len(child_steps) < len(steps) and steps[: len(child_steps)] == child_steps:
                    parent, descended = child, True
                    break
        return parent

    def is_bad(self, node: int) -> bool:
        """A state labeled bad: decided so by a test, or (the paper's rule) measured with MC = 0."""
        attrs = self.nodes[node]
        if node == ROOT or attrs["kind"] != "state":
            return False
        if attrs["decided"] is not None:
            return not attrs["decided"]
        return attrs["total"] > 0 and attrs["correct"] == 0

    def prune_lucky_leaves(self, node: int) -> None:
        """Drop the complete correct leaves below a bad state (they moved there when it was inserted).

        Their rows would say "the answer is right" after a step measured bad: either the state's
        measurement or the leaf's all-good path is wrong, and with a luck rate above 0 it is the leaf
        (a wrong prefix that reached the answer by luck). Without them the state is a leaf itself,
        and its path names the first error.
        """
        for below in list(nx.descendants(self, node)):
            attrs = self.nodes[below]
            if attrs["kind"] == "rollout" and attrs["final_status"] == "correct" and not self.out_degree(below):
                self.remove_node(below)
                del self._by_text[attrs["prefix"]]

    def set_measurement(self, node: int, result: ProbeResult) -> None:
        self.nodes[node].update(
            correct=result.correct,
            total=result.graded,  # the evidence: ungradable rollouts are counted apart, never as failures
            unknown=result.unknown,
            tokens=result.tokens,
            mc=result.mc,
            rollouts=list(result.rollouts),
        )


def node_attrs(prefix: str, steps: Steps, kind: NodeKind) -> dict[str, Any]:
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


# ------------------------------------------------------------------ rows
@dataclass
class OmegaPath:
    """One root-to-leaf path of the tree: a (partial or complete) solution with per-step counts.

    `steps` joins to the leaf's prefix text exactly. Step i carries the counts of the tree node
    whose prefix ends with step i ("mc": measured by rollouts; "verdict": the leaf is a complete
    rollout and its own grade is the one sample); steps inside an edge were never probed ("none",
    total 0).
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


def tree_paths(
    tree: nx.DiGraph,
    priors: Priors | None = None,
    confidence: float = 0.9,
    measured: dict[str, tuple[int, int]] | None = None,
    found_on: dict[int, Steps] | None = None,
) -> list[OmegaPath]:
    """One entry per root-to-leaf path (leaves in node order); the bare root gives none. With the
    change-point posterior's `priors` (search_test changepoint), each path is labeled by it, from the
    counts of every prefix the search `measured` (default: the tree's states) and, for a path that ends
    at a bad state, along the rollout the bisection `found_on` it."""
    out = []
    for leaf in sorted(tree.nodes):
        if leaf == ROOT or tree.out_degree(leaf):
            continue
        node_path = nx.shortest_path(tree, ROOT, leaf)[1:]
        path = _flatten(tree, node_path)
        if priors is not None:
            rollout = (found_on or {}).get(leaf)
            _label_by_posterior(tree, path, priors, confidence, measured, rollout)
        out.append(path)
    return out


def _flatten(tree: nx.DiGraph, node_path: list[int]) -> OmegaPath:
    leaf = tree.nodes[node_path[-1]]
    steps = list(leaf["steps"])
    n = len(steps)
    correct, total, unknown, source = [0] * n, [0] * n, [0] * n, ["none"] * n
    for node_id in node_path:
        node = tree.nodes[node_id]
        i = len(node["steps"]) - 1
        correct[i], total[i], unknown[i] = node["correct"], node["total"], node.get("unknown", 0)
        source[i] = "verdict" if node["kind"] == "rollout" else "mc"
    ann = Annotation(METHOD, correct, total, source, mc_unknown=unknown)
    for node_id in node_path:
        node = tree.nodes[node_id]
        if node.get("decided") is not None:
            ann.decide(len(node["steps"]) - 1, node["decided"], "test")
    final_status = leaf["final_status"] if leaf["kind"] == "rollout" else None
    return OmegaPath(steps, correct, total, ann.label_source, final_status, node_path, ann)


def _label_by_posterior(
    tree: nx.DiGraph,
    path: OmegaPath,
    priors: Priors,
    confidence: float,
    measured: dict[str, tuple[int, int]] | None = None,
    rollout: Steps | None = None,
) -> None:
    """A path's labels from the change-point posterior over its measured prefixes. A path that ends at
    a bad state is the beginning of the selected rollout its bisection ran on: that rollout's measured
    prefixes past the state and its own wrong answer are evidence too (the search decided the state
    bad on them; the path alone would lose them)."""
    ann = path.annotation
    horizon = None
    if rollout is not None and list(rollout[: len(path.steps)]) == path.steps:
        ev = evidence_along(tree, rollout, "incorrect", measured=measured)
    else:
        if path.final_status is None:  # a partial path: its prefixes have as many steps ahead as a complete one
            lengths = sorted(len(a["steps"]) for _, a in tree.nodes(data=True) if a["kind"] == "rollout")
            # at least one step past the leaf: the leaf is a measured state, its own prefix is evidence
            horizon = max(lengths[len(lengths) // 2] if lengths else 0, len(path.steps) + 1)
        ev = evidence_along(tree, path.steps, path.final_status or "unknown", horizon=horizon, measured=measured)
    post = Posterior(ev, priors)
    p_good = post.p_good[: len(path.steps)]  # a partial path's posterior spans the horizon
    lab = labels_from_posterior(p_good.tolist(), confidence, UNDECIDED_BUDGET)
    ann.p_good = [float(p) for p in p_good]
    ann.unlabeled_reason = list(lab.reasons)
    ann.decided.clear()
    for i, label in enumerate(lab.labels):
        if label is None:
            ann.label_source[i] = "none"
        else:
            source = ann.label_source[i]
            ann.decide(i, label, "verdict" if source == "verdict" else "test" if ann.mc_total[i] else "inferred")


def evidence_along(
    tree: nx.DiGraph,
    steps: Sequence[str],
    verdict: VerdictStatus,
    known: dict[str, ProbeResult] | None = None,
    horizon: int | None = None,
    measured: dict[str, tuple[int, int]] | None = None,
) -> Evidence:
    """Counts of every measured prefix along `steps` (index j: the first j steps; 0 is the question),
    from the tree's states, or every prefix the search measured (`measured`: (right, graded)), or during
    the search every prefix measured so far (`known`).
    `horizon`: steps of a complete solution when `steps` are only its beginning (a partial path): the
    evidence then spans the horizon, the prefixes past the path unmeasured and the verdict unknown,
    so a prefix's clean chance counts the steps still ahead of it, not the path's own length, and the
    path's own text (prefix n) is a measured prefix too (a partial path ends at a state: often the bad
    one a bisection found). Without a horizon, prefix n is the complete solution: its verdict."""
    counts = (
        {prefix: (r.correct, r.graded) for prefix, r in known.items()}
        if known is not None
        else measured
        if measured
        else {
            # a node's total is already its graded rollouts (`set_measurement`): unknown is not subtracted again
            a["prefix"]: (a["correct"], a["total"])
            for _, a in tree.nodes(data=True)
            if a["kind"] != "rollout"
        }
    )
    n = len(steps)
    ev = Evidence.empty(max(n, horizon or n), verdict if (horizon or n) <= n else "unknown")
    for j in range(min(n + 1, ev.n)):
        c, t = counts.get("".join(steps[:j]), (0, 0))
        ev.correct[j], ev.graded[j] = c, t
    return ev


# ------------------------------------------------------------------ saving trees
def tree_to_json(tree: nx.DiGraph) -> dict[str, Any]:
    """Node-link data of the tree: plain JSON types (tuples become lists)."""
    return json.loads(json.dumps(nx.node_link_data(tree, edges="edges")))
