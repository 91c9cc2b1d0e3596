"""`problems.kind: solutions`: solutions a user already has, labeled with sampling skipped.

The simulated policy's own solutions, written to a file and labeled as given, make the rows the sampled
route makes with the same seeds; bad rows are rejected with their reasons; the labels a source gave are
carried on the rows and `inspect --json` measures the kept labels against them.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from _simulated_run import pipeline_data, write_run
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from prm_synth.cli import app
from prm_synth.config import ConfigError, validate_config
from prm_synth.engines import build_engine
from prm_synth.export.hub import export_to_dir
from prm_synth.pipeline import iter_shards, process_shard
from prm_synth.problems.given import check_given_label, question_id
from prm_synth.problems.sources import iter_problems
from prm_synth.records import Problem
from prm_synth.sampling.sample import sample_solutions
from prm_synth.simulated import arithmetic
from prm_synth.store.given_labels import first_bad_label, given_labels, processbench_metric
from prm_synth.store.readers import iter_records

SMALL = {"kind": "builtin", "count": 8, "seed": 0, "min_ops": 3, "max_ops": 7}
# what differs between a sampled row and the same solution given: the sampling was not paid for (tokens),
# the source is the file, and the config (its problems section) is another
NOT_COMPARED = {"tokens", "source", "config_fingerprint", "given_first_error", "given_labels"}


def sampled_config(pipeline: str = "simulated-consensus", **sections: Any) -> dict[str, Any]:
    return pipeline_data(pipeline, problems=SMALL, **sections)


def write_policy_solutions(data: dict[str, Any], path: Path, labels: bool = False) -> list[dict[str, Any]]:
    """The simulated policy's own solutions to the config's problems, one a line, as a user would dump
    them (with the true first error as the given label where `labels`)."""
    config = validate_config(data)
    problems = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    sampled = sample_solutions(build_engine(config.policy), problems, config)
    rows = []
    for s in sampled.solutions:
        text = "".join(s.steps)
        row = {"id": s.id, "problem_id": s.problem.id, "question": s.problem.question, "answer": s.problem.gold_answer}
        row["solution"] = text
        if labels:
            row["label"] = arithmetic.true_first_error(s.steps)
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def run_rows(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows and rejections of a whole run, shard by shard, as the flow makes them."""
    config = validate_config(data)
    policy = build_engine(config.policy)
    judge = build_engine(config.judge.engine) if config.judge else None
    rows, rejected = [], []
    for shard in iter_shards(config):
        out = process_shard(policy, config, shard, config.fingerprint(), judge_engine=judge)
        rows += [r.to_row() for r in out.records]
        rejected += [r.to_row() for r in out.rejected]
    return rows, rejected


@pytest.mark.parametrize(
    "pipeline, sections",
    [
        ("simulated-consensus", {}),  # the default search, a judge and soft consensus, canaries on
        ("simulated", {"annotate": {"method": "mc", "k": 4}, "sampling": {"samples_per_problem": 3}}),
    ],
    ids=["binary-judged", "mc"],
)
def test_the_policys_own_solutions_given_make_the_sampled_rows(tmp_path, pipeline, sections):
    data = sampled_config(pipeline, **sections)
    file_rows = write_policy_solutions(data, tmp_path / "solutions.jsonl")
    sampled_rows, sampled_rejected = run_rows(data)
    given_data = data | {"problems": {"kind": "solutions", "path": str(tmp_path / "solutions.jsonl")}}
    given_rows, given_rejected = run_rows(given_data)

    assert sampled_rows and len(given_rows) == len(sampled_rows)
    same = [{k: v for k, v in r.items() if k not in NOT_COMPARED} for r in sampled_rows]
    assert [{k: v for k, v in r.items() if k not in NOT_COMPARED} for r in given_rows] == same
    assert [(r["id"], r["reason"]) for r in given_rejected] == [(r["id"], r["reason"]) for r in sampled_rejected]
    # every row's steps join to its given solution exactly, and it keeps the given id
    text_of = {r["id"]: r["solution"] for r in file_rows}
    assert all("".join(r["steps"]) == text_of[r["id"]] for r in given_rows)
    assert all(r["source"] == "solutions" and r["given_first_error"] is None for r in given_rows)


def given_id(rejected: dict[str, Any]) -> str:
    return json.loads(rejected["payload"])["id"] if rejected["stage"] == "load" else rejected["id"]


BAD_ROWS = [
    ({"id": "no-q", "answer": "3", "solution": "1+2 = 3"}, "missing_question"),
    ({"id": "empty", "question": "Q?", "answer": "3", "solution": "   "}, "empty_solution"),
    ({"id": "neither", "question": "Q?", "answer": "3"}, "empty_solution"),
    ({"id": "steps-ints", "question": "Q?", "answer": "3", "steps": [1, 2]}, "bad_solution"),
    ({"id": "not-text", "question": "Q?", "answer": "3", "solution": {"a": 1}}, "bad_solution"),
    ({"id": "label-high", "question": "Q?", "answer": "3", "steps": ["a\n", "b"], "label": 2}, "bad_label"),
    ({"id": "label-low", "question": "Q?", "answer": "3", "steps": ["a\n", "b"], "label": -2}, "bad_label"),
    ({"id": "ratings", "question": "Q?", "answer": "3", "steps": ["a\n", "b"], "label": [1, 2]}, "bad_label"),
    ({"id": "ratings-len", "question": "Q?", "answer": "3", "steps": ["a\n", "b"], "label": [1]}, "bad_label"),
    ({"id": "no-gold", "question": "Unheard of?", "solution": "x"}, "missing_answer"),
]


@pytest.mark.usefixtures("prefect_harness")
def test_bad_rows_are_rejected_with_reasons_and_the_good_ones_labeled(tmp_path):
    data = sampled_config("simulated", annotate={"method": "mc", "k": 4})
    good = write_policy_solutions(data, tmp_path / "good.jsonl", labels=True)
    # a text solution whose label cannot fit the steps it splits into is rejected once it is split
    first = good[0]
    too_far = {**first, "id": "split-label", "label": len(first["solution"].splitlines()) + 3}
    lines = [json.dumps(r) for r in good[:3]]
    lines += [json.dumps(row) for row, _ in BAD_ROWS]
    lines += [json.dumps(too_far), json.dumps(good[1]), "{not json"]  # good[1] again: its id is taken
    lines += [json.dumps(r) for r in good[3:]]
    solutions = tmp_path / "solutions.jsonl"
    solutions.write_text("\n".join(lines) + "\n")
    pipeline = tmp_path / "given.yaml"
    pipeline.write_text(yaml.safe_dump(data | {"problems": {"kind": "solutions", "path": "solutions.jsonl"}}))

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(pipeline), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output

    rows = list(iter_records(out))
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in good)
    everything = list(iter_records(out, "rejected"))
    # a row rejected on loading is named by its place ("solutions:7"); its payload is the row as it came
    rejected = {given_id(r): r for r in everything if r["reason"] != "broken_line"}
    expected = {row["id"]: reason for row, reason in BAD_ROWS} | {
        "split-label": "bad_label",
        good[1]["id"]: "duplicate_id",
    }
    assert {k: r["reason"] for k, r in rejected.items()} == expected
    assert all(r["detail"] for r in rejected.values())
    assert [r["reason"] for r in everything].count("broken_line") == 1
    summary = json.loads(CliRunner().invoke(app, ["inspect", str(out), "--json"]).output)
    assert summary["reconciles"] and summary["problems_in"] == len(lines)
    assert summary["rows"] + summary["rejected"] == len(lines)


def test_inspect_reports_the_kept_labels_against_the_given_ones(tmp_path):
    data = sampled_config(policy={"kind": "simulated", "step_error": 0.15, "recover": 0.1, "seed": 0})
    write_policy_solutions(data, tmp_path / "solutions.jsonl", labels=True)
    config = data | {"problems": {"kind": "solutions", "path": str(tmp_path / "solutions.jsonl")}}
    out = write_run(tmp_path / "out", config)
    report = json.loads(CliRunner().invoke(app, ["inspect", str(out), "--json"]).output)
    against = report["against_given"]
    assert "estimated_precision" in report  # the run's own estimate, beside it

    # recomputed here from the rows: a step's prefix is good before the given first error, bad from it on
    rows = list(iter_records(out))
    assert rows and all(r["given_first_error"] == arithmetic.true_first_error(r["steps"]) for r in rows)
    good = [
        (lab, i < r["given_first_error"] or r["given_first_error"] < 0)
        for r in rows
        for i, lab in enumerate(r["labels"])
        if lab is True
    ]
    bad = [(lab, i >= r["given_first_error"] >= 0) for r in rows for i, lab in enumerate(r["labels"]) if lab is False]
    assert against["good_steps"] == len(good) and against["bad_steps"] == len(bad)
    assert against["good_precision"] == pytest.approx(sum(t for _, t in good) / len(good))
    assert against["bad_precision"] == pytest.approx(sum(t for _, t in bad) / len(bad))
    firsts = [
        (next((i for i, lab in enumerate(r["labels"]) if lab is False), -1), r["given_first_error"]) for r in rows
    ]
    assert against["first_error_accuracy"] == pytest.approx(sum(p == t for p, t in firsts) / len(firsts))
    errors = [p == t for p, t in firsts if t >= 0]
    clean = [p == -1 for p, t in firsts if t < 0]
    acc_e, acc_c = sum(errors) / len(errors), sum(clean) / len(clean)
    assert against["processbench"]["f1"] == pytest.approx(2 * acc_e * acc_c / (acc_e + acc_c))
    # the audit's gold: per kept row, its given labels
    assert {k: g.first_error for k, g in given_labels(out).items()} == {r["id"]: r["given_first_error"] for r in rows}
    # and in words, beside the estimate, in the table
    table = CliRunner().invoke(app, ["inspect", str(out)], env={"COLUMNS": "200"}).output
    assert "against given labels" in table and "ProcessBench F1" in table
    # the card says which labels were given and which made, with the comparison
    export_to_dir(out, tmp_path / "repo", ["trl"], test_fraction=0.0)
    card = " ".join((tmp_path / "repo" / "README.md").read_text().split())
    assert "The solutions were given, not sampled" in card and "Each problem was solved by a policy" not in card
    assert (
        f"`given_first_error` (the earliest wrong step, as the source labeled it) on {len(rows)} of {len(rows)} rows"
        in card
    )
    assert "Labels made by this run: `labels`" in card and "ProcessBench F1" in card


def test_prm800k_ratings_give_the_first_error_and_are_kept(tmp_path):
    question = arithmetic.generate(__import__("random").Random(1), 3, 3)
    steps = [f"step {i}\n" for i in range(3)] + ["The answer is 0"]
    rows = [
        {
            "id": "p-1",
            "question": question.question(),
            "answer": str(question.answer),
            "steps": steps,
            "label": [1, 0, -1, 1],
        }
    ]
    (tmp_path / "prm800k.jsonl").write_text(json.dumps(rows[0]) + "\n")
    data = sampled_config("simulated", annotate={"method": "mc", "k": 2})
    data |= {"problems": {"kind": "solutions", "path": str(tmp_path / "prm800k.jsonl")}}
    out, _ = run_rows(data)
    assert [(r["id"], r["given_first_error"], r["given_labels"], r["steps"]) for r in out] == [
        ("p-1", 2, [1, 0, -1, 1], steps)
    ]
    assert out[0]["problem_id"] == question_id(question.question())


def test_gold_answers_join_by_question_and_separators_go_back(tmp_path):
    q = arithmetic.generate(__import__("random").Random(2), 2, 2)
    (tmp_path / "gold.jsonl").write_text(json.dumps({"question": "  " + q.question(), "answer": f"x\n#### {q.answer}"}))
    (tmp_path / "bench.json").write_text(
        json.dumps([{"id": "b-0", "problem": q.question(), "steps": ["a", "b"], "label": -1}])
    )
    source = {
        "kind": "solutions",
        "path": str(tmp_path / "bench.json"),
        "gold_answers": str(tmp_path / "gold.jsonl"),
        "fields": {"question": "problem"},
        "step_separator": "\n\n",
    }
    config = validate_config({"problems": source, "policy": {"kind": "simulated"}})
    (item,) = list(iter_problems(config.problems))
    assert item.problem.gold_answer == str(q.answer) and item.steps == ("a\n\n", "b")
    assert item.given_first_error == -1


@pytest.mark.parametrize("annotate, grader", [({"method": "omegaprm"}, {}), ({}, {"kind": "majority"})])
def test_methods_that_sample_their_own_are_refused_for_given_solutions(tmp_path, annotate, grader):
    (tmp_path / "s.jsonl").write_text("")
    data = {"problems": {"kind": "solutions", "path": str(tmp_path / "s.jsonl")}, "policy": {"kind": "simulated"}}
    data |= {"annotate": annotate} if annotate else {"grader": grader}
    with pytest.raises(ConfigError, match="problems.kind solutions labels the solutions given"):
        validate_config(data)


@settings(max_examples=200, deadline=None)
@given(label=st.one_of(st.integers(-5, 8), st.lists(st.integers(-2, 2), max_size=6)), steps=st.integers(1, 5))
def test_a_given_label_is_kept_exactly_when_it_fits_the_steps(label, steps):
    first, ratings, bad = check_given_label(label, steps)
    if isinstance(label, int):
        assert (bad is None) == (-1 <= label < steps) and (bad is not None or first == label)
    else:
        fits = len(label) == steps and all(r in (-1, 0, 1) for r in label)
        assert (bad is None) == fits
        if fits:
            assert ratings == tuple(label) and first == (label.index(-1) if -1 in label else -1)


def test_processbench_metric_and_first_bad_label():
    assert first_bad_label([True, None, False, False]) == 2 and first_bad_label([True, None]) == -1
    m = processbench_metric([-1, -1, 2, 3], [-1, 0, 2, 1])
    assert (m["correct_acc"], m["error_acc"], m["f1"]) == (0.5, 0.5, 0.5)


# ---------------------------------------------------------------- the guide's recipes, as written
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "given-solutions.md"


def guide_blocks(heading: str, language: str) -> list[str]:
    """The fenced blocks of one language under a heading of the guide, exactly as written there."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def verl_dump(path: Path, data: dict[str, Any], step: int) -> int:
    """The simulated policy's rollouts of a few problems, as verl writes a step's dump; returns the lines."""
    config = validate_config(data | {"problems": {**SMALL, "count": 3, "seed": step}})
    problems = [p for p in iter_problems(config.problems) if isinstance(p, Problem)]
    sampled = sample_solutions(build_engine(config.policy), problems, config)
    lines = [
        {
            "input": s.problem.question,
            "output": "".join(s.steps),
            "gts": s.problem.gold_answer,
            "score": 1.0,
            "step": step,
        }
        for s in sampled.solutions
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return len(lines)


@pytest.mark.usefixtures("prefect_harness")
def test_the_guides_rl_rollout_recipe_labels_the_new_dumps_only(tmp_path, monkeypatch):
    (pipeline,) = guide_blocks("## Label RL rollouts on a schedule", "yaml")
    (commands,) = guide_blocks("## Label RL rollouts on a schedule", "bash")
    data = yaml.safe_load(pipeline)
    # the dump is the simulated policy's: it continues the prefixes, writes a step a line; a small shard
    data |= {"policy": {"kind": "simulated", "step_error": 0.2, "seed": 0, "step_format": "line"}}
    data |= {"steps": {"strategy": "line"}, "output": {"shard_size": 4}, "sampling": {"samples_per_problem": 2}}
    monkeypatch.chdir(tmp_path)
    Path("rollouts.yaml").write_text(yaml.safe_dump(data))
    Path("rollouts").mkdir()
    runs = [shlex.split(line)[1:] for line in commands.splitlines() if line.startswith("prm-synth run ")]
    assert len(runs) == 2

    first_lines = verl_dump(Path("rollouts/1.jsonl"), data, 1) + verl_dump(Path("rollouts/2.jsonl"), data, 2)
    first = CliRunner().invoke(app, runs[0])
    assert first.exit_code == 0, first.output
    before = {r["id"]: r for r in iter_records(tmp_path / "runs" / "rollouts")}
    # a new dump, named by its training step: 10 comes after 2 (natural order), so only it is new
    new_lines = verl_dump(Path("rollouts/10.jsonl"), data, 10)
    second = CliRunner().invoke(app, runs[1])
    assert second.exit_code == 0, second.output
    summary = json.loads(second.output.strip().splitlines()[-1])
    shard = data["output"]["shard_size"]
    assert summary["shards_skipped"] == first_lines // shard  # the full shards of the first run are kept
    assert summary["shards_run"] == -(-(first_lines + new_lines) // shard) - first_lines // shard
    assert summary["reconciles"] and summary["problems_in"] == first_lines + new_lines
    after = {r["id"]: r for r in iter_records(tmp_path / "runs" / "rollouts")}
    rejected = list(iter_records(tmp_path / "runs" / "rollouts", "rejected"))
    assert len(after) + len(rejected) == first_lines + new_lines
    assert all(after[k] == row for k, row in before.items() if k in after)  # what was labeled stays
    assert {r["gold_answer"] for r in after.values()} and all(r["given_first_error"] is None for r in after.values())


def test_the_guides_prm800k_flattening_reads_as_given_ratings(tmp_path, monkeypatch):
    (flatten,) = guide_blocks("## PRM800K", "python")
    (section,) = guide_blocks("## PRM800K", "yaml")
    q = arithmetic.generate(__import__("random").Random(4), 3, 3)
    texts, ratings = ["first", "second", "third"], [1, 0, -1]

    def step(text: str, rating: int, chosen: int | None) -> dict[str, Any]:
        return {
            "completions": [{"text": text, "rating": rating, "flagged": None}],
            "human_completion": None,
            "chosen_completion": chosen,
        }

    row = {
        "question": {"problem": q.question(), "ground_truth_answer": str(q.answer)},
        "label": {
            "steps": [step(t, r, None if r == -1 else 0) for t, r in zip(texts, ratings, strict=True)],
            "finish_reason": "found_error",
        },
    }
    monkeypatch.chdir(tmp_path)
    Path("phase2_test.jsonl").write_text(json.dumps(row) + "\n")
    exec(compile(flatten, str(GUIDE), "exec"), {})  # noqa: S102 - the guide's own snippet, run as written
    data = sampled_config("simulated", annotate={"method": "mc", "k": 2}) | yaml.safe_load(section)
    data["problems"]["path"] = str(tmp_path / data["problems"]["path"])
    rows, rejected = run_rows(data)
    assert not rejected
    assert [(r["id"], r["steps"], r["given_labels"], r["given_first_error"]) for r in rows] == [
        ("prm800k-0", ["first\n", "second\n", "third"], ratings, 2)
    ]


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(st.text(alphabet="ab 1=+\n\r\t.", min_size=1, max_size=60), min_size=1, max_size=4),
    strategy=st.sampled_from(["line", "paragraph"]),
)
def test_every_given_text_is_split_without_losing_a_character(texts, strategy):
    from prm_synth.problems.given import GivenSolution
    from prm_synth.shard.given import given_solutions

    config = validate_config(
        {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}, "steps": {"strategy": strategy}}
    )
    problem = Problem(id="q-1", question="What is 1 + 1?", gold_answer="2", source="s")
    items = [GivenSolution(f"r{i}", problem, text=t) for i, t in enumerate(texts) if t.strip()]
    problems, sampled = given_solutions(items, config, build_engine(config.policy))
    assert [s.id for s in sampled.solutions] == [g.id for g in items]
    assert ["".join(s.steps) for s in sampled.solutions] == [g.text for g in items]
    assert all(all(s.steps) for s in sampled.solutions) and problems == ([problem] if items else [])


def test_the_hugging_face_form_reads_the_rows_the_file_form_reads(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    data = sampled_config("simulated", annotate={"method": "mc", "k": 2})
    write_policy_solutions(data, tmp_path / "rollouts.jsonl", labels=True)
    by_file = {"kind": "solutions", "path": str(tmp_path / "rollouts.jsonl")}
    by_hub_form = {"kind": "solutions", "dataset": "json", "data_files": str(tmp_path / "rollouts.jsonl")}
    items = [
        list(iter_problems(validate_config(data | {"problems": source}).problems)) for source in (by_file, by_hub_form)
    ]
    assert items[0] and [(g.id, g.text, g.given_first_error) for g in items[0]] == [
        (g.id, g.text, g.given_first_error) for g in items[1]
    ]
    with pytest.raises(ConfigError, match="exactly one of `path`"):
        validate_config(data | {"problems": by_file | {"dataset": "json"}})
