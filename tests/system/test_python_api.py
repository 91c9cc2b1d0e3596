"""The Python API (issue 60 part 6): the README's example runs as written, `prm_synth.load` gives the kept
rows as a `datasets.Dataset`, and a bad input raises the error the command would print."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import prm_synth
from prm_synth.errors import PrmSynthError

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def readme_example() -> str:
    """The README's one Python block (under "From Python")."""
    section = README.split("## From Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README lost its Python example"
    return match.group(1)


def test_the_readme_example_is_short():
    code = [line for line in readme_example().splitlines() if line.strip()]
    assert len(code) <= 10


@pytest.mark.usefixtures("prefect_harness")
def test_the_readme_example_runs_as_written(tmp_path, capsys):
    (tmp_path / "pipelines").symlink_to(ROOT / "pipelines")
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        exec(compile(readme_example(), "README.md", "exec"), {})  # noqa: S102 - our own README's code
    finally:
        os.chdir(before)
    printed = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"\d+ rows, \d+ labeled steps, counts reconcile: True", printed[0]), printed
    assert re.fullmatch(r"\d+ of \d+ rows have a bad step; the first is at step \d+", printed[1]), printed
    rows = prm_synth.load(tmp_path / "runs" / "api")
    assert int(printed[0].split()[0]) == len(rows) > 0
    assert (tmp_path / "runs" / "api.parquet").stat().st_size > 0
    # what load returns is the folder's rows, as the command line's readers give them
    from prm_synth.store.readers import iter_records

    assert rows.to_list() == list(iter_records(tmp_path / "runs" / "api"))
    rejected = prm_synth.load(tmp_path / "runs" / "api", rejected=True)
    assert set(rejected.column_names) >= {"stage", "reason", "detail"}


def test_a_folder_that_is_not_a_run_is_refused_with_the_commands_words(tmp_path):
    with pytest.raises(PrmSynthError, match=str(tmp_path)):
        prm_synth.load(tmp_path)


def test_a_bad_pipeline_path_is_refused_before_any_work(tmp_path):
    with pytest.raises(PrmSynthError, match="is a folder"):
        prm_synth.run(tmp_path, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_package_names_its_api_and_nothing_else():
    assert callable(prm_synth.run) and callable(prm_synth.load)
    with pytest.raises(AttributeError):
        prm_synth.nothing_here  # noqa: B018
