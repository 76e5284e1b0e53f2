"""Card admission over a real history store (SQLite, and PostgreSQL where one runs): `ampbench history cards`
lists each card of a GPU model in each speed cell and names the outlier card; a speed cell's card is held to
the history's other cards and to its baseline file's recorded fp32 step (``speed.admission.admit``), on the
same software and device-time method only."""

from __future__ import annotations

from pathlib import Path

from ampbench.baselines.file import BaselineFile
from ampbench.cli import main
from ampbench.history.baseline_source import HistoryBaselines
from ampbench.history.cards import fleet
from ampbench.history.store import open_history
from ampbench.results import SpeedRecord
from ampbench.speed.admission import admit
from history_runs import H100, speed_record, speed_run
from tests import records

pytest_plugins = ("history_stores",)

CELL = "test_speed[gpt-amp_bf16]"
SOFTWARE = {"torch": "2.11.0", "cuda": "13.0"}  # what history_runs.speed_run's runs were measured on
# each card's fp32 device ms per step, run by run: four cards within 0.5%, one 1.5x slow
CARDS = {"GPU-a": (40.0, 40.1, 39.9), "GPU-b": (40.2, 40.1, 40.2), "GPU-c": (39.8, 39.9, 39.8),
         "GPU-d": (40.1, 40.0, 40.1), "GPU-slow": (60.0, 60.3)}


def _fill(history) -> None:
    at = 0
    for card, steps in CARDS.items():
        for step in steps:
            cells = [speed_record("gpt", "amp_bf16", 5.6, device_method="graph", device_step_ms_ref=step),
                     speed_record("vit", "bf16", 2.1, device_method="graph", device_step_ms_ref=step / 4)]
            history.append(speed_run(f"run{at:02d}", cells, at=at, uuid=card))
            at += 1
    # a run that names no card is nobody's: it is left out
    history.append(speed_run("anonymous", [speed_record("gpt", "amp_bf16", 5.6, device_method="graph",
                                                        device_step_ms_ref=90.0)], at=at))


def test_history_cards_lists_every_card_of_each_cell_and_names_the_outlier(store_url, capsys):
    history = open_history(store_url)
    _fill(history)
    assert main(["history", "cards", "--history", store_url]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("  test_speed[")]
    assert len(rows) == 10, out  # 5 cards in each of 2 cells; the run without a card nowhere
    slow = [r for r in rows if r[1] == "GPU-slow"]
    assert [(r[0], r[2], r[-1]) for r in slow] == [(CELL, "2", "yes"), ("test_speed[vit-bf16]", "2", "yes")], out
    assert {r[-1] for r in rows if r[1] != "GPU-slow"} == {"no"}, out
    # its median, 60.15 ms, over the median of the four others', 40.05 ms
    assert f"{H100}: 5 cards" in out and slow[0][3:5] == ["60.150", "+50.19%"], out
    assert out.rstrip().splitlines()[-1].endswith(": GPU-slow")


def test_history_cards_of_one_gpu_and_of_an_unknown_one(store_url, capsys):
    _fill(open_history(store_url))
    assert main(["history", "cards", "--history", store_url, "--gpu", H100]) == 0
    assert "GPU-slow" in capsys.readouterr().out
    assert main(["history", "cards", "--history", store_url, "--gpu", "NVIDIA H10O 80GB HBM3"]) == 2
    err = capsys.readouterr().err
    assert "--gpu 'NVIDIA H10O 80GB HBM3': no run on that GPU; did you mean 'NVIDIA H100 80GB HBM3'?" in err, err


def test_history_cards_says_where_no_run_names_its_card(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    open_history(url).append(speed_run("r1", [speed_record("gpt", "amp_bf16", 5.6, device_step_ms_ref=40.0)]))
    assert main(["history", "cards", "--history", url]) == 0
    out = capsys.readouterr().out
    assert "no speed cell of a run that names its card (UUID)" in out and out.rstrip().endswith(": none")
    assert main(["history", "cards", "--history", str(tmp_path / "nope.sqlite")]) == 2
    assert "nope.sqlite: no such file" in capsys.readouterr().err


def _record(step_ms: float) -> SpeedRecord:
    return records.speed(CELL, model="gpt", mode="amp_bf16", device_speedup=5.6, device_method="graph",
                         device_step_ms_ref=step_ms)


def _file(tmp_path: Path, step_ms: float | None = None, software: dict = SOFTWARE) -> BaselineFile:
    figures = {"speedup": 5.0, "device_speedup": 5.6, "device_method": "graph", "device_step_ms_ref": step_ms}
    entries = {CELL: {"figures": figures, "software": software}} if step_ms is not None else {}
    return BaselineFile(path=tmp_path / "nvidia-h100-80gb-hbm3.json", gpu=H100, entries=entries, exists=bool(entries))


def test_a_cell_holds_its_card_to_the_historys_other_cards(store_url, tmp_path):
    history = open_history(store_url)
    _fill(history)
    source = HistoryBaselines(_file(tmp_path), history, card="GPU-new")
    card = admit(_record(60.0), CELL, source, SOFTWARE, "GPU-new")
    assert card.outlier and card.cards == 5 and card.runs == 1 and card.uuid == "GPU-new", card
    assert abs(card.level_ms - 40.1) < 0.05 and card.off > 0.45 and str(history) in card.source
    # the slow card's own earlier runs are its own, not the model's: it is held to the four others
    slow = admit(_record(60.1), CELL, HistoryBaselines(_file(tmp_path), history, card="GPU-slow"), SOFTWARE,
                 "GPU-slow")
    assert slow.outlier and slow.runs == 3 and slow.cards == 4, slow
    fine = admit(_record(40.05), CELL, source, SOFTWARE, "GPU-new")
    assert fine.outlier is False and abs(fine.z) < 1, fine
    # another torch moves every card's absolute time: the history's runs on the old one are not compared
    other = admit(_record(60.0), CELL, source, {**SOFTWARE, "torch": "2.12.0"}, "GPU-new")
    assert other.outlier is None and "no other card" in other.unchecked, other
    assert [r.card for r in fleet(history, H100) if r.test_id == CELL] == sorted(CARDS)


def test_a_cell_without_a_history_holds_its_card_to_the_baseline_files_fp32_step(tmp_path):
    file = _file(tmp_path, 40.0)
    assert admit(_record(60.0), CELL, file, SOFTWARE, "GPU-x").outlier is True
    near = admit(_record(40.4), CELL, file, SOFTWARE, None)
    assert near.outlier is False and near.source == str(file.path) and near.cards == 1, near
    # recorded on another stack, or by another method: no level to hold the card to
    assert admit(_record(60.0), CELL, _file(tmp_path, 40.0, {"torch": "2.9.0", "cuda": "12.8"}), SOFTWARE,
                 None).outlier is None
    assert admit(_record(60.0), CELL, None, SOFTWARE, None).unchecked.startswith("no baseline file or history")
    assert admit(records.speed(CELL, device_speedup=5.6), CELL, file, SOFTWARE, None).unchecked == \
        "no fp32 device time was measured"


def test_an_entry_the_history_learned_without_a_file_entry_carries_the_fp32_device_step(tmp_path):
    """What `ampbench baselines export` writes of a cell the file lacks: the latest counted run's fp32 step,
    the level a cell without a history holds its card to."""
    history = open_history(f"sqlite:///{tmp_path / 'history.sqlite'}")
    _fill(history)
    figures = HistoryBaselines(_file(tmp_path), history).figures(CELL)
    assert figures is not None and figures["device_step_ms_ref"] == 90.0, figures  # the anonymous run: the latest
    assert "device_step_ms" not in figures  # the mode's step, which these records do not hold
