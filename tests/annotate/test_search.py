from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.bisection import FixedTest, SequentialTest
from prm_synth.annotate.protocol import ProbeResult
from prm_synth.annotate.search import binary_search
from prm_synth.config import BinaryConfig
from prm_synth.records.labels import apply_rule

STEPS = [f"step {i}\n" for i in range(16)]


def drive(gen, success_rate, rng=None):
    """Answer probes by hand: the prefix ending at step i succeeds with success_rate(i)."""
    rng = rng or random.Random(0)
    counts: dict[int, list[int]] = {}
    asked: list[tuple[int, int]] = []
    try:
        probes = next(gen)
        while True:
            results = []
            for p in probes:
                asked.append((p.step, p.k))
                c, t = counts.setdefault(p.step, [0, 0])
                while t < p.k:
                    c += rng.random() < success_rate(p.step)
                    t += 1
                counts[p.step] = [c, t]
                results.append(ProbeResult(p.step, c, t))
            probes = gen.send(results)
    except StopIteration as stop:
        return stop.value, asked, counts


def test_noise_free_bisection_finds_the_first_error_in_log_probes():
    config = BinaryConfig(method="binary", search_test="fixed", k=4, recheck=False)
    for error in range(15):
        ann, asked, _ = drive(binary_search(STEPS, "incorrect", config), lambda i, e=error: 1.0 if i < e else 0.0)
        lab = apply_rule(ann, "hard")
        assert lab.first_error == error
        assert len({s for s, _ in asked}) <= 4  # ceil(log2(16))
        assert 15 not in {s for s, _ in asked}  # the graded full solution is never re-sampled
        # measured vs inferred: before the boundary good, boundary bad, after it unlabeled
        assert lab.labels[:error] == [True] * error and lab.labels[error] is False
        assert all(x is None for x in lab.labels[error + 1 :])
        assert set(ann.label_source[:error]) <= {"mc", "inferred"}


def test_correct_solution_spends_nothing_and_is_all_good():
    config = BinaryConfig(method="binary", search_test="sprt")
    ann, asked, _ = drive(binary_search(STEPS, "correct", config), lambda i: 1.0)
    assert asked == []
    assert apply_rule(ann, "hard").labels == [True] * 16
    assert ann.label_source == ["inferred"] * 15 + ["verdict"]


def test_verified_correct_solution_is_measured():
    config = BinaryConfig(method="binary", search_test="sprt", k=2)
    ann, asked, _ = drive(binary_search(STEPS[:4], "correct", config, verify=True), lambda i: 1.0)
    assert sorted(s for s, _ in asked) == [0, 1, 2]
    assert ann.label_source == ["mc", "mc", "mc", "verdict"]


def test_unknown_verdict_may_conclude_no_error():
    config = BinaryConfig(method="binary", search_test="fixed", k=2, recheck=False)
    ann, _, _ = drive(binary_search(STEPS[:5], "unknown", config), lambda i: 1.0)
    assert apply_rule(ann, "hard").first_error == -1


def test_sprt_stops_early_on_clear_evidence():
    test = SequentialTest.of(0.05, 0.3, 0.1, batch=2, max_rollouts=32)
    assert test.verdict(2, 2) is True  # two successes: clearly not a 5% prefix
    assert test.verdict(0, 2) is None
    assert test.verdict(0, 8) is False  # a run of failures
    assert test.verdict(1, 32) is False  # the cap: decided by the sign of the evidence
    assert test.stricter().verdict(0, 8) is None
    assert FixedTest(4).verdict(0, 2) is None and FixedTest(4).verdict(1, 4) is True


@settings(max_examples=60, deadline=None)
@given(error=st.integers(0, 14), seed=st.integers(0, 1000), test=st.sampled_from(["sprt", "fixed"]))
def test_labels_are_consistent_for_any_noise(error, seed, test):
    config = BinaryConfig(method="binary", search_test=test, k=4)
    rng = random.Random(seed)
    ann, asked, counts = drive(binary_search(STEPS, "incorrect", config), lambda i: 0.6 if i < error else 0.05, rng)
    lab = apply_rule(ann, "hard")
    first = lab.first_error
    assert 0 <= first <= 15
    assert lab.labels[:first] == [True] * first and lab.labels[first] is False
    for step, (c, t) in counts.items():  # every measured count is in the record
        assert ann.mc_correct[step] == c and ann.mc_total[step] == t
    if test == "fixed":  # plain bisection: labels up to the first error are the hard rule on the counts
        for i, source in enumerate(ann.label_source[: first + 1]):
            if source == "mc":
                assert lab.labels[i] == (ann.mc_correct[i] > 0)


def test_sequential_search_beats_plain_bisection_on_noisy_prefixes():
    """The model of ARCHITECTURE.md: correct prefixes succeed 0.9^(steps left), wrong ones 0.05."""
    rng = random.Random(1)
    hits = {"sprt": 0, "fixed": 0}
    for _trial in range(300):
        m = rng.randint(10, 20)
        error = rng.randrange(m - 1)
        for test in hits:
            config = BinaryConfig(method="binary", search_test=test, k=8)
            ann, _, _ = drive(
                binary_search(STEPS[:m] + STEPS[: max(0, m - 16)], "incorrect", config),
                lambda i, m=m, e=error: 0.9 ** (m - 1 - i) if i < e else 0.05,
                rng,
            )
            hits[test] += apply_rule(ann, "hard").first_error == error
    assert hits["sprt"] > hits["fixed"] * 1.3


# ------------------------------------------------------------------ each search takes its own knobs
BASE = {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}}


def test_a_knob_the_chosen_search_ignores_is_refused_by_name():
    import pytest

    from prm_synth.config import ConfigError, validate_config

    # the case: k and recheck mean nothing to the default changepoint search
    with pytest.raises(ConfigError, match=r"annotate\.k .*annotate\.recheck"):
        validate_config(BASE | {"annotate": {"method": "binary", "k": 16, "recheck": False}})
    with pytest.raises(ConfigError, match=r"annotate\.bad_rate"):
        validate_config(BASE | {"annotate": {"method": "binary", "search_test": "fixed", "bad_rate": 0.01}})
    with pytest.raises(ConfigError, match=r"annotate\.confidence"):
        validate_config(BASE | {"annotate": {"method": "omegaprm", "confidence": 0.95}})
    # the same knobs are a search's own where it reads them
    validate_config(BASE | {"annotate": {"method": "binary", "search_test": "sprt", "k": 16, "recheck": False}})
    validate_config(BASE | {"annotate": {"method": "omegaprm", "search_test": "changepoint", "confidence": 0.95}})


def test_the_fingerprint_holds_only_what_changes_rows():
    from prm_synth.config import validate_config

    default = validate_config(BASE)
    # a knob written out at its default changes nothing, and a stored config (a full dump) loads again
    assert validate_config(BASE | {"annotate": {"method": "binary", "k": 8}}).fingerprint() == default.fingerprint()
    assert validate_config(default.model_dump(mode="json")).fingerprint() == default.fingerprint()
    # a knob the chosen search reads changes it
    sprt = validate_config(BASE | {"annotate": {"method": "binary", "search_test": "sprt"}})
    assert validate_config(BASE | {"annotate": {"method": "binary", "search_test": "sprt", "k": 16}}).fingerprint() != (
        sprt.fingerprint()
    )
    assert "k" not in default.annotate.row_fields() and "k" in sprt.annotate.row_fields()
