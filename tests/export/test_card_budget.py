"""The dataset card's budget sentence on a default-method run is the real bound on a solution's rollouts,
and `annotate.changepoint_max_rollouts` is the one knob that sets it."""

from __future__ import annotations

import re

import pytest
from _simulated_run import pipeline_data, write_run

from prm_synth.export.hub import export_to_dir
from prm_synth.store.readers import iter_records

LIMIT = 40
BOUND = re.compile(r"within (\d+) rollouts a solution")


def _data(**annotate):
    """Longer solutions than the file's (10-20 operations), where a search may spend past 56."""
    data = pipeline_data(annotate={"method": "binary", **annotate})
    data["problems"] = data["problems"] | {"min_ops": 10, "max_ops": 20}
    return data


def _run(tmp_path_factory, name: str, **annotate):
    data = _data(**annotate)
    return write_run(tmp_path_factory.mktemp(name) / "run", data, LIMIT)


def _max_rollouts(run) -> int:
    return max(row["rollouts"] for row in iter_records(run))


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """pipelines/simulated.yaml under the default method (the change-point search) on 40 longer problems."""
    return _run(tmp_path_factory, "default")


def test_the_card_states_the_most_rollouts_a_row_took_at_most(default_run, tmp_path):
    export_to_dir(default_run, tmp_path / "repo", ["trl"], test_fraction=0.2)
    card = " ".join((tmp_path / "repo" / "README.md").read_text(encoding="utf-8").split())
    stated = {int(n) for n in BOUND.findall(card)}
    assert stated == {128}, stated  # the default of annotate.changepoint_max_rollouts
    most = _max_rollouts(default_run)
    assert most <= 128
    assert most > 56, "the run should include a search that spent past the old card's 56"


def test_the_knob_bounds_a_solution_s_rollouts(default_run, tmp_path_factory):
    low = _run(tmp_path_factory, "low", changepoint_max_rollouts=24)
    assert _max_rollouts(low) <= 24 < _max_rollouts(default_run)
    from prm_synth.annotate.labeler import make_labeler
    from prm_synth.config import validate_config

    labeler = make_labeler(validate_config(_data(changepoint_max_rollouts=24)))
    assert BOUND.findall(labeler.card_text()) == ["24"]
    assert "at most 24 rollouts a solution" in labeler.budget_line()
