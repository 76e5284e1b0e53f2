"""`ampbench spread` itself (what it prints, writes, refuses), adding runs to a learned spread (--add) and
the levels a re-recording opens."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ampbench.baselines.entries import SpeedEntry, entry_tolerance
from ampbench.baselines.file import load_document
from ampbench.baselines.spread import learn_spread, with_spread
from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.files.write import write_atomic
from ampbench.report import parse_run
from ampbench.results.ratios import DEVICE, WALL
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.stats import log_sd
from ampbench.tolerance import BetweenRuns
from spread_runs import (
    GPT,
    MEASURED,
    SOFTWARE,
    WRN,
    WRN_DEVICE,
    baseline_doc,
    device_baseline,
    device_run,
    learn_from,
    run_doc,
    spread_of,
)

# ---------------------------------------------------------------------------------------------------
# the command


def _files(tmp_path: Path, *runs: dict) -> tuple[Path, list[str]]:
    baseline = tmp_path / "gpu.json"
    write_atomic(baseline, baseline_doc())
    paths = []
    for i, run in enumerate(runs):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(run))
        paths.append(str(path))
    return baseline, paths


def test_spread_command_writes_the_figures_and_prints_them(tmp_path, capsys):
    baseline, runs = _files(tmp_path, run_doc({WRN: 8.583}, "a"), run_doc({WRN: 8.381, GPT: 6.2}, "b"))
    assert main(["spread", str(baseline), *runs]) == EXIT_OK
    out = capsys.readouterr().out
    assert WRN in out and "written to" in out
    entries = load_document(baseline)["entries"]
    assert entries[WRN]["figures"]["between_run_count"] == 3
    assert entries[GPT]["figures"]["between_run_sd"] == pytest.approx(abs(math.log(6.422 / 6.2)) / math.sqrt(2))
    assert "between_run_sd" not in entries["test_memory[gpt-bf16]"]["figures"]


def test_spread_dry_run_writes_nothing(tmp_path, capsys):
    baseline, runs = _files(tmp_path, run_doc({WRN: 8.583}, "a"))
    before = baseline.read_bytes()
    assert main(["spread", "--dry-run", str(baseline), *runs]) == EXIT_OK
    assert baseline.read_bytes() == before and "left as it was" in capsys.readouterr().out


def test_spread_with_no_run_that_counts_is_an_error_and_says_why(tmp_path, capsys):
    baseline, runs = _files(tmp_path, run_doc({WRN: 8.0}, "a", software=dict(SOFTWARE, driver="590.1")))
    before = baseline.read_bytes()
    assert main(["spread", str(baseline), *runs]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert "driver 580.159.04 in the baseline, 590.1 in the run" in captured.out
    assert "no run counts" in captured.err and baseline.read_bytes() == before


def test_spread_names_a_malformed_baseline_file(tmp_path, capsys):
    baseline, runs = _files(tmp_path, run_doc({WRN: 8.583}, "a"))
    baseline.write_text('{"schema_version": 2}')
    assert main(["spread", str(baseline), *runs]) == EXIT_BAD_INPUT
    assert f"baseline file {baseline}: field 'schema_version'" in capsys.readouterr().err


def test_spread_command_prints_and_writes_the_device_spread(tmp_path, capsys):
    baseline = tmp_path / "gpu.json"
    write_atomic(baseline, device_baseline())
    runs = []
    for i, run in enumerate((device_run({WRN: (8.583, 3.121), GPT: (6.2, None)}, "a"),
                             device_run({WRN: (8.381, 3.087)}, "b"))):
        runs.append(tmp_path / f"run{i}.json")
        runs[-1].write_text(json.dumps(run))
    assert main(["spread", str(baseline), *map(str, runs)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "device sd" in out and "(1 with device time, 0 with a ratio over a versus side)" in out
    [wrn_line] = [line for line in out.splitlines() if line.startswith(WRN)]
    sd = log_sd([WRN_DEVICE, 3.121, 3.087])
    assert f"{sd:.2%}" in wrn_line and "| 3.104 3.121 3.087" in wrn_line
    [gpt_line] = [line for line in out.splitlines() if line.startswith(GPT)]
    assert "|" not in gpt_line
    figures = load_document(baseline)["entries"][WRN]["figures"]
    assert figures["device_between_run_count"] == 3 and figures["device_between_run_sd"] == pytest.approx(sd)


def _learn_adding(*documents: dict, baseline: dict):
    return learn_spread(baseline["entries"], [parse_run(d, f"more{i}.json") for i, d in enumerate(documents)], add=True)


def test_adding_runs_to_a_learned_spread_pools_exactly_as_learning_them_all_at_once():
    runs = [device_run({WRN: (w, d)}, when) for w, d, when in
            ((8.583, 3.121, "a"), (8.381, 3.087, "b"), (8.5, 3.11, "c"), (8.45, 3.095, "d"))]
    all_at_once = with_spread(device_baseline(), learn_from(*runs, baseline=device_baseline()))
    first = with_spread(device_baseline(), learn_from(*runs[:2], baseline=device_baseline()))
    added = _learn_adding(*runs[2:], baseline=first)
    assert added.device_cells[WRN].speedups == (3.11, 3.095) and added.device_cells[WRN].prior.count == 3
    pooled = with_spread(first, added)
    for key in ("speedup", "between_run_sd", "device_speedup", "device_between_run_sd"):
        assert pooled["entries"][WRN]["figures"][key] == pytest.approx(all_at_once["entries"][WRN]["figures"][key])
    for key in ("between_run_count", "device_between_run_count", "device_recorded_speedup", "recorded_speedup"):
        assert pooled["entries"][WRN]["figures"][key] == all_at_once["entries"][WRN]["figures"][key]
    assert pooled["entries"][WRN]["figures"]["device_between_run_runs"] == ["a", "b", "c", "d"]


def test_adding_a_run_the_entry_counted_already_leaves_it_out():
    runs = [device_run({WRN: (8.583, 3.121)}, "a"), device_run({WRN: (8.381, 3.087)}, "b")]
    first = with_spread(device_baseline(), learn_from(*runs, baseline=device_baseline()))
    again = _learn_adding(runs[1], device_run({WRN: (8.5, 3.11)}, "c"), baseline=first)
    assert again.device_cells[WRN].speedups == (3.11,) and again.device_cells[WRN].count == 4
    assert any("counted in the entry's spread already" in why for _, _, why in again.left_out)


def test_adding_to_an_entry_without_a_spread_learns_it_from_the_recording_and_the_runs():
    learned = _learn_adding(device_run({WRN: (8.583, 3.121)}, "a"), baseline=device_baseline())
    assert learned.device_cells[WRN].prior is None and learned.device_cells[WRN].speedups == (WRN_DEVICE, 3.121)


def test_the_spread_command_adds_with_add(tmp_path: Path, capsys):
    baseline = tmp_path / "gpu.json"
    write_atomic(baseline, device_baseline())
    paths = []
    for i, (w, d, when) in enumerate(((8.583, 3.121, "a"), (8.381, 3.087, "b"), (8.5, 3.11, "c"))):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(device_run({WRN: (w, d)}, when)))
    assert main(["spread", str(baseline), *map(str, paths[:2])]) == EXIT_OK
    assert main(["spread", "--add", str(baseline), str(paths[2])]) == EXIT_OK
    out = capsys.readouterr().out
    assert "(3 earlier) 3.110" in out
    figures = load_document(baseline)["entries"][WRN]["figures"]
    assert figures["device_between_run_count"] == 4
    assert figures["device_between_run_sd"] == pytest.approx(log_sd([WRN_DEVICE, 3.121, 3.087, 3.11]))


def _re_recorded(document: dict, device: float, wall: float) -> dict:
    """`document` with WRN re-recorded at new levels, as the speed cell stores a recording on new software
    (``Ratio.recorded``): the recording's figures, and the spread each ratio measured alike keeps."""
    old = SpeedEntry.from_figures(document["entries"][WRN]["figures"])
    kept = {**old.ratio(WALL).kept_spread().figures(WALL), **old.ratio(DEVICE).kept_spread().figures(DEVICE),
            "device_tolerance": entry_tolerance(DEVICE, DEFAULT_TOLERANCE, old.ratio(DEVICE).kept_spread(), 0.004)}
    figures = {"speedup": wall, "noise": 0.01, "device_speedup": device, "device_noise": 0.004,
               "device_method": "graph",
               **MEASURED, **kept}
    entries = dict(document["entries"], **{WRN: dict(document["entries"][WRN], figures=figures)})
    return dict(document, entries=entries)


def test_runs_added_after_a_re_recording_join_its_level_and_the_earlier_levels_noise_stays_pooled():
    earlier = [device_run({WRN: (w, d)}, when) for w, d, when in ((8.583, 3.121, "a"), (8.381, 3.087, "b"))]
    learned = with_spread(device_baseline(), learn_from(*earlier, baseline=device_baseline()))
    re_recorded = _re_recorded(learned, device=3.30, wall=8.9)
    # the re-recorded level is its recording alone: uncentred, 3 values at one earlier level behind the sd
    assert spread_of(re_recorded["entries"][WRN]["figures"], "device_") == BetweenRuns(
        pytest.approx(log_sd([WRN_DEVICE, 3.121, 3.087])), 3, False)
    later = [device_run({WRN: (8.95, d)}, when) for d, when in ((3.31, "c"), (3.28, "d"))]
    added = _learn_adding(earlier[1], *later, baseline=re_recorded)  # "b" counted at the earlier level already
    cell = added.device_cells[WRN]
    assert cell.speedups == (3.31, 3.28) and (cell.count, cell.levels, cell.level_count) == (6, 2, 3)
    # by hand: each level's squared deviations of ln(value) from its own mean, over 6 values - 2 levels
    old, new = [math.log(v) for v in (WRN_DEVICE, 3.121, 3.087)], [math.log(v) for v in (3.30, 3.31, 3.28)]
    m2 = sum((x - sum(lv) / 3) ** 2 for lv in (old, new) for x in lv)
    assert cell.sd == pytest.approx(math.sqrt(m2 / 4)) and cell.centre == pytest.approx(math.exp(sum(new) / 3))
    figures = with_spread(re_recorded, added)["entries"][WRN]["figures"]
    assert figures["device_recorded_speedup"] == 3.30 and figures["device_between_run_runs"] == ["a", "b", "c", "d"]
    assert (figures["device_between_run_levels"], figures["device_between_run_level_count"]) == (2, 3)
    between = spread_of(figures, "device_")
    assert between == BetweenRuns(pytest.approx(math.sqrt(m2 / 4)), 6, True, 2, 3) and between.dof == 4
    # the bound: t with 4 df (4.604) x sqrt(1 + 1/3) around the mean of the 3 values at this level
    assert between.bound(0.99) == pytest.approx(4.604095 * math.sqrt(4 / 3) * math.sqrt(m2 / 4), rel=1e-6)
    # learned afresh from runs of one level, the entry holds one level again
    pooled = dict(re_recorded, entries={WRN: dict(re_recorded["entries"][WRN], figures=figures)})
    afresh = with_spread(pooled, learn_from(*later, baseline=pooled))["entries"][WRN]["figures"]
    assert "device_between_run_levels" not in afresh and afresh["device_between_run_count"] == 3


def test_a_spread_of_too_few_degrees_of_freedom_or_an_impossible_level_count_does_not_loosen_a_verdict():
    figures = {"device_between_run_sd": 0.01, "device_recorded_speedup": 3.0}
    assert spread_of({**figures, "device_between_run_count": 3, "device_between_run_levels": 2}, "device_") is None
    assert spread_of({**figures, "device_between_run_count": 4, "device_between_run_levels": 2}, "device_").dof == 2
    assert spread_of({**figures, "device_between_run_count": 4, "device_between_run_levels": 2,
                           "device_between_run_level_count": 4}, "device_") is None
