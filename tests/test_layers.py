"""The room rules, checked: a module imports only from its own layer or the layers below it.

Every module of `prm_synth` and `flows` must be named in LAYERS (a new module is placed on purpose),
and every import is read from the source with `ast`, function-level imports included, so "what may I
import from here" is checked, not remembered. docs/design/architecture.md says the same in words.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Top to bottom. A module may import from its own layer and any layer below, never from above.
LAYERS: list[tuple[str, set[str]]] = [
    ("commands", {"prm_synth.cli"}),
    ("orchestration", {"flows"}),
    ("products", {"prm_synth.export", "prm_synth.products", "prm_synth.store.summary"}),
    ("shard pipeline", {"prm_synth.pipeline"}),
    ("stages", {"prm_synth.annotate", "prm_synth.judge", "prm_synth.sampling.sample"}),
    (
        "parts",
        {
            "prm_synth.engines",
            "prm_synth.problems",
            "prm_synth.grading",
            "prm_synth.store",
            "prm_synth.demo_model",
            "prm_synth.telemetry",
            "prm_synth.lifeline",
            "prm_synth.key_scrub",
        },
    ),
    (
        "contracts",
        {
            "=prm_synth",  # "=": this module only, not the package below it
            "prm_synth.config",
            "prm_synth.schema",
            "prm_synth.sampling",
            "prm_synth.errors",
        },
    ),
]


def layer_of(module: str) -> int | None:
    """The layer of a dotted module name: the longest package prefix named in LAYERS wins."""
    best: tuple[int, int] | None = None
    for index, (_, roots) in enumerate(LAYERS):
        for root in roots:
            exact = root.startswith("=")
            root = root.lstrip("=")
            matches = module == root or (not exact and module.startswith(root + "."))
            if matches and (best is None or len(root) > best[1]):
                best = (index, len(root))
    return None if best is None else best[0]


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
    assert not unplaced, f"place these modules in tests/test_layers.py LAYERS: {unplaced}"


def test_every_listed_module_exists():
    """A stale entry (a module moved or deleted) would place nothing and hide the move."""
    names = {m for m, _ in modules()}
    missing = [
        root.lstrip("=")
        for _, roots in LAYERS
        for root in roots
        if not any(m == root.lstrip("=") or m.startswith(root.lstrip("=") + ".") for m in names)
    ]
    assert not missing, f"LAYERS names modules that do not exist: {missing}"


@pytest.mark.parametrize("module, path", modules(), ids=lambda x: x if isinstance(x, str) else "")
def test_imports_point_down(module, path):
    own = layer_of(module)
    assert own is not None
    upward = [
        f"{path.relative_to(ROOT)}:{line} imports {name} ({LAYERS[layer_of(name)][0]} is above {LAYERS[own][0]})"
        for name, line in imports_of(module, path)
        if layer_of(name) is not None and layer_of(name) < own
    ]
    assert not upward, "\n".join(upward)


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
    "prm_synth.annotate.labels",
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


# The judge room, one way: each module imports only the ones before it (asking, the judge's accuracy and
# what "pinned" means, the posterior over the first error, which rows to ask, consensus, verification).
JUDGE_ORDER = ("ask", "accuracy", "posterior", "selection", "consensus", "verify")


@pytest.mark.parametrize("index", range(len(JUDGE_ORDER)), ids=JUDGE_ORDER)
def test_the_judge_room_imports_one_way(index):
    module = f"prm_synth.judge.{JUDGE_ORDER[index]}"
    path = ROOT / "prm_synth" / "judge" / f"{JUDGE_ORDER[index]}.py"
    later = {f"prm_synth.judge.{name}" for name in JUDGE_ORDER[index:]}
    wrong = sorted({name for name, _ in imports_of(module, path) if name in later})
    assert not wrong, f"{module} imports {wrong}: the judge room reads {' -> '.join(JUDGE_ORDER)}"
    names = {m for m, _ in modules() if m.startswith("prm_synth.judge.")}
    assert names == {f"prm_synth.judge.{name}" for name in JUDGE_ORDER}, "place a new judge module in JUDGE_ORDER"
