"""ampbench uses pytest-benchmark through its public API only: no attribute that pytest-benchmark keeps
private (``config._benchmarksession``, ``BenchmarkFixture._make_stats``, ``._mode``, ...) is read or set
anywhere in the package or perf/, and nothing private is imported from it; its session is reached the way
pytest hands out any plugin (``config.pluginmanager.get_plugin("pytest-benchmark")``). Names private to
pytest itself as well (its terminal writer, ``_tw``) are pytest's, not pytest-benchmark's, and not held
here."""

from __future__ import annotations

import ast
from pathlib import Path

import _pytest
import pytest_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _private_names(package: Path) -> set[str]:
    """The underscored names a package defines: attributes it sets, functions and classes."""
    names = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_no_private_name_of_pytest_benchmark_is_used():
    private = _private_names(Path(pytest_benchmark.__file__).parent) - _private_names(Path(_pytest.__file__).parent)
    assert {"_benchmarksession", "_make_stats", "_mode"} <= private, "the scan reads pytest-benchmark's sources"
    used = []
    for path in [*(ROOT / "ampbench").rglob("*.py"), *(ROOT / "models").rglob("*.py"), *(ROOT / "perf").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in private
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                used.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) > 1
                  and isinstance(node.args[1], ast.Constant) and node.args[1].value in private):
                used.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pytest_benchmark"):
                used += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{a.name}" for a in node.names
                         if a.name.startswith("_") or any(p.startswith("_") for p in node.module.split("."))]
    assert used == []
