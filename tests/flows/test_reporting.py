"""The live progress of a run and its engine picture (Prefect's artifact calls replaced by recorders)."""

from __future__ import annotations

import pytest
from _timed_engine import LengthEngine, TimedEngine, always_correct, scripted

import flows.reporting as reporting
from prm_synth.annotate.protocol import Probe
from prm_synth.annotate.scheduler import ProbeScheduler, SolutionJob
from prm_synth.config import validate_config
from prm_synth.engines.base import SamplingOptions
from prm_synth.telemetry import ProgressSnapshot


@pytest.fixture
def artifacts(monkeypatch):
    calls: list[tuple[str, tuple, dict]] = []

    def recorder(name):
        def record(*args, **kwargs):
            calls.append((name, args, kwargs))
            return "artifact-id"

        return record

    for name in ("create_progress_artifact", "update_progress_artifact", "create_markdown_artifact"):
        monkeypatch.setattr(reporting, name, recorder(name))
    return calls


def snap(done: int, total: int, rollouts: int, finished: bool = False) -> ProgressSnapshot:
    return ProgressSnapshot("annotate", 1.0, done, total, total, rollouts, 10 * rollouts, 5.0, 3, 8, finished)


def test_progress_sums_the_shards_in_flight_and_the_finished_ones(artifacts, monkeypatch):
    monkeypatch.setattr(reporting, "ARTIFACT_INTERVAL_S", 0.0)
    progress = reporting.ShardProgress(total=4, terminal=False)
    progress.shard_callback(0)(snap(5, 10, 40))
    progress.shard_callback(1)(snap(2, 8, 12))
    assert progress.fraction() == pytest.approx((0.5 + 0.25) / 4)
    assert progress.run_line().startswith("7 annotated, 52 rollouts, 520 tokens")
    progress.shard_callback(0)(snap(10, 10, 70, finished=True))
    assert progress.totals()[2] == 700 + 120  # labeled, not yet written: its rollouts' tokens still count
    progress.advance(tokens=700, shard_index=0)  # written: its stats' tokens (sampling and judge too) instead
    assert progress.fraction() == pytest.approx((1 + 0.25) / 4)
    assert progress.run_line().startswith("12 annotated, 82 rollouts, 820 tokens")
    updates = [c for c in artifacts if c[0] == "update_progress_artifact"]
    assert updates and "shard 1: annotate: annotated 2/8" in updates[-1][2]["description"]
    assert updates[-1][1][1] == pytest.approx(100 * 1.25 / 4)
    progress.advance(tokens=1000, resumed=True)  # an earlier run's shard: in the total, not in tok/s
    assert progress.totals()[2] == 1820
    progress.close()


def test_the_engine_picture_is_saved_and_attached(artifacts, tmp_path):
    engine = TimedEngine(LengthEngine(lambda p: 3 + len(p)), capacity=4)
    before = reporting.engine_totals()
    sched = ProbeScheduler(engine, SamplingOptions(), grader=always_correct)
    jobs = [SolutionJob(f"j{i}", f"p{i}", "Q", "1", scripted([[Probe("a" * i, 2)]])) for i in range(6)]
    assert len(list(sched.run(jobs))) == 6
    config = validate_config(
        {"name": "pic", "problems": {"kind": "builtin", "count": 1}, "policy": {"kind": "simulated"}}
    )
    pngs = reporting.publish_engine_pictures(tmp_path, before, config)
    assert (tmp_path / "telemetry" / "length.json").exists() and (tmp_path / "telemetry" / "length.csv").exists()
    pytest.importorskip("matplotlib")
    assert pngs == [tmp_path / "telemetry" / "length.png"]
    (markdown,) = [c for c in artifacts if c[0] == "create_markdown_artifact"]
    assert "occupancy" in markdown[1][0] and markdown[2]["key"] == "pic-engine-length"
    # a second run of the same process with nothing new for this engine adds no picture
    assert reporting.publish_engine_pictures(tmp_path / "again", reporting.engine_totals(), config) == []


def test_shard_tasks_of_this_process_report_to_the_running_flows_progress(artifacts):
    progress = reporting.ShardProgress(total=2, terminal=False)
    assert reporting.active_shard_callback(0) is None  # no run in this process: log lines only
    progress.activate()
    reporting.active_shard_callback(1)(snap(3, 6, 20))
    assert "20" in progress.run_line()
    progress.close()
    assert reporting.active_shard_callback(0) is None
