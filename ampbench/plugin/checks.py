"""A run keeps its results: before the first cell, every file the run will write is checked and every
option that would leave it without its results is refused (usage errors naming the flag), and so is a
--benchmark-json that would replace one of the suite's own inputs; at the end, pytest-benchmark's JSON and
saved run go to a fallback file, named in the summary, where their own path cannot be written, and the
session fails, the JSON an earlier run left at that path removed so that no later step reads it as this
run's. A refused session (a usage error after the session started) writes no JSON and leaves none from
before. A pytest plugin, loaded by ``ampbench.plugin``; it acts where ampbench does
(``ampbench.plugin.acts``).

This module imports none of the modules ``ampbench.plugin`` loads after it (``entries``) at its top:
pytest marks each for assertion rewriting as it loads it, and one imported before then is not rewritten
and warns in every pytest run of the environment (an error under ``-W error``)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import pytest

from ampbench.files import paths
from ampbench.files.write import unwritable_reason, write_text_atomic
from ampbench.outputs import SQLITE_SIDE_FILES, replaced_input
from ampbench.plugin import acts
from ampbench.plugin.options import follows

# lines for the end of the session: where results went that could not go where they were asked to
FALLBACK_KEY = pytest.StashKey[list]()
LOST_KEY = pytest.StashKey[bool]()  # a results file was not written where asked: the session fails


def _refuse_lost_results(opt: argparse.Namespace) -> None:
    """Options under which the tests pass and the results vanish. pytest-xdist's workers are refused
    where they would run cells (``workers_problem``, at collection): other tests run under them."""
    if getattr(opt, "benchmark_disable", False) and getattr(opt, "benchmark_json", None) is not None:
        raise pytest.UsageError(
            f"--benchmark-disable with --benchmark-json {opt.benchmark_json}: a disabled benchmark writes no JSON; "
            "drop one of them")
    if getattr(opt, "benchmark_skip", False):
        raise pytest.UsageError(
            "--benchmark-skip: every ampbench cell is a benchmark, so it would skip them all and pass having "
            "measured nothing; choose cells with --perf-models, --perf-precisions or -k instead")


def _storage_folder(opt: argparse.Namespace) -> Path | None:
    """The folder --benchmark-save and --benchmark-autosave write to, where it is a local one."""
    if not (getattr(opt, "benchmark_save", None) or getattr(opt, "benchmark_autosave", None)):
        return None
    storage = str(getattr(opt, "benchmark_storage", "") or "")
    if "://" in storage and not storage.startswith("file://"):
        return None  # a server: nothing to probe here
    return Path(storage.removeprefix("file://") or ".")


def output_problems(opt: argparse.Namespace) -> list[str]:
    """One usage error per output path of the run that cannot be written, each naming its flag."""
    problems = []
    target = getattr(opt, "benchmark_json", None)
    if isinstance(target, (str, os.PathLike)):  # before 5.3, pytest-benchmark opened it at parsing
        reason = unwritable_reason(Path(target), make_parents=False)  # it writes into the folder as it is
        if reason:
            problems.append(f"--benchmark-json {target}: {reason}")
    folder = _storage_folder(opt)
    if folder is not None:
        reason = unwritable_reason(folder / ".ampbench-save-check.json")  # the folder is made where missing
        if reason:
            save = getattr(opt, "benchmark_save", None)
            problems.append(f"{f'--benchmark-save {save}' if save else '--benchmark-autosave'}: {reason}")
    xml = getattr(opt, "xmlpath", None)
    if xml:
        reason = unwritable_reason(Path(xml))  # pytest makes the folder
        if reason:
            problems.append(f"--junitxml {xml}: {reason}")
    return problems


def _history_files(store: str | None) -> list[Path]:
    """The files of the SQLite store --perf-history names (with SQLite's own beside it); none for a
    server, or with the history off."""
    if not store or store == "off":
        return []
    from ampbench.history.connect import HistoryError, parse_url, sqlite_path

    try:
        path = sqlite_path(parse_url(store))
    except HistoryError:
        return []  # the option's own check says what is wrong with it
    return [] if path is None else [Path(f"{path}{suffix}") for suffix in ("", *SQLITE_SIDE_FILES)]


def overwrite_problems(config: pytest.Config) -> list[str]:
    """A --benchmark-json that would replace one of the suite's own inputs (``outputs.replaced_input``):
    the run history, a file of the baseline folder or of ampbench's state folder (.ampbench/), or an
    existing file that is no earlier run's JSON (a test module, a database)."""
    opt, root = config.option, config.rootpath
    target = getattr(opt, "benchmark_json", None)
    if not isinstance(target, (str, os.PathLike)):
        return []
    files = [("the run history", path) for path in _history_files(getattr(opt, "perf_history", None))]
    folders = [("the baseline folder", root / paths.BASELINE_DIR),
               ("ampbench's state folder", root / paths.HISTORY.parent)]
    baseline_dir = getattr(opt, "perf_baseline_dir", None)
    if baseline_dir is not None:
        folders.insert(0, ("the baseline folder (--perf-baseline-dir)", Path(baseline_dir)))
    what = replaced_input(Path(target), files, folders)
    return [f"--benchmark-json {target} would overwrite {what}; give a path of its own"] if what else []


CPU_WHEELS = "https://download.pytorch.org/whl/cpu"
_PAIR_CHECKED = pytest.StashKey[bool]()


def torch_pair_problem(load: Callable[[str], Any] = importlib.import_module) -> str | None:
    """Why torch and torchvision do not work together, or None. A torchvision built against another torch
    build (pip falling back to another index for one of them) has no operators: importing it fails, and
    every cell that builds a torchvision model or loads data fails the same way, one traceback each."""
    try:
        load("torchvision.ops")
    except ModuleNotFoundError:
        return None  # not installed at all: the cells that need it say so
    except (RuntimeError, ImportError, AttributeError) as exc:
        versions = {}
        for name in ("torch", "torchvision"):
            try:
                versions[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                versions[name] = "(not installed)"
        cause = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return (f"torch {versions['torch']} and torchvision {versions['torchvision']} do not work together "
                f"({cause}): torchvision was built against another torch. Install the pair from one index in one "
                f"command: pip install --force-reinstall torch torchvision --index-url {CPU_WHEELS} (CPU only), "
                "or pip install --force-reinstall torch torchvision (PyPI's builds, CUDA included); to pin, pin "
                "both, e.g. \"torch==2.11.*\" \"torchvision==0.26.*\"")
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if acts(config):
        check_run(config)


def workers_problem(config: pytest.Config, collected: list) -> str | None:
    """Why `collected` (what a collector collected) may not run on pytest-xdist's worker, or None: a worker
    that runs cells keeps their results to itself (pytest-benchmark writes no JSON, the summary and the
    history see no cell), and cells timed side by side share the device they are timed on. The
    harness's own tests, which are no cells, run under -n."""
    if not hasattr(config, "workerinput"):  # no worker: the run is not spread (-n 0, or no pytest-xdist)
        return None
    from ampbench.plugin.entries import cell_of  # loaded by ampbench.plugin before any hook runs

    cells = [item.nodeid for item in collected if isinstance(item, pytest.Function) and cell_of(item) is not None]
    if not cells:
        return None
    more = f" and {len(cells) - 1} more cell(s) of ampbench" if len(cells) > 1 else ", an ampbench cell,"
    return (f"{cells[0]}{more} cannot run on pytest-xdist's workers (-n, --tx): they would time cells side by side "
            "on one device and keep the results to themselves (no JSON, no summary, no history); run the cells "
            "without -n (other tests may run with it)")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """On a pytest-xdist worker, a module (or class) of cells fails to collect, saying why
    (``workers_problem``): its cells never run, and the worker's other tests do."""
    report = yield
    if report.passed and isinstance(report.result, list) and acts(collector.config):
        problem = workers_problem(collector.config, report.result)
        if problem:
            report.outcome, report.longrepr, report.result = "failed", problem, []
    return report


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """A broken torch/torchvision pair as one usage error before the first test, not a traceback per test.
    Checked where the run needs torchvision (it collected cells, or a test module failed to import), so
    that a run of neither pays for importing it."""
    if not acts(config) or "torchvision.ops" in sys.modules:
        return
    from ampbench.plugin.entries import cell_of

    if session.testsfailed or any(cell_of(item) is not None for item in items):
        config.stash[_PAIR_CHECKED] = True
        problem = torch_pair_problem()
        if problem:
            raise pytest.UsageError(problem + "; nothing was measured")


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: no other wrapper sees the run end
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A test that imports torchvision as it runs finds a broken pair only then: at the first failure the
    pair is checked, and a broken one ends the run with its usage error instead of a traceback a test."""
    result = yield
    config = item.config
    if not item.session.testsfailed or config.stash.get(_PAIR_CHECKED, False) or not acts(config):
        return result
    config.stash[_PAIR_CHECKED] = True
    problem = None if "torchvision.ops" in sys.modules else torch_pair_problem()
    if problem:
        pytest.exit(problem + "; the run stops here", returncode=pytest.ExitCode.USAGE_ERROR)
    return result


def check_run(config: pytest.Config) -> None:
    """The usage error of a run that would lose its results, before anything is measured."""
    if getattr(config.option, "help", False) or hasattr(config, "workerinput"):
        return
    # by its module: loaded by entry point it is named "benchmark", by -p after its module
    if not any(getattr(p, "__name__", None) == "pytest_benchmark.plugin" for p in config.pluginmanager.get_plugins()):
        raise pytest.UsageError(
            "pytest-benchmark's plugin is off in this run (-p no:benchmark, or PYTEST_DISABLE_PLUGIN_AUTOLOAD "
            "without -p pytest_benchmark.plugin): ampbench's cells are its benchmarks and keep their results in "
            "its JSON; run with it on")
    _refuse_lost_results(config.option)
    # a node that only follows node 0's launches writes none of the run's files: node 0's are the run's
    problems = [] if follows(config) else [*output_problems(config.option), *overwrite_problems(config)]
    if problems:
        raise pytest.UsageError("; ".join(problems) + "; nothing was measured")


def fallback_paths(requested: Path, pid: int | None = None) -> list[Path]:
    """Where results go when `requested` cannot be written, in order: beside it, then the working
    folder, then the temporary folder."""
    pid = os.getpid() if pid is None else pid
    requested = Path(os.path.abspath(requested))
    name = f"ampbench-results-{pid}.json"
    beside = ([requested.with_name(f"{requested.stem}-{pid}{requested.suffix or '.json'}")]
              if requested.parent.is_dir() else [])
    return [*beside, Path.cwd() / name, Path(tempfile.gettempdir()) / name]


def save_or_fall_back(write: Callable[[], None], text: str, requested: Path, what: str,
                      tell: Callable[[str], None]) -> Path | None:
    """`write()` of `requested`, or, where it fails, `text` written to the first fallback path that
    takes it, and `tell` a line saying where (`what`: the flag and its value); the path written, or None
    where no fallback took it either (the line says so)."""
    try:
        write()
        return requested
    except OSError as exc:
        why = exc.strerror or str(exc)
    tried = fallback_paths(requested)
    for path in tried:
        try:
            write_text_atomic(path, text)
        except OSError:
            continue
        tell(f"ampbench: {what} could not be written ({why}); the results are in {path}")
        return path
    tell(f"ampbench: {what} could not be written ({why}), nor could any fallback ({', '.join(map(str, tried))}): "
         "the results are lost")
    return None


def _dumps(output_json: dict) -> str:
    """The JSON text pytest-benchmark writes."""
    from pytest_benchmark.utils import safe_dumps

    return safe_dumps(output_json, ensure_ascii=True, indent=4)


def drop_stale(path: Path) -> str:
    """Remove the file an earlier run left at `path`, so that no later step reads it as this run's; what
    became of it, in words ('' where there was none). A folder there is left alone."""
    if not (path.is_symlink() or path.is_file()):
        return ""
    try:
        path.unlink()  # a link itself, not the file it leads to
    except OSError as exc:
        return f"; the earlier {path} could not be removed ({exc.strerror or exc}) and is NOT this run's"
    return f"; the earlier {path} was removed"


def _refused(session: pytest.Session) -> bool:
    """Whether the session ended in a usage error after it started (cells collected under a broken
    torch/torchvision pair, say): nothing it measured holds."""
    return session.exitstatus == pytest.ExitCode.USAGE_ERROR


def _keep_json(bench: Any, session: pytest.Session, tell: Callable[[str], None]) -> None:
    """--benchmark-json: written atomically (through a symlink to its real file), else to a fallback, the
    session failing and the earlier file at the path removed; none written for a refused session."""
    config = session.config

    def save_json(output_json: dict) -> None:
        target = Path(bench.json)
        if _refused(session):
            tell(f"ampbench: --benchmark-json {target} not written: the run was refused{drop_stale(target)}")
            return
        text = _dumps(output_json)
        written = save_or_fall_back(lambda: write_text_atomic(target, text), text, target,
                                    f"--benchmark-json {target}", tell)
        if written == target:
            bench.logger.info(f"Wrote benchmark data in: {written}", purple=True)
            return
        config.stash[LOST_KEY] = True
        lines = config.stash[FALLBACK_KEY]
        lines[-1] += drop_stale(target) + "; the run fails"

    bench.save_json = save_json


def _keep_saved_run(storage: Any, session: pytest.Session, tell: Callable[[str], None]) -> None:
    """--benchmark-save and -autosave into a folder: to a fallback where the folder fails, the session
    failing; none saved for a refused session."""
    save, config = storage.save, session.config

    def save_run(output_json: dict, name: str) -> None:
        what = f"the saved run {name} (--benchmark-storage {storage})"
        if _refused(session):
            tell(f"ampbench: {what} not written: the run was refused")
            return
        requested = Path(str(storage)) / f"{name}.json"
        if save_or_fall_back(lambda: save(output_json, name), _dumps(output_json), requested, what, tell) != requested:
            config.stash[LOST_KEY] = True
            config.stash[FALLBACK_KEY][-1] += "; the run fails"

    storage.save = save_run


def pytest_sessionstart(session: pytest.Session) -> None:
    """Wrap pytest-benchmark's writers, once its own configure (its last) has made them: hours of cells
    are never lost to a path that fails at the end."""
    config = session.config
    bench = config.pluginmanager.get_plugin("pytest-benchmark")  # the session, as registered
    if bench is None or not acts(config):
        return
    tell = lambda line: config.stash.setdefault(FALLBACK_KEY, []).append(line)  # noqa: E731
    if hasattr(bench, "save_json") and isinstance(bench.json, (str, os.PathLike)):  # before 5.3: an open file
        _keep_json(bench, session, tell)
    storage = getattr(bench, "storage", None)
    if storage is not None and hasattr(storage, "get"):  # a folder (a FileStorage), not a server
        _keep_saved_run(storage, session, tell)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A results file not written where asked fails the session (pytest-benchmark wrote its files in its
    own wrapper of this hook, before this runs): a step after it must not go on as if it were there."""
    if session.config.stash.get(LOST_KEY, False) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    for line in config.stash.get(FALLBACK_KEY, []):
        terminalreporter.write_line(line, red=True, bold=True)
