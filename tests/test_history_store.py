"""The history store on SQLite and on a real PostgreSQL server: a run in and its series out, what counts
and where a level restarts, acceptances, the schema version (an older store migrated, a newer refused),
and each bad store as a one-line error naming it."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from ampbench.cli import main
from ampbench.history.connect import parse_url
from ampbench.history.ingest import file_run
from ampbench.history.schema import SCHEMA_VERSION, build_metadata
from ampbench.history.store import HistoryError, open_history
from ampbench.results import Verdict
from history_runs import H100, cells_of, speed_record, speed_run

pytest_plugins = ("history_stores",)

DATA = Path(__file__).parent / "data"


def test_a_saved_run_comes_back_as_it_went_in(store_url):
    history = open_history(store_url)
    row = file_run(DATA / "h100_speed_device.json")
    assert history.append(row) is True
    assert history.counts() == (1, 35)
    cell = next(c for c in row.cells if c.test_id == "test_speed[resnet50-amp_bf16]")
    series = history.series(H100, cell.test_id, "device_speedup")
    (point,) = series.points
    device = cell.record["ratios"]["device"]  # the record as the current schema writes it
    assert (point.value, point.low, point.high) == (device["speedup"], device["speedup_low"], device["speedup_high"])
    assert point.run_id == row.id and point.when == "2026-11-23T09:03:34.764057+00:00" and point.counts
    assert history.cells(H100) == sorted(c.test_id for c in row.cells)
    (summary,) = history.runs()
    assert (summary.gpu_slug, summary.cells, summary.failing, summary.source) == (
        "nvidia-h100-80gb-hbm3", 35, 1, "h100_speed_device.json")
    assert summary.software["driver"] == "580.159.04" and summary.card_uuid.startswith("76aea033")
    assert history.kernels(row.id, cell.test_id) == cell.record["kernels"] and cell.record["kernels"]


def test_appending_a_run_and_reading_its_references_takes_well_under_a_second(store_url):
    """The history's share of a `pytest perf/` session: the store checked at the start, a real run of
    35 speed cells appended at the end, and every cell's series read, on a store of 20 earlier runs."""
    row = file_run(DATA / "h100_speed_device.json")
    history = open_history(store_url)
    for n in range(20):
        history.append(dataclasses.replace(row, id=f"earlier-{n}", when=f"2026-01-{n + 1:02d}T00:00:00.000000+00:00"))
    t0 = time.perf_counter()
    open_history(store_url).release()
    assert history.append(row)
    series = history.series_of(H100, "device_speedup", [c.test_id for c in row.cells])
    took = time.perf_counter() - t0
    assert len(series) == 35 and all(len(s.points) == 21 for s in series.values())
    assert took < 1.0, f"{took:.2f} s"


def test_a_run_is_appended_once(store_url):
    history = open_history(store_url)
    run = speed_run("r1", cells_of(3))
    assert history.append(run) is True
    assert history.append(run) is False
    assert history.counts() == (1, 3)


def test_what_counts_and_where_a_level_restarts(store_url):
    history = open_history(store_url)
    cell = ("gpt", "amp_bf16")
    runs = [speed_run("clean", [speed_record(*cell, 2.0)], at=0),
            speed_run("failed", [speed_record(*cell, 1.8, Verdict.REGRESSION)], at=1),
            speed_run("slowed", [speed_record(*cell, 1.9, injected_slowdown=0.01)], at=2),
            speed_run("upgrade", [speed_record(*cell, 2.4, Verdict.IMPROVED)], at=3),
            speed_run("later", [speed_record(*cell, 2.41, Verdict.REGRESSION)], at=4)]
    for run in reversed(runs):  # appended out of order: the series is in run order
        history.append(run)
    history.append(speed_run("smoke", [speed_record(*cell, 0.5)], gpu="cpu", at=5))
    history.accept("upgrade", None, "torch 2.12")
    history.accept("later", "test_speed[gpt-amp_bf16]", "the regression was the new level settling")
    points = history.series(H100, "test_speed[gpt-amp_bf16]", "device_speedup").points
    assert [(p.run_id, p.counts, p.restart) for p in points] == [
        ("clean", True, False), ("failed", False, False), ("slowed", False, False), ("upgrade", True, True),
        ("later", True, True)]
    assert [p.value for p in history.series(H100, "test_speed[gpt-amp_bf16]", "speedup").points][0] == 2.0
    every = history.series_of(H100, "device_speedup")
    assert list(every) == ["test_speed[gpt-amp_bf16]"] and every["test_speed[gpt-amp_bf16]"].points == tuple(points)
    assert history.series_of(H100, "device_speedup", ["test_speed[mlp-fp32]"]) == {}
    (smoke,) = history.series("cpu", "test_speed[gpt-amp_bf16]", "device_speedup").points
    assert not smoke.counts
    assert [r.id for r in history.runs(gpu=H100, limit=2)] == ["later", "upgrade"]


def test_accepting_an_unknown_run_or_cell_is_refused_naming_it(store_url):
    history = open_history(store_url)
    history.append(speed_run("run-1", cells_of(2)))
    with pytest.raises(HistoryError, match=r"no run 'run-2' \(did you mean run-1\?\)") as info:
        history.accept("run-2", None, "because")
    assert str(info.value).startswith(f"history {history.name}: ")
    with pytest.raises(HistoryError, match=r"run run-1 has no cell 'test_speed\[model9-amp_bf16\]'"):
        history.accept("run-1", "test_speed[model9-amp_bf16]", "because")
    with pytest.raises(HistoryError, match="needs a reason"):
        history.accept("run-1", None, "  ")
    with pytest.raises(HistoryError, match="run run-1 has no cell 'x'"):
        history.kernels("run-1", "x")
    assert history.series(H100, "test_speed[model0-amp_bf16]", "device_speedup").points[0].restart is False


def test_accepting_a_run_and_cell_twice_or_a_smoke_run_is_refused(store_url):
    history = open_history(store_url)
    history.append(speed_run("run-1", cells_of(2)))
    history.append(speed_run("smoke", cells_of(1), gpu="cpu", at=1))
    first, second = "test_speed[model0-amp_bf16]", "test_speed[model1-amp_bf16]"
    history.accept("run-1", first, "cuDNN 9.19")
    with pytest.raises(HistoryError, match=r"run run-1 is accepted already \(its cell test_speed\[model0-amp_bf16\]: "
                                           r"'cuDNN 9.19'\); nothing to add"):
        history.accept("run-1", first, "cuDNN 9.19, again")
    history.accept("run-1", None, "the driver too")  # the run's other cells
    for cell in (second, None):
        with pytest.raises(HistoryError, match=r"accepted already \(every cell of it: 'the driver too'\)"):
            history.accept("run-1", cell, "once more")
    with pytest.raises(HistoryError, match="run smoke is a CPU smoke run: its figures count for nothing"):
        history.accept("smoke", None, "a smoke run")
    with sa.create_engine(parse_url(store_url)).connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM acceptances").scalar() == 2


def _set_version(url: str, version: int) -> None:
    engine = sa.create_engine(parse_url(url))
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")
    engine.dispose()


def test_a_store_of_a_newer_schema_is_refused_naming_both_versions(store_url):
    open_history(store_url).append(speed_run("r", cells_of(1)))
    _set_version(store_url, SCHEMA_VERSION + 1)
    with pytest.raises(HistoryError) as info:
        open_history(store_url)
    message = str(info.value)
    assert f"written with history schema {SCHEMA_VERSION + 1}; this ampbench reads schema {SCHEMA_VERSION}" in message
    assert message.startswith("history ") and "\n" not in message


def test_a_version_1_store_is_migrated_and_keeps_its_runs(store_url):
    engine = sa.create_engine(parse_url(store_url))
    old = build_metadata(1)
    with engine.begin() as conn:
        old.create_all(conn)
        t = old.tables
        conn.execute(t["meta"].insert().values(key="schema_version", value="1"))
        conn.execute(t["runs"].insert().values(
            id="old", run_at="2025-06-01T00:00:00.000000+00:00", gpu=H100, gpu_slug="h100", world_size=1,
            smoke=False, software="{}", source="pytest", cell_count=1, appended_at="2025-06-01T00:00:00+00:00"))
        conn.execute(t["cells"].insert().values(run_id="old", test_id="test_speed[gpt-fp16]", kind="speed",
                                                injected=False, record="{}", verdict="pass"))
        conn.execute(t["figures"].insert().values(run_id="old", test_id="test_speed[gpt-fp16]",
                                                  figure="device_speedup", value=3.0, verdict="pass"))
        # a distributed run of 2 GPUs: v3 files its cells' figures under the two GPUs
        conn.execute(t["runs"].insert().values(
            id="dist", run_at="2025-06-02T00:00:00.000000+00:00", gpu=H100, gpu_slug="h100", world_size=2,
            smoke=False, software="{}", source="pytest", cell_count=1, appended_at="2025-06-02T00:00:00+00:00"))
        conn.execute(t["cells"].insert().values(run_id="dist", test_id="test_ddp_speed[gpt-amp_bf16-fp32]",
                                                kind="distributed", injected=False, record="{}", verdict="pass"))
        conn.execute(t["figures"].insert().values(run_id="dist", test_id="test_ddp_speed[gpt-amp_bf16-fp32]",
                                                  figure="device_speedup", value=5.0, verdict="pass"))
    history = open_history(store_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT value FROM meta").scalar() == str(SCHEMA_VERSION)
        indexes = {i["name"] for i in sa.inspect(conn).get_indexes("figures")}
    assert "figures_by_cell" in indexes and "figures_by_test" not in indexes
    assert [p.value for p in history.series(H100, "test_speed[gpt-fp16]", "device_speedup").points] == [3.0]
    ddp = "test_ddp_speed[gpt-amp_bf16-fp32]"
    assert [p.value for p in history.series(f"{H100} x2", ddp, "device_speedup").points] == [5.0]
    assert not history.series(H100, ddp, "device_speedup").points
    assert history.series_gpus() == [H100, f"{H100} x2"]
    history.append(speed_run("new", [speed_record("gpt", "fp16", 3.1)], at=1))
    assert [p.run_id for p in history.series(H100, "test_speed[gpt-fp16]", "device_speedup").points] == ["old", "new"]
    engine.dispose()


@pytest.mark.parametrize("command", [["history", "runs"], ["history", "changes"],
                                     ["history", "explain", "test_speed[gpt-fp16]"], ["baselines", "export"],
                                     ["report", str(DATA / "h100_speed_device.json")]],
                         ids=["runs", "changes", "explain", "export", "report"])
def test_a_command_that_only_reads_leaves_an_older_store_as_it_is(store_url, command, tmp_path, capsys):
    engine = sa.create_engine(parse_url(store_url))
    with engine.begin() as conn:
        build_metadata(1).create_all(conn)
        conn.exec_driver_sql("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
    out = ["-o", str(tmp_path / "report")] if command[0] == "report" else []
    out += ["--baseline-dir", str(tmp_path / "b")] if command[0] == "baselines" else []
    assert main([*command, "--history", store_url, *out]) == 2
    assert (f"holds history schema 1, older than this ampbench's {SCHEMA_VERSION}; this command only reads"
            in capsys.readouterr().err)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT value FROM meta").scalar() == "1"
        assert "gpu" not in {c["name"] for c in sa.inspect(conn).get_columns("figures")}
    engine.dispose()
    open_history(store_url, create=False)  # a command that writes migrates it
    assert open_history(store_url, create=False, read_only=True).counts() == (0, 0)


def test_a_database_of_other_tables_is_no_history(store_url):
    engine = sa.create_engine(parse_url(store_url))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    engine.dispose()
    with pytest.raises(HistoryError, match=r"holds other tables \(invoices\) and no ampbench schema version"):
        open_history(store_url)


def test_a_store_is_made_only_where_asked(tmp_path):
    path = tmp_path / "deep" / "history.sqlite"
    with pytest.raises(HistoryError, match=f"history {path}: no such file"):
        open_history(str(path), create=False)
    assert not path.exists()
    open_history(str(path))
    assert path.exists() and open_history(f"sqlite:///{path}", create=False).counts() == (0, 0)


@pytest.mark.parametrize("url, expected", [
    ("postgresq://u:secret@localhost/db", "history store postgresq://u:***@localhost/db: unknown database 'postgresq'"),
    ("mysql://u@localhost/db", "unknown database 'mysql'"),
    ("sqlite://", "an in-memory SQLite database keeps nothing"),
    ("postgresql+psycopg2://u:secret@localhost/db", "its driver 'psycopg2' is not installed"),
    ("postgresql://u:secret@127.0.0.1:1/db",
     "history postgresql+psycopg://u:***@127.0.0.1:1/db: cannot be reached: connection failed"),
    ("://nothing", "not a database URL"),
], ids=["misspelt", "other database", "in memory", "driver missing", "unreachable", "no URL"])
def test_a_bad_url_is_one_line_naming_the_store_without_its_password(url, expected):
    with pytest.raises(HistoryError) as info:
        open_history(url)
    message = str(info.value)
    assert expected in message and "secret" not in message and "\n" not in message, message


@pytest.mark.parametrize("url, hint", [
    ("postgresql:/x", "'postgresql:/x': a database URL needs '://' after its scheme: did you mean "
                      "postgresql://USER:PASSWORD@HOST/DATABASE?"),
    ("sqlite:/x",
     "'sqlite:/x': a database URL needs '://' after its scheme: did you mean sqlite:///PATH (three slashes)?"),
    ("postgres://", "postgres://: the scheme is spelt 'postgresql', not 'postgres': did you mean "
                    "postgresql://USER:PASSWORD@HOST/DATABASE?"),
])
def test_a_misspelt_url_is_a_usage_error_with_a_hint_and_makes_no_folder(url, hint, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # read as a path, "postgresql:/x" would be a folder "postgresql:" here
    with pytest.raises(HistoryError) as info:
        open_history(url)
    assert str(info.value).startswith(f"history store {hint}")
    with pytest.raises(SystemExit) as exited:
        main(["history", "import", "--history", url, str(DATA / "h100_speed_device.json")])
    assert exited.value.code == 2 and f"argument --history: history store {hint}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_sqlite_file_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "history.sqlite"
    path.write_bytes(b"this is not a database, it only sits where one should be " * 100)
    before = path.read_bytes()
    with pytest.raises(HistoryError, match=f"^history {path}: not a usable SQLite database .*move it aside$"):
        open_history(str(path))
    assert path.read_bytes() == before
    with pytest.raises(HistoryError, match="is a folder"):
        open_history(str(tmp_path))


def test_a_locked_sqlite_store_waits_then_says_so_and_writes_nothing(tmp_path):
    path = tmp_path / "history.sqlite"
    open_history(str(path)).append(speed_run("first", cells_of(2)))
    history = open_history(str(path), busy_timeout=0.3)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer, mid-append
    try:
        with pytest.raises(HistoryError, match=r"locked by another writer: waited 0\.[3-9] s for it; try again"):
            history.append(speed_run("second", cells_of(2)))
        assert history.counts() == (1, 2), "a reader is not held up by the writer"
        # the message tells the command's whole wait, where it tried more than once
        with pytest.raises(HistoryError, match=r"waited (0\.[6-9]|1\.\d) s for it \(in tries of up to 0\.3 s each\)"):
            history.append(speed_run("second", cells_of(2)))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert history.append(speed_run("second", cells_of(2))) is True


def test_run_summaries_hold_the_runs_software_and_where_it_came_from(store_url):
    history = open_history(store_url)
    history.append(speed_run("a", cells_of(2) + [speed_record("x", "fp16", 1.0, Verdict.REGRESSION)],
                             label="app@abc123", triton="3.5.0", uuid="GPU-1"))
    run = history.run("a")
    assert (run.label, run.suite_revision,
            run.card_uuid, run.cells, run.failing) == ("app@abc123", "v0.1", "GPU-1", 3, 1)
    assert run.software == {"torch": "2.11.0", "cuda": "13.0", "cudnn": None, "driver": "580.1", "triton": "3.5.0",
                            "torchao": None, "capability": None}
    assert run.host_load == {"cpus": 2} and json.dumps(run.software)
