"""The package's imports run one way: no module imports, at its top, one that imports it back (through
any chain), and ``ampbench.report.compare`` needs nothing of the report's rendering modules but the text of
its figures (``ampbench.report.figure_text``): the pages render a comparison, never the other way round."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# the package's source folders: the zoo lies at the top level and installs as ampbench.models
SOURCES = {ROOT / "ampbench": "ampbench", ROOT / "models": "ampbench.models"}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in SOURCES.items():
        for path in folder.rglob("*.py"):
            name = ".".join((package, *path.relative_to(folder).with_suffix("").parts))
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ampbench modules `name` imports at its top (not under ``if TYPE_CHECKING``), with the packages
    whose __init__ those imports run; its own packages' are running already."""
    named = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ampbench"):
            named |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            named |= {a.name for a in node.names if a.name.startswith("ampbench")}
    parts = {".".join(m.split(".")[:i]) for m in named for i in range(1, m.count(".") + 2)}
    return {m for m in parts if m in modules and not f"{name}.".startswith(f"{m}.")}


def _reach(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_no_module_imports_itself_back():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "ampbench.report" in _reach("ampbench.cli", graph), "the scan follows imports"
    cycles = sorted(name for name in graph if name in _reach(name, graph))
    assert cycles == []


def test_compare_needs_nothing_of_the_report_but_its_figures_text():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "ampbench.report.figure_text" in graph["ampbench.report.compare"], "the scan follows imports"
    reached = {m for m in _reach("ampbench.report.compare", graph) if m.startswith("ampbench.report.")}
    assert reached == {"ampbench.report.figure_text"}


def _wing(name: str) -> str:
    """The top-level module or wing (``ampbench.speed``) a module belongs to."""
    return ".".join(name.split(".")[:2])


def test_the_wings_import_one_way_even_inside_functions():
    """Between top-level modules and wings (speed/, baselines/, plugin/, history/, ...) the imports run one
    way, those made inside a function included: a wing that imports one which imports it back has no
    layer of its own (the history's pytest side lives in plugin/, the tolerance of an entry in baselines/)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        named = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ampbench"):
                named |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                named |= {a.name for a in node.names if a.name.startswith("ampbench")}
        wing = _wing(name)
        graph.setdefault(wing, set()).update(_wing(m) for m in named if _wing(m) in modules and _wing(m) != wing)
    for wing in modules:
        graph.setdefault(_wing(wing), set())
    assert "ampbench.speed" in _reach("ampbench.plugin", graph), "the scan follows imports"
    assert sorted(w for w in graph if w in _reach(w, graph)) == []
