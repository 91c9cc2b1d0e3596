"""Golden rows: the labels of fixed runs are pinned per labeler revision, so a change that moves a row
without bumping `LABELER_REVISIONS` (prm_synth/config/annotate.py) fails here.

Cases (`CASES`): pipelines/simulated.yaml on its first problems under every search (per-step MC, the
default change-point search, the fixed and sequential bisections, OmegaPRM with each test it can take),
and two worlds of benchmarks/fidelity.py (`luck_15`, `repair`; their policies copied to tests/_worlds.py
so the benchmark may change its worlds) through `make_labeler` as the benchmark runs them. Each row is
digested over a canonical JSON of everything it holds but its config fingerprint (which names the
revision itself); floats are rounded to 9 decimals, so a platform's last-bit differences do not count as
a change.

The fixture (tests/fixtures/golden_rows.json) maps each revision to its digests. When rows change on
purpose: bump the revision, then regenerate the fixture and commit it with the change:

    PYTHONPATH=$PWD python tests/annotate/test_golden_rows.py --regenerate

(a behaviour-preserving refactor must pass without either).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: `python tests/annotate/test_golden_rows.py --regenerate`
    sys.path.insert(0, str(ROOT))

from _worlds import world_config  # noqa: E402

from prm_synth.config import LABELER_REVISIONS, PipelineConfig  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "golden_rows.json"
REVISION = LABELER_REVISIONS["changepoint"]
SIMULATED_LIMIT = 24
WORLD_PROBLEMS = 30
WORLD_SEED = 3
WORLDS = ("luck_15", "repair")  # of tests/_worlds.py (benchmarks/fidelity.py's, as they were when pinned)
SIMULATED_ANNOTATE: dict[str, dict[str, Any]] = {
    "mc": {"method": "mc", "k": 8},
    "binary-changepoint": {"method": "binary"},
    "binary-fixed": {"method": "binary", "search_test": "fixed"},
    "binary-sprt": {"method": "binary", "search_test": "sprt"},
    "omegaprm-fixed": {"method": "omegaprm", "search_limit": 6, "rollout_budget": 80},
    "omegaprm-changepoint": {
        "method": "omegaprm",
        "search_test": "changepoint",
        "search_limit": 6,
        "rollout_budget": 80,
    },
}
CASES = [f"simulated/{name}" for name in SIMULATED_ANNOTATE] + [f"fidelity/{world}" for world in WORLDS]


def _simulated(name: str) -> PipelineConfig:
    data = yaml.safe_load((ROOT / "pipelines" / "simulated.yaml").read_text())
    data["annotate"] = SIMULATED_ANNOTATE[name]
    data["problems"]["count"] = SIMULATED_LIMIT
    return PipelineConfig.model_validate(data)


def _world(world: str) -> PipelineConfig:
    return world_config(world, f"fidelity-{world}", WORLD_PROBLEMS, WORLD_SEED)


def case_rows(case: str) -> list[dict[str, Any]]:
    """The rows of one case, labeled now."""
    from prm_synth.annotate.labeler import make_labeler
    from prm_synth.problems.sources import iter_problems
    from prm_synth.records import Problem
    from prm_synth.simulated.engines import SimulatedPolicy

    kind, name = case.split("/")
    config = _simulated(name) if kind == "simulated" else _world(name)
    problems = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    engine = SimulatedPolicy(config.policy)  # type: ignore[arg-type]
    result = make_labeler(config).label(engine, problems)
    return [r.to_row() for r in result.records]


def _canonical(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


# nullable columns added to the record schema after the fixture was first generated
ADDED_COLUMNS = frozenset(
    {"consensus_p_good", "labels_before_consensus", "gold_origin", "given_first_error", "given_labels"}
)
# columns added after the fixture that only restate what a pinned column holds (why `final_correct` is
# null: the grader's reason), left out always: they do not move a label
RESTATING_COLUMNS = frozenset({"final_unknown_reason"})


def row_digest(row: dict[str, Any]) -> str:
    """sha256 (first 16 hex digits) of the row's canonical JSON, its config fingerprint left out, and
    the nullable columns added after the fixture's first version left out where null (`ADDED_COLUMNS`):
    a column the labeler does not fill leaves the pinned digests alone."""
    body = {
        k: v
        for k, v in row.items()
        if k != "config_fingerprint" and k not in RESTATING_COLUMNS and not (k in ADDED_COLUMNS and v is None)
    }
    text = json.dumps(_canonical(body), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digests(case: str) -> list[list[str]]:
    """[[row id, digest], ...] of one case, in row order."""
    return [[row["id"], row_digest(row)] for row in case_rows(case)]


def _load() -> dict[str, dict[str, list[list[str]]]]:
    return json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}


REGENERATE = f"PYTHONPATH=$PWD python {Path(__file__).relative_to(ROOT)} --regenerate"


@pytest.mark.parametrize("case", CASES)
def test_rows_match_the_labeler_revision(case: str) -> None:
    pinned = _load().get(REVISION)
    if pinned is None or case not in pinned:
        pytest.fail(
            f"no golden rows pinned for labeler revision {REVISION!r} ({case}): regenerate the fixture "
            f"with `{REGENERATE}` and commit it with the change that bumped the revision"
        )
    now = digests(case)
    want = pinned[case]
    if now != want:
        changed = [a[0] for a, b in zip(now, want, strict=False) if a != b]
        pytest.fail(
            f"{case}: rows changed under the same labeler revision {REVISION!r} "
            f"({len(now)} rows now, {len(want)} pinned; first changed: {changed[:5]}). A change that moves "
            f"rows must bump LABELER_REVISIONS in prm_synth/config/annotate.py and regenerate the fixture "
            f"(`{REGENERATE}`); a refactor must not move them."
        )


def regenerate() -> None:
    """Pin the current code's rows under the current revision (other revisions' entries are kept)."""
    data = _load()
    data[REVISION] = {case: digests(case) for case in CASES}
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"pinned {len(CASES)} cases under labeler revision {REVISION} in {FIXTURE.relative_to(ROOT)}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: {REGENERATE}")
    regenerate()
