"""One error hierarchy: what prm-synth raises on purpose is a PrmSynthError with its exit code, printed
as one `error:` line; anything else is a bug, shown with its traceback and exit code 70."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows
import prm_synth
from prm_synth.cli import app
from prm_synth.errors import EXIT_BUG, EXIT_FAILED, EXIT_USAGE, PrmSynthError

ROOT = Path(__file__).resolve().parents[1]
SIMULATED = ROOT / "pipelines" / "simulated.yaml"
PLANTED = "planted bug 7f3a"
# Modules that need an optional extra, or vLLM, to import: their classes are checked by name below.
OPTIONAL = ("prm_synth.engines.vllm", "flows.ray_runner")


def _our_modules():
    for package in (prm_synth, flows):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.startswith(OPTIONAL):
                continue
            yield importlib.import_module(info.name)


def test_every_public_error_class_is_a_prm_synth_error_with_an_exit_code():
    found = []
    for module in _our_modules():
        for name, cls in vars(module).items():
            if (
                inspect.isclass(cls)
                and issubclass(cls, BaseException)
                and cls.__module__ == module.__name__
                and not name.startswith("_")  # private control flow of one module, never seen by a caller
            ):
                found.append(cls)
                assert issubclass(cls, PrmSynthError), f"{module.__name__}.{name} is not a PrmSynthError"
                assert cls.exit_code in (EXIT_FAILED, EXIT_USAGE), f"{name}.exit_code {cls.exit_code}"
    names = {cls.__name__ for cls in found}
    # The ones the issue named: each of them now ours.
    for name in ("PRMEvalError", "GraderUnavailableError", "TokenizationError", "HubExportError"):
        assert name in names
    for name in ("ExportRequestError", "SkipRow", "TrainError", "ConfigError", "ShardsFailedError"):
        assert name in names


def _bug(*_args, **_kwargs):
    raise ValueError(PLANTED)


def _manifest_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"config_fingerprint": "x"}))
    return folder


def _bench(tmp_path: Path) -> Path:
    path = tmp_path / "bench.jsonl"
    path.write_text(json.dumps({"problem": "1+1?", "steps": ["2"], "label": -1}) + "\n")
    return path


# Each command, and one function inside its work that a bug could be in.
def _cases(tmp_path: Path) -> list[tuple[str, list[str], str]]:
    folder = _manifest_folder(tmp_path)
    bench = _bench(tmp_path)
    return [
        ("run", ["run", str(SIMULATED), "--out", str(tmp_path / "out")], "flows.synthesize.synthesize_with_runner"),
        ("serve", ["serve", str(SIMULATED), "--cron", "0 3 * * *"], "prm_synth.config.load_config"),
        ("models prepare-demo", ["models", "prepare-demo"], "prm_synth.demo_model.prepare_demo_model"),
        ("inspect", ["inspect", str(folder)], "prm_synth.store.summary.summarize"),
        ("show", ["show", str(folder)], "prm_synth.store.readers.iter_records"),
        ("export", ["export", str(folder), "--to-dir", str(tmp_path / "x")], "prm_synth.export.hub.plan_export"),
        (
            "eval judge",
            ["eval", "judge", str(bench), "--model", "demo"],
            "prm_synth.products.evaluate.load_processbench",
        ),
        (
            "eval labels",
            ["eval", "labels", str(bench), "--gold-answers", str(bench), "--pipeline", str(SIMULATED)],
            "prm_synth.problems.gold_answers.load_gold_answers",
        ),
        ("eval dataset", ["eval", "dataset", str(folder)], "prm_synth.products.evaluate.evaluate_dataset"),
        (
            "train",
            ["train", str(folder), "--model", "m", "--out", str(tmp_path / "prm")],
            "prm_synth.products.train.train_prm",
        ),
        ("eval prm", ["eval", "prm", "m", "--processbench", str(bench)], "prm_synth.products.prm_eval.evaluate_prm"),
    ]


COMMANDS = [
    "run",
    "serve",
    "models prepare-demo",
    "inspect",
    "show",
    "export",
    "eval judge",
    "eval labels",
    "eval dataset",
    "train",
    "eval prm",
]


def _patch(monkeypatch, target: str, value) -> None:
    module, _, attr = target.rpartition(".")
    monkeypatch.setattr(importlib.import_module(module), attr, value)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bug_inside_a_command_keeps_its_traceback_and_exits_70(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, target = next((a, t) for name, a, t in _cases(tmp_path) if name == command)
    _patch(monkeypatch, target, _bug)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == EXIT_BUG, result.output
    assert "Traceback (most recent call last)" in result.output, result.output
    assert f"ValueError: {PLANTED}" in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: internal error (ValueError)"), last


def test_every_command_is_covered():
    commands = []
    for info in app.registered_commands:
        commands.append(info.name or info.callback.__name__)
    for group in app.registered_groups:
        for info in group.typer_instance.registered_commands:
            commands.append(f"{group.name} {info.name or info.callback.__name__}")
    assert sorted(commands) == sorted(COMMANDS)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ("ours_input", EXIT_USAGE),
        ("ours_failed", EXIT_FAILED),
        ("os", EXIT_FAILED),
    ],
)
def test_our_errors_and_the_systems_are_one_line_with_their_exit_code(error, code, tmp_path, monkeypatch):
    from prm_synth.engines.base import EngineError
    from prm_synth.problems.gold_answers import BenchFileError

    raised = {
        "ours_input": BenchFileError("bench.jsonl row 3: not an object"),
        "ours_failed": EngineError("the server at http://127.0.0.1:9 did not answer"),
        "os": OSError(28, "No space left on device", str(tmp_path / "f")),
    }[error]

    def fails(*_args, **_kwargs):
        raise raised

    monkeypatch.setattr("prm_synth.products.evaluate.evaluate_dataset", fails)
    result = CliRunner().invoke(app, ["eval", "dataset", str(tmp_path)])
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output


def test_a_runtime_error_that_is_not_prefects_start_up_is_a_bug(tmp_path, monkeypatch):
    """`run` reads one RuntimeError of Prefect's (its temporary server did not start) as a failure; any
    other RuntimeError is a bug, shown whole."""

    def flow(*_args, **_kwargs):
        raise RuntimeError(PLANTED)

    monkeypatch.setattr("flows.synthesize.synthesize_with_runner", lambda *_a, **_k: flow)
    result = CliRunner().invoke(app, ["run", str(SIMULATED), "--out", str(tmp_path / "out")])
    assert result.exit_code == EXIT_BUG, result.output
    assert f"RuntimeError: {PLANTED}" in result.output and "Traceback" in result.output


def test_a_file_that_is_not_a_bench_file_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bench.json"
    bad.write_text("{not json")
    result = CliRunner().invoke(app, ["eval", "judge", str(bad), "--model", "demo"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.output.startswith("error: ") and "not JSON" in result.output and "Traceback" not in result.output


def test_a_commands_own_refusal_is_not_a_bug(tmp_path):
    result = CliRunner().invoke(app, ["export", str(tmp_path)])  # neither --to-dir nor --repo-id
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.output.startswith("error: give exactly one of") and "Traceback" not in result.output
