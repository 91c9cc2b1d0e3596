"""The docs are checked, not trusted: every config field has a docstring (the configuration reference is
generated from them), the generated reference pages match the code, the site builds with
`mkdocs build --strict` (broken links and pages missing from the nav fail), and every command-line flag
and pipeline key the README and the docs name exists.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# The pages a user reads. Left out: docs/design/experiments.md (an append-only record of what was
# measured and tried, so it names flags and keys as they were then) and benchmarks/results/ (what the
# scripts printed).
PAGES = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "benchmarks" / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.name != "experiments.md"),
]

# Flags of other tools the docs show, per tool. Kept short on purpose: a flag named here is not checked.
OTHER_TOOLS: dict[str, set[str]] = {
    "prefect": {"--no-prompt", "--name", "--type", "--pool", "--limit", "--cron", "--param"},
    "pip": {"--no-deps", "--upgrade"},
    "pytest": {"--durations", "--basetemp"},
    "curl": set(),
    "mkdocs": {"--strict", "--site-dir"},
    "vllm_serve": {"--dtype", "--enforce-eager"},  # python -m prm_synth.engines.vllm_serve serve ...
    "openrlhf": {"--placeholder_token", "--reward_tokens"},  # what the export tells OpenRLHF's trainer
    "vllm": {"--port", "--gpu-memory-utilization"},  # `vllm serve`: a judge's server (walkthrough)
}

FLAG = re.compile(r"^--[A-Za-z][\w-]*")


def _hooks() -> Any:
    spec = importlib.util.spec_from_file_location("prm_synth_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = _hooks()


def _benchmark_flags() -> dict[str, set[str]]:
    """benchmarks/<script>.py -> the flags its argparse defines (read from the source)."""
    flags = {}
    for script in (ROOT / "benchmarks").glob("*.py"):
        source = script.read_text(encoding="utf-8")
        flags[script.name] = {"--help"} | set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", source))
    return flags


CLI = {path: HOOKS.cli_flags(cmd) for path, cmd in HOOKS.cli_commands().items()}
BENCHMARKS = _benchmark_flags()
KNOWN_FLAGS = set().union(*CLI.values(), *BENCHMARKS.values(), *OTHER_TOOLS.values(), {"--version", "--help"})
KEYS = HOOKS.config_keys()
SECTIONS = {k for k in KEYS if "." not in k}


# ---------------------------------------------------------------- reading a page
def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return [(m.group(1).strip(), m.group(2)) for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```", text, re.S | re.M)]


def inline_spans(text: str) -> list[str]:
    """Inline code spans outside fenced blocks (single or double backticks)."""
    prose = re.sub(r"^```[^\n`]*\n.*?^```", "", text, flags=re.S | re.M)
    return [m.group(2).strip() for m in re.finditer(r"(`+)(.+?)\1", prose)]


def _tokens(segment: str) -> list[str]:
    return re.findall(r"\"[^\"]*\"|'[^']*'|\S+", segment)


def command_problems(line: str) -> list[str]:
    """The flags of one shell line that its command does not have."""
    problems = []
    line = re.sub(r"(^|\s)#.*$", "", line)  # a comment
    for segment in re.split(r"\|\||&&|;|\|", line):
        tokens = [t for t in _tokens(segment) if t not in ("&", "$", ">")]
        while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):  # VAR=value before the command
            tokens.pop(0)
        flags = [FLAG.match(t).group(0) for t in tokens if FLAG.match(t)]
        if not tokens or not flags:
            continue
        program = tokens[0].rsplit("/", 1)[-1]
        if program == "prm-synth":
            words = [t for t in tokens[1:] if not t.startswith("-")]
            path = "prm-synth"
            for word in words:
                if any(p.startswith(f"{path} {word}") for p in CLI):
                    path = f"{path} {word}"
                else:
                    break
            allowed = CLI.get(path, {"--version", "--help"})
            where = path
        elif program.startswith("python"):
            script = next((t for t in tokens[1:] if t.endswith(".py")), None)
            module = tokens[tokens.index("-m") + 1] if "-m" in tokens[:-1] else None
            if script is not None and Path(script).name in BENCHMARKS and script.startswith("benchmarks/"):
                allowed, where = BENCHMARKS[Path(script).name], script
            elif module == "prm_synth.engines.vllm_serve":
                allowed, where = OTHER_TOOLS["vllm_serve"], module
            elif module in OTHER_TOOLS:
                allowed, where = OTHER_TOOLS[module], module
            else:
                problems.append(f"{segment.strip()!r}: flags for a program the check does not know")
                continue
        elif program in OTHER_TOOLS:
            allowed, where = OTHER_TOOLS[program], program
        elif program == "make":
            continue
        else:
            problems.append(f"{segment.strip()!r}: flags for a program the check does not know ({program})")
            continue
        problems += [f"{where} has no {flag} (in {segment.strip()!r})" for flag in flags if flag not in allowed]
    return problems


def key_problems(span: str) -> list[str]:
    """A dotted pipeline key (`run.stall_warning_s`) that no config model has."""
    m = re.fullmatch(r"([a-z_]+)(\.[a-z_][a-z0-9_]*)+", span)
    if not m or m.group(1) not in SECTIONS or span.rsplit(".", 1)[1] in ("py", "md", "yaml", "json", "arrow"):
        return []
    return [] if span in KEYS else [f"no pipeline key {span}"]


def yaml_problems(body: str) -> list[str]:
    """Keys of a YAML pipeline snippet (its top level made of pipeline sections) that do not exist."""
    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError:
        return []
    if not isinstance(data, dict) or not data or not set(data) <= SECTIONS:
        return []
    problems = []

    def walk(mapping: dict[str, Any], prefix: str) -> None:
        for key, value in mapping.items():
            path = f"{prefix}{key}"
            if path not in KEYS:
                problems.append(f"no pipeline key {path}")
            elif isinstance(value, dict) and any(k.startswith(f"{path}.") for k in KEYS):
                walk(value, f"{path}.")

    walk(data, "")
    return problems


def page_problems(text: str) -> list[str]:
    problems = []
    for language, body in code_blocks(text):
        if language in ("bash", "sh", "shell", "console"):
            for line in body.splitlines():
                problems += command_problems(line)
        elif language == "yaml":
            problems += yaml_problems(body)
    for span in inline_spans(text):
        if FLAG.match(span) and " " not in span.split("=")[0]:  # a flag alone: `--soft`, `--runner ray`
            flag = FLAG.match(span).group(0)
            if flag not in KNOWN_FLAGS:
                problems.append(f"no command has {flag}")
        elif re.match(r"^(\S+/)?(prm-synth|python\S*)\s", span):
            problems += command_problems(span)
        problems += key_problems(span)
    return problems


# ---------------------------------------------------------------- the tests
def test_every_config_field_has_a_description():
    assert HOOKS.fields_without_description() == [], "give each field a docstring: a string literal under it"


def test_a_field_without_a_docstring_is_found():
    from prm_synth.config import Strict

    class Section(Strict):
        documented: int = 1
        """Has one."""
        bare: int = 2

    class Top(Strict):
        section: Section = Section()
        """A section."""

    assert HOOKS.fields_without_description(Top) == ["Section.bare"]


@pytest.mark.parametrize("page", sorted(HOOKS.GENERATED))
def test_the_generated_reference_pages_match_the_code(page):
    committed = (ROOT / "docs" / page).read_text(encoding="utf-8")
    assert committed == HOOKS.GENERATED[page](), f"docs/{page} is out of date: run `make docs` and commit it"


def test_the_config_reference_lists_every_key_with_its_default():
    text = (ROOT / "docs" / "reference" / "config.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([\w.]+)` \|", text, re.M))
    assert listed == KEYS
    row = next(line for line in text.splitlines() if line.startswith("| `run.stall_warning_s` |"))
    assert "| float | `300.0` | ≥ 0 |" in row and "0 turns it off" in row, row


def test_the_site_builds_strictly_offline(tmp_path):
    env = os.environ | {
        "PYTHONPATH": str(ROOT),
        "PRM_SYNTH_DOCS_CHECK": "1",  # a stale generated page fails instead of being rewritten
        "NO_MKDOCS_2_WARNING": "1",
    }
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for page in ("reference/config", "reference/cli", "guides/servers-and-failures", "benchmarks/results"):
        assert (site / page / "index.html").exists(), page


def test_readme_links_reach_the_pages_a_newcomer_needs():
    """One click each from the README: a GPU run, every key, the columns, the failure table, resume, the Hub."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    links = set(re.findall(r"\]\(([^)]+)\)", readme))
    for target in (
        "docs/guides/running.md#on-a-gpu",
        "docs/reference/config.md",
        "docs/reference/output-schema.md#columns-of-a-labeled-row",
        "docs/guides/servers-and-failures.md#what-each-failure-costs",
        "docs/guides/running.md#resume",
        "docs/guides/export-and-training.md#export-trainer-ready-views-and-the-hugging-face-hub",
    ):
        assert target in links, target
    for link in links:
        if "://" in link:
            continue
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"README links to {link}, which does not exist"
        if anchor:
            assert anchor in _anchors(ROOT / path), f"README links to {link}: no such heading there"


def _anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as MkDocs and GitHub make them."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", text, re.M):
        explicit = re.search(r"\{ *#([\w-]+) *\}", heading)
        if explicit:
            anchors.add(explicit.group(1))
            continue
        words = re.sub(r"[^\w\s-]", "", heading.replace("`", "").lower()).strip()
        anchors.add(re.sub(r"[\s]+", "-", words))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_flag_and_key_a_page_names_exists(page):
    assert page_problems(page.read_text(encoding="utf-8")) == []


def test_the_check_finds_a_flag_or_key_that_does_not_exist():
    text = """
```bash
prm-synth run pipelines/simulated.yaml --out runs/sim --no-such-flag
python benchmarks/fidelity.py --worlds all --nor-this
```

```yaml
run:
  max_in_flight: 8
  stall_warnings: 5
```

Set `run.no_such_key`, or `--overwrit`.
"""
    assert page_problems(text) == [
        "prm-synth run has no --no-such-flag (in 'prm-synth run pipelines/simulated.yaml --out runs/sim --no-such-flag')",
        "benchmarks/fidelity.py has no --nor-this (in 'python benchmarks/fidelity.py --worlds all --nor-this')",
        "no pipeline key run.stall_warnings",
        "no pipeline key run.no_such_key",
        "no command has --overwrit",
    ]
