"""A quiet console (issue 60 part 4): in `prm-synth run`'s worker, what the libraries print (Python logging,
`warnings`, child processes and C code writing to file descriptor 2, tqdm bars) goes to the log file, and
the run's own lines (its loggers, its `error:` lines, the summary on stdout) stay on the console.

The demo on vLLM is checked end to end in tests/test_demo_pipeline.py (slow); here every door the
libraries print through is opened by hand, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import logging, os, subprocess, sys, warnings
from pathlib import Path
import flows.synthesize  # Prefect and its logging set up first, as in a run
from tqdm import tqdm as imported_before  # a library that brought tqdm before the console was made quiet
from prm_synth.cli.quiet import quiet_console

quiet_console(Path(sys.argv[1]))
warnings.warn("a library's FutureWarning", FutureWarning)
logging.getLogger("vllm.engine").warning("a library WARNING")
logging.getLogger("some.library").error("another library's error")
subprocess.run([sys.executable, "-c", "import sys; print('a child process on fd 2', file=sys.stderr)"])
os.write(2, b"C code on fd 2\n")
list(imported_before(range(3), desc="a library bar"))
logging.getLogger("prm_synth.sampling").warning("the run's own warning")
logging.getLogger("flows.synthesize").warning("a shard's warning")
print("error: the run's own error line", file=sys.stderr)
print("summary on stdout")
"""
LIBRARY = ("FutureWarning", "a library WARNING", "another library's error", "a child process on fd 2", "C code on fd 2")


def test_library_output_goes_to_the_log_and_the_runs_own_lines_stay(tmp_path):
    log = tmp_path / "out" / "logs" / "run.log"
    env = os.environ | {"PYTHONPATH": str(ROOT), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("TQDM_DISABLE", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log)], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "summary on stdout\n"
    console = done.stderr
    for text in LIBRARY:
        assert text not in console
    assert "a library bar" not in console and "it/s" not in console  # no bar on the console: in the log
    assert "a library bar" in log.read_text()
    lines = console.splitlines()
    assert len(lines) == 3, console
    assert "the run's own warning" in lines[0] and "a shard's warning" in lines[1]
    assert lines[2] == "error: the run's own error line"
    written = log.read_text()
    assert written.startswith("\n==== prm-synth run, ")
    for text in LIBRARY:
        assert text in written, text
    assert "the run's own warning" not in written


def test_a_run_says_where_its_library_log_is_only_when_it_holds_something(tmp_path):
    from prm_synth.cli.quiet import HEADER, said_anything

    log = tmp_path / "run.log"
    log.write_text(f"\n{HEADER}, earlier\nvLLM said something\n\n{HEADER}, now (pid 1)\n")
    assert not said_anything(log)  # this run's part is empty; an earlier run's is not this run's
    log.write_text(log.read_text() + "a warning\n")
    assert said_anything(log)
    assert not said_anything(tmp_path / "missing.log")


def test_the_demos_ungradable_rollouts_are_said_to_be_expected_in_the_same_line(tmp_path):
    import yaml
    from _simulated_run import pipeline_data, write_run

    from prm_synth.cli.run import _explain_demo
    from prm_synth.config import validate_config
    from prm_synth.store.summary import summarize

    summary = summarize(write_run(tmp_path / "run", pipeline_data(), 4))
    summary.warnings = ["46 of 104 rollouts (44.2%) could not be graded (...): check rollouts.max_tokens", "other"]
    demo = validate_config(yaml.safe_load((ROOT / "pipelines" / "demo.yaml").read_text()))
    said = _explain_demo(summary, demo).warnings
    assert len(said) == 2 and said[1] == "other"
    assert said[0].startswith("46 of 104") and "Expected on the demo" in said[0] and "max_tokens (64)" in said[0]
    other = validate_config(pipeline_data())  # not the demo: the warning stays as it was
    summary.warnings = ["46 of 104 rollouts (44.2%) could not be graded"]
    assert _explain_demo(summary, other).warnings == ["46 of 104 rollouts (44.2%) could not be graded"]
