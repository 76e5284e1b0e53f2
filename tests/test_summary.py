"""The terminal summary's table of speed cells: one row per cell, every column readable, nothing
where no speed cell ran."""

from __future__ import annotations

from types import SimpleNamespace

from ampbench.summary import COLUMNS, SPEED_PROPERTY, speed_cells, speed_table

GPT = {"model": "gpt", "mode": "amp_bf16", "device": "2.412x [2.405, 2.419]", "device_verdict": "pass",
       "wall": "1.873x [1.851, 1.902]", "wall_verdict": "regression", "idle_share": 0.2345, "host_bound": True,
       "method": "graph"}
LSTM = {"model": "lstm_lm", "mode": "fp16", "device": "3.100x [3.090, 3.110]", "device_verdict": "no baseline",
        "wall": "2.950x [2.900, 3.000]", "wall_verdict": "no baseline", "idle_share": 0.031, "host_bound": False,
        "method": "kernels"}


def test_no_speed_cell_no_lines():
    assert speed_table([]) == []


def test_one_row_per_cell_under_a_header_of_every_column():
    title, header, rule, *rows = speed_table([GPT, LSTM])
    assert title.startswith("ampbench: speed cells (2)")
    assert header.split("  ")[0] == "model" and "device speedup" in header and "host-bound" in header
    assert set(rule.replace("  ", "")) == {"-"}
    assert len(rows) == 2
    gpt, lstm = rows
    for text in ("gpt", "amp_bf16", "2.412x [2.405, 2.419]", "pass", "1.873x [1.851, 1.902]", "regression",
                 "23%", "yes", "graph"):
        assert text in gpt
    assert "3%" in lstm and " no " in lstm and lstm.endswith("kernels") and "no baseline" in lstm


def test_columns_line_up():
    header, rule, *rows = speed_table([GPT, LSTM])[1:]
    starts = [i for i, ch in enumerate(rule) if ch == "-" and (i == 0 or rule[i - 1] == " ")]
    assert len(starts) == len(COLUMNS)
    for line in (header, *rows):
        assert all(line[i] != " " and (i == 0 or line[i - 2:i] == "  ") for i in starts), line


def test_missing_values_show_as_a_dash():
    [row] = speed_table([{"model": "mlp", "mode": "tf32", "idle_share": float("nan")}])[3:]
    assert row.split() == ["mlp", "tf32", "-", "-", "-", "-", "-", "-", "-"]
    assert len(COLUMNS) == 9


def _report(when: str, start: float, *properties):
    return SimpleNamespace(when=when, start=start, user_properties=list(properties))


def test_only_call_reports_count_in_the_order_the_tests_ran():
    reports = [
        _report("call", 2.0, (SPEED_PROPERTY, LSTM)),  # reported under "failed", listed first by pytest
        _report("setup", 0.5),
        _report("call", 1.0, ("other", {}), (SPEED_PROPERTY, GPT)),
        _report("teardown", 1.5, (SPEED_PROPERTY, GPT)),  # a teardown report repeats the properties
        _report("call", 3.0),  # a test of another kind
    ]
    assert speed_cells(reports) == [GPT, LSTM]
