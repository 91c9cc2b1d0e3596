"""Text that is not ours (model output, questions, server messages) reaches the terminal literally: never
read as rich markup, and with control characters shown as escapes instead of driving the terminal."""

from __future__ import annotations

import unicodedata

from _simulated_run import pipeline_data, write_run
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.cli.common import visible
from prm_synth.store.readers import dataset_shards, iter_records, read_manifest
from prm_synth.store.shards import ShardStore

HOSTILE_STEPS = [
    "[/INST] the answer is [b]bold[/b] :smile:",  # rich markup: a closing tag with nothing open crashed `show`
    "the pair [a, b] sums to 3",  # read as a style, this vanished
    "clear\x1b[2J\x1b[Hthe screen and retitle\x1b]0;pwned\x07 the window",  # terminal escapes
    "right\u202eto left, a zero\u200bwidth space, a bell\x07",
]


@given(st.text())
def test_visible_text_holds_no_control_character_and_leaves_ordinary_text_alone(text):
    shown = visible(text)
    assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in shown)
    shown.encode("utf-8")  # a lone surrogate cannot break the terminal's encoder either
    if not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in text):
        assert shown == text


def test_visible_shows_escapes_as_escapes():
    assert visible("a\x1b[2Jb\nc\ud800") == "a\\x1b[2Jb\\nc\\ud800"


def test_show_prints_markup_brackets_and_escapes_literally(tmp_path):
    root = write_run(tmp_path / "run", pipeline_data(), 2)
    (entry,) = dataset_shards(root)
    store = ShardStore(root, read_manifest(root)["config_fingerprint"])
    rows = store.read_rows(entry, "data")
    rows[0]["steps"] = HOSTILE_STEPS + rows[0]["steps"][len(HOSTILE_STEPS) :]
    rows[0]["question"] = "What is [red]2[/red] + 2?\x1b[31m"
    n = len(rows[0]["steps"])
    for column in ("labels", "label_source", "mc_correct", "mc_total", "mc_values", "mc_unknown", "p_good"):
        if isinstance(rows[0].get(column), list):
            rows[0][column] = (rows[0][column] + [rows[0][column][-1]] * n)[:n]
    if isinstance(rows[0].get("unlabeled_reason"), list):
        rows[0]["unlabeled_reason"] = (rows[0]["unlabeled_reason"] + [None] * n)[:n]
    store.write_shard(0, rows, store.read_rows(entry, "rejected"), entry.problems, entry.stats)
    assert next(iter_records(root))["steps"][:4] == HOSTILE_STEPS

    result = CliRunner().invoke(app, ["show", str(root), "--n", "1"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "[/INST] the answer is [b]bold[/b] :smile:" in out
    assert "the pair [a, b] sums to 3" in out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "clear\\x1b[2J\\x1b[Hthe screen and retitle\\x1b]0;pwned\\x07 the window" in out
    assert "right\\u202eto left, a zero\\u200bwidth space" in out
    assert "What is [red]2[/red] + 2?\\x1b[31m" in out


def test_an_error_line_keeps_its_own_line_breaks_and_escapes_the_rest():
    import typer

    from prm_synth.cli.common import fail

    runner = CliRunner()
    app_ = typer.Typer()

    @app_.command()
    def boom() -> None:
        fail("invalid config:\n  a.b: wrong\x1b[2J")

    result = runner.invoke(app_, [])
    assert result.exit_code == 2
    assert result.output == "error: invalid config:\n  a.b: wrong\\x1b[2J\n"
