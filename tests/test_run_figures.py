"""Every figure the suite shows of a run stays as it was: for each committed run (real GPU runs, synthetic
ones and a CPU run of the suite), the report (summary.md, index.html's text, the values its charts draw),
the end-of-session summary, `ampbench export`'s figures, the figure rows of a history and `ampbench
compare`'s table are what the code made of it before the run JSON was nested by ratio
(``tests/data/before/``, written by ``tests/run_figures.py``): read as it was written, and rewritten in
the current layout (``ampbench export --format pytest-benchmark``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.run_figures import BEFORE, COMPARED, DATA, RUNS, comparison, figures


def _before(name: str):
    return json.loads((BEFORE / name).read_text())


@pytest.mark.parametrize("name", RUNS)
def test_a_committed_run_shows_every_figure_as_before(name):
    assert figures(DATA / name) == _before(name)


def test_compare_says_of_two_committed_runs_what_it_said_before():
    assert comparison(*(DATA / n for n in COMPARED)) == _before("compare.json")
