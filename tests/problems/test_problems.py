import json
from itertools import islice
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prm_synth.config import BuiltinSource, FieldMapping, FileSource, HFSource
from prm_synth.problems.sources import Problem, ProblemSourceError, count_hint, gold_from_field, iter_problems
from prm_synth.records import RejectedRecord
from prm_synth.simulated import arithmetic

FIXTURES = Path(__file__).parents[1] / "fixtures" / "problems"


def _split(items):
    problems = [x for x in items if isinstance(x, Problem)]
    rejected = [x for x in items if isinstance(x, RejectedRecord)]
    assert len(problems) + len(rejected) == len(items)
    return problems, rejected


def test_builtin_is_stable_per_index() -> None:
    small = list(iter_problems(BuiltinSource(count=3, seed=7)))
    large = list(iter_problems(BuiltinSource(count=10, seed=7)))
    assert [p.id for p in small] == ["builtin-7-000000", "builtin-7-000001", "builtin-7-000002"]
    assert small == large[:3]  # problem i does not depend on the count
    assert [p.question for p in small] == [p.question for p in large[:3]]
    other_seed = list(iter_problems(BuiltinSource(count=3, seed=8)))
    assert [p.question for p in other_seed] != [p.question for p in small]
    for p in large:
        chain = arithmetic.parse_question(p.question)
        assert chain is not None and str(chain.answer) == p.gold_answer
        assert p.source == "builtin" and 2 <= len(chain.ops) <= 8
    assert count_hint(BuiltinSource(count=10)) == 10


def test_builtin_respects_op_range() -> None:
    items = list(iter_problems(BuiltinSource(count=20, min_ops=3, max_ops=3)))
    assert all(len(arithmetic.parse_question(p.question).ops) == 3 for p in items)


def test_jsonl_gsm8k_rows_and_rejections() -> None:
    items = list(iter_problems(FileSource(path=FIXTURES / "gsm8k_mini.jsonl", preset="gsm8k")))
    problems, rejected = _split(items)
    assert [(p.id, p.gold_answer) for p in problems] == [
        ("gsm8k_mini-000000", "7"),
        ("gsm8k_mini-000001", "1234000"),
        ("gsm8k_mini-000009", "-2"),
    ]
    assert all(p.source == "gsm8k_mini" for p in problems)
    assert [(r.id, r.reason) for r in rejected] == [
        ("gsm8k_mini:2", "broken_line"),
        ("gsm8k_mini:3", "broken_line"),
        ("gsm8k_mini:4", "missing_answer"),
        ("gsm8k_mini:6", "empty_question"),
        ("gsm8k_mini:7", "unparseable_answer"),
        ("gsm8k_mini:8", "empty_answer"),
    ]
    for r in rejected:
        assert r.stage == "load" and r.source == "gsm8k_mini" and r.config_fingerprint == ""
        assert r.detail and r.payload
    assert rejected[0].payload == '{"question": "broken line follows"\n'
    assert json.loads(rejected[2].payload) == {"question": "No answer field here."}
    assert count_hint(FileSource(path=FIXTURES / "gsm8k_mini.jsonl")) is None


def test_json_math_preset() -> None:
    items = list(iter_problems(FileSource(path=FIXTURES / "math_mini.json", preset="math")))
    problems, rejected = _split(items)
    assert [(p.id, p.gold_answer) for p in problems] == [
        ("test/algebra/1.json", "\\frac{3}{4}"),
        ("test/algebra/2.json", "2"),
        ("math_mini-000002", "5"),  # no id in the row: the positional id
    ]
    assert [(r.id, r.reason, r.problem_id) for r in rejected] == [
        ("math_mini:3", "duplicate_id", "test/algebra/1.json"),
        ("math_mini:4", "missing_answer", "test/algebra/3.json"),
        ("math_mini:5", "not_an_object", None),
        ("math_mini:6", "bad_question", "test/algebra/4.json"),
    ]


def test_boxed_answer_format_with_custom_fields() -> None:
    mapping = FieldMapping(question="q", answer="solution", answer_format="boxed")
    items = list(iter_problems(FileSource(path=FIXTURES / "boxed_mini.jsonl", fields=mapping)))
    problems, rejected = _split(items)
    assert [p.gold_answer for p in problems] == ["\\dfrac{1}{\\sqrt{2}}", "\\{1, 2\\}"]
    assert [r.reason for r in rejected] == ["unparseable_answer"]


def test_json_list_and_rows_key(tmp_path: Path) -> None:
    rows = [{"question": "q", "answer": "1"}, {"question": "r", "answer": "2"}]
    for name, data in (("plain_list.json", rows), ("rows_key.json", {"rows": rows})):
        path = tmp_path / name
        path.write_text(json.dumps(data))
        problems, rejected = _split(list(iter_problems(FileSource(path=path))))
        assert [p.gold_answer for p in problems] == ["1", "2"] and not rejected
    bad = tmp_path / "bad.json"
    bad.write_text('{"other": 1}')
    with pytest.raises(ProblemSourceError, match="list of objects"):
        iter_problems(FileSource(path=bad))
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(ProblemSourceError, match="cannot read"):
        iter_problems(FileSource(path=broken))


def test_jsonl_bad_utf8_line_is_rejected_and_rest_continue(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'{"question": "a", "answer": "1"}\n\xff\xfe{"x"\n{"question": "b", "answer": "2"}')
    problems, rejected = _split(list(iter_problems(FileSource(path=path))))
    assert [p.id for p in problems] == ["mixed-000000", "mixed-000002"]
    assert [(r.id, r.reason) for r in rejected] == [("mixed:1", "broken_line")]


def test_jsonl_is_streamed(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    with path.open("w") as f:
        for i in range(10_000):
            f.write(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n")
    first = list(islice(iter_problems(FileSource(path=path)), 2))
    assert [p.gold_answer for p in first] == ["0", "1"]


def test_parquet_in_batches(tmp_path: Path) -> None:
    n = 2500  # more than one record batch
    table = pa.table(
        {
            "problem": [f"q{i}" if i != 5 else None for i in range(n)],
            "answer": [str(i) for i in range(n)],
            "unique_id": [f"id-{i}" for i in range(n)],
        }
    )
    path = tmp_path / "set.parquet"
    pq.write_table(table, path, row_group_size=1000)
    source = FileSource(path=path, preset="math")
    problems, rejected = _split(list(iter_problems(source)))
    assert len(problems) == n - 1
    assert problems[0] == Problem("id-0", "q0", "0", "set")
    assert problems[-1].id == f"id-{n - 1}"
    assert [(r.id, r.reason) for r in rejected] == [("set:5", "missing_question")]
    assert json.loads(rejected[0].payload) == {"problem": None, "answer": "5", "unique_id": "id-5"}
    assert count_hint(source) == n


def test_unsupported_file_type(tmp_path: Path) -> None:
    path = tmp_path / "problems.csv"
    path.write_text("question,answer\n")
    with pytest.raises(ProblemSourceError, match="unsupported"):
        iter_problems(FileSource(path=path))


def test_gold_from_field() -> None:
    assert gold_from_field("Work...\n#### 1,234,567", "gsm8k") == ("1234567", None)
    assert gold_from_field("#### 3.5", "gsm8k") == ("3.5", None)
    assert gold_from_field("no marker", "gsm8k") == (None, "unparseable_answer")
    assert gold_from_field("so \\boxed{\\frac{a}{\\sqrt{b}}}.", "boxed") == ("\\frac{a}{\\sqrt{b}}", None)
    assert gold_from_field("\\boxed{1} \\boxed{2}", "boxed") == ("2", None)
    assert gold_from_field("  7 ", "plain") == ("7", None)
    assert gold_from_field(7, "plain") == ("7", None)
    assert gold_from_field(None, "plain") == (None, "missing_answer")
    assert gold_from_field("  ", "plain") == (None, "empty_answer")
    assert gold_from_field(["7"], "plain") == (None, "unparseable_answer")
    assert gold_from_field(True, "plain") == (None, "unparseable_answer")


@pytest.fixture
def local_hf_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local dataset folder: load_dataset reads it with no network. Its cache goes to tmp_path."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    folder = tmp_path / "tiny_gsm8k"
    (folder / "data").mkdir(parents=True)
    rows = [
        {"question": "q0", "answer": "x\n#### 1,000"},
        {"question": "q1", "answer": "no marker"},
        {"question": "q2", "answer": "#### 3"},
    ]
    (folder / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.parametrize("streaming", [True, False])
def test_hf_local_folder(local_hf_dataset: Path, streaming: bool) -> None:
    source = HFSource(path=str(local_hf_dataset), preset="gsm8k", streaming=streaming)
    problems, rejected = _split(list(iter_problems(source)))
    name = str(local_hf_dataset)
    assert [(p.id, p.gold_answer, p.source) for p in problems] == [
        (f"{name}-test-000000", "1000", name),
        (f"{name}-test-000002", "3", name),
    ]
    assert [(r.id, r.reason) for r in rejected] == [(f"{name}:1", "unparseable_answer")]
    assert count_hint(source) is None


def test_hf_errors_name_the_dataset(local_hf_dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(ProblemSourceError, match="split 'train'"):
        iter_problems(HFSource(path=str(local_hf_dataset), split="train"))
    missing = str(tmp_path / "no-such-dataset")
    with pytest.raises(ProblemSourceError, match="no-such-dataset"):
        iter_problems(HFSource(path=missing))


# ---------------------------------------------------------------- hostile input files
def _source(path: Path) -> FileSource:
    return FileSource(path=path, fields=FieldMapping(id="id"))


def _write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _row(i: int, **fields: object) -> bytes:
    return json.dumps({"id": f"r{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} | fields).encode()


def test_a_deeply_nested_line_is_rejected_with_file_and_line_and_the_rest_kept(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "deep.jsonl", [_row(0), b"[" * 100_000 + b"]" * 100_000, _row(2)])
    problems, rejected = _split(list(iter_problems(_source(path))))
    assert [p.id for p in problems] == ["r0", "r2"]
    (bad,) = rejected
    assert bad.reason == "broken_line" and f"{path}:2" in bad.detail and "nested too deeply" in bad.detail
    assert len(bad.payload) <= 2000


def test_a_deeply_nested_json_file_is_a_clear_source_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ProblemSourceError, match="nested too deeply"):
        iter_problems(_source(path))


@pytest.mark.parametrize("field", ["id", "question", "answer"])
def test_a_lone_surrogate_is_rejected_at_read_time_and_the_rejection_is_storable(tmp_path: Path, field: str) -> None:
    bad = {"id": "bad \ud800", "question": "What is \ud800?", "answer": "\udfff"}[field]
    path = _write_lines(tmp_path / "sur.jsonl", [_row(0), _row(1, **{field: bad}), _row(2)])
    assert b"\\ud800" in path.read_bytes() or b"\\udfff" in path.read_bytes()  # legal JSON: an escape
    problems, rejected = _split(list(iter_problems(_source(path))))
    assert [p.id for p in problems] == ["r0", "r2"]
    (rej,) = rejected
    assert rej.reason == "bad_text" and repr(field) in rej.detail
    for value in rej.to_row().values():  # the rejected row itself can be written
        if isinstance(value, str):
            value.encode("utf-8")
    pa.Table.from_pylist([rej.to_row()])


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_json_answers_are_rejected(tmp_path: Path, constant: bytes) -> None:
    row = b'{"id": "n", "question": "What is 0/0?", "answer": ' + constant + b"}"
    path = _write_lines(tmp_path / "nan.jsonl", [row, _row(1)])
    problems, rejected = _split(list(iter_problems(_source(path))))
    assert [p.id for p in problems] == ["r1"]
    assert [r.reason for r in rejected] == ["unparseable_answer"]


def test_a_byte_order_mark_does_not_cost_the_first_row(tmp_path: Path) -> None:
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + _row(0) + b"\n" + _row(1) + b"\n")
    problems, rejected = _split(list(iter_problems(_source(jsonl))))
    assert [p.id for p in problems] == ["r0", "r1"] and rejected == []
    array = tmp_path / "bom.json"
    array.write_bytes(b"\xef\xbb\xbf[" + _row(0) + b"]")
    problems, rejected = _split(list(iter_problems(_source(array))))
    assert [p.id for p in problems] == ["r0"] and rejected == []
