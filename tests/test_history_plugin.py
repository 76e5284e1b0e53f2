"""The history's pytest plugin (``-p ampbench.plugin.history``, as ampbench.plugin loads it): a session's
cells appended at its end under the id its benchmark JSON carries, the smoke pass off unless a store is
named, a bad, unreachable, read-only or full store a usage error before the first cell, and a store
failing at the end costing no result: the run saved for a later import, the exit status 1."""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3

# psycopg before any in-process run: pytester drops the modules a run was first to import, and SQLAlchemy's
# PostgreSQL dialect would then hold a psycopg whose exceptions are not the ones later raised
import psycopg  # noqa: F401
import pytest
import sqlalchemy as sa
import torch
from sqlalchemy.engine import make_url

from ampbench.history.ingest import import_runs
from ampbench.history.schema import SCHEMA_VERSION
from ampbench.history.store import open_history
from ampbench.plugin import history as plugin

pytest_plugins = ("pytester", "history_stores")

CELLS = """
import os
import pytest
from ampbench.plugin import summary
from ampbench.results import RatioFigures, SpeedRecord, Verdict

@pytest.mark.parametrize("mode", ["fp32", "amp_bf16"])
def test_speed(request, benchmark, mode):
    record = SpeedRecord(model="mlp", mode=mode, device="cpu", verdict=Verdict.PASS,
                         ratios={"device": RatioFigures(speedup=1.5, speedup_low=1.4, speedup_high=1.6)})
    benchmark.extra_info.update(record.to_info())
    summary.keep_record(request.config, request.node.nodeid, record)
    benchmark.pedantic(lambda: None, rounds=1)
    if os.environ.get("BREAK_STORE"):  # the store is lost while the cells run
        with open(os.environ["BREAK_STORE"], "wb") as f:
            f.write(b"no longer a database " * 200)
"""


@pytest.fixture
def session(pytester, monkeypatch):
    """Run CELLS under the plugin on the CPU: (pytest's result, the benchmark JSON)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in plugin.LABEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(CELLS)
    pytester.makeini("[pytest]\nrequired_plugins = ampbench\n")  # a run of the suite: the plugin acts
    out = pytester.path / "run.json"

    def run(*args: str):
        result = pytester.runpytest_inprocess("-p", "ampbench.plugin.history", "-p", "no:cacheprovider",
                                              f"--benchmark-json={out}", *args)
        return result, json.loads(out.read_text()) if out.exists() else None

    return run


def test_a_session_is_appended_under_the_id_its_json_carries(session, pytester, store_url, monkeypatch):
    monkeypatch.setenv("CI_COMMIT_SHA", "0123abcd")
    result, document = session("--perf-history", store_url)
    result.assert_outcomes(passed=2)
    machine = document["machine_info"]["ampbench"]
    history = open_history(store_url)
    result.stdout.fnmatch_lines([f"ampbench: run {machine['run_id']} (2 cells) appended to the history {history.name}"])
    (run,) = history.runs()
    assert (run.id, run.label, run.smoke, run.cells, run.source) == (machine["run_id"], "0123abcd", True, 2, "pytest")
    assert run.suite_revision == machine["suite_revision"] and run.host_load["cpus"] >= 1
    assert machine["label"] == "0123abcd" and run.software["torch"] == torch.__version__
    (point,) = history.series("cpu", "test_speed[amp_bf16]", "device_speedup").points
    # a smoke run counts for nothing
    assert (point.value, point.low, point.high, point.counts) == (1.5, 1.4, 1.6, False)
    (again,) = import_runs(history, [pytester.path / "run.json"])
    assert not again.appended and again.run_id == run.id


def test_the_label_option_wins_over_the_ci_variable(session, tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_SHA", "feed")
    store = tmp_path / "h.sqlite"
    result, _ = session("--perf-history", str(store), "--perf-label", " stack 7 ")
    result.assert_outcomes(passed=2)
    assert open_history(str(store)).runs()[0].label == "stack 7"


def test_the_smoke_pass_keeps_no_history_unless_one_is_named(session, pytester):
    result, document = session()
    result.assert_outcomes(passed=2)
    assert "appended" not in result.stdout.str()
    assert not (pytester.path / ".ampbench").exists()
    assert document["machine_info"]["ampbench"]["run_id"], "the JSON carries its run id for a later import"
    result, _ = session("--perf-history", "off")
    assert result.ret == 0 and not (pytester.path / ".ampbench").exists()


@pytest.mark.parametrize("args, expected", [
    (["--perf-history", "postgresq://u:pw@localhost/db"],
     "argument --perf-history: history store postgresq://u:***@localhost/db: unknown database 'postgresq'"),
    (["--perf-history", "postgresql://u:pw@127.0.0.1:1/db"],
     "--perf-history: history postgresql+psycopg://u:***@127.0.0.1:1/db: cannot be reached: connection failed"),
    (["--perf-label", " "], "argument --perf-label: expects one line of 1 to 200 characters"),
], ids=["misspelt", "unreachable", "empty label"])
def test_a_bad_store_or_label_is_a_usage_error_before_the_first_cell(session, args, expected):
    result, document = session(*args)
    assert result.ret == 4 and document is None
    assert expected in result.stderr.str() and result.stderr.str().count(args[0]) == 1, result.stderr.str()
    assert "pw" not in result.stderr.str()


@pytest.mark.parametrize("url", ["postgresql:/x", "sqlite:/x", "postgres://"])
def test_a_misspelt_store_url_is_a_usage_error_making_no_folder(session, pytester, url):
    before = set(pytester.path.iterdir())
    result, document = session("--perf-history", url)
    assert result.ret == 4 and document is None
    assert "argument --perf-history: history store " in result.stderr.str() and "did you mean " in result.stderr.str()
    assert set(pytester.path.iterdir()) == before, "a misspelt URL read as a path made a folder"


def test_a_store_of_a_newer_schema_is_a_usage_error(session, tmp_path):
    store = tmp_path / "h.sqlite"
    open_history(str(store)).release()
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    result, _ = session("--perf-history", str(store))
    assert result.ret == 4
    assert (f"--perf-history: history {store}: written with history schema 99; this ampbench reads schema "
            f"{SCHEMA_VERSION}") in result.stderr.str()


def _refuse_writes(url: str) -> None:
    """Make the store at `url` one that reads and takes no write, as a read-only file or a standby does."""
    if url.startswith("sqlite"):
        open_history(url).release()
        path = make_url(url).database
        with open(path, "r+b") as f:  # a write version above 2 (a newer SQLite's format): read-only, to root too
            f.seek(18)
            f.write(bytes([3]))
        return
    engine = sa.create_engine(make_url(url).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        open_history(url).release()
        conn.exec_driver_sql(f'ALTER DATABASE "{make_url(url).database}" SET default_transaction_read_only = on')
    engine.dispose()


def test_a_store_that_takes_no_writes_is_a_usage_error_before_the_first_cell(session, store_url):
    _refuse_writes(store_url)
    result, document = session("--perf-history", store_url)
    assert result.ret == 4 and document is None, result.stdout.str() + result.stderr.str()
    assert "--perf-history: history " in result.stderr.str() and "nothing was measured" in result.stderr.str()
    assert "read-only" in result.stderr.str(), result.stderr.str()


def test_a_full_disk_under_the_store_is_a_usage_error_before_the_first_cell(session, tmp_path, monkeypatch):
    store = tmp_path / "h.sqlite"
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=3 * 2**20))
    result, document = session("--perf-history", str(store))
    assert result.ret == 4 and document is None
    assert f"--perf-history: history {store}: its disk is full (3.0 MiB free, and a run may need 32 MiB)" \
           in result.stderr.str(), result.stderr.str()


def test_a_store_failing_at_the_end_keeps_the_run_and_fails_the_session(session, pytester, tmp_path, monkeypatch):
    store = tmp_path / "h.sqlite"
    monkeypatch.setenv("BREAK_STORE", str(store))
    result, document = session("--perf-history", str(store))
    result.assert_outcomes(passed=2)
    assert result.ret == 1 and len(document["benchmarks"]) == 2, "the JSON as without a history, the status not 0"
    run_id = document["machine_info"]["ampbench"]["run_id"]
    saved = pytester.path / ".ampbench" / "unappended" / f"run-{run_id}.json"
    result.stdout.fnmatch_lines([f"ampbench: run {run_id} NOT appended: history {store}: not a usable SQLite "
                                 f"database * saved to {saved}: load it with `ampbench history import {saved}`; "
                                 "exit status 1"])
    later = open_history(str(tmp_path / "later.sqlite"))
    (imported,) = import_runs(later, [saved])
    assert (imported.run_id, imported.appended, imported.cells) == (run_id, True, 2)


def test_the_options_follow_the_suites_conventions():
    options = {}

    class Group:
        @staticmethod
        def addoption(*names, **kwargs):
            options[names[0]] = kwargs

    class Parser:
        @staticmethod
        def getgroup(*args, **kwargs):
            return Group

    plugin.pytest_addoption(Parser)
    assert set(options) == {"--perf-history", "--perf-label"}
    for flag, kw in options.items():
        assert kw["metavar"] and "(default: " in kw["help"] and kw["help"].endswith(")"), flag
    assert options["--perf-history"]["help"].endswith(
        "(default: .ampbench/history.sqlite under the rootdir; off on the CPU smoke pass)")
    assert plugin.history_option("OFF") == "off" and plugin.history_option("x.sqlite") == "x.sqlite"
    with pytest.raises(argparse.ArgumentTypeError, match="an in-memory SQLite database keeps nothing"):
        plugin.history_option("sqlite://")


def test_a_cell_slowed_on_purpose_reaches_the_history_as_injected(session, tmp_path):
    """ampbench.slowdown tags a cell once its test has run, after the cell kept its record: the history
    must hold the tag too, or a slowed run would count as a sample of the cell's level and noise."""
    store = tmp_path / "h.sqlite"
    result, document = session("--perf-history", str(store), "-p", "ampbench.slowdown",
                               "--perf-slowdown", "mlp:fp32:0.05")
    result.assert_outcomes(passed=2)
    assert {b["name"]: b["extra_info"].get("injected_slowdown") for b in document["benchmarks"]} == {
        "test_speed[fp32]": 0.05, "test_speed[amp_bf16]": None}
    with sqlite3.connect(store) as db:
        rows = dict(db.execute("SELECT test_id, injected FROM cells"))
    assert rows == {"test_speed[fp32]": 1, "test_speed[amp_bf16]": 0}
