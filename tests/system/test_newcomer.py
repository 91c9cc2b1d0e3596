"""The rough edges a newcomer hit in the first hour (issue 52), each held by a test: an empty verifier
export refused, help texts that show `[train]`, the reference's escapes and type cells, exit codes in
the CLI reference, the dataset card's judge paragraph, plural and examples, the run summary in words,
`show`'s first-error wording, one style of boolean flag, and a resume with nothing left to do that
answers without starting Prefect."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from _cli_output import one_line_error
from _simulated_run import pipeline_data, write_run
from _tokenizers import qwen_like_bpe
from test_docs import HOOKS
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.cli.look import first_error_words
from prm_synth.config import validate_config
from prm_synth.store.readers import iter_records

ROOT = Path(__file__).resolve().parents[2]
WIDE = {"COLUMNS": "250"}


def _with_revision(root: Path, data: dict) -> Path:
    """A run written by the test writer, with the labeler revision `prm-synth run` records (so that the
    command resumes it instead of refusing it as another labeler's)."""
    manifest = json.loads((root / "manifest.json").read_text())
    revision = validate_config(data).labeler_revision()
    if revision is not None:
        manifest["labeler_revision"] = revision
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """pipelines/simulated.yaml as the quickstart runs it (the default labeler), on 20 problems."""
    data = pipeline_data()
    return _with_revision(write_run(tmp_path_factory.mktemp("quick") / "run", data, 20), data)


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """pipelines/simulated-consensus.yaml (a judge, soft consensus) on 20 problems, with its pipeline file."""
    folder = tmp_path_factory.mktemp("judged")
    data = pipeline_data("simulated-consensus")
    (folder / "pipeline.yaml").write_text(yaml.safe_dump(data))
    return _with_revision(write_run(folder / "run", data, 20), data), folder / "pipeline.yaml"


# ---------------------------------------------------------------- the quickstart shows the default labeler
def test_the_quickstart_rows_carry_p_good_and_reasons(quickstart):
    rows = list(iter_records(quickstart))
    assert rows and all(r["p_good"] is not None and None not in r["p_good"] for r in rows)
    assert any(reason for r in rows for reason in r["unlabeled_reason"])  # `show` has reasons to print


# ---------------------------------------------------------------- export
def test_a_verifier_export_of_a_run_without_chains_is_refused_in_one_line(quickstart, tmp_path):
    result = CliRunner().invoke(app, ["export", str(quickstart), "--to-dir", str(tmp_path / "v"), "-f", "verifier"])
    line = one_line_error(result)
    assert "verification chains" in line and "-f verifier" in line
    assert not (tmp_path / "v").exists()  # nothing written
    # the PRM views of the same run still export (the default list never holds an empty verifier view)
    ok = CliRunner().invoke(app, ["export", str(quickstart), "--to-dir", str(tmp_path / "prm")])
    assert ok.exit_code == 0, ok.output and "verifier" not in ok.output


def test_a_qwen_export_names_no_step_marker_it_does_not_use(quickstart, tmp_path):
    tokenizer = tmp_path / "tok"
    qwen_like_bpe().save_pretrained(tokenizer)
    args = ["export", str(quickstart), "--to-dir", str(tmp_path / "q"), "--tokenizer", str(tokenizer)]
    qwen = CliRunner().invoke(app, [*args, "-f", "qwen"])
    assert qwen.exit_code == 0, qwen.output
    assert "ки" not in qwen.output and "{'" not in qwen.output and "step marker" not in qwen.output
    marked = CliRunner().invoke(app, [*args[:3], str(tmp_path / "m"), *args[4:], "-f", "math-shepherd"])
    assert marked.exit_code == 0, marked.output
    assert "step marker" in marked.output and "{'" not in marked.output


def test_the_card_shows_steps_in_its_examples_and_a_judge_paragraph_only_with_a_judge(quickstart, judged, tmp_path):
    CliRunner().invoke(app, ["export", str(quickstart), "--to-dir", str(tmp_path / "a"), "-f", "math-shepherd"])
    card = (tmp_path / "a" / "README.md").read_text()
    example = card.split("Example row of `math-shepherd`:", 1)[1].split("```", 2)[1]
    assert "ки" in json.loads(example.removeprefix("json"))["input"]  # a step is shown, not only the question
    assert "1 solution a problem" in card
    assert "A judge model was asked" not in card and "judge model | none" in card
    run, _ = judged
    CliRunner().invoke(app, ["export", str(run), "--to-dir", str(tmp_path / "b"), "-f", "trl"])
    judged_card = (tmp_path / "b" / "README.md").read_text()
    assert "A judge model was asked" in judged_card and "2 solutions a problem" in judged_card


# ---------------------------------------------------------------- help and the references
def _commands(cmd: Any, path: tuple[str, ...] = ()):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():  # typer's groups need not be click's class
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_help_texts_show_brackets_as_written_and_name_no_internal_module():
    checked = 0
    for path, cmd in COMMANDS:
        shown = " ".join(CliRunner().invoke(app, [*path, "--help"], env=WIDE).output.split())
        assert "prm_synth." not in shown, (path, shown)  # a module path means nothing to a user
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        for text in texts:
            for inner in re.findall(r"\\?\[([A-Za-z0-9_,-]+)\]", text):
                assert f"[{inner}]" in shown, (path, inner)
                checked += 1
    assert checked  # `train --lora` names prm-synth[train]
    assert "prm-synth[train]" in " ".join(CliRunner().invoke(app, ["train", "--help"], env=WIDE).output.split())


def test_boolean_flags_have_one_style():
    """`--json`, `--soft`, `--dry-run`: a flag is on when given; none has a `--no-` twin to read past."""
    for path, cmd in COMMANDS:
        for param in cmd.params:
            if getattr(param, "param_type_name", "") == "option" and param.is_flag and param.name != "help":
                assert not param.secondary_opts, (path, param.opts, param.secondary_opts)
                assert all(o.startswith("--") or re.fullmatch(r"-[a-z]", o) for o in param.opts), param.opts


def test_the_reference_shows_markers_as_written_and_one_type_for_a_choice_of_sections():
    page = HOOKS.config_reference()
    assert "`<think>`" in page and "&lt;think&gt;" not in page  # in a code span Markdown shows `&lt;` as is
    assert "section \\| section" not in page
    assert "runs/&lt;name&gt;" in page  # outside code, escaped: the site shows <name>
    cli = HOOKS.cli_reference()
    codes = cli.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 70 |", "| 130 |"):
        assert code in codes


# ---------------------------------------------------------------- what the commands say
def test_show_says_a_bad_label_after_unlabeled_steps_may_not_be_the_first_error():
    assert first_error_words([True, False, None], 1) == "first error at step 1"
    words = first_error_words([None, False, None], 1)
    assert words.startswith("first bad label at step 1") and "step 0 unlabeled" in words
    assert first_error_words([True, True], -1) == "no error found"
    assert first_error_words([True, None], -1) == "no bad label (some steps unlabeled)"


def _resume(pipeline: Path, out: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    # PREFECT_API_URL names a port nothing listens on: a command that needed Prefect would fail.
    environ = os.environ | {"PYTHONPATH": str(ROOT), "PREFECT_API_URL": "http://127.0.0.1:9/api"} | env
    cmd = [sys.executable, "-m", "prm_synth.cli", "run", str(pipeline), "--out", str(out), *extra]
    return subprocess.run(cmd, env=environ, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_a_resume_with_nothing_left_answers_without_prefect_and_in_words(judged):
    run, pipeline = judged
    done = _resume(pipeline, run, "--limit", "20")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "0 run, 1 resumed" in out and "temporary server" not in done.stderr + out
    assert "{'" not in out and "True" not in out and re.search(r"reconciles +yes", out)
    judge = next(line for line in out.splitlines() if line.strip().startswith("judge accuracy"))
    assert len(judge) < 160, judge  # `inspect` and the card give it whole
    assert re.search(r"rejected +\d+ \((low_confidence|[a-z_]+) \d+", out) or re.search(
        r"rejected +0( \(none\))?\n", out
    )
    as_json = json.loads(_resume(pipeline, run, "--limit", "20", "--json").stdout.strip().splitlines()[-1])
    assert as_json["shards_skipped"] == 1 and as_json["shards_run"] == 0


def test_a_resume_with_work_left_is_not_answered_from_the_markers(judged):
    """Without --limit the source holds 400 problems: the flow must run (here it cannot reach Prefect)."""
    from prm_synth.cli.finished import nothing_left
    from prm_synth.config import load_config

    run, pipeline = judged
    config = load_config(pipeline)
    assert nothing_left(config, run, 20, False) is not None
    assert nothing_left(config, run, None, False) is None  # shards 1..7 not made
    changed = config.model_copy(update={"run": config.run.model_copy(update={"max_parallel_shards": 3})})
    assert nothing_left(changed, run, 20, False) is None  # the manifest would change: the flow records it


# ---------------------------------------------------------------- pictures
def _drawn(path: Path) -> Any:
    """The PNG's pixels (RGB floats), checked to be a picture with something drawn on it."""
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)[..., :3]
    assert pixels.std() > 0.05, path  # not one flat colour
    return pixels


def _has_colour(pixels: Any, rgb: tuple[int, int, int]) -> bool:
    import numpy as np

    return bool((np.abs(pixels * 255 - np.array(rgb)).max(axis=-1) < 30).sum() > 50)


def test_inspect_plots_draws_the_quickstart_data(quickstart, tmp_path):
    result = CliRunner().invoke(app, ["inspect", str(quickstart), "--plots", str(tmp_path / "p")], env=WIDE)
    assert result.exit_code == 0, result.output
    written = sorted((tmp_path / "p").glob("*.png"))
    assert len(written) >= 5, result.output
    for path in written:
        _drawn(path)
        assert f"wrote {path}" in " ".join(result.output.split())
    green, red = (44, 160, 44), (214, 39, 40)  # good and bad (matplotlib's tab:green, tab:red)
    share = _drawn(tmp_path / "p" / "label_share_by_step.png")
    assert _has_colour(share, green) and _has_colour(share, red)
    assert "not drawn: judge_accuracy.png (no judge" in result.output


def test_a_judged_run_gets_the_judges_accuracy_picture_and_the_card_shows_the_pictures(judged, tmp_path):
    run, _ = judged
    result = CliRunner().invoke(app, ["export", str(run), "--to-dir", str(tmp_path / "e"), "-f", "trl", "--plots"])
    assert result.exit_code == 0, result.output
    _drawn(tmp_path / "e" / "plots" / "judge_accuracy.png")
    card = (tmp_path / "e" / "README.md").read_text()
    for path in sorted((tmp_path / "e" / "plots").glob("*.png")):
        assert f"(plots/{path.name})" in card
    plain = CliRunner().invoke(app, ["export", str(run), "--to-dir", str(tmp_path / "f"), "-f", "trl"])
    assert plain.exit_code == 0 and not (tmp_path / "f" / "plots").exists()


@pytest.mark.parametrize("rows", [1, 3])
def test_the_telemetry_picture_draws_a_line_for_a_run_of_any_length(tmp_path, rows):
    from prm_synth.telemetry import plot_series

    series = [
        {
            "t": float(i),
            "running": 0.3 + i,
            "capacity": 256,
            "occupancy": 0.0,
            "tokens_per_s": 2000.0 + i,
            "sequences": 9,
        }
        for i in range(rows)
    ]
    path = tmp_path / "engine.png"
    assert plot_series(series, path, end=rows - 0.6)
    pixels = _drawn(path)
    blue, green = (31, 119, 180), (44, 160, 44)  # running sequences, tokens/s
    height = pixels.shape[0]
    assert _has_colour(pixels[: height // 2], blue) and _has_colour(pixels[height // 2 :], green)


# ---------------------------------------------------------------- the cost estimate of a dry run
def test_the_estimate_scales_the_measured_figures_and_states_its_throughput(quickstart):
    """A folder without telemetry (written without the flow): the rate is the one given, and said to be."""
    from prm_synth.products.estimate import estimate, estimate_lines, sample_from_folder
    from prm_synth.store.summary import summarize

    summary, config = summarize(quickstart), validate_config(pipeline_data())
    est = estimate(sample_from_folder(quickstart, config), config, tokens_per_s=2_000)
    assert est is not None and est.problems == summary.problems_loaded == 20
    assert est.per_problem["rollouts"].point == pytest.approx(summary.rollouts / 20)
    hours = est.gpu_hours(10_000).point
    assert hours == pytest.approx(summary.tokens / 20 * 10_000 / 2_000 / 3600)  # no start-up measured here
    assert est.sizes == [400, 1_000, 10_000, 100_000]  # the source's 400 problems, in order
    lines = estimate_lines(est, simulated=True)
    assert any("given (--gpu-tokens-per-s)" in line and "policy 2,000" in line for line in lines)
    row = next(line for line in lines if line.strip().startswith("10,000"))
    assert row.split()[-2] == f"{hours:.2f}"
    assert f"at most {config.annotate.changepoint_max_rollouts} rollouts a problem" in "\n".join(lines)


# ---------------------------------------------------------------- quiet runs
def test_prefect_info_is_off_by_default_verbose_brings_it_back_and_a_users_level_stays(monkeypatch):
    from prm_synth.cli import environment

    monkeypatch.delenv("PREFECT_LOGGING_LEVEL", raising=False)
    environment.prepare_environment()
    assert os.environ["PREFECT_LOGGING_LEVEL"] == "WARNING"
    environment.verbose_engines()
    assert os.environ["PREFECT_LOGGING_LEVEL"] == "INFO"
    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "DEBUG")
    environment.prepare_environment()
    environment.verbose_engines()
    assert os.environ["PREFECT_LOGGING_LEVEL"] == "DEBUG"


def test_offline_the_hub_retries_and_the_flows_own_failure_line_are_not_printed():
    """Offline, huggingface_hub logged two lines a retry, and Prefect echoed the failure the command's one
    `error:` line then says: neither reaches the terminal; an error of the Hub client itself does."""
    import logging

    from prm_synth.cli.environment import FLOW_FAILED, quiet_expected_failures
    from prm_synth.problems.sources import ProblemSourceError

    quiet_expected_failures()
    hub = logging.getLogger("huggingface_hub.utils._http")

    def record(name: str, level: int, msg: str, exc: BaseException | None = None) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, msg, (), (type(exc), exc, None) if exc else None)

    assert not hub.filter(record(hub.name, logging.WARNING, "Retrying in 1s [Retry 1/5]."))
    assert hub.filter(record(hub.name, logging.ERROR, "something else"))
    flow_runs = logging.getLogger("prefect.flow_runs")
    failure = ProblemSourceError("cannot load Hugging Face dataset 'openai/gsm8k'")
    assert not flow_runs.filter(record(flow_runs.name, logging.ERROR, f"{FLOW_FAILED}: {failure!r}", failure))
    shard = record(flow_runs.name, logging.ERROR, "shard 0 failed: EngineError: ...", failure)
    assert flow_runs.filter(shard) and shard.exc_info is None  # kept, without its traceback
