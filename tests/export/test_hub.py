"""Hub export against a recording stand-in at the huggingface_hub API boundary (the Hub is not
reachable here): the uploaded layout equals `--to-dir`, the card's YAML and body, merging with an
existing card, and a planted token that must appear nowhere but in the API calls themselves."""

from __future__ import annotations

import fnmatch
import logging
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
import yaml
from _dataset_fixture import make_dataset
from _tokenizers import qwen_like_bpe
from huggingface_hub import HfApi
from huggingface_hub.errors import EntryNotFoundError
from typer.testing import CliRunner

from prm_synth.cli.export import register
from prm_synth.export import card
from prm_synth.export.card import redact
from prm_synth.export.card_facts import source_facts
from prm_synth.export.hub import HubExportError, export_to_dir, export_to_hub, resolve_token
from prm_synth.export.views import VIEW_NAMES

TOKEN = "hf_PLANTEDsecret123"


class FakeHfApi(HfApi):
    """HfApi with the four methods the export uses replaced by an in-memory repo.

    `files` is the repo after the calls (path -> bytes); `calls` records each call without its token,
    `tokens` the tokens the calls were given (the token must reach the API, and only the API).
    """

    def __init__(self, files: dict[str, bytes] | None = None, private: bool = False, fail: str | None = None):
        super().__init__(endpoint="http://127.0.0.1:9")  # never contacted: every used method is overridden
        self.files = dict(files or {})
        self.private = private
        self.fail = fail
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.tokens: list[Any] = []

    def _record(self, name: str, kwargs: dict[str, Any]) -> None:
        self.tokens.append(kwargs.pop("token", None))
        self.calls.append((name, kwargs))
        if self.fail == name:
            raise RuntimeError(f"401 Unauthorized for {name} with Authorization: Bearer {self.tokens[-1]}")

    def create_repo(self, repo_id, **kwargs):
        self._record("create_repo", {"repo_id": repo_id, **kwargs})
        return SimpleNamespace(repo_id=repo_id)

    def repo_info(self, repo_id, **kwargs):
        self._record("repo_info", {"repo_id": repo_id, **kwargs})
        return SimpleNamespace(id=repo_id, private=self.private)

    def hf_hub_download(self, repo_id, filename, **kwargs):
        self._record("hf_hub_download", {"repo_id": repo_id, "filename": filename, **kwargs})
        if filename not in self.files:
            raise EntryNotFoundError(f"{filename} not found in {repo_id}")
        path = Path(kwargs["local_dir"]) / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.files[filename])
        return str(path)

    def upload_folder(self, **kwargs):
        self._record("upload_folder", dict(kwargs))
        folder = Path(kwargs["folder_path"])
        uploaded = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        for pattern in kwargs.get("delete_patterns") or []:  # as HfApi: matching files not re-uploaded go
            for path in [p for p in self.files if fnmatch.fnmatch(p, pattern) and p not in uploaded]:
                del self.files[path]
        self.files.update(uploaded)
        return SimpleNamespace(commit_url="fake")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    make_dataset(root)
    return root


@pytest.fixture(scope="module")
def tok():
    return qwen_like_bpe()


@pytest.fixture(scope="module")
def tok_file(tmp_path_factory, tok):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.backend_tokenizer.save(str(path))
    return path


@pytest.fixture
def planted(monkeypatch):
    """The token in the environment, as a user would have it; no saved login is consulted."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    return TOKEN


def _card(text: str) -> tuple[dict[str, Any], str]:
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def _assert_no_token(api: FakeHfApi, *texts: str) -> None:
    for path, data in api.files.items():
        assert TOKEN.encode() not in data, path
    for name, kwargs in api.calls:
        assert TOKEN not in repr(kwargs), name
    for text in texts:
        assert TOKEN not in text


def test_push_uploads_views_and_a_card_and_never_leaks_the_token(dataset, planted, caplog, capsys, tok):
    caplog.set_level(logging.DEBUG)
    api = FakeHfApi()
    result = export_to_hub(dataset, "me/prm-data", api=api, tokenizer=tok)

    create = dict(api.calls)["create_repo"]
    assert create == {"repo_id": "me/prm-data", "repo_type": "dataset", "private": False, "exist_ok": True}
    upload = dict(api.calls)["upload_folder"]
    assert upload["repo_type"] == "dataset"
    assert sorted(upload["delete_patterns"]) == sorted(f"{v}/*.parquet" for v in VIEW_NAMES)
    assert set(api.tokens) == {TOKEN}  # the token reached every API call ...
    out, err = capsys.readouterr()
    _assert_no_token(api, caplog.text, out, err, repr(result))  # ... and nothing else

    expected = {f"{v}/{s}-00000-of-00001.parquet" for v in VIEW_NAMES for s in ("train", "test")} | {"README.md"}
    expected |= {f"{v}/view.json" for v in VIEW_NAMES}
    assert set(api.files) == expected == set(result.files)

    meta, body = _card(api.files["README.md"].decode())
    assert meta["license"] == "apache-2.0"  # builtin problems: ours
    assert {"trl", "process-reward-model", "prm-synth"} <= set(meta["tags"])
    assert meta["task_categories"] == ["token-classification"]
    assert meta["size_categories"] == ["n<1K"]
    assert meta["source_datasets"] == ["original"]
    assert meta["pretty_name"] == "fixture (prm-synth)"
    assert meta["language"] == ["en"] and meta["annotations_creators"] == ["machine-generated"]
    assert [(i["config_name"], [s["num_examples"] for s in i["splits"]]) for i in meta["dataset_info"]] == [
        (v, [result.views[v].splits[s].rows for s in ("train", "test")]) for v in VIEW_NAMES
    ]
    assert [c["config_name"] for c in meta["configs"]] == list(VIEW_NAMES)
    assert meta["configs"][0]["default"] is True
    assert meta["configs"][1]["data_files"] == [
        {"split": "train", "path": "math-shepherd/train-*"},
        {"split": "test", "path": "math-shepherd/test-*"},
    ]
    for needle in (
        "| policy model | simulated-arithmetic |",
        "| judge model | simulated-judge |",
        "| annotator | mc (method `mc`) |",
        "| labeling rule | hard |",
        "| labeling budget | k = 8 rollouts from every step prefix |",  # the labeler's own budget line
        "3 solutions a problem",
        "| labeled solutions (records) | 72 |",
        "| rejected: `judge_disagrees` | 3 |",
        "| rejected: `bad_answer` | 1 |",
        "| problems | 28 read, 28 loaded |",
        "216 (168 labeled, 60 bad = 35.7% of labeled, before the rule below)",
        "| 0 | 12 |",
        # What a trainer gets: 60 rows of the 72 (12 have no labeled first step), the tagged row
        # skipped by the marked views, steps after the first error dropped (36 bad of 120, not 60 of 168).
        "| `trl` | 46 | 14 | 24 | 120 | 36 (30.0%) | mc 120 | none | none | no_labeled_steps 12 |",
        # the tagged row has 3 supervised steps, 1 bad, and sits in the train split
        "| `openrlhf` | 45 | 14 | 24 | 117 | 35 (29.9%) | mc 117 | none | none | marker_in_text 1, no_labeled_steps 12 |",
        "- `math-shepherd` (input, label, id, problem_id)",
        "--placeholder_token ки --reward_tokens + -",
        "| `openrlhf` | OpenRLHF ProcessRewardDataset (openrlhf/datasets/process_reward_dataset.py) | 59 | 117 of 117 |",
        "marker ' ки' refused: math-shepherd: row p000-s0: found 0 placeholders for 3 labels",
        "`qwen`: <extra_0> is not one token in this tokenizer: checked with it added",
        'Example row of `qwen`:\n\n```json\n{\n  "system": "Please reason step by step',
        'load_dataset("me/prm-data", "trl")',
        "```yaml\nannotate:",
        "Math-Shepherd: Verify and Reinforce",
        "arXiv:2406.06592",
        "The Lessons of Developing Process Reward Models",
        "ProcessBench: Identifying Process Errors",
        card.BEGIN,
        card.END,
    ):
        assert needle in body, needle


def test_to_dir_writes_exactly_what_a_push_uploads(dataset, planted, tmp_path, tok):
    api = FakeHfApi()
    export_to_hub(dataset, "me/prm-data", api=api, formats=["qwen", "trl"], tokenizer=tok)
    export_to_dir(dataset, tmp_path, formats=["qwen", "trl"], repo_id="me/prm-data", tokenizer=tok)
    local = {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert local == api.files


EXISTING = """---
license: cc-by-4.0
language:
- en
tags:
- mine
annotations_creators:
- machine-generated
my_field:
  nested: [1, 2]
configs:
- config_name: raw
  data_files: raw/*.jsonl
- config_name: trl
  data_files: old/*.parquet
dataset_info:
- config_name: trl
  splits:
  - name: train
    num_examples: 999
- config_name: raw
  splits:
  - name: train
    num_examples: 5
---

# My PRM data

A hand-written introduction.

<!-- prm-synth:begin -->
stale generated text
<!-- prm-synth:end -->

## Citation

Please cite us.
"""


def test_an_existing_card_is_merged_not_overwritten(dataset, planted, tok):
    api = FakeHfApi(
        files={"README.md": EXISTING.encode(), "raw/a.jsonl": b"{}\n", "trl/train-00000-of-00009.parquet": b"old"}
    )
    export_to_hub(dataset, "me/prm-data", api=api, tokenizer=tok)
    text = api.files["README.md"].decode()
    meta, body = _card(text)

    assert meta["license"] == "cc-by-4.0"  # a human's choice stands
    assert meta["language"] == ["en"] and meta["my_field"] == {"nested": [1, 2]}
    assert meta["annotations_creators"] == ["machine-generated"]
    assert meta["tags"][0] == "mine" and {"trl", "process-reward-model", "prm-synth"} <= set(meta["tags"])
    names = [c["config_name"] for c in meta["configs"]]
    assert names == ["raw", *VIEW_NAMES]
    assert next(c for c in meta["configs"] if c["config_name"] == "trl")["data_files"][0]["path"] == "trl/train-*"
    # stale info of our config replaced by the new, the other config's kept
    assert [i["config_name"] for i in meta["dataset_info"]] == ["raw", *VIEW_NAMES]
    assert meta["dataset_info"][0]["splits"][0]["num_examples"] == 5
    assert list(meta)[:3] == ["license", "language", "tags"]  # the existing key order is kept

    assert body.startswith("\n# My PRM data\n\nA hand-written introduction.\n\n" + card.BEGIN)
    assert body.rstrip().endswith("## Citation\n\nPlease cite us.")
    assert "stale generated text" not in body
    assert body.count(card.BEGIN) == body.count(card.END) == 1
    assert "raw/a.jsonl" in api.files  # files of other configs are not ours to delete
    assert "trl/train-00000-of-00009.parquet" not in api.files  # a stale shard of our view is

    again = FakeHfApi(files=dict(api.files))
    export_to_hub(dataset, "me/prm-data", api=again, tokenizer=tok)
    assert again.files["README.md"].decode() == text  # a re-export changes nothing

    api = FakeHfApi(files={"README.md": b"# Notes only\n\nNo markers, no YAML.\n"})
    export_to_hub(dataset, "me/prm-data", api=api, license="mit")
    meta, body = _card(api.files["README.md"].decode())
    assert meta["license"] == "mit" and body.startswith("# Notes only\n\nNo markers, no YAML.\n\n" + card.BEGIN)


def test_errors_are_wrapped_and_scrubbed(dataset, planted, caplog):
    caplog.set_level(logging.DEBUG)
    for failing in ("create_repo", "hf_hub_download", "upload_folder"):
        api = FakeHfApi(fail=failing)
        with pytest.raises(HubExportError) as e:
            export_to_hub(dataset, "me/prm-data", api=api)
        assert "401 Unauthorized" in str(e.value) and "***" in str(e.value)
        assert TOKEN not in "".join(traceback.format_exception(e.value))
        assert e.value.__cause__ is None and e.value.__suppress_context__
    assert TOKEN not in caplog.text


def test_private_export_refuses_an_existing_public_repo(dataset, planted):
    api = FakeHfApi(private=False)
    with pytest.raises(HubExportError, match="public"):
        export_to_hub(dataset, "me/prm-data", private=True, api=api)
    assert "upload_folder" not in dict(api.calls)
    api = FakeHfApi(private=True)
    export_to_hub(dataset, "me/prm-data", private=True, api=api)
    assert dict(api.calls)["create_repo"]["private"] is True


def test_a_folder_that_is_not_a_dataset_creates_no_repo(tmp_path, planted):
    api = FakeHfApi()
    with pytest.raises(FileNotFoundError):
        export_to_hub(tmp_path, "me/prm-data", api=api)
    assert api.calls == []


def test_no_token_is_refused_before_any_call(dataset, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    api = FakeHfApi()
    with pytest.raises(HubExportError, match="HF_TOKEN"):
        export_to_hub(dataset, "me/prm-data", api=api)
    assert api.calls == []


def test_token_resolution(monkeypatch):
    monkeypatch.setattr("huggingface_hub.get_token", lambda: "hf_fromLogin")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert resolve_token() == "hf_fromLogin"
    monkeypatch.setenv("HF_TOKEN", "hf_fromEnv")
    assert resolve_token() == "hf_fromEnv"
    assert resolve_token("hf_fromArg") == "hf_fromArg"


def test_redaction_matches_words_not_substrings():
    config = {
        "hf_token": "x",
        "policy": {"api_key_env": "OPENAI_API_KEY", "max_tokens": 5, "tokenizer": "gpt2", "apiKey": "k"},
        "judges": [{"client_secret": "s", "rollout_max_tokens": 7, "Password": "p"}],
    }
    assert redact(config) == {
        "hf_token": "***",
        "policy": {"api_key_env": "***", "max_tokens": 5, "tokenizer": "gpt2", "apiKey": "***"},
        "judges": [{"client_secret": "***", "rollout_max_tokens": 7, "Password": "***"}],
    }


def test_license_and_source_follow_the_problem_source():
    assert source_facts({"problems": {"kind": "hf", "path": "openai/gsm8k"}})["license"] == "mit"
    assert source_facts({"problems": {"kind": "hf", "path": "openai/gsm8k"}})["source_datasets"] == ["openai/gsm8k"]
    assert source_facts({"problems": {"kind": "hf", "path": "someone/else"}})["license"] == "unknown"
    assert source_facts({"problems": {"kind": "builtin"}})["license"] == "apache-2.0"


# ---------------------------------------------------------------- the command and the flow
def _cli():
    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:  # keeps `export` a sub-command, as in the real app
        pass

    return app


def test_cli_to_dir(dataset, tmp_path, tok_file):
    args = ["export", str(dataset), "--to-dir", str(tmp_path), "-f", "trl", "-f", "qwen", "--tokenizer", str(tok_file)]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "qwen", "trl"]
    assert "trl" in result.output and "train" in result.output
    assert "qwen           120/120 labels found by its trainer's tokenization" in result.output


def test_cli_without_tokenizer_exports_the_views_that_need_none(dataset, tmp_path):
    result = CliRunner().invoke(_cli(), ["export", str(dataset), "--to-dir", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["README.md", "math-shepherd", "trl"]
    card = (tmp_path / "a" / "README.md").read_text()
    assert "Not checked: this export was made without `--tokenizer`" in card
    result = CliRunner().invoke(_cli(), ["export", str(dataset), "--to-dir", str(tmp_path / "b"), "-f", "openrlhf"])
    assert result.exit_code == 2 and "need --tokenizer" in result.output
    assert not (tmp_path / "b").exists()  # refused before anything was written


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--to-dir", "x", "--repo-id", "a/b"],
        ["--to-dir", "x", "-f", "nope"],
        ["--to-dir", "x", "--private"],
        ["--to-dir", "x", "--marker", "§"],  # a marker is only checked against a tokenizer
        ["--to-dir", "x", "--tokenizer", "/nonexistent/tokenizer"],
    ],
)
def test_cli_refuses_bad_arguments(dataset, args):
    result = CliRunner().invoke(_cli(), ["export", str(dataset), *args])
    assert result.exit_code == 2, result.output


def test_cli_push_uses_the_environment_token_and_scrubs_it(dataset, planted, monkeypatch, tok_file):
    apis: list[FakeHfApi] = []
    monkeypatch.setattr("huggingface_hub.HfApi", lambda *a, **k: apis.append(FakeHfApi()) or apis[-1])
    args = ["export", str(dataset), "--repo-id", "me/prm-data", "-f", "openrlhf", "--tokenizer", str(tok_file)]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    assert apis[0].tokens[0] == TOKEN and "openrlhf/train-00000-of-00001.parquet" in apis[0].files
    _assert_no_token(apis[0], result.output)

    monkeypatch.setattr("huggingface_hub.HfApi", lambda *a, **k: FakeHfApi(fail="upload_folder"))
    result = CliRunner().invoke(_cli(), ["export", str(dataset), "--repo-id", "me/prm-data"])
    assert result.exit_code == 1 and "401 Unauthorized" in result.output and TOKEN not in result.output


def test_the_cards_k_and_budget_come_from_the_labeler():
    from prm_synth.config import ConfigError
    from prm_synth.export.card_facts import labeling

    base = {"problems": {"kind": "builtin", "count": 4}, "policy": {"kind": "simulated"}}
    # OmegaPRM before the per-method config (omega_k) and after it (k): upgraded, then the k that was used.
    old = labeling(base | {"annotate": {"method": "omegaprm", "k": 8, "omega_k": 16, "omega_rollout_budget": 400}})
    assert old["method"] == "omegaprm" and "k = 16 rollouts a state" in old["budget"] and "400" in old["budget"]
    new = labeling(base | {"annotate": {"method": "omegaprm", "k": 16, "rollout_budget": 300}})
    assert "k = 16" in new["budget"] and "300" in new["budget"]
    assert "k = 8 rollouts from every step prefix" in labeling(base | {"annotate": {"method": "mc", "k": 8}})["budget"]
    with pytest.raises(ConfigError, match="stored config"):  # never re-described by hand
        labeling(base | {"annotate": {"method": "no-such-method"}})


def test_the_card_explains_every_label_source_of_the_schema():
    from prm_synth.export.card import SOURCE_TEXT
    from prm_synth.records import LABEL_SOURCES

    assert set(SOURCE_TEXT) == set(LABEL_SOURCES)
