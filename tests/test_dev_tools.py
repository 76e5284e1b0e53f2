"""The tools of dev/, which run the suite's stages and probes on a GPU machine (gpu_run.sh,
history_series.sh, two_nodes.sh, bisect_check.sh, fsdp2_probe.py, held_check.py) and compute the tables
of docs/ from simulations and recorded runs (bench_*.py, dashboard_check.py, dist_table.py), start as
their usage lines say with the package as it is: each imports as a module without running anything, each
with a command line answers ``--help``, and each shell script parses (``bash -n``)."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "dev"
TOOLS = sorted(DEV.glob("*.py"))
SCRIPTS = sorted(DEV.glob("*.sh"))
# what a tool may do at its top besides importing and defining: name constants, put the checkout on the path
SETUP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def _is_main_guard(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and ast.unparse(node.test) in ("__name__ == '__main__'", "'__main__' == __name__"))


def _is_setup(node: ast.stmt) -> bool:
    if isinstance(node, SETUP):
        return True
    if isinstance(node, ast.Expr):
        # the docstring, or sys.path.insert(...)
        return isinstance(node.value, ast.Constant) or ast.unparse(node.value).startswith("sys.path.insert(")
    return False


def test_the_scan_finds_the_tools():
    assert {"bench_history.py", "fsdp2_probe.py", "dashboard_check.py"} <= {p.name for p in TOOLS}
    assert "gpu_run.sh" in {p.name for p in SCRIPTS}


@pytest.mark.parametrize("tool", TOOLS, ids=_ids(TOOLS))
def test_tool_runs_nothing_when_imported(tool: Path):
    """Everything a tool does on its own runs under ``if __name__ == "__main__"``: importing it (as this
    test does, or another tool) times or trains nothing."""
    strays = [f"line {n.lineno}: {ast.unparse(n).splitlines()[0]}" for n in ast.parse(tool.read_text()).body
              if not _is_setup(n) and not _is_main_guard(n)]
    assert strays == []


@pytest.mark.parametrize("tool", TOOLS, ids=_ids(TOOLS))
def test_tool_imports(tool: Path, monkeypatch):
    # the tools put the checkout first on the path: on a copy, given back after the test
    monkeypatch.setattr(sys, "path", [str(DEV), *sys.path])  # dev/ first, as for a script: probe_traces
    name = f"dev_tool_{tool.stem}"
    spec = importlib.util.spec_from_file_location(name, tool)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # a dataclass looks its module up while it is made
    spec.loader.exec_module(module)
    assert module.__doc__, "a tool says what it is for"


WITH_ARGS = [t for t in TOOLS if "argparse" in t.read_text()]


@pytest.mark.parametrize("tool", WITH_ARGS, ids=_ids(WITH_ARGS))
def test_tool_answers_help(tool: Path):
    run = subprocess.run([sys.executable, str(tool), "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage:")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("script", SCRIPTS, ids=_ids(SCRIPTS))
def test_script_parses(script: Path):
    run = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
