from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.annotation import Annotation
from prm_synth.annotate.mc import per_step_mc
from prm_synth.annotate.protocol import ProbeResult
from prm_synth.records.labels import apply_rule, binomial_cdf

S = [f"step {i}\n" for i in range(10)]


def drive(gen, mc_of_step):
    """Run an annotator by hand: step i's prefix reaches the answer mc_of_step[i] times out of k."""
    asked = []
    try:
        probes = next(gen)
        while True:
            asked.append([p.step for p in probes])
            probes = gen.send([ProbeResult(p.step, mc_of_step[p.step], p.k) for p in probes])
    except StopIteration as stop:
        return stop.value, asked


def test_per_step_mc_probes_all_prefixes_but_the_graded_full_solution():
    ann, asked = drive(per_step_mc(S[:4], "incorrect", k=8), [8, 3, 0, 0])
    assert asked == [[0, 1, 2]]
    assert ann.mc_correct == [8, 3, 0, 0] and ann.mc_total == [8, 8, 8, 1]
    assert ann.label_source == ["mc", "mc", "mc", "verdict"]
    lab = apply_rule(ann, "hard")
    assert lab.labels == [True, True, False, False] and lab.first_error == 2
    assert lab.mc_values == [1.0, 3 / 8, 0.0, 0.0]


def test_stop_at_first_zero_leaves_later_steps_unlabeled():
    ann, asked = drive(per_step_mc(S[:5], "incorrect", k=4, stop_at_first_zero=True), [4, 0, 0, 0, 0])
    assert asked == [[0], [1]]
    lab = apply_rule(ann, "hard")
    assert lab.labels == [True, False, None, None, None]
    assert lab.mc_values == [1.0, 0.0, None, None, None]
    assert lab.first_error == 1


def test_correct_solution_with_unknown_verdict_has_unlabeled_last_step():
    ann, _ = drive(per_step_mc(S[:2], "unknown", k=2), [2, 0])
    assert apply_rule(ann, "hard").labels == [True, None]


def test_recovered_error_is_good_under_hard_and_bad_under_relative():
    ann = Annotation("mc", [16, 1, 1], [16, 16, 16], ["mc", "mc", "mc"])
    assert apply_rule(ann, "hard").first_error == -1
    assert apply_rule(ann, "relative", 0.05).first_error == 1
    assert apply_rule(ann, "majority").labels == [True, False, False]


def test_inferred_labels_survive_every_rule():
    ann = Annotation(
        "binary", [0, 1, 0, 3], [0, 20, 0, 8], ["inferred", "test", "none", "none"], decided={0: True, 1: False}
    )
    for rule in ("hard", "majority", "relative"):
        assert apply_rule(ann, rule).labels == [True, False, None, None]


def test_binomial_cdf_matches_hand_values():
    assert abs(binomial_cdf(0, 2, 0.5) - 0.25) < 1e-12
    assert abs(binomial_cdf(1, 2, 0.5) - 0.75) < 1e-12
    assert abs(binomial_cdf(3, 3, 0.2) - 1.0) < 1e-12


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 16), st.integers(0, 16)), min_size=1, max_size=20))
def test_hard_labels_agree_with_counts(pairs):
    correct = [min(c, t) for c, t in pairs]
    total = [t for _, t in pairs]
    ann = Annotation("mc", correct, total, ["mc" if t else "none" for t in total])
    lab = apply_rule(ann, "hard")
    first_zero = next((i for i, (c, t) in enumerate(zip(correct, total, strict=True)) if t and c == 0), len(pairs))
    for i, (c, t, v, label) in enumerate(zip(correct, total, lab.mc_values, lab.labels, strict=True)):
        assert (v is None) == (t == 0) == (label is None)
        if t:
            # MC > 0 is good, up to the first prefix with MC = 0; every measured step after it is bad
            assert label == (c > 0 and i < first_zero) and v == c / t
    assert lab.first_error == next((i for i, x in enumerate(lab.labels) if x is False), -1)


def test_relative_rule_keeps_later_prefixes_bad_after_the_drop():
    """Regression: the drop step was bad and the steps after it went back to good."""
    ann = Annotation("mc", [6, 1, 1, 1], [8, 8, 8, 8], ["mc"] * 4)
    lab = apply_rule(ann, "relative")
    assert lab.labels == [True, False, False, False] and lab.first_error == 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8), st.sampled_from(["mc", "verdict", "none"])), min_size=1, max_size=12),
    st.sampled_from(["hard", "majority", "relative"]),
)
def test_no_rule_calls_a_step_good_after_the_first_bad_one(steps, rule):
    correct = [c for c, _ in steps]
    sources = [s for _, s in steps]
    total = [0 if s == "none" else 8 for s in sources]
    lab = apply_rule(Annotation("mc", correct, total, sources), rule)
    if lab.first_error >= 0:
        assert all(x is not True for x in lab.labels[lab.first_error :])
