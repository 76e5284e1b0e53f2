"""Cells whose test stopped with an error (in its setup or teardown, or failing for another reason than
its verdict) are failing cells too: each is kept as a record of verdict ``error`` with the error's first
line, so that the terminal summary, the run history and ``ampbench report`` count it where pytest does. A
cell whose entry the run JSON holds (timed among the benchmarks, or untimed beside them) keeps it, its
verdict set to ``error``; one without (a crash before it wrote a record) goes under the run JSON's
``ampbench_errors`` list, with the fields of an entry but no timing, which dashboards reading
``benchmarks`` never see. A pytest plugin, loaded by ``ampbench.plugin``; it acts where ampbench does."""

from __future__ import annotations

from typing import Any

import pytest

from ampbench.plugin import acts
from ampbench.plugin.entries import cell_of, item_entry
from ampbench.results.schema import ERRORS_KEY, KIND_KEY, SCHEMA_KEY, UNTIMED_KEY


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


@pytest.hookimpl(trylast=True, optionalhook=True)  # after entries has moved the untimed cells beside the benchmarks
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    """The cells whose test stopped with an error into the JSON: on their entry where pytest-benchmark
    wrote one, else under ERRORS_KEY."""
    if not acts(config):
        return
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
