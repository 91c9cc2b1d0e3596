"""The room rules, checked: a module imports only from its own floor or the floors below it, and no
import closes a circle.

The floors are read from the folders: LAYERS names every folder of prm_synth/ (a stage is a folder, in
data-flow order) and the top-level `flows`; the few modules at the top of the package are placed by name
(TOP_MODULES). Every import is read from the source with `ast`, function-level imports included, so
"what may I import from here" is checked, not remembered, and an import hidden in a function body can
neither reach upward nor close a circle. docs/design/architecture.md draws the same floors.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The floors, top to bottom: each names folders of prm_synth/ (and the top-level `flows` package). A module
# may import from its own floor and any floor below, never from above (function-level imports included).
# The stages stand side by side on one floor, as datatrove's pipeline steps do: they share the records
# (records/) and the floors below, and never import each other (STAGE_CROSSINGS names the two exceptions);
# the shard pipeline above them alone knows their order, and composes what uses several of them (shard/).
LAYERS: list[tuple[str, list[str]]] = [
    ("commands", ["cli", "api"]),
    ("orchestration", ["flows"]),
    ("products", ["products"]),
    ("shard pipeline", ["shard"]),
    ("stages", ["problems", "sampling", "annotate", "judge", "export"]),
    ("simulated world", ["simulated"]),
    ("engines", ["engines"]),
    ("storage and grading", ["store", "grading"]),
    ("contracts", ["config", "records", "prompting"]),
]
STAGES = ("problems", "sampling", "annotate", "judge", "export")
# The only imports from one stage package into another, each with its reason.
STAGE_CROSSINGS: dict[tuple[str, str], str] = {
    ("prm_synth.annotate.labeler", "prm_synth.sampling.sample"): "the labeler samples through its own probe "
    "scheduler, so a problem's annotators start as soon as its solutions are back (no drain between the two)",
    ("prm_synth.export.card_facts", "prm_synth.annotate.labeler"): "the card describes the labeling method in "
    "the labeler's own words: the labeler registry is the one place that knows each method",
}
# The few modules at the top of prm_synth/ (at most 8: the package, its errors and contracts, and the
# infrastructure every floor may use), each placed on a floor by name.
TOP_MODULES: dict[str, str] = {
    "prm_synth": "contracts",
    "prm_synth.errors": "contracts",
    "prm_synth.telemetry": "contracts",
    "prm_synth.lifeline": "contracts",
    "prm_synth.key_scrub": "contracts",
    "prm_synth.demo_model": "contracts",
    "prm_synth.pipeline": "shard pipeline",
}
FLOORS = [name for name, _ in LAYERS]
# The doors into the simulated world (prm_synth/simulated/): the registries that dispatch on a config's kind
# may import it from below, and the reports that compare rows with the simulated truth from above; no other
# module outside it does, so a reader of the real pipeline never steps into it.
SIMULATED = "prm_synth.simulated"
SIMULATED_ENTRIES: dict[str, str] = {
    "prm_synth.engines": "build_engine: the engine registry builds the simulated policy and judge",
    "prm_synth.problems.sources": "the builtin problem source generates the simulated arithmetic problems",
    "prm_synth.export.card_facts": "the card's label quality against the simulated truth",
    "prm_synth.products.evaluate": "eval dataset/labels: quality against the simulated truth, and its refusal",
    "prm_synth.cli.preflight": "refuses problems the simulated policy cannot solve before any work",
    "prm_synth.cli.eval": "refuses problems the simulated policy cannot solve before an engine starts",
    "flows.synthesize": "refuses problems the simulated policy cannot solve before the first shard",
}


def folders() -> list[str]:
    """Every package folder of prm_synth/, and the top-level `flows`."""
    found = [p.name for p in sorted((ROOT / "prm_synth").iterdir()) if (p / "__init__.py").exists()]
    return [*found, "flows"]


def layer_of(module: str) -> int | None:
    """The floor of a dotted module name: its folder's, or the top module's own."""
    if module in TOP_MODULES:
        return FLOORS.index(TOP_MODULES[module])
    parts = module.split(".")
    folder = parts[0] if parts[0] == "flows" else parts[1] if parts[0] == "prm_synth" and len(parts) > 1 else None
    for index, (_, names) in enumerate(LAYERS):
        if folder in names:
            return index
    return None


def modules() -> list[tuple[str, Path]]:
    out = []
    for package in ("prm_synth", "flows"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out.append((".".join(parts), path))
    return out


def imports_of(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import of our own packages, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import name` may import a submodule: judge it by the most precise name.
            for alias in node.names:
                found.append(
                    (f"{base}.{alias.name}" if layer_of(f"{base}.{alias.name}") is not None else base, node.lineno)
                )
    return [(name, line) for name, line in found if name.split(".")[0] in ("prm_synth", "flows")]


def test_every_module_has_a_layer():
    unplaced = [m for m, _ in modules() if layer_of(m) is None]
    assert not unplaced, (
        f"place these folders in tests/test_layers.py LAYERS (or top modules in TOP_MODULES): {unplaced}"
    )


def test_every_folder_is_on_one_floor_and_every_named_folder_exists():
    named = [name for _, names in LAYERS for name in names]
    assert sorted(named) == sorted(set(named)), "a folder is on one floor"
    assert sorted(named) == sorted(folders()), f"LAYERS names exactly the folders: {sorted(folders())}"


def test_few_modules_at_the_top_of_the_package():
    top = sorted(
        f"prm_synth.{p.stem}" if p.stem != "__init__" else "prm_synth" for p in (ROOT / "prm_synth").glob("*.py")
    )
    assert len(top) <= 8, f"at most 8 modules at the top of prm_synth/ (a stage is a folder): {top}"
    assert sorted(TOP_MODULES) == top, f"place each top module in TOP_MODULES: {top}"


@pytest.mark.parametrize("module, path", modules(), ids=lambda x: x if isinstance(x, str) else "")
def test_imports_point_down(module, path):
    own = layer_of(module)
    assert own is not None
    upward = [
        f"{path.relative_to(ROOT)}:{line} imports {name} ({LAYERS[layer_of(name)][0]} is above {LAYERS[own][0]})"
        for name, line in imports_of(module, path)
        if layer_of(name) is not None
        and layer_of(name) < own
        and not (module in SIMULATED_ENTRIES and name.startswith(SIMULATED + "."))
    ]
    assert not upward, "\n".join(upward)


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "prm_synth" and parts[1] in STAGES else None


def test_stages_import_no_other_stage_but_the_named_crossings():
    graph = import_graph()
    found = {(module, name) for module, names in graph.items() for name in names if _stage(module) and _stage(name)}
    crossings = {(module, name) for module, name in found if _stage(module) != _stage(name)}
    assert crossings <= set(STAGE_CROSSINGS), (
        f"imports between stage packages (a stage imports records, not another stage): "
        f"{sorted(crossings - set(STAGE_CROSSINGS))}"
    )
    assert len(STAGE_CROSSINGS) <= 2, "at most two imports between stage packages"


def test_only_the_named_doors_lead_into_the_simulated_world():
    entered = sorted(
        {
            module
            for module, path in modules()
            if not module.startswith(SIMULATED)
            for name, _ in imports_of(module, path)
            if name == SIMULATED or name.startswith(SIMULATED + ".")
        }
    )
    assert entered == sorted(SIMULATED_ENTRIES), (
        f"modules that import prm_synth.simulated: {entered}; the doors named in SIMULATED_ENTRIES: "
        f"{sorted(SIMULATED_ENTRIES)}"
    )


def test_the_checker_sees_an_upward_import(tmp_path):
    fake = tmp_path / "grading.py"
    fake.write_text("def f():\n    from prm_synth.pipeline import process_shard\n")
    ((name, _),) = imports_of("prm_synth.grading.math", fake)
    assert layer_of(name) < layer_of("prm_synth.grading.math")


# Inside the label stage: the first-error searches. The change-point package is read in the order things
# happen and uses only the annotate modules every method shares; the fixed/sprt bisection knows nothing of
# it; the registry (annotate/search.py) is the one module that knows every search.
CHANGEPOINT = "prm_synth.annotate.changepoint"
# (budget_interval and token_cost: what a token budget means for any search's rows and probe choice)
SHARED_ANNOTATE = {
    "prm_synth.annotate.annotation",
    "prm_synth.annotate.protocol",
    "prm_synth.annotate.budget_interval",
    "prm_synth.annotate.token_cost",
}
SEARCH_TYPES = ("FixedTest", "SequentialTest", "ChangepointSearch", "FixedSearch", "SprtSearch", "PosteriorTest")


def _annotate_imports(module: str) -> set[str]:
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    return {name for name, _ in imports_of(module, path) if name.startswith("prm_synth.annotate")}


@pytest.mark.parametrize("module", [m for m, _ in modules() if m.startswith(CHANGEPOINT + ".")])
def test_the_changepoint_package_uses_only_the_shared_annotate_modules(module):
    outside = {
        name
        for name in _annotate_imports(module)
        if not name.startswith(CHANGEPOINT) and not any(name == m or name.startswith(m + ".") for m in SHARED_ANNOTATE)
    }
    assert not outside, f"{module} imports {sorted(outside)}: the search registry (annotate/search.py) wires it in"


def test_the_bisection_imports_nothing_of_the_changepoint_search():
    names = _annotate_imports("prm_synth.annotate.bisection")
    assert not [name for name in names if name.startswith(CHANGEPOINT)], names


def test_no_module_but_the_registry_asks_a_search_for_its_type():
    """`SEARCHES` (annotate/search.py) is the only dispatch on the search's kind."""
    found = []
    for module, path in modules():
        if module == "prm_synth.annotate.search":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            call = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
            if call and len(node.args) == 2 and any(t in ast.unparse(node.args[1]) for t in SEARCH_TYPES):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"isinstance on a search type outside annotate/search.py: {found}"


def import_graph(read_from: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (module-level and function-level imports alike; an import
    of a package is an edge to its `__init__`). `read_from`: modules read from another file."""
    names = {m for m, _ in modules()}
    sources = dict(modules()) | (read_from or {})

    def resolve(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    return {
        module: {r for name, _ in imports_of(module, path) if (r := resolve(name)) is not None and r != module}
        for module, path in sources.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle():
    """No module reaches itself through imports, a function-level import included (one that hides a
    circle from the interpreter does not hide it from this test)."""
    assert not cycles(import_graph()), "import circles (cut one import of each):\n" + "\n".join(
        " <-> ".join(c) for c in cycles(import_graph())
    )


def test_the_checker_sees_a_circle_through_a_function_level_import(tmp_path):
    fake = tmp_path / "accuracy.py"
    original = (ROOT / "prm_synth" / "judge" / "accuracy.py").read_text()
    fake.write_text(original + "\n\ndef f():\n    from prm_synth.judge.consensus import decide\n")
    graph = import_graph({"prm_synth.judge.accuracy": fake})
    (circle,) = cycles(graph)
    assert {"prm_synth.judge.accuracy", "prm_synth.judge.consensus"} <= set(circle)


# Small modules with one job: none of the package's files over 450 lines (split by job, never by folding lines).
MAX_LINES = 450


def test_no_module_over_450_lines():
    long = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "prm_synth").rglob("*.py")
        if len(path.read_text().splitlines()) > MAX_LINES
    )
    assert not long, f"over {MAX_LINES} lines (split by job): {long}"


# The judge room, one way: each module imports only the ones before it (asking, the judge's accuracy and
# what "pinned" means, the posterior over the first error, the rates and precision the run estimates from
# them, which rows to ask, the target the kept labels are held to, consensus, verification, and whether the
# judges could be read).
JUDGE_ORDER = ("ask", "accuracy", "posterior", "estimate", "selection", "target", "consensus", "verify", "readable")


@pytest.mark.parametrize("index", range(len(JUDGE_ORDER)), ids=JUDGE_ORDER)
def test_the_judge_room_imports_one_way(index):
    module = f"prm_synth.judge.{JUDGE_ORDER[index]}"
    path = ROOT / "prm_synth" / "judge" / f"{JUDGE_ORDER[index]}.py"
    later = {f"prm_synth.judge.{name}" for name in JUDGE_ORDER[index:]}
    wrong = sorted({name for name, _ in imports_of(module, path) if name in later})
    assert not wrong, f"{module} imports {wrong}: the judge room reads {' -> '.join(JUDGE_ORDER)}"
    names = {m for m, _ in modules() if m.startswith("prm_synth.judge.")}
    assert names == {f"prm_synth.judge.{name}" for name in JUDGE_ORDER}, "place a new judge module in JUDGE_ORDER"


# The docs' architecture page draws the floors from here: LAYERS and each folder's docstring.
ARCHITECTURE = ROOT / "docs" / "design" / "architecture.md"
FLOORS_START = "<!-- floors: generated from tests/test_layers.py (LAYERS, TOP_MODULES, each folder's docstring) -->"
FLOORS_END = "<!-- /floors -->"


def _summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")


def floors_table() -> str:
    """The floors as a Markdown table: each folder (and top module) with what its docstring says."""
    lines = ["| floor | where | what |", "|---|---|---|"]
    for floor, names in LAYERS:
        for name in names:
            folder = ROOT / name if name == "flows" else ROOT / "prm_synth" / name
            where = "flows/" if name == "flows" else f"prm_synth/{name}/"
            lines.append(f"| {floor} | `{where}` | {_summary(folder / '__init__.py')} |")
        for module in sorted(m for m, f in TOP_MODULES.items() if f == floor and m != "prm_synth"):
            path = ROOT / (module.replace(".", "/") + ".py")
            lines.append(f"| {floor} | `{path.relative_to(ROOT)}` | {_summary(path)} |")
    return "\n".join(lines)


def test_the_architecture_page_draws_the_floors_from_the_folders():
    page = ARCHITECTURE.read_text()
    assert FLOORS_START in page and FLOORS_END in page, f"{ARCHITECTURE} lost its generated floors table"
    drawn = page.split(FLOORS_START)[1].split(FLOORS_END)[0].strip()
    assert drawn == floors_table(), (
        f"{ARCHITECTURE.relative_to(ROOT)} is stale: run `PYTHONPATH=$PWD python tests/test_layers.py --write-docs`"
    )


def write_docs() -> None:
    page = ARCHITECTURE.read_text()
    head, rest = page.split(FLOORS_START)
    tail = rest.split(FLOORS_END)[1]
    ARCHITECTURE.write_text(f"{head}{FLOORS_START}\n{floors_table()}\n{FLOORS_END}{tail}")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write-docs"]:
        write_docs()
