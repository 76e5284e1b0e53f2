"""One name, one meaning. A public module-level name (a function, a class, a constant) is defined in one
module of the package, unless it is listed below with the reason it means the same in each; and a
dotted name that a comment or a docstring puts in backquotes (``replay.Replay``, ``ampbench.fp8``) names
something that exists.

A name a module only re-exports (``X = other.X``) or imports is no definition; a name with a leading
underscore is its module's own, and a pytest hook's name is pytest's."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import tokenize
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ampbench"
# the package's source folders: the zoo lies at the top level and installs as ampbench.models
SOURCES = {PACKAGE: "ampbench", ROOT / "models": "ampbench.models"}
MODELS = ("ampbench.models.",)

# names defined in several modules on purpose, with one meaning: the modules they may stand in (a prefix
# ending in "." admits a whole wing), and why
SAME_MEANING = {
    # README.md, "Add a model": every model file defines these, and the registry reads them so
    "Config": (MODELS, "a model's frozen config"),
    "SPEC": (MODELS, "a model's ModelSpec, which the registry lists"),
    "make_batch": (MODELS, "a model's batch maker"),
    "flops_per_sample": (MODELS, "a model's FLOP count"),
    "loss": (MODELS, "a model's loss, where not cross-entropy on logits"),
    "Block": (MODELS, "a transformer's block"),
    "FeedForward": (MODELS, "a transformer block's feed-forward layers"),
    "main": (("ampbench.cli.command", "ampbench.distributed.", "ampbench.speed.ahead"),
             "the entry point of `python -m` that module"),
    "command": (("ampbench.cli.", "ampbench.export.cli"), "a subcommand module's entry, its parser's handler"),
    "add_parser": (("ampbench.cli.", "ampbench.export.cli"),
                   "a command module's subcommands, their arguments and handlers (cli.args.COMMAND_MODULES)"),
    "SCHEMA_VERSION": (("ampbench.baselines.schema", "ampbench.history.schema", "ampbench.results.schema"),
                       "the version of that module's format: a baseline file, the run history, a run's JSON"),
    "R": (("ampbench.results.base", "ampbench.results.run"), "a TypeVar bound to Record, for a kind of cell asked for"),
    "Measurement": (("ampbench.bisect.measure", "ampbench.gate.measurement"),
                    "what was measured, before it is judged: a bisect step's figures, a speed ratio's rounds"),
    "judge": (("ampbench.memory.judging", "ampbench.gate.judge"),
              "the verdict of measured figures against what they are judged against, with its words"),
}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            found[".".join((package, *path.relative_to(folder).with_suffix("").parts)).removesuffix(".__init__")] = path
    return found


def _defined(tree: ast.Module) -> set[str]:
    """The public names a module's top level defines."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple)
                         and isinstance(node.value, ast.Tuple) else [(target, node.value)])
                for name, value in pairs:
                    alias = isinstance(value, ast.Attribute) and isinstance(name, ast.Name) and value.attr == name.id
                    if isinstance(name, ast.Name) and not alias:
                        names.add(name.id)
    return {n for n in names if not n.startswith("_") and not n.startswith("pytest_")}


def _definitions() -> dict[str, set[str]]:
    where = defaultdict(set)
    for module, path in _modules().items():
        for name in _defined(ast.parse(path.read_text(encoding="utf-8"))):
            where[name].add(module)
    return where


def _allowed(name: str, modules: set[str]) -> bool:
    if name in SAME_MEANING:
        prefixes = SAME_MEANING[name][0]
        return all(m in prefixes or any(p.endswith(".") and m.startswith(p) for p in prefixes) for m in modules)
    return False


def test_the_scan_finds_definitions_and_leaves_re_exports_and_private_names():
    tree = ast.parse("A = 1\nB, C = 2, other.C\n_D = 3\ndef e(): pass\nclass F: pass\nimport g\nfrom h import I\n"
                     "def pytest_configure(config): pass\n")
    assert _defined(tree) == {"A", "B", "e", "F"}
    assert _definitions()["build_report"] == {"ampbench.report.build"}


def test_a_public_name_has_one_meaning():
    twice = {n: m for n, m in _definitions().items() if len(m) > 1}
    unexplained = {n: sorted(m) for n, m in twice.items() if not _allowed(n, m)}
    assert unexplained == {}, "a name defined in several modules: rename one, or list it in SAME_MEANING with why"
    stale = sorted(n for n, (prefixes, _) in SAME_MEANING.items() if n not in twice)
    assert stale == [], "SAME_MEANING lists a name no longer defined twice: drop its entry"


# -- names in comments and docstrings -------------------------------------------------------------

TOKEN = re.compile(r"`{1,2}([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`{1,2}")
FILE_ENDINGS = {"json", "py", "md", "html", "sqlite", "yml", "yaml", "xml", "png", "j2", "css", "txt", "sh", "toml",
                "gz"}
# what a conventional parameter name stands for in prose, where no signature is at hand
INSTANCES = {"benchmark": "pytest_benchmark.fixture.BenchmarkFixture", "record": "ampbench.results.Record"}
OPTIONAL = {"torchao"}  # the fp8 extra (pyproject.toml): its names are checked where it is installed
# (file, name): why it stands although the scan cannot resolve it
UNRESOLVED = {
    ("ampbench/plugin/session.py", "config.stash"): "pytest.Config's stash, an attribute of each instance",
    ("ampbench/plugin/summary.py", "config.stash"): "pytest.Config's stash, an attribute of each instance",
    # for the ratio table's work (issue 40): these comments name modules that no longer exist
    ("ampbench/baselines/file.py", "baseline_schema.ENTRY_SCHEMAS"): "to fix: baselines.schema's entry tables",
    ("ampbench/history/learn.py", "speed_cell._checks"): "to fix: the speed cell's checks, speed.cell",
}


def _texts(path: Path) -> list[tuple[int, str, set[str]]]:
    """(line, text, parameter names in scope) of every comment and docstring of a file."""
    source = path.read_text(encoding="utf-8")
    found = [(t.start[0], t.string, set()) for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                args = node.args if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
                params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]} if args else set()
                found.append((node.body[0].lineno, doc, params))
    return found


def _follow(obj: object, parts: list[str]) -> bool:
    for part in parts:
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif isinstance(obj, type) and any(part in getattr(k, "__annotations__", {}) for k in obj.__mro__):
            return True  # a dataclass field without a default, or an annotated attribute
        elif isinstance(obj, ModuleType) and hasattr(obj, "__path__"):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
            except ImportError:
                return False
        else:
            return False
    return True


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _resolves(token: str, own: ModuleType, modules: list[str]) -> bool:
    parts = token.split(".")
    if parts[0] in vars(own) and _follow(vars(own)[parts[0]], parts[1:]):
        return True  # the file's own names, imports and aliases
    if parts[0] in INSTANCES:
        module, _, cls = INSTANCES[parts[0]].rpartition(".")
        return _follow(getattr(importlib.import_module(module), cls), parts[1:])
    if parts[0] in OPTIONAL and importlib.util.find_spec(parts[0]) is None:
        return True  # an optional package that is not installed here: nothing to hold the name against
    for i in range(len(parts), 0, -1):  # a module, from the top or by the tail of an ampbench module's path
        head = ".".join(parts[:i])
        for name in [head, *(m for m in modules if m.endswith("." + head))]:
            module = _module(name)
            if module is not None and _follow(module, parts[i:]):
                return True
    # a name some module of the package defines
    return any(parts[0] in vars(m) and _follow(vars(m)[parts[0]], parts[1:])
               for m in map(importlib.import_module, modules))


def test_every_dotted_name_a_comment_gives_exists():
    modules = [m for m, p in _modules().items() if p.name != "__main__.py"]
    names, wrong = 0, []
    for module in modules:
        path = _modules()[module]
        own = importlib.import_module(module)
        where = path.relative_to(ROOT).as_posix()
        for line, text, params in _texts(path):
            for token in TOKEN.findall(text):
                if token.rsplit(".", 1)[1].lower() in FILE_ENDINGS or token.split(".")[0] in params:
                    continue
                names += 1
                if (where, token) not in UNRESOLVED and not _resolves(token, own, modules):
                    wrong.append(f"{where}:{line}: {token}")
    assert names > 200, "the scan reads the comments"
    assert wrong == [], "a comment names what does not exist: correct it, or list it in UNRESOLVED with why"


@pytest.mark.parametrize("text, found", [
    ("held by ``speed_cell._checks`` and `baseline_schema.ENTRY_SCHEMAS`", ["speed_cell._checks",
                                                                           "baseline_schema.ENTRY_SCHEMAS"]),
    ("a file ``baselines/x.json``, a call ``run()``, a bare `name`", []),
])
def test_the_scan_reads_backquoted_dotted_names(text, found):
    assert TOKEN.findall(text) == found


def test_a_name_that_does_not_exist_is_found():
    own = importlib.import_module("ampbench.history.changes")
    modules = [m for m, p in _modules().items() if p.name != "__main__.py"]
    assert _resolves("replay.Replay.moved_from", own, modules)
    assert _resolves("ampbench.fp8.FP8_ALIGNMENT", own, modules)
    assert not _resolves("speed_cell._checks", own, modules)
    assert not _resolves("replay.Replay.no_such_method", own, modules)


# -- the word "reference" -----------------------------------------------------------------------------

# names of the package that say "reference" without standing for a ``tolerance.Reference``, each with why it
# stays: format (the run JSON, a baseline file), which no rename of code changes; docs/glossary.md, "Names in
# code that use a word otherwise", keeps the same list. The fp32 side is fp32_*, the parity mode parity_*.
REFERENCE_FORMAT = {
    "ampbench.results.cells.ConvergenceRecord.reference": "the run JSON's key \"reference\" of a convergence "
                                                          "record (the parity mode), written from its field",
}
REFERENCE_WORD = re.compile("reference", re.IGNORECASE)


def _annotated_reference(annotation: ast.expr | None) -> bool:
    """Whether an annotation names the Reference type (``Reference``, ``Reference | None``, ...)."""
    return annotation is not None and re.search(r"\bReference\b", ast.unparse(annotation)) is not None


def _reference_names(tree: ast.Module, module: str) -> dict[str, bool]:
    """Every public name a module gives with "reference" in it (its top level's, its classes' members and
    fields, its public functions' parameters), by qualified name: whether it stands for a Reference (the
    class itself, or a name its annotation types as one)."""
    found: dict[str, bool] = {}

    def function(node: ast.FunctionDef | ast.AsyncFunctionDef, where: str) -> None:
        if node.name.startswith("_"):
            return
        if REFERENCE_WORD.search(node.name):
            found[f"{where}.{node.name}"] = _annotated_reference(node.returns)
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
            if REFERENCE_WORD.search(arg.arg):
                found[f"{where}.{node.name}({arg.arg})"] = _annotated_reference(arg.annotation)

    def body(nodes: list[ast.stmt], where: str) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                function(node, where)
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                if REFERENCE_WORD.search(node.name):
                    found[f"{where}.{node.name}"] = f"{where}.{node.name}" == "ampbench.tolerance.Reference"
                body(node.body, f"{where}.{node.name}")
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if not node.target.id.startswith("_") and REFERENCE_WORD.search(node.target.id):
                    found[f"{where}.{node.target.id}"] = _annotated_reference(node.annotation)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    for name in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(name, ast.Name) and not name.id.startswith("_") \
                                and REFERENCE_WORD.search(name.id):
                            found[f"{where}.{name.id}"] = False

    body(tree.body, module)
    return found


def test_the_reference_scan_tells_the_type_from_other_senses():
    tree = ast.parse("class Reference: pass\nREFERENCE_SIDE = 'fp32'\n"
                     "class Source:\n    def reference(self, kind: str) -> Reference | None: ...\n"
                     "    reference_name: str = 'fp32'\n"
                     "def check(reference: Reference, over_reference: list[float]) -> None: ...\n")
    assert _reference_names(tree, "ampbench.tolerance") == {
        "ampbench.tolerance.Reference": True, "ampbench.tolerance.REFERENCE_SIDE": False,
        "ampbench.tolerance.Source.reference": True, "ampbench.tolerance.Source.reference_name": False,
        "ampbench.tolerance.check(reference)": True, "ampbench.tolerance.check(over_reference)": False}


def test_reference_names_only_the_reference_type():
    """A name that says "reference" stands for a ``tolerance.Reference`` (docs/glossary.md): the type, or a
    function, field or parameter its annotation types as one; the fp32 side is fp32_*, the parity mode
    parity_*, a baseline source a source. Only the format-bound names of REFERENCE_FORMAT stay otherwise."""
    names: dict[str, bool] = {}
    for module, path in _modules().items():
        names |= _reference_names(ast.parse(path.read_text(encoding="utf-8")), module)
    assert names.get("ampbench.tolerance.Reference") is True, "the scan finds the type"
    other = sorted(n for n, is_type in names.items() if not is_type and n not in REFERENCE_FORMAT)
    assert other == [], "a name says reference for something else: rename it, or list it in REFERENCE_FORMAT with why"
    stale = sorted(n for n in REFERENCE_FORMAT if n not in names)
    assert stale == [], "REFERENCE_FORMAT lists a name the package no longer gives: drop its entry"
