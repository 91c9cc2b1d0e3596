"""`prm-synth show` fit to audit (issue 60, part 5): rows by id, a seeded random sample, the rejected
rows with their reasons, JSON as stored; code steps kept as code, a long gold answer printed once a
problem and never escaped into the header; why a final answer could not be graded."""

from __future__ import annotations

import json

import pytest
from _simulated_run import pipeline_data, write_run
from rich.console import Console
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.cli.show_rows import renderables
from prm_synth.store.readers import iter_records

WIDE = {"COLUMNS": "200"}


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory):
    """A judged simulated run whose policy writes some ungradable completions (cut off, no answer): it has
    rejected rows (consensus) and rows whose final answer could not be graded."""
    data = pipeline_data(
        "simulated-consensus",
        policy={"kind": "simulated", "seed": 0, "ungradable": 0.3},
        # a judge right half the time: the posterior stays below the confidence on some rows, rejected
        judge={"engine": {"kind": "simulated-judge", "accuracy": 0.5}, "samples": 3},
    )
    return write_run(tmp_path_factory.mktemp("show") / "run", data, 30)


def _show(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["show", *args], env=WIDE)
    return result.exit_code, result.output


def _json_rows(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_json_prints_each_row_as_stored(judged_run):
    code, out = _show(str(judged_run), "--n", "4", "--json")
    assert code == 0, out
    assert _json_rows(out) == list(iter_records(judged_run))[:4]


def test_id_shows_that_row_or_every_row_of_a_problem(judged_run):
    rows = list(iter_records(judged_run))
    target = rows[5]
    code, out = _show(str(judged_run), "--id", target["id"], "--json")
    assert code == 0 and _json_rows(out) == [target]
    code, out = _show(str(judged_run), "--id", target["id"])
    assert code == 0 and out.startswith(target["id"]) and "step" in out
    problem_rows = [r["id"] for r in rows if r["problem_id"] == target["problem_id"]]
    rejected = [r["id"] for r in iter_records(judged_run, "rejected") if r["problem_id"] == target["problem_id"]]
    code, out = _show(str(judged_run), "--id", target["problem_id"], "--json")
    assert code == 0 and [r["id"] for r in _json_rows(out)] == problem_rows + rejected


def test_an_id_the_run_lacks_is_one_error_line(judged_run):
    result = CliRunner().invoke(app, ["show", str(judged_run), "--id", "no-such-row"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {judged_run} has no rows (labeled or rejected) with id no-such-row (a row id or a problem id)"
    ]


def test_random_draws_the_same_rows_for_the_same_seed_and_others_for_another(judged_run):
    all_ids = [r["id"] for r in iter_records(judged_run)]
    draws = {}
    for seed in ("1", "1", "2"):
        code, out = _show(str(judged_run), "--random", "5", "--seed", seed, "--json")
        assert code == 0
        draws.setdefault(seed, []).append([r["id"] for r in _json_rows(out)])
    first, again = draws["1"]
    assert first == again and len(set(first)) == 5 and set(first) <= set(all_ids)
    assert first == sorted(first, key=all_ids.index)  # in the folder's order
    assert draws["2"][0] != first
    assert first != all_ids[:5]  # a sample, not the first rows


def test_rejected_shows_each_rejection_with_its_reason_and_the_row_as_labeled(judged_run):
    rejected = list(iter_records(judged_run, "rejected"))
    assert rejected, "the judged run must reject some rows"
    code, out = _show(str(judged_run), "--rejected", "--n", "100")
    assert code == 0
    for row in rejected:
        assert f"{row['id']}  rejected at {row['stage']}: {row['reason']}" in out
    assert "label" in out and "source" in out  # the consensus rejections carry their labeled row
    code, out = _show(str(judged_run), "--rejected", "--n", "100", "--json")
    assert code == 0 and _json_rows(out) == rejected


def test_an_ungradable_final_answer_says_why(judged_run):
    rows = list(iter_records(judged_run))
    ungradable = [r for r in rows if r["final_correct"] is None]
    assert ungradable and all(r["final_unknown_reason"] for r in ungradable)
    assert all(r["final_unknown_reason"] is None for r in rows if r["final_correct"] is not None)
    row = ungradable[0]
    code, out = _show(str(judged_run), "--id", row["id"])
    assert code == 0 and f"(ungradable: {row['final_unknown_reason']}, gold {row['gold_answer']})" in out


def _render(rows) -> str:
    console = Console(record=True, width=160)
    for shown in renderables(rows):
        console.print(shown)
    return console.export_text()


def _code_row(row_id: str) -> dict:
    program = "def solve(v):\n    if v > 3:\n        return v * 2\n    return v\n"
    return {
        "id": row_id,
        "problem_id": "humaneval-7",
        "question": "Write solve(v).",
        "gold_answer": program,
        "steps": ["```python\ndef solve(v):\n", "    if v > 3:\n        return v * 2\n", "    return v\n```"],
        "final_answer": program,
        "final_correct": None,
        "final_unknown_reason": "timeout",
        "labels": [True, True, None],
        "label_source": ["test", "test", "none"],
        "mc_correct": [4, 4, 0],
        "mc_total": [4, 4, 0],
        "first_error_mc": -1,
        "rollouts": 8,
        "tokens": 100,
        "p_good": None,
        "unlabeled_reason": [None, None, "not_probed"],
    }


def test_code_steps_keep_their_lines_and_a_long_gold_is_printed_once_a_problem():
    text = _render([_code_row("a"), _code_row("b")])
    assert "        return v * 2" in text  # a step's lines and indentation, as written
    assert "\\n" not in text  # nothing escaped onto one line
    headers = [line for line in text.splitlines() if line.startswith(("a ", "b "))]
    assert len(headers) == 2 and all("def solve" not in h for h in headers)
    assert "answer of 4 lines (ungradable: timeout, gold below)" in headers[0]
    assert text.count("gold answer of humaneval-7:") == 1  # under the problem's first row only
    assert text.count("    if v > 3:") == 2 + 1  # each row's step, and the gold once


def test_a_control_character_in_a_code_step_is_still_shown_as_an_escape():
    row = _code_row("c")
    row["steps"] = ["print(1)\n\x1b[2Jprint(2)\n", "x\n", "y"]
    text = _render([row])
    assert "\x1b" not in text and "\\x1b[2Jprint(2)" in text
