"""What the run JSON (``--benchmark-json``, ``--benchmark-save``) says of each cell to the tools that read
pytest-benchmark's format (its own ``compare``, github-action-benchmark, Bencher):

- every cell's entry has a ``group``: its kind, from the test's ``benchmark`` marker (``speed``,
  ``memory``, ``convergence``, ``input pipeline``, ``distributed``, ``underflow``), and its model, added
  here at collection (``speed: resnet50``);
- every cell's entry has the ``params`` ``model_name`` and ``mode_name`` (``results.schema.CELL_PARAMS``), which a
  distributed cell's test names in one ``dist_cell`` (model, mode, comm variant), kept beside them: so
  ``pytest-benchmark compare --group-by param:mode_name`` groups every cell. The other parameters are
  their kind's own axes (a speed cell's ``compiled_cell``, a distributed cell's ``dist_cell``): grouped
  by one of them, a run of several kinds has entries without it, and ``--group-by group`` or
  ``param:mode_name`` is the grouping for such a run;
- ``benchmarks`` holds only entries whose figures are training-step times (``Record.times_steps``);
  a cell that times none (a convergence run, a loader measurement, a memory cell that searched no
  largest batch) keeps its entry, without ``stats``, in the document's ``ampbench_untimed`` list, where
  those tools do not look (every one of them requires ``stats`` of each entry of ``benchmarks``);
- a run of such cells only is written all the same (pytest-benchmark writes no file without a timed
  benchmark);
- a cell whose test stopped with an error (in its setup or teardown, or failing for another reason than
  its verdict) is a failing cell too: it is kept as a record of verdict ``error`` with the error's first
  line, so that the terminal summary, the run history and ``ampbench report`` count it where pytest does.
  A cell whose entry the JSON holds (timed among the benchmarks, or untimed beside them) keeps it, its
  verdict set to ``error``; one without (a crash before it wrote a record) goes under the JSON's
  ``ampbench_errors`` list, with the fields of an entry but no timing, which dashboards reading
  ``benchmarks`` never see.
"""

from __future__ import annotations

from typing import Any

import pytest

from ampbench.plugin import acts
from ampbench.plugin.options import follows
from ampbench.results.run import entry_group, timed_entry
from ampbench.results.schema import ERRORS_KEY, KIND_KEY, SCHEMA_KEY, UNTIMED_KEY, with_cell_params

_KEPT = pytest.StashKey[list]()  # the entry of every cell that wrote a record, in run order
_OWN_INFO = pytest.StashKey[dict]()  # the extra_info of a cell that times no step (no benchmark fixture)


def cell_of(item: pytest.Item) -> tuple[str, str] | None:
    """(model, mode) of a cell test's item: its ``model_name`` and ``mode_name`` (``with_cell_params``);
    None for a test that is no cell."""
    params = with_cell_params(getattr(getattr(item, "callspec", None), "params", {}))
    model, mode = params.get("model_name"), params.get("mode_name")
    return (model, mode) if isinstance(model, str) and isinstance(mode, str) else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A cell's group: the kind its test's ``benchmark`` marker names, and the cell's model."""
    if not acts(config):
        return
    for item in items:
        marker, cell = item.get_closest_marker("benchmark"), cell_of(item)
        model = cell[0] if cell else None
        kind = marker.kwargs.get("group") if marker is not None else None
        if isinstance(kind, str) and model is not None and marker is not None:  # a kind comes from a marker
            item.add_marker(pytest.mark.benchmark(**{**marker.kwargs, "group": entry_group(kind, model)}), append=False)


def cell_entry(request: pytest.FixtureRequest) -> dict:
    """The extra_info a cell writes its record into, kept (``keep_entry``): its benchmark's, where the
    test itself takes pytest-benchmark's fixture to time steps; else a dict of its own on the item. A cell
    that times nothing does not take the fixture: an unused one warns, an error under ``-W error``."""
    if "benchmark" in request.fixturenames:
        info = request.getfixturevalue("benchmark").extra_info
    else:
        info = request.node.stash.setdefault(_OWN_INFO, {})
    keep_entry(request.config, request.node, info)
    return info


def item_entry(item: pytest.Item) -> dict | None:
    """The extra_info the cell of `item` writes into (``cell_entry``); None before it has one."""
    bench = (getattr(item, "funcargs", None) or {}).get("benchmark")
    info = getattr(bench, "extra_info", None)
    return info if isinstance(info, dict) else item.stash.get(_OWN_INFO, None)


def keep_entry(config: pytest.Config, node: pytest.Item, extra_info: dict) -> None:
    """Keep a cell's entry (its extra_info by reference: what the cell and the plugins write into it later
    is kept too), for the JSON's ``ampbench_untimed`` list should pytest-benchmark list none of it."""
    marker = node.get_closest_marker("benchmark")
    callspec = getattr(node, "callspec", None)
    config.stash.setdefault(_KEPT, []).append({
        "group": marker.kwargs.get("group") if marker is not None else None,
        "name": node.name,
        "fullname": node.nodeid,
        "params": callspec.params if callspec is not None else None,
        "param": callspec.id if callspec is not None else None,
        "extra_info": extra_info,
    })


def _untimed(config: pytest.Config, benchmarks: list[dict]) -> list[dict]:
    """The entries of the cells that pytest-benchmark's `benchmarks` lacks or lists without step times,
    in run order, without stats."""
    kept = config.stash.get(_KEPT, [])
    listed = {b.get("fullname") for b in benchmarks}
    moved = [{k: v for k, v in b.items() if k not in ("stats", "options")} for b in benchmarks if not timed_entry(b)]
    never = [dict(e) for e in kept if e["fullname"] not in listed and SCHEMA_KEY in e["extra_info"]]
    order = {e["fullname"]: i for i, e in enumerate(kept)}
    return sorted(moved + never, key=lambda e: order.get(e.get("fullname"), len(order)))


@pytest.hookimpl(optionalhook=True)  # pytest-benchmark's hook: a run without its plugin knows no such hook
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    if not acts(config):
        return
    untimed = _untimed(config, output_json["benchmarks"])
    output_json["benchmarks"] = [b for b in output_json["benchmarks"] if timed_entry(b)]
    if untimed:
        output_json[UNTIMED_KEY] = untimed
    for entry in (*output_json["benchmarks"], *untimed):
        if isinstance(entry, dict) and "params" in entry:
            entry["params"] = with_cell_params(entry["params"])
    _write_errors(config, output_json)  # once the untimed cells are beside the benchmarks


def _save_untimed_only(bench: Any, config: pytest.Config, cells: bool) -> None:
    """pytest-benchmark's saving, through its own hooks, of a run none of whose cells it timed. A run of no
    cell at all (every test skipped: memory cells on the CPU) still writes the --benchmark-json it was
    asked for, so that the step reading it says what the run did; it is not saved as a run."""
    save = (bench.save or bench.autosave) if cells else False
    if not (save or bench.json) or (not cells and follows(config)):
        return  # a following node's run holds no cell: node 0's JSON is the run's, even on a shared disk
    machine_info = bench.get_machine_info()
    commit_info = config.hook.pytest_benchmark_generate_commit_info(config=config)
    config.hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit_info)
    writers = [(True, bench.save_json)] if bench.json else []
    if save:
        writers.append((bench.save_data, lambda output: bench.storage.save(output, save)))
    for include_data, write in writers:
        output = config.hook.pytest_benchmark_generate_json(config=config, benchmarks=[], include_data=include_data,
                                                            machine_info=machine_info, commit_info=commit_info)
        config.hook.pytest_benchmark_update_json(config=config, benchmarks=[], output_json=output)
        write(output)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Where no cell handed pytest-benchmark a timing, it would write nothing ("no benchmarks have been
    run"): the cells' records are written all the same."""
    config = session.config
    bench = config.pluginmanager.get_plugin("pytest-benchmark")  # the session, as registered
    if bench is None or not acts(config) or not hasattr(bench, "handle_saving"):
        return
    handle = bench.handle_saving

    def handle_saving() -> None:
        if bench.benchmarks or bench.disabled:
            return handle()
        _save_untimed_only(bench, config, any(SCHEMA_KEY in e["extra_info"] for e in config.stash.get(_KEPT, [])))

    bench.handle_saving = handle_saving


# -- cells whose test stopped with an error ---------------------------------------------------------

def _first_line(report: pytest.TestReport, call: pytest.CallInfo) -> str:
    text = call.excinfo.exconly() if call.excinfo is not None else str(report.longrepr)
    return next((line.strip() for line in text.splitlines() if line.strip()), "no message")


def _identity(item: pytest.Item) -> dict[str, Any]:
    """What the cell wrote of itself into its benchmark's extra_info before it stopped (kind, model, mode)."""
    info = item_entry(item)
    return dict(info) if isinstance(info, dict) and SCHEMA_KEY in info else {}


def error_record(item: pytest.Item, cell: tuple[str, str], message: str, device: str):
    """The record of a cell whose test stopped with `message`: the kind it wrote of itself, else the one
    its test's name says (``test_memory``: memory), else a kind of its own named after the test."""
    from ampbench.results import OtherRecord, Verdict, record_type

    info = _identity(item)
    kind = info.get(KIND_KEY)
    if not kind:
        assert isinstance(item, pytest.Function), "a cell's item has a callspec: a test function's"
        kind = item.originalname.removeprefix("test_")
    record = record_type(kind).from_info(info, item.nodeid.split("::")[-1])
    if isinstance(record, OtherRecord):
        record = record.with_values(other_kind=kind)
    model, mode = cell
    return record.with_values(model=record.model or model, mode=record.mode or mode,
                              device=record.device or device, verdict=Verdict.ERROR, message=message)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    if not report.failed or hasattr(report, "wasxfail"):
        return
    from ampbench.plugin.session import SETTINGS_KEY

    settings = item.config.stash.get(SETTINGS_KEY, None)
    cell = cell_of(item)
    if settings is None or cell is None:
        return  # a run where ampbench does not act, or a test that is no cell
    from ampbench.plugin import summary
    from ampbench.results import Verdict

    kept = [r for nodeid, r in item.config.stash.get(summary.RECORDS_KEY, []) if nodeid == item.nodeid]
    if kept and kept[-1].verdict is not None and kept[-1].verdict.needs_a_look:
        return  # the test failed on its verdict (or warned, under --perf-strict), which says why
    # a teardown's error (a warning under -W error, a fixture that failed to clean up) fails the cell too
    where = {"setup": "error in setup", "call": "the test failed"}.get(call.when, f"error in {call.when}")
    message = f"{where}: {_first_line(report, call)}"
    if kept:  # its record was kept, then the test stopped: its figures reached no verdict that holds
        summary.annotate(item.config, item.nodeid, verdict=Verdict.ERROR, message=message)
    else:
        summary.keep_record(item.config, item.nodeid, error_record(item, cell, message, str(settings.device)))


def _write_errors(config: pytest.Config, output_json: dict) -> None:
    """The cells whose test stopped with an error into the JSON: on their entry where pytest-benchmark
    wrote one, else under ERRORS_KEY."""
    from ampbench.plugin import summary
    from ampbench.results import Verdict

    entries = {b.get("fullname"): b for key in ("benchmarks", UNTIMED_KEY) for b in output_json.get(key, [])
               if isinstance(b, dict)}
    for nodeid, record in config.stash.get(summary.RECORDS_KEY, []):
        if record.verdict is not Verdict.ERROR:
            continue
        entry = entries.get(nodeid)
        if entry is not None:
            entry["extra_info"] = {**(entry.get("extra_info") or {}), **record.to_info(only_set=True)}
        else:
            output_json.setdefault(ERRORS_KEY, []).append(
                {"name": record.test_id or nodeid.split("::")[-1], "fullname": nodeid,
                 "extra_info": record.to_info(only_set=True)})
