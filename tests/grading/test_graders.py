"""The grader registry (`grader.kind`): config, fingerprint compatibility, choice, exact and majority."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prm_synth.config import ConfigError, load_config, validate_config
from prm_synth.config.grader import GraderConfig
from prm_synth.engines.base import Completion, GenerationResult
from prm_synth.grading.choice import ChoiceGrader
from prm_synth.grading.exact import ExactGrader
from prm_synth.grading.keys import dump_key
from prm_synth.grading.majority import accuracy_table, gold_origin
from prm_synth.grading.registry import make_grader
from prm_synth.records import Problem
from prm_synth.sampling.votes import pseudo_gold

ROOT = Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = {"problems": {"kind": "builtin"}, "policy": {"kind": "simulated"}}
OPTIONS = ["Oxygen", "Carbon dioxide", "Nitrogen", "Helium"]


@pytest.mark.parametrize("kind", ["math", "choice", "exact", "majority"])
def test_each_kind_validates(kind: str) -> None:
    data = BASE | {"grader": {"kind": kind}}
    if kind == "choice":
        data["problems"] = {"kind": "choice-file", "path": str(ROOT / "pipelines/data/choice-demo.jsonl")}
    assert validate_config(data).grader.kind == kind


def test_code_validates_on_humaneval_and_is_refused_without_tests() -> None:
    assert validate_config(BASE | {"problems": {"kind": "humaneval"}, "grader": {"kind": "code"}}).grader.kind == "code"
    with pytest.raises(ConfigError, match="needs problems with tests") as e:
        validate_config(BASE | {"grader": {"kind": "code"}})
    assert "\n" not in str(e.value).split(":", 1)[0]


def test_an_unknown_kind_is_one_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="grader.kind") as e:
        validate_config(BASE | {"grader": {"kind": "sql"}})
    assert "math" in str(e.value) and "majority" in str(e.value)


def test_the_default_grader_leaves_the_fingerprint_as_it_was() -> None:
    plain = validate_config(BASE)
    assert plain.fingerprint() == validate_config(BASE | {"grader": {"kind": "math"}}).fingerprint()
    assert plain.fingerprint() == validate_config(BASE | {"grader": {}}).fingerprint()
    assert plain.fingerprint() != validate_config(BASE | {"grader": {"kind": "exact"}}).fingerprint()
    assert plain.fingerprint() != validate_config(BASE | {"grader": {"kind": "majority"}}).fingerprint()


@pytest.mark.parametrize(
    "name", ["humaneval-demo", "humaneval-server", "choice-demo", "majority-demo", "code-file-demo"]
)
def test_the_domain_pipelines_validate(name: str) -> None:
    config = load_config(ROOT / "pipelines" / f"{name}.yaml")
    assert config.grader.kind in {"code", "choice", "majority"}


def test_knobs_of_another_kind_are_refused() -> None:
    with pytest.raises(ValueError, match="exact"):
        GraderConfig(kind="choice", tolerance=0.1)


# ---------------------------------------------------------------- choice
CHOICE_KEY = dump_key({"answer": "B", "options": OPTIONS})


@pytest.mark.parametrize(
    "text, status",
    [
        ("Plants use it. The answer is (B).", "correct"),
        ("So the answer is B", "correct"),
        ("Final answer: \\boxed{B}", "correct"),
        ("Thinking...\nB. Carbon dioxide", "correct"),
        ("They breathe in carbon dioxide.", "correct"),
        ("The answer is (A).", "incorrect"),
        ("It must be oxygen.", "incorrect"),
        ("The answer is (E).", "unknown"),  # not one of the options
        ("I am not sure.", "unknown"),
    ],
)
def test_choice_reads_the_usual_forms(text: str, status: str) -> None:
    assert ChoiceGrader().grade(text, CHOICE_KEY).status == status


def test_choice_gold_may_be_the_options_text() -> None:
    key = dump_key({"answer": "carbon dioxide", "options": OPTIONS})
    assert ChoiceGrader().grade("The answer is (B).", key).status == "correct"
    bad = dump_key({"answer": "Neon", "options": OPTIONS})
    assert ChoiceGrader().grade("The answer is (B).", bad).reason == "unparseable_gold"


@given(st.text(max_size=3000))
def test_choice_never_raises_and_is_three_valued(text: str) -> None:
    assert ChoiceGrader().grade(text, CHOICE_KEY).status in ("correct", "incorrect", "unknown")


# ---------------------------------------------------------------- exact
def test_exact_normalizes_and_takes_aliases_and_tolerance() -> None:
    key = dump_key({"answer": "Paris", "aliases": ["Paris, France"]})
    grader = ExactGrader()
    assert grader.grade("The answer is paris.", key).status == "correct"
    assert grader.grade("The answer is Paris, France.", key).status == "correct"
    assert grader.grade("The answer is Lyon.", key).status == "incorrect"
    assert grader.grade("", key).status == "unknown"
    assert ExactGrader(case_sensitive=True).grade("The answer is paris.", key).status == "incorrect"
    number = dump_key({"answer": "3.14"})
    assert ExactGrader(tolerance=0.01).grade("The answer is 3.141.", number).status == "correct"
    assert ExactGrader().grade("The answer is 3.141.", number).status == "incorrect"


def test_math_grader_is_todays_grader() -> None:
    grader = make_grader(GraderConfig())
    problem = Problem("p", "q", "42", "s")
    assert grader.key(problem) == "42"
    assert grader.grade("so \\boxed{42}", "42").status == "correct"


# ---------------------------------------------------------------- majority
class VotingEngine:
    """Answers every request with the given final answers, one completion each."""

    model_name = "voter"

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    def generate(self, requests: list[Any]) -> list[GenerationResult]:
        out = []
        for r in requests:
            votes = next(v for q, v in self.answers.items() if q in r.user)
            assert r.n == len(votes)
            out.append(GenerationResult(tuple(Completion(f"So \\boxed{{{a}}}", 3, "stop") for a in votes), 5))
        return out


def test_majority_keeps_agreed_gold_marks_it_and_audits_held_out_gold() -> None:
    config = validate_config(BASE | {"grader": {"kind": "majority", "votes": 4, "min_agreement": 0.75}})
    problems = [
        Problem("a", "question alpha", "7", "s"),  # majority 7 (3/4): right
        Problem("b", "question beta", "5", "s"),  # majority 9 (4/4): wrong
        Problem("c", "question gamma", "", "s"),  # no gold: kept, not audited
        Problem("d", "question delta", "1", "s"),  # 2/4: rejected
    ]
    engine = VotingEngine(
        {
            "alpha": ["7", "7", "7.0", "3"],
            "beta": ["9", "9", "9", "9"],
            "gamma": ["2", "2", "2", "1"],
            "delta": ["1", "1", "2", "3"],
        }
    )
    out = pseudo_gold(engine, problems, config)
    assert [p.id for p in out.problems] == ["a", "b", "c"]
    assert [p.gold_answer for p in out.problems] == ["7", "9", "2"]
    assert [gold_origin(p) for p in out.problems] == ["majority 0.750", "majority 1.000", "majority 0.750"]
    assert json.loads(out.problems[0].grading or "{}")["held_out_gold"] == "7"
    assert [(r.problem_id, r.reason) for r in out.rejected] == [("d", "no_majority")]
    assert accuracy_table(out.audit.to_counts()) == [("0.7", 1, 1), ("1.0", 0, 1)]
    assert gold_origin(problems[0]) is None


@pytest.mark.parametrize(
    "grader, says",
    [({"kind": "sql"}, "grader.kind: Input should be"), ({"kind": "code"}, "needs problems with tests")],
)
def test_prm_synth_run_refuses_a_bad_grader_before_any_work(tmp_path: Path, grader: dict[str, str], says: str) -> None:
    from typer.testing import CliRunner

    from prm_synth.cli import app

    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(BASE | {"grader": grader}))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code != 0
    assert result.output.startswith("error: invalid pipeline config") and says in result.output
    assert not out.exists()  # nothing was started


def test_an_aliases_column_left_at_its_default_keeps_the_fingerprint(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "q", "answer": "1"}\n')
    data = BASE | {"problems": {"kind": "file", "path": str(path), "fields": {"question": "question"}}}
    with_default = data | {"problems": data["problems"] | {"fields": {"question": "question", "aliases": None}}}
    assert validate_config(data).fingerprint() == validate_config(with_default).fingerprint()
    named = data | {"problems": data["problems"] | {"fields": {"question": "question", "aliases": "also"}}}
    assert validate_config(data).fingerprint() != validate_config(named).fingerprint()
