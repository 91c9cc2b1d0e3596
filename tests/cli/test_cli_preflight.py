"""`prm-synth run` refuses bad input in one line, before Prefect starts, and writes nothing."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from _cli_output import one_line_error
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from prm_synth import __version__
from prm_synth.cli import app
from prm_synth.config import load_config
from prm_synth.config.diff import differing_keys, without_sections
from prm_synth.store.shards import ShardStore

ROOT = Path(__file__).resolve().parents[2]
SIMULATED = ROOT / "pipelines" / "simulated.yaml"


def pipeline(tmp_path: Path, filename: str = "pipeline.yaml", **sections) -> Path:
    data = yaml.safe_load(SIMULATED.read_text())
    for key, value in sections.items():
        if isinstance(value, dict) and "kind" not in value:  # a new `kind` replaces the section
            data[key] = data.get(key, {}) | value
        else:
            data[key] = value
    path = tmp_path / filename
    path.write_text(yaml.safe_dump(data))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "prm_synth.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_another_configs_folder_is_refused_at_once_naming_the_keys_that_differ(tmp_path):
    out = tmp_path / "out"
    mc = {"method": "mc", "k": 8}  # per-step MC: a labeler with a `k` to change
    old = load_config(pipeline(tmp_path, filename="old.yaml", annotate=mc))
    dump = old.model_dump(mode="json")
    ShardStore(out, old.fingerprint()).prepare(dump, yaml.safe_dump(dump))
    new = pipeline(
        tmp_path, filename="new.yaml", annotate=mc | {"k": 4}, problems={"count": 7}, run={"max_parallel_shards": 3}
    )
    result = run_cli("run", str(new), "--out", str(out))
    line = one_line_error(result)
    assert "another config" in line and "annotate.k" in line and "problems.count" in line, line
    assert "run.max_parallel_shards" not in line  # run-time knobs never refuse a folder
    assert "temporary server" not in result.stderr  # refused before Prefect started


def test_a_folder_labeled_by_another_revision_of_the_labeler_is_refused_naming_both(tmp_path, monkeypatch):
    import prm_synth.config.pipeline as config_module

    data = yaml.safe_load(SIMULATED.read_text()) | {"annotate": {"method": "binary"}}  # the change-point search
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    today = load_config(path).labeler_revision()
    older, unrecorded = tmp_path / "older", tmp_path / "unrecorded"
    with monkeypatch.context() as patch:
        patch.setitem(config_module.LABELER_REVISIONS, "changepoint", "2026-01-01")
        old = load_config(path)
        dump = old.model_dump(mode="json")
        ShardStore(older, old.fingerprint(), old.labeler_revision()).prepare(dump, yaml.safe_dump(dump))
        patch.setattr(config_module.PipelineConfig, "labeler_revision", lambda self: None)  # before revisions
        ShardStore(unrecorded, old.fingerprint()).prepare(dump, yaml.safe_dump(dump))
    assert json.loads((older / "manifest.json").read_text())["labeler_revision"] == "changepoint 2026-01-01"
    line = one_line_error(CliRunner().invoke(app, ["run", str(path), "--out", str(older)]))
    assert "changepoint 2026-01-01" in line and str(today) in line and "--overwrite" in line, line
    line = one_line_error(CliRunner().invoke(app, ["run", str(path), "--out", str(unrecorded)]))
    assert "before revisions were recorded" in line and str(today) in line, line


def test_output_folders_that_cannot_work_are_one_line_errors(tmp_path):
    path = pipeline(tmp_path)
    runner = CliRunner()
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with_data_file = tmp_path / "with-data-file"
    with_data_file.mkdir()
    (with_data_file / "data").write_text("x")
    cases = {
        str(a_file): "is a file",
        str(a_file / "below"): "which is a file",
        str(with_data_file): "data is a file",
    }
    for out, expected in cases.items():
        line = one_line_error(runner.invoke(app, ["run", str(path), "--out", out]))
        assert expected in line, line
    assert not (with_data_file / "manifest.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_output_folder_is_a_one_line_error(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        line = one_line_error(CliRunner().invoke(app, ["run", str(pipeline(tmp_path)), "--out", str(out)]))
    finally:
        out.chmod(0o755)
    assert "not writable" in line


def test_a_pipeline_name_that_is_not_a_folder_name_cannot_pick_the_output_path(tmp_path, monkeypatch):
    cwd = tmp_path / "a" / "b" / "c"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    for name in ("../../escape", "/abs", "..", "a/b"):
        result = CliRunner().invoke(app, ["run", str(pipeline(tmp_path, name=name))])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert "name" in result.output.splitlines()[0] or "name:" in result.output, result.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "c", "pipeline.yaml"]


def test_the_default_output_folder_is_refused_for_a_name_that_is_not_a_folder_name():
    """The CLI's own check, behind the config's: whatever a config lets through never leaves runs/."""
    from types import SimpleNamespace

    from prm_synth.cli.preflight import PreflightError, default_out_dir

    assert default_out_dir(SimpleNamespace(name="demo")) == Path("runs") / "demo"
    for name in ("../../escape", "/abs", "..", ".", "a/b", "a\\b", ""):
        with pytest.raises(PreflightError, match="not a plain folder name"):
            default_out_dir(SimpleNamespace(name=name))


def test_a_folder_as_pipeline_path_is_a_one_line_error(tmp_path):
    line = one_line_error(CliRunner().invoke(app, ["run", str(tmp_path)]))
    assert "is a folder" in line


def test_a_bad_problem_file_writes_nothing(tmp_path):
    (tmp_path / "problems.csv").write_text("question,answer\n")
    path = pipeline(tmp_path, problems={"kind": "file", "path": str(tmp_path / "problems.csv")})
    line = one_line_error(CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")]))
    assert "problems.csv" in line
    assert not (tmp_path / "out").exists()


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"prm-synth {__version__}"


def test_the_cli_sets_prefect_defaults_a_user_can_override():
    probe = (
        "import os, prm_synth.cli\n"
        "from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS as t\n"
        "print(os.environ['DO_NOT_TRACK'], t.value())\n"
    )
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DO_NOT_TRACK", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS")
    }
    base["PYTHONPATH"] = str(ROOT)
    ours = subprocess.run([sys.executable, "-c", probe], env=base, capture_output=True, text=True, timeout=120)
    assert ours.stdout.split() == ["1", "300"], ours.stderr
    theirs = subprocess.run(
        [sys.executable, "-c", probe],
        env=base | {"DO_NOT_TRACK": "0", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "7"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert theirs.stdout.split() == ["0", "7"], theirs.stderr


def test_a_server_that_does_not_start_is_a_one_line_error_and_leaves_no_process(tmp_path):
    import psutil

    env = os.environ | {
        "PYTHONPATH": str(ROOT),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "0",  # no server can start in 0 s
    }
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(SIMULATED), "--out", str(tmp_path / "o"), "--limit", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stdout + stderr
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "did not start within 0 s" in errors[0], stderr

    # The server Prefect started anyway (uvicorn) ends with the command: every process of the run
    # inherited this PREFECT_HOME, and none may be left.
    def leftovers() -> list[int]:
        pids = []
        for p in psutil.process_iter():
            try:
                if p.environ().get("PREFECT_HOME") == env["PREFECT_HOME"] and p.status() != psutil.STATUS_ZOMBIE:
                    pids.append(p.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return pids

    deadline = time.monotonic() + 60
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftovers()


# ---------------------------------------------------------------- config_diff
leaves = st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none(), st.lists(st.integers(), max_size=3))
configs = st.recursive(
    leaves, lambda inner: st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), inner, max_size=4), max_leaves=12
)


@settings(deadline=None)  # a busy machine: no per-example time limit
@given(configs)
def test_a_config_differs_from_itself_nowhere(config):
    assert differing_keys(config, config) == []


@settings(deadline=None)  # a busy machine: no per-example time limit
@given(st.dictionaries(st.text("abc", min_size=1, max_size=2), configs, min_size=1, max_size=4), st.data())
def test_changing_one_leaf_names_exactly_its_path(config, data):
    paths = []

    def walk(node, prefix):
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else k)
        else:
            paths.append(prefix)

    walk(config, "")
    target = data.draw(st.sampled_from(paths))
    changed = copy.deepcopy(config)
    node = changed
    *parents, leaf = target.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = ["a value no strategy draws"]
    assert differing_keys(config, changed) == [target]
    assert without_sections(differing_keys(config, changed), [target.split(".")[0]]) == []


def test_failed_shards_end_in_one_error_line_and_no_traceback(tmp_path):
    """A server that does not answer fails every shard: Prefect logs each failure in one line, the
    command ends with one error line and exit 1, and no traceback hides it."""
    path = pipeline(
        tmp_path,
        policy={"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0, "timeout_s": 2},
        problems={"count": 2},
        output={"shard_size": 1},
        run={"shard_retry_delays_s": [0, 0.5]},  # the retries without the default's 2 + 10 s of waiting
    )
    # Prefect's INFO lines (its retry notices among them) are off by default; a user's own level wins.
    env = os.environ | {
        "PYTHONPATH": str(ROOT),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_LOGGING_LEVEL": "INFO",
    }
    cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(path), "--out", str(tmp_path / "out")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    # Each shard is retried twice by Prefect, after the configured waits.
    assert done.stderr.count("Retry 2/2 will start 0.5 second(s) from now") == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "2 shard(s) failed" in errors[0] and "127.0.0.1:9" in errors[0]


def test_the_summary_counts_the_start_up_in_the_wall_time(tmp_path):
    """A real command (a CliRunner run would leave Prefect's log handler on its closed stream)."""
    env = os.environ | {"PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect")}
    cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(SIMULATED), "--out", str(tmp_path / "o"), "--limit", "5"]
    done = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert 0 < summary["startup_seconds"] <= summary["wall_seconds"]
    assert "started_at" not in summary
