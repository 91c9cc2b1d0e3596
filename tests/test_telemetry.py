from __future__ import annotations

import csv
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_synth.telemetry import Countdown, EngineTelemetry, ProgressSnapshot, duration, summary_markdown

events_st = st.lists(
    st.tuples(st.floats(0.0, 7.0), st.integers(0, 16), st.integers(0, 500), st.integers(0, 4)), min_size=1, max_size=60
)


@settings(max_examples=80, deadline=None)
@given(events=events_st, max_buckets=st.integers(2, 12))
def test_buckets_keep_every_token_and_every_sequence_second_whatever_the_merging(events, max_buckets):
    tel = EngineTelemetry(bucket_s=0.5, max_buckets=max_buckets)
    t = 100.0
    busy = 0.0
    tel.advance(t, 0, 16)
    for dt, running, tokens, seqs in events:
        t += dt
        tel.advance(t, running, 16, tokens, seqs)
        busy += running * dt
    rows = tel.series()
    assert len(rows) <= max_buckets
    totals = tel.totals()
    assert totals.tokens == sum(e[2] for e in events)
    assert totals.busy == pytest.approx(busy)
    width = tel.width
    covered = [min(width, (totals.t - 100.0) - r["t"]) for r in rows]
    assert sum(r["tokens_per_s"] * max(c, 1e-9) for r, c in zip(rows, covered, strict=True)) == pytest.approx(
        totals.tokens, rel=1e-6, abs=1e-6
    )
    assert sum(r["running"] * max(c, 1e-9) for r, c in zip(rows, covered, strict=True)) == pytest.approx(
        busy, rel=1e-6, abs=1e-6
    )


def test_window_between_two_totals():
    tel = EngineTelemetry()
    tel.advance(0.0, 0, 8)
    tel.advance(10.0, 4, 8, tokens=100, sequences=2)  # 4 of 8 running for 10 s
    start = tel.totals()
    tel.advance(20.0, 8, 8, tokens=300, sequences=5)  # full for 10 s
    window = EngineTelemetry.window(start, tel.totals())
    assert (window.seconds, window.tokens, window.sequences) == (10.0, 300, 5)
    assert window.occupancy == 1.0 and window.tokens_per_s == 30.0
    whole = EngineTelemetry.window(EngineTelemetry().totals(), tel.totals())
    assert whole.occupancy == pytest.approx(0.75)


def test_save_writes_the_numbers_and_the_picture(tmp_path):
    tel = EngineTelemetry()
    tel.advance(0.0, 0, 4)
    start = tel.totals()
    for i in range(1, 30):
        tel.advance(float(i), i % 5, 4, tokens=10 * (i % 5), sequences=i % 2)
    paths = tel.save(tmp_path, start=start)
    data = json.loads(paths["json"].read_text())
    assert data["summary"]["tokens"] == sum(10 * (i % 5) for i in range(1, 30))
    assert len(data["series"]) == 29
    rows = list(csv.DictReader(paths["csv"].open()))
    assert [float(r["tokens_per_s"]) for r in rows] == [r["tokens_per_s"] for r in data["series"]]
    pytest.importorskip("matplotlib")
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = summary_markdown(data["summary"], paths)
    assert "occupancy" in text and "engine.png" in text


def test_progress_line_says_what_is_done():
    snap = ProgressSnapshot("shard 3", 12.0, 5, 9, None, 120, 4000, 333.3, 30, 64)
    assert snap.line() == (
        "shard 3: annotated 5/? (9 started), 120 rollouts, 4000 tokens, 333.3 tok/s, engine 30/64 sequences running"
    )


def test_a_countdown_says_what_is_done_and_how_long_the_rest_takes_at_this_pace():
    now = [0.0]
    countdown = Countdown(10, "steps", clock=lambda: now[0])
    now[0] = 30.0
    assert countdown.line(2) == "2/10 steps (20%), 30 s elapsed, about 2 min 00 s left"
    now[0] = 150.0
    assert countdown.line(10) == "10/10 steps (100%), 2 min 30 s elapsed"  # nothing left to estimate
    assert Countdown(5, "samples", clock=lambda: 0.0).line(0) == "0/5 samples (0%), 0 s elapsed"


@given(st.floats(0, 10 * 86400))
def test_a_duration_reads_in_the_largest_unit_that_fits(seconds):
    text = duration(seconds)
    unit = "s" if seconds < 59.5 else "min" if seconds < 3599.5 else "h"
    assert text.split()[1] == unit


def test_an_interval_starting_on_a_boundary_that_rounding_misfiles_ends():
    """The values of ../shared/repro/telemetry_hang.py: start = origin + 179 * 0.3 in floats, but
    int((start - origin) / 0.3) == 178. The old walk spun forever there."""
    tel = EngineTelemetry(bucket_s=0.3)
    origin, start = 3037.1899814263015, 3090.8899814263013
    tel.advance(origin, running=1, capacity=1)
    tel.advance(start, running=1, capacity=1)
    tel.advance(start + 1.0, running=1, capacity=1)
    assert tel.totals().busy == pytest.approx(start + 1.0 - origin)
    assert sum(r["running"] for r in tel.series()) > 0


@settings(max_examples=300, deadline=None)
@given(
    origin=st.one_of(
        st.floats(0.0, 1e7), st.sampled_from([2047.999, 4095.9999999, 2.0**20 - 1e-6, 3037.1899814263015])
    ),
    width=st.sampled_from([0.1, 0.3, 1.0, 0.7, 1e-3, 2.5]),
    steps=st.lists(st.floats(0.0, 50.0), min_size=1, max_size=20),
    max_buckets=st.integers(2, 50),
)
def test_advance_always_returns_and_keeps_every_sequence_second(origin, width, steps, max_buckets):
    """Bounded by construction: whatever the origin (across powers of two), width and times, advance
    returns, the kept buckets stay within max_buckets, and their busy time sums to the total."""
    tel = EngineTelemetry(bucket_s=width, max_buckets=max_buckets)
    t = origin
    tel.advance(t, 2, 4)
    for dt in steps:
        t += dt
        tel.advance(t, 2, 4, tokens=1, sequences=1)
    rows, totals = tel.series(), tel.totals()
    assert len(rows) <= max_buckets
    covered = [max(1e-9, min(tel.width, (totals.t - origin) - r["t"])) for r in rows]
    busy = sum(r["running"] * c for r, c in zip(rows, covered, strict=True))
    assert busy == pytest.approx(totals.busy, rel=1e-6, abs=1e-6)


def test_a_jump_of_the_clock_widens_the_buckets_instead_of_walking_them():
    tel = EngineTelemetry(bucket_s=1e-3, max_buckets=100)
    tel.advance(0.0, 1, 1)
    tel.advance(1e9, 1, 1)  # a day-long gap at millisecond buckets would be 10^12 steps
    assert len(tel.series()) <= 100
    assert tel.totals().busy == pytest.approx(1e9)
