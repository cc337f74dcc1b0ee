"""The package layout of docs/architecture.md, held against the code: no import cycle, each layer imports down.

Every import counts, at any depth of a module (a function's lazy import, an ``if TYPE_CHECKING:`` one): a cycle
through a lazy import is still two modules that cannot be read, tested or moved apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("exporters", "bot")

# Each package, and the packages of its own top-level package it may import besides itself and that top-level
# package's root modules (exporters/*.py, bot/*.py); bot imports anything of exporters, exporters nothing of bot.
LAYERS = {
    "bot.audit": set(),
    "bot.sweep": set(),
    "bot.github": {"bot.audit"},
    "bot.run": {"bot.audit", "bot.sweep", "bot.github"},
    "bot.cli": {"bot.audit", "bot.sweep", "bot.github", "bot.run"},
    "exporters.bundle": set(),
    "exporters.quantize": set(),
    "exporters.generation": {"exporters.bundle", "exporters.quantize"},
    "exporters.dynamo": {"exporters.bundle", "exporters.generation"},
    "exporters.onnx": {"exporters.bundle", "exporters.generation", "exporters.dynamo", "exporters.quantize"},
    "exporters.executorch": {"exporters.bundle", "exporters.generation", "exporters.dynamo", "exporters.quantize"},
    "exporters.tiny": {"exporters.generation"},
    "exporters.ledger": {"exporters.tiny", "exporters.quantize"},
}
# The packages that export or run a model; none of them may depend on the model factory.
EXPORTER_PACKAGES = ("exporters.dynamo", "exporters.onnx", "exporters.executorch", "exporters.bundle",
                     "exporters.generation", "exporters.quantize")  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its text (``from a import b`` counts ``a.b`` when
    that is a module, else ``a``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found |= {target for target in targets if target in known and target != name}
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
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
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_cycles_finds_a_cycle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back(graph):
    assert cycles(graph) == []


def layer(name: str) -> str:
    """``bot.run`` for ``bot.run.runner`` (and ``bot.run``); ``bot`` for a root module (``bot.outcome``)."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or ".".join(parts[:2]) in LAYERS else parts[0]


def test_every_package_has_a_layer(graph):
    packages = {layer(name) for name in graph} - set(PACKAGES)
    assert packages == set(LAYERS)


def test_each_package_imports_only_the_layers_below_it(graph):
    upward = []
    for name, targets in graph.items():
        if layer(name) not in LAYERS:
            continue
        top = name.split(".")[0]
        allowed = LAYERS[layer(name)] | {layer(name), top}
        upward += [f"{name} -> {t}" for t in sorted(targets) if t.split(".")[0] == top and layer(t) not in allowed]
    assert upward == []


def test_bot_root_modules_import_no_bot_package(graph):
    """bot.outcome, bot.errors, bot.config and bot.signatures are what every layer shares: they import none of the
    layers."""
    root = [name for name in graph if name.startswith("bot.") and layer(name) == "bot" and name != "bot.__main__"]
    assert sorted(root) == ["bot.config", "bot.errors", "bot.outcome", "bot.signatures"]
    assert {name: sorted(t for t in graph[name] if t.startswith("bot.")) for name in root} == {n: [] for n in root}


def test_the_library_never_imports_the_bot(graph):
    assert [f"{n} -> {t}" for n, ts in graph.items() if n.startswith("exporters") for t in ts if t.startswith("bot")] == []


def test_no_exporter_depends_on_the_model_factory(graph):
    found = [f"{name} -> {target}" for name, targets in graph.items() if name.startswith(EXPORTER_PACKAGES)
             for target in sorted(targets) if target == "exporters.tiny" or target.startswith("exporters.tiny.")]  # fmt: skip
    assert found == []
