from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.labeler import split_evenly
from prm_synth.annotate.omega import (
    Candidate,
    OmegaResult,
    OmegaSearch,
    omegaprm,
    q_value,
    u_value,
)
from prm_synth.annotate.omega_tree import ROOT, tree_to_json
from prm_synth.annotate.protocol import Probe, ProbeResult
from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob
from prm_synth.config import OmegaConfig, SimulatedPolicyConfig
from prm_synth.engines.base import SamplingOptions
from prm_synth.grading.math import grade
from prm_synth.prompting.prompts import policy_user_prompt
from prm_synth.prompting.steps import split_steps
from prm_synth.records.labels import apply_rule
from prm_synth.simulated import arithmetic
from prm_synth.simulated.engines import SimulatedPolicy

split_lines = functools.partial(split_steps, strategy="line")
RolloutFn = Callable[[str, int], tuple[str, str, int]]


class Prober:
    """Answers probes like the scheduler: a prefix's rollouts accumulate; "k" means k in total."""

    def __init__(self, rollout: RolloutFn) -> None:
        self.rollout = rollout
        self.drawn: dict[str, list[tuple[str, str, int]]] = {}
        self.asked: list[Probe] = []

    def answer(self, probe: Probe) -> ProbeResult:
        self.asked.append(probe)
        got = self.drawn.setdefault(probe.prefix, [])
        while len(got) < probe.k:
            got.append(self.rollout(probe.prefix, len(got)))
        statuses = [s for _, s, _ in got]
        return ProbeResult(
            probe.step,
            statuses.count("correct"),
            len(got),
            statuses.count("unknown"),
            sum(t for _, _, t in got),
            tuple(got),
        )

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.drawn.values())


def drive(annotator, prober: Prober) -> OmegaResult:
    try:
        probes = next(annotator)
        while True:
            probes = annotator.send([prober.answer(p) for p in probes])
    except StopIteration as stop:
        return stop.value


def searched(cfg: OmegaConfig, prober: Prober, correct_leaves: int = 1) -> tuple[OmegaSearch, OmegaResult]:
    """The search (its own state: selections, rollouts spent) and its result."""
    search = OmegaSearch(cfg, split_lines, correct_leaves)
    return search, drive(search.run(), prober)


def config(**kw) -> OmegaConfig:
    return OmegaConfig(method="omegaprm", **kw)


# ---------------------------------------------------------------- a hand-built world
# A solution has LENGTH lines "s<j>=ok" or "s<j>=bad"; it is correct iff no line is bad (no recovery).
LENGTH = 6


def lines(prefix: str) -> int:
    return prefix.count("\n")


def completion(prefix: str, bad_at: int | None) -> str:
    """The rest of a solution after `prefix`, wrong first at line `bad_at` (None: all ok)."""
    return "".join(f"s{j}={'bad' if j == bad_at else 'ok'}\n" for j in range(lines(prefix), LENGTH))


def hand_world(root_plan: list[tuple[int | None, int]]) -> RolloutFn:
    """Root rollout i follows root_plan[i] = (bad_at, tokens). From any other prefix: a wrong prefix
    never recovers; a right one alternates a correct rollout and one wrong at its last line."""

    def rollout(prefix: str, i: int) -> tuple[str, str, int]:
        if prefix == "":
            bad_at, tokens = root_plan[i % len(root_plan)]
        else:
            bad_at, tokens = (None if i % 2 == 0 else LENGTH - 1), 10
        text = completion(prefix, bad_at)
        return text, "incorrect" if "bad" in prefix + text else "correct", tokens

    return rollout


def prefix_of(*marks: str) -> str:
    return "".join(f"s{j}={m}\n" for j, m in enumerate(marks))


def test_binary_search_finds_the_first_error_and_adds_the_states_along_the_path():
    prober = Prober(hand_world([(None, 10), (2, 10), (None, 10), (5, 10)]))
    search, result = searched(config(k=4, search_limit=1), prober)
    # Root, then bisection of the rollout wrong at line 2 over positions 0..4 (5 is the rollout itself).
    assert [p.prefix for p in prober.asked] == [
        "",
        prefix_of("ok", "ok", "bad"),
        prefix_of("ok"),
        prefix_of("ok", "ok"),
    ]
    assert all(p.k == 4 for p in prober.asked)
    assert search.spent == prober.total == 16
    assert result.stop_reason == "search_limit"
    assert [c.text for c in search.selected] == [completion("", 2)]
    assert result.tree.nodes[ROOT]["N"] == 1

    paths = result.paths()
    assert len(paths) == 2
    wrong = next(p for p in paths if p.final_status is None)
    assert wrong.steps == split_lines(prefix_of("ok", "ok", "bad"))
    assert wrong.mc_correct == [2, 2, 0] and wrong.mc_total == [4, 4, 4]
    assert wrong.label_source == ["mc", "mc", "mc"]
    assert apply_rule(wrong.annotation, "hard").first_error == 2
    assert wrong.annotation.method == "omegaprm"

    right = next(p for p in paths if p.final_status == "correct")
    assert right.text == completion("", None)
    assert right.mc_total == [4, 4, 0, 0, 0, 1] and right.mc_correct == [2, 2, 0, 0, 0, 1]
    assert right.label_source == ["mc", "mc", "none", "none", "none", "verdict"]
    assert apply_rule(right.annotation, "hard").labels == [True, True, None, None, None, True]


def test_a_complete_rollout_is_never_resampled_its_verdict_is_the_last_step():
    prober = Prober(hand_world([(None, 10), (5, 10)]))
    result = drive(omegaprm(config(k=2, search_limit=1), split_lines), prober)
    probed = [lines(p.prefix) for p in prober.asked]
    assert probed == [0, 3, 4, 5]  # positions 2, 3, 4; never the six-line complete rollout
    wrong = next(p for p in result.paths() if p.final_status == "incorrect")
    assert wrong.text == completion("", 5)
    assert wrong.label_source == ["none", "none", "mc", "mc", "mc", "verdict"]
    assert wrong.mc_correct[-1] == 0 and wrong.mc_total[-1] == 1
    assert apply_rule(wrong.annotation, "hard").first_error == 5


def test_shorter_rollout_of_the_same_state_is_selected_first():
    prober = Prober(hand_world([(None, 10), (1, 900), (2, 30)]))
    search, _ = searched(config(k=3, search_limit=1), prober)
    assert [c.text for c in search.selected] == [completion("", 2)]


def test_q_and_u_on_hand_values():
    assert q_value(0.5, 250, 0.5, 0.9, 500) == pytest.approx(0.5**0.5 * 0.9**0.5)
    assert q_value(1.0, 0, 0.5, 0.9, 500) == 1.0
    assert q_value(0.0, 500, 0.5, 0.9, 500) == pytest.approx(0.45)
    assert u_value(1, 4, 0.125) == pytest.approx(0.125)
    assert u_value(0, 9, 0.125) == pytest.approx(0.375)
    assert u_value(0, 0, 0.125) == 0.0


def test_selection_uses_q_plus_u_and_pops_for_good():
    search = OmegaSearch(config(k=4), split_lines)
    for node, (mc, visits) in {1: (0.5, 3), 2: (0.5, 0), 3: (0.75, 0)}.items():
        search.tree.add_node(node, mc=mc, N=visits)
    search.tree.nodes[ROOT]["N"] = 1
    search.pool = [Candidate(1, "a", 100), Candidate(2, "b", 100), Candidate(3, "c", 1500)]
    # Σ N = 4; U = 0.125 · 2 / (1 + N): 0.0625, 0.25, 0.25
    score = {
        1: q_value(0.5, 100, 0.5, 0.9, 500) + 0.0625,
        2: q_value(0.5, 100, 0.5, 0.9, 500) + 0.25,
        3: q_value(0.75, 1500, 0.5, 0.9, 500) + 0.25,
    }
    order = sorted(score, key=score.get, reverse=True)
    assert order == [2, 3, 1]  # the unvisited state wins over the visited one with the same Q
    assert [search._select().state for _ in range(3)] == order
    assert search.pool == [] and [c.state for c in search.selected] == order


@pytest.mark.parametrize(
    "root_plan, screened",
    [
        ([(None, 5)], True),
        ([(2, 5)], True),
        ([(None, 5), (2, 5)], False),
    ],
)
def test_screening_keeps_only_questions_with_mixed_first_rollouts(root_plan, screened):
    prober = Prober(hand_world(root_plan))
    result = drive(omegaprm(config(k=4, screen=True), split_lines), prober)
    assert result.screened_out is screened
    if screened:
        assert [p.prefix for p in prober.asked] == [""]
        assert result.stop_reason == "screened_out" and result.paths() == []
        assert result.tree.number_of_nodes() == 1


def test_states_with_mc_zero_or_one_feed_no_candidates():
    search, all_right = searched(config(k=4), Prober(hand_world([(None, 5)])))
    assert all_right.stop_reason == "pool_empty" and search.selected == []
    assert [p.final_status for p in all_right.paths()] == ["correct"]
    all_wrong = drive(omegaprm(config(k=4), split_lines), Prober(hand_world([(1, 5)])))
    assert all_wrong.stop_reason == "pool_empty" and all_wrong.paths() == []


def test_budget_is_a_hard_limit_and_an_interrupted_search_claims_no_error():
    prober = Prober(hand_world([(None, 10), (2, 10)]))
    search, result = searched(config(k=4, rollout_budget=10), prober)
    assert prober.total == search.spent == 10
    assert [(lines(p.prefix), p.k) for p in prober.asked] == [(0, 4), (3, 4), (1, 2)]  # the last gets what fits
    assert result.stop_reason == "budget"
    # The bad probe at position 2 is not a state: the first error could still be at position 1.
    assert all(attrs["correct"] > 0 for n, attrs in result.tree.nodes(data=True) if n != ROOT)
    assert all(p.final_status != "incorrect" for p in result.paths())


def test_a_prefix_shared_by_two_rollouts_is_measured_once():
    # Both root rollouts go wrong after the same two good lines; the second search reuses them.
    prober = Prober(hand_world([(None, 10), (2, 10), (3, 11)]))
    search, _ = searched(config(k=3, search_limit=2), prober)
    prefixes = [p.prefix for p in prober.asked]
    assert len(prefixes) == len(set(prefixes))
    assert search.spent == prober.total


# ---------------------------------------------------------------- properties on a random world
def random_world(seed: int, length: int, p_error: float, recover: float) -> RolloutFn:
    def rollout(prefix: str, i: int) -> tuple[str, str, int]:
        rng = random.Random(f"{seed}|{prefix}|{i}")
        wrong = "bad" in prefix
        out = []
        for j in range(lines(prefix), length):
            bad = not wrong and rng.random() < p_error
            wrong = wrong or bad
            out.append(f"s{j}={'bad' if bad else 'ok'}\n")
        status = "correct" if not wrong or rng.random() < recover else "incorrect"
        if rng.random() < 0.05:
            status = "unknown"
        return "".join(out), status, rng.randint(1, 60)

    return rollout


def check_tree_and_paths(result: OmegaResult, posterior: bool = False) -> None:
    tree = result.tree
    for node, attrs in tree.nodes(data=True):
        assert "".join(attrs["steps"]) == attrs["prefix"]
        assert node == ROOT or tree.in_degree(node) == 1
    for parent, child in tree.edges:
        ps, cs = tree.nodes[parent]["steps"], tree.nodes[child]["steps"]
        assert len(ps) < len(cs) and cs[: len(ps)] == ps
    for path in result.paths():
        leaf = tree.nodes[path.nodes[-1]]
        assert "".join(path.steps) == leaf["prefix"] and path.steps == list(leaf["steps"])
        n = len(path.steps)
        assert len(path.mc_correct) == len(path.mc_total) == len(path.label_source) == n
        assert path.annotation.mc_total == path.mc_total and path.annotation.label_source == path.label_source
        for node in path.nodes:
            i = len(tree.nodes[node]["steps"]) - 1
            assert path.mc_total[i] == tree.nodes[node]["total"]
        for c, t, s in zip(path.mc_correct, path.mc_total, path.label_source, strict=True):
            assert 0 <= c <= t
            if posterior:  # labels come from the posterior: unmeasured ones inferred, undecided ones none
                assert s in ("none", "inferred", "test", "verdict") and (s != "inferred" or t == 0)
            else:
                assert (t == 0) == (s == "none")
        if posterior:
            assert path.annotation.p_good is not None and len(path.annotation.p_good) == n
            labels = apply_rule(path.annotation, "hard").labels
            for label, p in zip(labels, path.annotation.p_good, strict=True):
                assert label is None or (p if label else 1 - p) >= result.confidence
        assert (path.final_status is None) == (leaf["kind"] != "rollout")
        assert len(apply_rule(path.annotation, "hard").labels) == n


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    length=st.integers(1, 10),
    budget=st.integers(1, 150),
    k=st.integers(1, 8),
    limit=st.integers(1, 25),
    screen=st.booleans(),
    leaves=st.integers(0, 2),
    p_error=st.sampled_from([0.1, 0.3, 0.6]),
    search_test=st.sampled_from(["fixed", "sprt", "changepoint"]),
)
def test_budget_never_exceeded_no_rollout_selected_twice_nothing_complete_resampled(
    seed, length, budget, k, limit, screen, leaves, p_error, search_test
):
    prober = Prober(random_world(seed, length, p_error, recover=0.1))
    cfg = config(
        k=k,
        rollout_budget=budget,
        search_limit=limit,
        screen=screen,
        search_test=search_test,
    )
    search, result = searched(cfg, prober, correct_leaves=leaves)
    assert prober.total <= budget
    assert search.spent == prober.total
    assert len(search.selected) <= limit
    chosen = [(c.state, c.text) for c in search.selected]
    assert len(chosen) == len(set(chosen))
    completes = [result.tree.nodes[s]["prefix"] + text for s, text in chosen]
    assert len(completes) == len(set(completes))
    # Complete solutions have `length` lines: only their own verdict is ever used.
    assert all(lines(p.prefix) < length for p in prober.asked)
    check_tree_and_paths(result, posterior=search_test == "changepoint")


# ---------------------------------------------------------------- through the real scheduler
def test_through_the_scheduler_with_the_simulated_policy():
    policy = SimulatedPolicy(SimulatedPolicyConfig(step_error=0.15, recover=0.05, seed=3))
    cfg = config(k=4, rollout_budget=60, search_limit=10)
    problems = [arithmetic.generate(random.Random(i), 4, 9) for i in range(8)]
    jobs = [
        SolutionJob(f"q{i}", f"q{i}", policy_user_prompt(p.question()), str(p.answer), omegaprm(cfg, split_lines))
        for i, p in enumerate(problems)
    ]
    sched = ProbeScheduler(policy, SamplingOptions(), max_batch_requests=64, max_in_flight=8)
    results = {job.key: result for job, result in sched.run(jobs)}
    assert len(results) == 8
    assert sum(sched.spend[job.key].rollouts for job in jobs) == sched.stats.rollouts
    assert any(result.paths() for result in results.values())
    for job in jobs:
        result = results[job.key]
        assert sched.spend[job.key].rollouts <= 60  # the budget, counted by the scheduler
        check_tree_and_paths(result)
        for path in result.paths():
            if path.final_status is not None:  # a complete rollout's verdict is its own grade
                assert path.final_status == grade(path.text, job.gold).status


# ---------------------------------------------------------------- saving trees
def sample_tree():
    prober = Prober(hand_world([(None, 10), (2, 10), (5, 7)]))
    return drive(omegaprm(config(k=3, search_limit=3), split_lines), prober).tree


def test_a_saved_tree_is_plain_json_with_every_node_and_edge():
    tree = sample_tree()
    assert tree.number_of_nodes() > 4
    data = tree_to_json(tree)
    assert json.loads(json.dumps(data)) == data  # plain JSON types only: a tuple would not compare equal
    nodes = {n["id"]: n for n in data["nodes"]}
    assert set(nodes) == set(tree.nodes)
    assert all(
        nodes[i]["steps"] == list(a["steps"]) and nodes[i]["kind"] == a["kind"] for i, a in tree.nodes(data=True)
    )
    assert {(e["source"], e["target"]) for e in data["edges"]} == set(tree.edges)


def test_split_evenly_adds_up():
    assert split_evenly(10, 3) == [4, 3, 3]
    assert split_evenly(0, 2) == [0, 0]
    assert split_evenly(5, 0) == []
    assert sum(split_evenly(1234, 7)) == 1234
    assert math.isclose(sum(split_evenly(7, 7)), 7)


def test_sequential_bisection_calls_a_lucky_wrong_prefix_bad_and_searches_nothing_below_it():
    """A wrong prefix that reaches the answer 1 time in 16: MC > 0 (the paper: good), the test: bad."""
    length = 4

    def rollout(prefix: str, i: int) -> tuple[str, str, int]:
        if "bad" in prefix:  # a wrong prefix goes on with right lines; its first rollout is lucky
            text = "".join(f"s{j}=ok\n" for j in range(lines(prefix), length))
            return text, "correct" if i == 0 else "incorrect", 5
        bad_at = None if i % 2 == 0 else max(1, lines(prefix))  # half the rollouts go wrong
        text = "".join(f"s{j}={'bad' if j == bad_at else 'ok'}\n" for j in range(lines(prefix), length))
        return text, "incorrect" if "bad" in text else "correct", 5

    outcomes = {}
    for search_test in ("fixed", "sprt"):
        cfg = config(k=16, rollout_budget=400, search_limit=1, search_test=search_test)
        result = drive(omegaprm(cfg, split_lines, correct_leaves=0), Prober(rollout))
        (path,) = [p for p in result.paths() if "s1=bad" in p.text]
        labels = apply_rule(path.annotation, "hard").labels
        outcomes[search_test] = (labels, path.label_source)
    fixed_labels, _ = outcomes["fixed"]
    sprt_labels, sprt_sources = outcomes["sprt"]
    assert fixed_labels[1] is not False  # MC = 1/16 > 0: the paper's rule calls the wrong step good
    assert sprt_labels[1] is False and sprt_sources[1] == "test"  # the sequential test does not


# ---------------------------------------------------------------- regressions
def test_correct_leaves_are_the_first_correct_rollouts_not_the_first_new_text():
    """Regression: a state's clean endings were already in the tree, so the odd (lucky) one became the leaf."""
    length = 4
    clean_root = "".join(f"s{j}=ok\n" for j in range(length))

    def rollout(prefix: str, i: int) -> tuple[str, str, int]:
        start = lines(prefix)
        if prefix == "":
            text = clean_root if i % 2 == 0 else "s0=ok\ns1=ok\ns2=ok\ns3=bad\n"
        elif start == 2 and i == 3:  # three clean endings, then an odd one that reaches the answer
            text = "s2=odd\ns3=ok\n"
        else:
            text = "".join(f"s{j}=ok\n" for j in range(start, length))
        return text, "incorrect" if "bad" in text else "correct", 5

    result = drive(omegaprm(config(k=4, search_limit=1), split_lines, correct_leaves=1), Prober(rollout))
    assert prefix_of("ok", "ok") in {attrs["prefix"] for _, attrs in result.tree.nodes(data=True)}
    complete_correct = [p.text for p in result.paths() if p.final_status == "correct"]
    assert complete_correct == [clean_root]
    assert all("odd" not in p.text for p in result.paths())


def test_a_correct_leaf_never_lies_below_a_bad_state():
    """Regression: steps A, X, C2, answer with labels [True, False, None, True] and final_correct=True."""

    def rollout(prefix: str, i: int) -> tuple[str, str, int]:
        if prefix == "":
            text = prefix_of("ok", "ok", "ok", "ok") if i % 2 == 0 else "s0=ok\ns1=bad\ns2=c1\ns3=ok\n"
            return text, "correct" if i % 2 == 0 else "incorrect", 5
        if prefix == prefix_of("ok"):  # the first ending holds the error and is lucky
            text = "s1=bad\ns2=c2\ns3=ok\n" if i == 0 else "s1=ok\ns2=ok\ns3=ok\n"
            return text, "correct", 5
        return "s2=c3\ns3=ok\n", "incorrect", 5  # below the bad step X nothing reaches the answer

    result = drive(omegaprm(config(k=2, search_limit=1), split_lines, correct_leaves=1), Prober(rollout))
    check_tree_and_paths(result)
    leaves = [a for n, a in result.tree.nodes(data=True) if a["kind"] == "rollout" and not result.tree.out_degree(n)]
    assert not any(a["final_status"] == "correct" and "s1=bad" in a["prefix"] for a in leaves)  # the lucky one went
    for path in result.paths():
        labels = apply_rule(path.annotation, "hard").labels
        if path.final_status == "correct":
            assert False not in labels, (path.steps, labels)
    (through_x,) = [p for p in result.paths() if "s1=bad" in p.text]
    assert through_x.text == "s0=ok\ns1=bad\n" and apply_rule(through_x.annotation, "hard").labels == [True, False]


def hard_step_world(length: int, error_at: int, unknown_every: int = 0) -> RolloutFn:
    """From a clean prefix, one rollout in five goes wrong first at line `error_at` (the hard step), the
    rest are clean; a wrong prefix never recovers (no luck). With `unknown_every`, every such rollout
    cannot be graded (its text is still written)."""

    def rollout(prefix: str, i: int) -> tuple[str, str, int]:
        start = lines(prefix)
        bad_at = error_at if i % 5 == 1 and start <= error_at and "bad" not in prefix else None
        text = "".join(f"s{j}={'bad' if j == bad_at else 'ok'}\n" for j in range(start, length))
        if unknown_every and i % unknown_every == unknown_every - 1:
            return text, "unknown", 5
        return text, "incorrect" if "bad" in prefix + text else "correct", 5

    return rollout


def labels_against_truth(result: OmegaResult) -> int:
    """Assert every label of every path against the truth (a step is good iff no line up to it is bad);
    return how many wrong paths have their true first error labeled bad."""
    located = 0
    for path in result.paths():
        truth = next((i for i, s in enumerate(path.steps) if "bad" in s), -1)
        labels = apply_rule(path.annotation, "hard").labels
        for i, label in enumerate(labels):
            if label is not None:
                assert label == (truth < 0 or i < truth), (path.steps, truth, labels, path.annotation.p_good)
        located += truth >= 0 and labels[truth] is False
    return located


def test_posterior_labels_of_a_world_with_ungradable_rollouts_match_the_truth():
    """Regression: a tree node's total is its graded rollouts, and the posterior's evidence subtracted the
    ungradable ones a second time: a prefix with 13 of 17 graded rollouts right and 4 ungradable read as
    13 right of 13, one with 5 of 5 and 1 ungradable as 5 right of 4 (a negative count of failures). The
    labels went wrong both ways: here the true first error was labeled good; in the fidelity benchmark's
    mixed world a clean step with MC 1.0 was labeled bad (bad precision 0.04)."""
    cfg = config(k=10, rollout_budget=400, search_limit=4, search_test="changepoint")
    result = drive(omegaprm(cfg, split_lines, correct_leaves=1), Prober(hard_step_world(8, 5, unknown_every=5)))
    check_tree_and_paths(result, posterior=True)
    assert any(a["unknown"] for _, a in result.tree.nodes(data=True))  # the world did leave rollouts ungraded
    labels_against_truth(result)


def test_a_partial_path_ending_at_the_bad_state_the_bisection_found_labels_it_bad():
    """Regression: a partial path's evidence stopped one prefix short of its own text, so the bad state the
    bisection found (its leaf, 0 of 3 rollouts right) was no evidence for the path's labels: here the first
    error was labeled good (p_good 0.92, from the clean prefixes before it alone), and OmegaPRM with the
    posterior located almost no first error (fidelity's hard_step world: first-error accuracy 0.04, against
    1.0 with `fixed`)."""
    cfg = config(k=10, rollout_budget=400, search_limit=4, search_test="changepoint")
    result = drive(omegaprm(cfg, split_lines, correct_leaves=1), Prober(hard_step_world(8, 5)))
    check_tree_and_paths(result, posterior=True)
    (wrong,) = [p for p in result.paths() if p.final_status is None]
    leaf = result.tree.nodes[wrong.nodes[-1]]
    assert leaf["kind"] == "state" and leaf["decided"] is False and "s5=bad" in leaf["prefix"]
    assert apply_rule(wrong.annotation, "hard").labels[5] is False
    assert labels_against_truth(result) == 1


@pytest.mark.parametrize("search_test", ["fixed", "changepoint"])
def test_a_prefix_the_test_gives_up_on_ends_that_rollouts_bisection_not_the_search(search_test):
    """Regression: a prefix its test could not decide (here: every rollout of it ungradable; under the
    posterior also one it cannot call within probe_max_rollouts) stopped the question's whole search as
    if the budget were spent: under the posterior most questions of fidelity's worlds got one selection
    and a fifth of their rollout budget."""
    weird = "s0=ok\ns1=weird\ns2=ok\ns3=ok\ns4=ok\ns5=ok\n"

    def rollout(prefix: str, i: int) -> tuple[str, str, int]:
        if prefix == "":
            if i % 4 == 1:  # the shortest wrong rollout (selected first): no prefix of it can be graded
                return weird, "incorrect", 5
            bad_at = 4 if i % 4 == 3 else None
            return completion("", bad_at), "incorrect" if bad_at is not None else "correct", 50
        if "weird" in prefix:
            return completion(prefix, None), "unknown", 5
        if "bad" in prefix:
            return completion(prefix, None), "incorrect", 5
        return completion(prefix, None), "correct", 5  # a clean prefix always finishes right (no hard step)

    cfg = config(k=4, rollout_budget=400, search_limit=2, search_test=search_test)
    search, result = searched(cfg, Prober(rollout))
    assert [c.text for c in search.selected] == [weird, completion("", 4)]
    assert search.spent < cfg.rollout_budget and result.stop_reason == "search_limit"
    assert not any("weird" in a["prefix"] for n, a in result.tree.nodes(data=True) if n != ROOT)
    assert labels_against_truth(result) == 1  # the second rollout's first error is found


def test_a_bad_leaf_is_labeled_with_the_evidence_its_bisection_decided_on():
    """Regression: a path that ends at the bad state a bisection found was labeled from its own prefixes
    alone, so the probes past the state along the selected rollout (all wrong) and the rollout's own wrong
    answer, on which the search had called the state bad, were lost: 0 of 3 right after 2 of 3 left the
    first error unlabeled (p_good 0.54), and OmegaPRM with the posterior located a fifth of the first
    errors where `fixed` locates all (fidelity's hard_step world: 0.21 against 1.0)."""
    cfg = config(k=10, rollout_budget=400, search_limit=4, search_test="changepoint")
    search, result = searched(cfg, Prober(hard_step_world(20, 3)))
    check_tree_and_paths(result, posterior=True)
    (wrong,) = [p for p in result.paths() if p.final_status is None]
    assert apply_rule(wrong.annotation, "hard").labels == [True, True, True, False]
    assert labels_against_truth(result) == 1
    leaf = wrong.nodes[-1]
    assert result.found_on[leaf][: len(wrong.steps)] == tuple(wrong.steps)  # the rollout it was found on
    assert len(result.found_on[leaf]) == 20 and search.tree.nodes[leaf]["total"] == 3
