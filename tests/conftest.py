"""Shared fixtures, the session's test order, and the guard that keeps vLLM out of the fast tests.

Fixtures any test file may use (ask for them by name; none needs an import):

- `prefect_harness` (session): one ephemeral Prefect API for the whole session (one per xdist worker);
  entering it costs ~11 s, so every in-process flow test shares it
  (`@pytest.mark.usefixtures("prefect_harness")`).
- `demo_vllm_engine`: the demo model (SmolLM2-135M) in ONE in-process `VLLMEngine` built from
  `VLLMConfig(model="demo")` (the defaults: max_model_len 2048, seed 0), shared by every test that only
  generates with it. Starting vLLM costs 30-90 s on two cores and a quarter of the machine's RAM, so:
    * the tests that ask for it run together, at the end of the session (see `pytest_collection_modifyitems`),
      so it starts once;
    * it is closed as soon as the next test does not ask for it, so it never shares the machine with a
      `vllm serve`, a `prm-synth run` subprocess on the demo model, or a test's own engine;
    * it is handed over idle: a test that leaves requests running in it (a failure half-way) gets it closed,
      and the next test a fresh one.
  To adopt it: add `demo_vllm_engine` as an argument (or make a module fixture of yours return it) and do
  not close it. It is slow: mark the test `@pytest.mark.slow`. A test that needs its own seed or config
  builds its own engine and does not ask for this one (the shared one is closed before that test starts;
  mark it `vllm`); a test must not assume the shared engine's random state (other tests sampled from it before).

Markers (pyproject.toml): `slow` = needs vLLM (even only its import), Ray, a model server, the demo model
through vLLM, or whole `prm-synth` processes that take minutes. `make test-fast` (`-m "not slow"`) runs the
rest; when slow tests are deselected, importing `vllm` in the pytest process fails the test that did it (a
test that needs vLLM must be marked slow instead of silently costing the fast run half a minute). Asking
whether it is installed (`importlib.util.find_spec`, TRL's checks) is not importing it and still works.
Ray is not guarded (a flow run on threads no longer imports prefect_ray, but nothing checks it).
`vllm` = starts vLLM other than through `demo_vllm_engine` (its own engine, a `prm-synth run` or deployment
on the demo model, a `vllm serve`): with the shared engine's users, these run on one xdist worker, one at
a time. A test that only imports vLLM needs `slow`, not `vllm`.

pytest-xdist (`make test` runs `-n 3`): every test that starts vLLM runs on one worker, one at a time
(the scheduler at the end of the shared-engine section); each worker has its own PREFECT_HOME; a test
takes its ports free from the OS and its files under its own tmp_path.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import shutil
import sys
import tempfile

import pytest

# No network: keep Prefect from phoning home, and keep its state out of ~/.prefect.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Under pytest-xdist every worker gets its own PREFECT_HOME: the workers inherit the controller's
# environment, and Prefect keeps profiles and caches there that two processes must not write at once.
_OWN_PREFECT_HOME = "PRM_SYNTH_TEST_PREFECT_HOME"
if "PREFECT_HOME" not in os.environ or (
    os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(_OWN_PREFECT_HOME) == os.environ["PREFECT_HOME"]
):
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="prm-synth-prefect-")
    os.environ[_OWN_PREFECT_HOME] = os.environ["PREFECT_HOME"]

# Under pytest-xdist three workers, vLLM and their subprocesses share two cores: OpenMP threads (torch's,
# vLLM's) that spin while they wait for work would burn the time the others need. Passive: they sleep.
# Set before any test imports torch; subprocesses (`prm-synth run`, `vllm serve`) inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DEMO_ENGINE = "demo_vllm_engine"
VLLM_GROUP = "vllm"  # the pytest-xdist work unit of the tests that start vLLM (marked `vllm` or using DEMO_ENGINE)
# Imported only by slow tests: 10-30 s of import on two cores.
HEAVY_MODULES = ("vllm",)


@pytest.fixture(scope="session")
def prefect_harness():
    """One ephemeral Prefect API for the whole session (entering it costs ~11 s; on a busy machine far
    more, and the harness's default 30 s start-up limit failed every test of a worker: wait generously)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=600):
        yield


# ---------------------------------------------------------------- the shared demo-model engine
class _SharedDemoEngine:
    """The one in-process demo engine: built on first use, closed when the next test does not use it."""

    def __init__(self) -> None:
        self.engine = None

    def get(self):
        if self.engine is None:
            pytest.importorskip("vllm")
            from prm_synth.config import VLLMConfig
            from prm_synth.engines.vllm import VLLMEngine

            self.engine = VLLMEngine(VLLMConfig(model="demo"))
        return self.engine

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()


_shared_demo_engine = _SharedDemoEngine()


@pytest.fixture
def demo_vllm_engine():
    """The demo model in the session's one in-process `VLLMEngine` (see the module docstring). Do not close it."""
    return _shared_demo_engine.get()


def _uses_demo_engine(item) -> bool:
    return DEMO_ENGINE in getattr(item, "fixturenames", ())


def _starts_vllm(item) -> bool:
    return _uses_demo_engine(item) or item.get_closest_marker("vllm") is not None


def pytest_collection_modifyitems(session, config, items):
    # The demo engine's users last, in their collected order: the engine starts once, and nothing that
    # starts a vLLM of its own (a `vllm serve`, a demo `prm-synth run`) runs while it is up.
    users = [item for item in items if _uses_demo_engine(item)]
    if users:
        items[:] = [item for item in items if not _uses_demo_engine(item)] + users
    _tell_the_controller_which_tests_start_vllm(config, items)


# ---------------------------------------------------------------- pytest-xdist: vLLM on one worker
# `make test` runs the suite on pytest-xdist workers. Every test that starts vLLM (marked `vllm`, or using
# the shared demo engine) runs on ONE worker, one after the other in the order above: one vLLM at a time,
# as in a serial run (each takes both cores and gigabytes of RAM), and the shared engine's users follow
# each other, so it starts once. xdist's own `xdist_group` mark cannot do this under pytest 9.2 (it renames
# the node ids through an attribute pytest no longer reads), so this conftest brings its own scheduler:
# the workers collect, write which of their tests start vLLM to a folder the controller gave them, and
# the controller schedules those as one unit (first: they are the longest chain), a module whose tests
# share a module-scoped fixture as one (built once), and every other test alone, slow ones first.
# Applies to `-n N` with the default `--dist load` or with `--dist loadgroup`.
_GROUPS_DIR = "prm_synth_vllm_groups_dir"


def _tell_the_controller_which_tests_start_vllm(config, items) -> None:
    folder = getattr(config, "workerinput", {}).get(_GROUPS_DIR)
    if folder is None:
        return
    worker = config.workerinput["workerid"]
    scratch = os.path.join(folder, f".{worker}.json")
    with open(scratch, "w") as f:
        json.dump(
            {
                "vllm": [item.nodeid for item in items if _starts_vllm(item)],
                "slow": [item.nodeid for item in items if item.get_closest_marker("slow") is not None],
                "units": {item.nodeid: unit for item in items if (unit := _shared_fixture_unit(item))},
            },
            f,
        )
    os.replace(scratch, os.path.join(folder, f"{worker}.json"))  # the controller never reads half a file


def _shared_fixture_unit(item) -> str | None:
    """The module of a test that uses a module- or class-scoped fixture (a simulated run, a server): the
    module's tests go to one worker, so the fixture is built once, not once per worker."""
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for defs in definitions.values():
        if defs and defs[-1].scope in ("module", "class", "package"):
            return item.nodeid.split("::")[0]
    return None


def _groups_dir(config) -> str:
    folder = getattr(config, "_prm_synth_groups_dir", None)
    if folder is None:
        folder = config._prm_synth_groups_dir = tempfile.mkdtemp(prefix="prm-synth-xdist-")
    return folder


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput[_GROUPS_DIR] = _groups_dir(node.config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None  # an explicit other mode (loadfile, worksteal, ...) is the caller's choice
    from xdist.scheduler import LoadScopeScheduling

    class VLLMOnOneWorker(LoadScopeScheduling):
        """Every test alone, but the tests that start vLLM as one unit, and a module's tests that share a
        module-scoped fixture as one. Handed out longest first: the vLLM unit, the other slow tests, the
        modules, then the rest (short tests fill the end, not a lone slow one)."""

        vllm_tests: set[str] | None = None
        units: dict[str, str] = {}
        first: list[str] = []

        def _read_the_workers_lists(self) -> None:
            folder = _groups_dir(config)
            self.vllm_tests, slow = set(), []
            for name in sorted(os.listdir(folder)):
                if name.endswith(".json") and not name.startswith("."):
                    with open(os.path.join(folder, name)) as f:
                        lists = json.load(f)
                    self.vllm_tests.update(lists["vllm"])
                    # the same on every worker (xdist checks that the collections match)
                    slow, self.units = lists["slow"], lists["units"]
            order = [VLLM_GROUP, *(self._split_scope(n) for n in slow), *self.units.values()]
            self.first = list(dict.fromkeys(order))

        def _split_scope(self, nodeid: str) -> str:
            if self.vllm_tests is None:  # first called once every worker has collected (and written)
                self._read_the_workers_lists()
            return VLLM_GROUP if nodeid in self.vllm_tests else self.units.get(nodeid, nodeid)

        def _assign_work_unit(self, node) -> None:
            while self.first and self.first[0] not in self.workqueue:
                self.first.pop(0)
            if self.first:
                self.workqueue.move_to_end(self.first.pop(0), last=False)
            super()._assign_work_unit(node)

    return VLLMOnOneWorker(config, log)


def pytest_runtest_teardown(item, nextitem):
    engine = _shared_demo_engine.engine
    if engine is None:
        return
    if nextitem is None or not _uses_demo_engine(nextitem) or engine.running():
        _shared_demo_engine.close()


def pytest_sessionfinish(session, exitstatus):
    _shared_demo_engine.close()  # a session stopped early (-x) ends with the engine still up
    folder = getattr(session.config, "_prm_synth_groups_dir", None)
    if folder is not None:  # the controller's folder of the workers' vLLM test lists
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- no vLLM in the fast tests
class HeavyImportInFastTests(RuntimeError):
    """Not an ImportError on purpose: `pytest.importorskip` must not turn it into a quiet skip."""


class _RefusingLoader(importlib.abc.Loader):
    """Runs no code of the module: executing it (importing it for real) is the error. Finding it is not:
    libraries ask whether vLLM is installed (`find_spec`) without loading it."""

    def __init__(self, fullname: str) -> None:
        self.fullname = fullname

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        top = self.fullname.partition(".")[0]
        raise HeavyImportInFastTests(
            f"`import {self.fullname}` in the fast tests (-m 'not slow'): a test that needs {top} must be "
            "marked @pytest.mark.slow"
        )


class _RefuseHeavyImports(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in HEAVY_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None:
            spec.loader = _RefusingLoader(fullname)
        return spec


def _deselects_slow(config) -> bool:
    expression = " ".join((config.getoption("markexpr", "") or "").split())
    return "not slow" in expression


def pytest_configure(config):
    if _deselects_slow(config) and not any(name in sys.modules for name in HEAVY_MODULES):
        sys.meta_path.insert(0, _RefuseHeavyImports())
