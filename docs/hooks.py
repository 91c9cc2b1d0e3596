"""MkDocs hooks: the pages made from the code, so they cannot drift from it.

- docs/reference/config.md: every pipeline key, from the pydantic models in prm_synth/config/ (one file per section (each
  field's type, default and bounds, and its attribute docstring as the meaning);
- docs/reference/cli.md: every `prm-synth` command and option, from the typer app.

Both are written before each build (`on_pre_build`) and committed, so the README's links to them work
on GitHub too. With PRM_SYNTH_DOCS_CHECK=1 (tests/test_docs.py) a page that differs from what the code
makes fails the build instead of being rewritten: run `make docs` and commit the pages.

The site also gets pages from outside docs/ (`on_files`): benchmarks/README.md and the dated
benchmarks/results/*.md that `--report` writes, with an index of them; CHANGELOG.md and CONTRIBUTING.md.

The generators are plain functions (`config_reference`, `cli_reference`, `config_keys`, `cli_commands`),
also used by tests/test_docs.py.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GENERATED_NOTE = (
    '!!! note "Generated"\n    This page is generated from the code by `docs/hooks.py` (`make docs`); '
    "edit {source}, not this page.\n"
)


# ---------------------------------------------------------------- the config reference
def _escaped(text: str) -> str:
    """HTML-looking text shown as written: escaped outside code spans only (inside one, Markdown shows
    `&lt;` literally, so `<think>` in backticks must stay as it is)."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(
        p if p.startswith("`") and p.endswith("`") and len(p) > 1 else html.escape(p, quote=False) for p in parts
    )


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, pipes escaped, HTML-looking text shown as written."""
    return _escaped(" ".join(text.split())).replace("|", "\\|")


def _members(annotation: Any) -> list[Any]:
    """The types an annotation allows, through Annotated, unions and Optional."""
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [t for a in get_args(annotation) for t in _members(a)]
    return [annotation]


def _models(annotation: Any) -> list[type]:
    from pydantic import BaseModel

    return [m for m in _members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is Annotated:
        return _type_name(get_args(annotation)[0])
    if annotation is type(None):
        return "null"
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(json.dumps(a) for a in get_args(annotation))
    if origin in (Union, types.UnionType):  # a choice of sections by `kind` reads "section", not three times
        return " \\| ".join(dict.fromkeys(_type_name(a) for a in get_args(annotation)))
    if origin in (list, tuple, dict):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        inner = ", ".join(_type_name(a) for a in args)
        if origin is tuple and Ellipsis in get_args(annotation):
            inner += ", ..."
        return f"{origin.__name__}[{inner}]"
    if _models(annotation):
        return "section"
    if isinstance(annotation, type):
        return {"Path": "path", "str": "str", "int": "int", "float": "float", "bool": "bool"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation)


def _bounds(field: Any) -> str:
    words = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥", "max_length": "length ≤"}
    found = []
    metadata = list(field.metadata)
    if get_origin(field.annotation) is Annotated:  # RolloutCount carries its bounds in the annotation
        for m in get_args(field.annotation)[1:]:
            metadata += list(getattr(m, "metadata", [])) or [m]
    for m in metadata:
        for attr, word in words.items():
            value = getattr(m, attr, None)
            if value is not None:
                found.append(f"{word} {value}")
        if getattr(m, "pattern", None):
            found.append(f"matches `{m.pattern}`")
    return ", ".join(dict.fromkeys(found))


def _default(field: Any) -> str:
    from pydantic import BaseModel

    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{json.dumps(value, default=str)}`"


def _discriminator(model: type) -> tuple[str, str] | None:
    for name in ("kind", "method"):
        f = model.model_fields.get(name)  # type: ignore[attr-defined]
        if f is not None and get_origin(f.annotation) is Literal:
            return name, get_args(f.annotation)[0]
    return None


def config_reference() -> str:
    """reference/config.md: every key reachable from PipelineConfig, one table a section."""
    from prm_synth.config import PipelineConfig

    out = [
        "# Pipeline configuration",
        "",
        GENERATED_NOTE.format(source="the field docstrings in `prm_synth/config/` (one file per section)"),
        "A pipeline file is YAML validated by these models: an unknown key, a wrong type, a value past its "
        "bound or a missing file fails before any work starts, naming the key (a misspelt key is named with "
        "the one meant). Keys renamed since 0.1 still load, with a warning naming the new key "
        "(`prm_synth/config/upgrade.py`). Every section but `run` is hashed into the config fingerprint: "
        "an output folder made with another config is refused, never resumed into.",
        "",
        "A section chosen by a `kind` or `method` key takes only the keys listed under that choice.",
        "",
    ]
    anchors: set[str] = set()

    def table(model: type, path: str, level: int, title: str, parent: str = "") -> None:
        anchor = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
        if anchor in anchors:  # `problems.fields` under both `file` and `hf`
            anchor = f"{parent}-{anchor.removeprefix(path.split('.')[0] + '-')}"
        anchors.add(anchor)
        out.extend([f"{'#' * level} {title} {{ #{anchor} }}", ""])
        doc = (model.__doc__ or "").strip()
        if doc and not doc.startswith(("Usage docs", "A base class")):
            out.extend([" ".join(doc.split()), ""])
        out.extend(["| key | type | default | bounds | meaning |", "|---|---|---|---|---|"])
        nested: list[tuple[str, list[type]]] = []
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            key = f"{path}.{name}" if path else name
            models = _models(field.annotation)
            meaning = _cell(field.description or "")
            if models:
                nested.append((key, models))
                meaning += " See below."
            out.append(
                f"| `{key}` | {_type_name(field.annotation)} | {_default(field)} | {_cell(_bounds(field))} | {meaning} |"
            )
        out.append("")
        for key, models in nested:
            for m in models:
                tag = _discriminator(m)
                sub = f"`{key}` ({tag[0]}: `{tag[1]}`)" if tag and len(models) > 1 else f"`{key}`"
                table(m, key, level + 1, sub, anchor)

    table(PipelineConfig, "", 2, "Top level")
    return "\n".join(out) + "\n"


def fields_without_description(root: type | None = None) -> list[str]:
    """`Model.field` for every config field reachable from `root` (PipelineConfig) that has no docstring."""
    from prm_synth.config import PipelineConfig

    missing: list[str] = []
    seen: set[type] = set()

    def walk(model: type) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            if not (field.description or "").strip():
                missing.append(f"{model.__name__}.{name}")
            for m in _models(field.annotation):
                walk(m)

    walk(root or PipelineConfig)
    return missing


def config_keys() -> set[str]:
    """Every dotted key of a pipeline file (`annotate.confidence`, `policy.model`, ...)."""
    from prm_synth.config import PipelineConfig

    keys: set[str] = set()

    def walk(model: type, path: str, seen: tuple[type, ...]) -> None:
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            key = f"{path}.{name}" if path else name
            keys.add(key)
            for m in _models(field.annotation):
                if m not in seen:
                    walk(m, key, (*seen, m))

    walk(PipelineConfig, "", (PipelineConfig,))
    return keys


# ---------------------------------------------------------------- the CLI reference
def cli_commands() -> dict[str, Any]:
    """`prm-synth <command ...>` -> its click command, for every leaf command of the typer app."""
    import typer.main

    from prm_synth.cli import app

    found: dict[str, Any] = {}

    def walk(cmd: Any, path: str) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, f"{path} {name}")
        else:
            found[path] = cmd

    walk(typer.main.get_command(app), "prm-synth")
    return found


def cli_flags(cmd: Any) -> set[str]:
    flags = {"--help"}
    for p in cmd.params:
        flags.update(o for o in [*p.opts, *p.secondary_opts] if o.startswith("-"))
    return flags


def exit_codes() -> list[str]:
    """The exit codes every command shares, from the constants that make them."""
    from prm_synth.cli.supervise import EXIT_INTERRUPTED
    from prm_synth.errors import EXIT_BUG, EXIT_FAILED, EXIT_USAGE

    return [
        "## Exit codes",
        "",
        "A command that fails says why in one `error:` line, the last line it prints.",
        "",
        "| code | meaning |",
        "|---|---|",
        "| 0 | done |",
        f"| {EXIT_FAILED} | the work failed (an engine, a server, the disk, the Hub); what is finished is kept, "
        "and the same command resumes |",
        f"| {EXIT_USAGE} | bad input before any work (a config, a file, an option); nothing was done |",
        f"| {EXIT_BUG} | a bug in prm-synth: printed with its traceback (please report it) |",
        f"| {EXIT_INTERRUPTED} | stopped by Ctrl-C or SIGTERM; finished shards are kept |",
        "",
    ]


def cli_reference() -> str:
    """reference/cli.md: each command's help and options, as `prm-synth COMMAND --help` prints them."""
    out = [
        "# Command line",
        "",
        GENERATED_NOTE.format(source="the commands' docstrings and option help in `prm_synth/cli/`"),
        "`prm-synth --version` prints the version; every command takes `--help`.",
        "",
        *exit_codes(),
    ]
    for path, cmd in cli_commands().items():
        ctx = cmd.make_context(path.split()[-1], [], resilient_parsing=True)
        arguments = [p for p in cmd.params if p.param_type_name == "argument"]
        usage = " ".join(["[OPTIONS]", *(p.name.upper() + ("..." if p.nargs == -1 else "") for p in arguments)])
        out.extend([f"## `{path}`", "", "```text", f"{path} {usage}", "```", ""])
        if cmd.help:
            out.extend([_escaped(cmd.help.strip()).replace("\b\n", ""), ""])
        rows = [p.get_help_record(ctx) for p in cmd.params]
        rows = [r for r in rows if r]
        if rows:
            out.extend(["| argument or option | meaning |", "|---|---|"])
            out.extend(f"| {_option(name)} | {_cell(text)} |" for name, text in rows)
            out.append("")
    return "\n".join(out) + "\n"


def _option(record: str) -> str:
    """`--runner <threads|ray>` as the option in code and its metavar as text."""
    names, _, metavar = record.partition(" <")
    if names.startswith("-"):
        return f"`{names}`" + (f" {_cell('<' + metavar)}" if metavar else "")
    return f"`{names.upper()}`"  # an argument


# ---------------------------------------------------------------- the benchmark pages
def results_index(pages: list[str]) -> str:
    out = [
        "# Benchmark results",
        "",
        "Dated pages written by the benchmark scripts' `--report` flag (see [what each script measures](../README.md)),",
        "newest first. A figure quoted in these docs comes from one of them.",
        "",
    ]
    if not pages:
        out.append("No results have been written yet: run a benchmark with `--report`.")
    for name in sorted(pages, key=lambda p: (p.removesuffix(".md")[-10:], p), reverse=True):
        stem = name.removesuffix(".md")
        out.append(f"- [{stem}]({name})")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- MkDocs events
GENERATED = {"reference/config.md": config_reference, "reference/cli.md": cli_reference}


def on_pre_build(config: Any) -> None:
    from mkdocs.exceptions import PluginError

    if missing := fields_without_description():
        raise PluginError(
            "config fields without a docstring (a string literal under the field in prm_synth/config/): "
            + ", ".join(missing)
        )
    for page, make in GENERATED.items():
        path = Path(config["docs_dir"]) / page
        text = make()
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        if os.environ.get("PRM_SYNTH_DOCS_CHECK"):
            raise PluginError(f"docs/{page} is out of date with the code: run `make docs` and commit it")
        path.write_text(text, encoding="utf-8")


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File, InclusionLevel

    def add(src_uri: str, content: str | None = None, path: Path | None = None, in_nav: bool = True) -> None:
        # the dated results pages are reached from their index, not listed in the nav one by one
        inclusion = InclusionLevel.INCLUDED if in_nav else InclusionLevel.NOT_IN_NAV
        if path is not None:
            files.append(File.generated(config, src_uri, abs_src_path=str(path), inclusion=inclusion))
        else:
            files.append(File.generated(config, src_uri, content=content, inclusion=inclusion))

    add("benchmarks/README.md", path=ROOT / "benchmarks" / "README.md")
    results = sorted((ROOT / "benchmarks" / "results").glob("*.md"))
    for page in results:
        add(f"benchmarks/results/{page.name}", path=page, in_nav=False)
    add("benchmarks/results/index.md", results_index([p.name for p in results]))
    add("changelog.md", path=ROOT / "CHANGELOG.md")
    add("contributing.md", path=ROOT / "CONTRIBUTING.md")
    return files


# Pages that live outside docs/ link to docs pages by their repository path (`docs/guides/running.md`,
# right on GitHub); on the site those pages sit at the top, so the `docs/` falls away, and the
# repository's CHANGELOG.md and CONTRIBUTING.md are the site's changelog.md and contributing.md.
_REPO_PAGES = {"changelog.md", "contributing.md"}
_REPO_LINK = re.compile(r"\]\((?:\./)?docs/")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri in _REPO_PAGES:
        markdown = _REPO_LINK.sub("](", markdown)
        markdown = markdown.replace("](CHANGELOG.md", "](changelog.md").replace(
            "](CONTRIBUTING.md", "](contributing.md"
        )
    return markdown
