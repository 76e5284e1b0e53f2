"""The README's workflow for an intended change, as a user types it, from the folder the suite runs in:
runs appended to the history (``.ampbench/history.sqlite``), ``ampbench baselines export`` into
``baselines/``, ``ampbench history accept RUN_ID --reason ...`` of the run the level moved at, more runs,
export again into the same folder, in any order and any number of times. Every export succeeds, writes a
file that loads, and shows the accepted level.

Before the accepted run the cards lie apart; from it on they agree, so the card term an export writes
goes from a figure to none (null) while the earlier export's file still holds the figure."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ampbench.baselines.entries import SpeedEntry, learned_spread
from ampbench.baselines.file import load_document
from ampbench.cli import main
from ampbench.files import paths
from ampbench.history.store import open_history
from ampbench.results.ratios import DEVICE
from history_runs import speed_record, speed_run

MODELS = ("gpt", "resnet50", "mlp")
CARDS = ("GPU-0a", "GPU-1b", "GPU-2c")
APART = {"GPU-0a": 1.0, "GPU-1b": 1.02, "GPU-2c": 0.98}  # how far each card lies from the level
NOISE = 0.003  # run-to-run, relative


class Workflow:
    """A GPU's runs, appended as the plugin appends them, and the commands of the README."""

    def __init__(self) -> None:
        self.history = open_history(str(paths.HISTORY))
        self.rng = random.Random(7)
        self.count = 0
        self.level = 2.0
        self.moved_at: str | None = None  # the first run at the current level
        self.accepted: dict[str, float] = {}  # cell: the level accepted for it
        self.exports = 0

    def runs(self, n: int, level: float | None = None) -> None:
        """`n` runs of every cell; at `level` from the first of them on, where given (the cards agree then)."""
        if level is not None:
            self.level, self.moved_at = level, None
        for _ in range(n):
            run_id, card = f"run{self.count:03d}", CARDS[self.count % len(CARDS)]
            apart = APART[card] if self.level == 2.0 else 1.0
            cells = [speed_record(m, "amp_bf16", self.level * apart * (1 + self.rng.gauss(0, NOISE))) for m in MODELS]
            self.history.append(speed_run(run_id, cells, at=self.count, uuid=card))
            self.moved_at = self.moved_at or run_id
            self.count += 1

    def accept(self, cell: str | None = None) -> None:
        assert self.moved_at is not None, "a scenario accepts a run it appended"
        args = ["history", "accept", self.moved_at, "--reason", "cuDNN 9.19"] + (["--cell", cell] if cell else [])
        assert main(args) == 0
        self.accepted.update({c: self.level for c in ([cell] if cell else [_cell(m) for m in MODELS])})

    def export(self) -> dict:
        """`ampbench baselines export`: exit status 0 and a file that loads, each learned entry readable."""
        assert main(["baselines", "export"]) == 0, f"export {self.exports + 1} failed"
        self.exports += 1
        (path,) = Path(paths.BASELINE_DIR).glob("*.json")
        entries = load_document(path)["entries"]
        assert sorted(entries) == sorted(_cell(m) for m in MODELS)
        for test_id, entry in entries.items():
            device = SpeedEntry.from_figures(entry["figures"]).ratio(DEVICE)
            assert learned_spread(device) is not None, f"{test_id}: the export holds a learned spread"
            if test_id in self.accepted:
                assert device.speedup == pytest.approx(self.accepted[test_id], rel=0.02), (
                    f"export {self.exports}: {test_id} shows its accepted level")
        return entries


def _cell(model: str) -> str:
    return f"test_speed[{model}-amp_bf16]"


@pytest.fixture
def workflow(tmp_path, monkeypatch) -> Workflow:
    monkeypatch.chdir(tmp_path)  # the README's commands run from the suite's folder, with their defaults
    return Workflow()


def test_the_readmes_intended_change_exports_again_and_again(workflow):
    workflow.runs(12)
    first = workflow.export()
    assert all(e["figures"]["device_between_card_sd"] > 0 for e in first.values()), "the cards lie apart"
    workflow.runs(3, level=2.5)
    workflow.accept()
    workflow.export()
    workflow.runs(25)
    workflow.export()
    workflow.export()  # the same history into the same folder: the file it wrote itself
    workflow.runs(2, level=2.2)
    workflow.accept()
    workflow.export()
    workflow.runs(4)
    last = workflow.export()
    assert all(e["figures"]["device_recorded_speedup"] == pytest.approx(2.2, rel=0.02) for e in last.values()), (
        "the level starts from the accepted run")


@pytest.mark.parametrize("steps", [
    "runs accept-cell export runs export accept export",
    "export runs accept runs export accept-cell runs export export",
    "runs accept runs accept export export runs export",
], ids=["accept-first", "cell-then-all", "accept-twice"])
def test_accepting_and_exporting_in_any_order(workflow, steps):
    workflow.runs(9)
    levels = iter((2.6, 1.7, 2.3, 1.9))
    for step in steps.split():
        if step == "runs":
            workflow.runs(4, level=next(levels))
        elif step == "accept":
            workflow.accept()
        elif step == "accept-cell":
            workflow.accept(_cell(MODELS[0]))
        else:
            workflow.export()
    assert workflow.exports == steps.split().count("export")
