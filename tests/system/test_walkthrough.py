"""The walkthrough (docs/guides/walkthrough.md) as written: first among the guides, its pipelines load,
and every output block it shows is what its command prints on the CPU stand-in (the simulated policy
and judge), re-made here from the same pipeline: the dry run's cost estimate, the run's summary,
`show`, `inspect --plots`, and the exports. (Every flag and key it names is checked by test_docs.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from _simulated_run import pipeline_data, write_run
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.config import load_config, validate_config

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "guides" / "walkthrough.md").read_text()
STAND_IN = "simulated-consensus"
LIMIT = 100
TERMINAL = {"COLUMNS": "80"}  # the width the page's outputs were printed at


def shown_after(command: str) -> list[str]:
    """The lines of the `text` block that follows the bash block holding exactly `command`."""
    match = re.search(r"```bash\n" + re.escape(command) + r"\n```\n(.*?)```text\n(.*?)```", PAGE, re.S)
    assert match, f"no output block after {command!r} in the walkthrough"
    return match.group(2).rstrip("\n").splitlines()


def lines(output: str) -> list[str]:
    return [line.rstrip() for line in output.strip("\n").splitlines()]


def test_the_walkthrough_is_the_first_guide():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))["nav"]
    guides = next(item["Guides"] for item in nav if isinstance(item, dict) and "Guides" in item)
    assert next(iter(guides[0].values())) == "guides/walkthrough.md"


def test_the_pipelines_it_names_load():
    named = set(re.findall(r"pipelines/[\w.-]+\.yaml", PAGE))
    assert {"pipelines/gsm8k-judged.yaml", f"pipelines/{STAND_IN}.yaml"} <= named
    for path in named:
        load_config(ROOT / path)
    judged = load_config(ROOT / "pipelines/gsm8k-judged.yaml")
    assert judged.judge is not None and judged.consensus is not None and judged.annotate.method == "binary"


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """runs/walk as the page made it (100 problems of the stand-in), in a folder of its own."""
    home = tmp_path_factory.mktemp("walk")
    (home / "pipelines").symlink_to(ROOT / "pipelines")
    data = pipeline_data(STAND_IN)
    run = write_run(home / "runs" / "walk", data, LIMIT)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["labeler_revision"] = validate_config(data).labeler_revision()  # as `prm-synth run` writes it
    (run / "manifest.json").write_text(json.dumps(manifest))
    return home


def _invoke(home: Path, monkeypatch, *args: str) -> str:
    monkeypatch.chdir(home)  # the page's relative paths (runs/walk, out/walk)
    result = CliRunner().invoke(app, list(args), env=TERMINAL)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(
    "command",
    [
        "prm-synth show runs/walk -n 1 --bad",
        "prm-synth inspect runs/walk --plots runs/walk-plots",
        "prm-synth export runs/walk --to-dir out/walk -f trl -f math-shepherd --plots",
    ],
)
def test_the_outputs_shown_are_what_the_commands_print(stand_in, monkeypatch, command):
    assert lines(_invoke(stand_in, monkeypatch, *command.split()[1:])) == shown_after(command)


def test_the_openrlhf_export_shown_is_what_it_prints(stand_in, monkeypatch):
    from prm_synth.demo_model import prepare_demo_model

    command = 'prm-synth export runs/walk --to-dir out/walk-openrlhf -f openrlhf --tokenizer "$(prm-synth models prepare-demo)"'
    args = ["export", "runs/walk", "--to-dir", "out/walk-openrlhf", "-f", "openrlhf"]
    printed = _invoke(stand_in, monkeypatch, *args, "--tokenizer", str(prepare_demo_model()))
    assert lines(printed) == shown_after(command)
    view = json.loads((stand_in / "out" / "walk-openrlhf" / "openrlhf" / "view.json").read_text())
    flags = view["consumer"]["openrlhf_train_prm_args"]
    assert json.dumps(flags, ensure_ascii=False)[1:-1] in PAGE  # the arguments the page hands train_prm
    assert " ".join(flags).replace(" § ", ' "§" ') in " ".join(PAGE.replace("\\\n", " ").split())


def test_the_run_summary_shown_is_the_runs(stand_in, monkeypatch):
    """Answered from the finished folder (nothing left to do): the same figures; only the shards line
    (run here, resumed there) and the wall time differ."""
    command = f"prm-synth run pipelines/{STAND_IN}.yaml --out runs/walk --limit {LIMIT}"
    printed = lines(_invoke(stand_in, monkeypatch, *command.split()[1:]))
    shown = shown_after(command)

    def figures(block: list[str]) -> list[str]:
        return [line for line in block if not line.lstrip().startswith(("shards", "wall time"))]

    assert figures(printed) == figures(shown)
    assert any(line.split() == ["shards", "2", "(2", "run,", "0", "resumed)"] for line in shown)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_the_dry_run_estimate_shown_is_the_stand_ins():
    """The dry run labels the first 32 problems (flows/synthesize.py DRY_RUN_PROBLEMS). What it measures
    on the engines' clocks (tokens/s), the start-up (wall seconds) and the GPU hours made from them vary
    from run to run; everything else is the page's, line for line."""
    from flows.synthesize import DRY_RUN_PROBLEMS

    command = f"prm-synth run pipelines/{STAND_IN}.yaml --dry-run"
    result = CliRunner().invoke(app, command.split()[1:], env=TERMINAL)
    assert result.exit_code == 0, result.output
    printed = lines(result.stdout)
    printed = printed[next(i for i, line in enumerate(printed) if line.startswith("estimate from the dry run")) :]
    shown = shown_after(command)
    assert shown[0] == f"estimate from the dry run: {DRY_RUN_PROBLEMS} problems, 2 solution(s) each"
    table_row = re.compile(r"\s+[\d,]+\*?\s+[\d.,MB]+\s+[\d.,MB]+\s")

    def steady(block: list[str]) -> list[str]:
        timed = ("tokens/s a GPU", "start-up:")
        kept = [line for line in block if not line.lstrip().startswith(timed)]
        return [line[:36] if table_row.match(line) else line for line in kept]

    assert steady(printed) == steady(shown)
