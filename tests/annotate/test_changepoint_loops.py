"""The change-point sweep's compiled passes against their definitions in plain numpy: the log-sum-exp
they take in the linear domain must equal the log-domain one, also where the largest exponent meets a
zero switch weight (the exact fallback), where whole classes have weight zero (log weight -inf), and
across spreads of hundreds of nats."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.annotate.changepoint.engine.kernels import absorb, settle

D, Q, L = 3, 4, 5


def log_sum_exp(x: np.ndarray) -> float:
    top = x.max()
    if not np.isfinite(top):
        return float(top) if top > 0 else -np.inf
    return float(np.log(np.exp(x - top).sum()) + top)


@st.composite
def states(draw: st.DrawFn) -> dict[str, np.ndarray]:
    rows = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    spread = draw(st.sampled_from([1.0, 50.0, 800.0]))  # nats between the rows' exponents
    msg = rng.random((D, rows, Q, L))
    msg[rng.random((D, rows, Q)) < 0.2] = 0.0  # vectors with no weight left
    acc = -spread * rng.random((D, rows, Q))
    acc[rng.random((D, rows, Q)) < 0.15] = -np.inf  # classes and lucks ruled out
    sig = rng.random((rows, D, L))
    sig[rng.random((rows, D, L)) < 0.3] = 0.0
    if draw(st.booleans()):
        # the largest exponent with no switch weight at all: the sum must come from the others
        d, q = np.unravel_index(np.argmax(np.where(np.isfinite(acc[:, 0]), acc[:, 0], -np.inf)), (D, Q))
        acc[d, 0, q] = 5.0
        sig[0, d] = 0.0
    return {
        "msg": msg,
        "acc": acc,
        "weight": rng.random((rows, Q, L)),
        "top": -rng.random((rows, Q)),
        "sig": sig,
        "base": -spread * rng.random((rows, D, Q)),
        "end_col": rng.random((rows, D, L)),
        "end_base": -spread * rng.random((rows, D, Q)),
        "has_run": rng.random(rows) < 0.5,
        "ends": rng.random(rows) < 0.5,
    }


@settings(max_examples=60, deadline=None)
@given(states())
def test_absorb_equals_its_log_domain_definition(s):
    msg, acc = s["msg"].copy(), s["acc"].copy()
    rows = msg.shape[1]
    n = 6
    out = np.full((rows, n + 1), np.nan)
    summed, shift = np.full((rows, D, L), np.nan), np.full(rows, np.nan)
    cols = np.arange(rows, dtype=np.int64)
    absorb(
        msg, acc, 0, rows, -1, -1, s["weight"], s["top"], s["sig"], s["base"], cols, s["has_run"],
        s["end_col"], s["end_base"], s["ends"], out, summed, shift,
    )  # fmt: skip
    for r in range(rows):
        after = s["msg"][:, r] * s["weight"][r][None]  # [d, q, level]
        np.testing.assert_allclose(msg[:, r], after, rtol=1e-14, atol=0)
        log_acc = s["acc"][:, r] + s["top"][r][None]
        np.testing.assert_allclose(acc[:, r], log_acc, rtol=1e-14, atol=0)
        with np.errstate(divide="ignore"):
            switch = np.log((after * s["sig"][r][:, None, :]).sum(axis=2))
            want = log_sum_exp(log_acc + s["base"][r] + switch)
        assert np.isclose(out[r, r], want, rtol=1e-12, atol=1e-9) or (want == -np.inf and out[r, r] == -np.inf)
        if s["ends"][r]:
            with np.errstate(divide="ignore"):
                end = np.log((after * s["end_col"][r][:, None, :]).sum(axis=2))
                want_end = log_sum_exp(log_acc + s["end_base"][r] + end)
            got = out[r, n]
            assert np.isclose(got, want_end, rtol=1e-12, atol=1e-9) or (want_end == -np.inf and got == -np.inf)
        if s["has_run"][r]:
            exponent = log_acc + s["base"][r]
            top = exponent.max()
            top = top if np.isfinite(top) else 0.0
            assert shift[r] == top
            want_summed = (np.exp(exponent - top)[:, :, None] * after).sum(axis=1)
            np.testing.assert_allclose(summed[r], want_summed, rtol=1e-12, atol=1e-300)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1.0, 1e-20, 1e-40, 1e-310]))
def test_settle_renormalises_only_what_nears_underflow_and_keeps_the_weight(seed, size):
    rng = np.random.default_rng(seed)
    msg = rng.random((D, 2, Q, L)) * size
    acc = rng.random((D, 2, Q))
    log_scale = rng.random((1, D))
    before_msg, before_acc = msg.copy(), acc.copy()
    settle(msg, acc, 0, 2, log_scale, False)
    sums = before_msg.sum(axis=3)
    low = sums < 1e-30
    # the weight a state stands for, exp(acc) * msg, is kept (up to the kernel's own scale)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(
            np.log(msg.sum(axis=3)) + acc, np.log(sums) + before_acc + log_scale[0][:, None, None], rtol=1e-12
        )
    np.testing.assert_array_equal(msg[~low], before_msg[~low])
    # renormalised to sum 1, or by 1e-300 at most where the sum was smaller still (subnormal)
    assert np.allclose(msg.sum(axis=3)[low & (sums >= 1e-300)], 1.0)
