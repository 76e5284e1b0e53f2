"""The card's conditions over each timed block (``ampbench.gate.conditions``; how they are read:
tests/test_nvml_reads.py), kept per side and round, and a verdict that knows them: a drop explained by the
card's clocks is inconclusive, a regression that holds in cycle space and at steady clocks stands, and rounds
at one clock leave the verdict as it was. The recorded runs here are simulated: a fake NVML trace whose clock
drops in the mode's blocks only, with each block's time following its clock."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from ampbench.gate.conditions import CLOCK_GAP, conditions_info, conditions_text, energy_of, round_flag
from ampbench.gate.judge import judge
from ampbench.gate.measurement import Measurement, Rounds
from ampbench.nvml import BlockConditions, Energy
from ampbench.results import SpeedRecord
from ampbench.verdict import SpeedupCheck, Verdict
from tests.conditions_strategies import POWER_CAP, blocks, reasons
from tests.conditions_strategies import block_read as _block

CHECK = SpeedupCheck("gpt", "amp_bf16", 2.0, 0.03)
STEADY_MHZ = 1980.0
FP32_S, MODE_S = 0.100, 0.050  # seconds per step at the steady clock: a 2.0x speedup, on its baseline


def _rounds(mode_mhz: list[float], slower: float = 1.0, reasons: int = 0) -> Rounds:
    """Rounds whose mode's blocks ran at `mode_mhz` (fp32's at the steady clock), each block's time following
    its clock (a block's cycles do not change), the mode's `slower` in cycles too; a jitter of 0.1% apart."""
    n = len(mode_mhz)
    jitter = [1.0 + 0.001 * math.sin(3.7 * i) for i in range(n)]
    ref = tuple(FP32_S * j for j in jitter)
    mode = tuple(MODE_S * slower * STEADY_MHZ / mhz * j for mhz, j in zip(mode_mhz, reversed(jitter)))
    return Rounds(ref, mode, 10, 20, tuple(_block(STEADY_MHZ, energy_mj=10_000.0) for _ in range(n)),
                  tuple(_block(mhz, reasons if mhz != STEADY_MHZ else 0, 6_000.0) for mhz in mode_mhz))


def _measured(first: Rounds, confirming: Rounds | None = None) -> Measurement:
    est = first.estimate(0.99)
    return Measurement(True, first, est, confirming=confirming,
                       confirmation=confirming.estimate(0.99) if confirming is not None else None)


def _unread(r: Rounds) -> Rounds:
    return Rounds(r.ref_times, r.mode_times, r.ref_steps, r.mode_steps)


def _unread_measurement(m: Measurement) -> Measurement:
    confirming = _unread(m.confirming) if m.confirming else None
    return Measurement(m.gated, _unread(m.first), m.estimate, confirming=confirming, confirmation=m.confirmation)


# -- a simulated run: the clock drops in the mode's blocks only ------------------------------------------------

def test_a_drop_the_mode_blocks_clock_explains_is_inconclusive_and_says_so():
    # 1980 MHz for fp32's blocks; the mode's at 1755 MHz under a power cap in 14 of 16 rounds, and in its
    # confirming rounds: -11% in device time, none in cycle space
    dropped = [STEADY_MHZ] * 2 + [1755.0] * 14
    measured = _measured(_rounds(dropped, reasons=POWER_CAP), _rounds([1755.0] * 8, reasons=POWER_CAP))
    unread, _ = judge(_unread_measurement(measured), CHECK)
    assert unread is Verdict.REGRESSION, "without the reads the drop would fail the cell"
    verdict, judgement = judge(measured, CHECK)
    assert verdict is Verdict.INCONCLUSIVE, judgement
    assert "the card's clocks explain the drop" in judgement and "power cap" in judgement
    assert "22 of 24 rounds under unsteady clocks" in judgement


def test_a_regression_that_holds_in_cycle_space_and_at_steady_clocks_stands():
    # the mode 10% slower in cycles, and 4 of 16 rounds under a clock drop besides
    measured = _measured(_rounds([STEADY_MHZ] * 12 + [1755.0] * 4, slower=1.1, reasons=POWER_CAP),
                         _rounds([STEADY_MHZ] * 8, slower=1.1))
    verdict, judgement = judge(measured, CHECK)
    assert verdict is Verdict.REGRESSION, judgement
    assert "confirmed in cycle space" in judgement


def test_a_regression_with_too_few_rounds_at_steady_clocks_is_decided_by_its_cycles():
    # a card whose rounds are mostly flagged must still fail a regression its cycles show: the reads never
    # switch a gate off
    measured = _measured(_rounds([STEADY_MHZ] * 4 + [1755.0] * 8, slower=1.1, reasons=POWER_CAP))
    verdict, judgement = judge(measured, CHECK)
    assert verdict is Verdict.REGRESSION and "at steady clocks too few rounds" in judgement, judgement
    assert "confirmed in cycle space" in judgement, judgement


def test_a_throttle_both_sides_ran_under_flags_no_round():
    # a card at its power cap through every block of both sides, at one clock: like is compared with like
    assert round_flag(_block(1755.0, POWER_CAP), _block(1755.0, POWER_CAP)) is None
    capped = _rounds([STEADY_MHZ] * 12, slower=1.1)  # the mode 10% slower; both sides then read capped
    measured = _measured(Rounds(capped.ref_times, capped.mode_times, 10, 20,
                                tuple(_block(1755.0, POWER_CAP, 10_000.0) for _ in range(12)),
                                tuple(_block(1755.0, POWER_CAP, 6_000.0) for _ in range(12))))
    verdict, judgement = judge(measured, CHECK)
    assert verdict is Verdict.REGRESSION and "unsteady" not in judgement, judgement


def test_rounds_at_one_clock_leave_the_verdict_and_judgement_as_they_were():
    for slower in (1.0, 1.1, 0.9):
        measured = _measured(_rounds([STEADY_MHZ] * 12, slower=slower))
        assert judge(measured, CHECK) == judge(_unread_measurement(measured), CHECK), slower


@given(st.lists(st.booleans(), min_size=8, max_size=24), st.floats(0.5, 0.96), st.booleans())
@example([False] * 4 + [True] * 8, 1755.0 / STEADY_MHZ, True)  # the issue's: 1755 against 1980 MHz, capped
@example([True] * 8, 0.5, False)  # every round at half the clock, no reason given
def test_a_clock_drop_in_the_mode_blocks_alone_is_never_a_regression(dropped: list[bool], depth: float,
                                                                     capped: bool):
    mhz = [STEADY_MHZ * depth if d else STEADY_MHZ for d in dropped]
    verdict, judgement = judge(_measured(_rounds(mhz, reasons=POWER_CAP if capped else 0)), CHECK)
    assert verdict is not Verdict.REGRESSION, judgement


# -- the flagging rule -----------------------------------------------------------------------------------------

@given(blocks(), blocks())
@example(_block(1980.0), _block(1980.0 * math.exp(CLOCK_GAP) * 0.9999))  # just inside the gap
@example(_block(1980.0), _block(1980.0, POWER_CAP))
def test_a_round_is_flagged_exactly_where_its_clocks_part_or_one_side_alone_is_throttled(ref, mode):
    apart = abs(math.log(ref.sm_mhz / mode.sm_mhz)) > CLOCK_GAP
    throttled = set(ref.throttles) != set(mode.throttles)  # a throttle one side ran under and the other not
    flag = round_flag(ref, mode)
    assert (flag is not None) == (apart or throttled), (ref, mode, flag)
    assert (round_flag(mode, ref) is None) == (flag is None), "the flag does not depend on which side is which"


@given(reasons(throttled=False), reasons(throttled=False))
def test_reasons_other_than_power_and_heat_never_flag_a_round_at_one_clock(a, b):
    assert round_flag(_block(1980.0, a), _block(1980.0, b)) is None


def test_a_round_without_reads_is_never_flagged():
    assert round_flag(None, _block(1000.0, POWER_CAP)) is None


# -- energy -------------------------------------------------------------------------------------------------

def test_energy_per_step_is_each_sides_joules_over_its_steps_in_the_rounds_both_were_read():
    r = _rounds([STEADY_MHZ] * 8)  # fp32 10 J per 10-step block, the mode 6 J per 20 steps
    energy = energy_of([r])
    assert energy is not None and energy.rounds == 8
    assert energy.fp32_j == pytest.approx(1.0) and energy.mode_j == pytest.approx(0.3)
    assert energy.ratio == pytest.approx(0.3)
    missing = Rounds(r.ref_times, r.mode_times, 10, 20, r.ref_conditions,
                     (None,) + r.mode_conditions[1:])
    assert energy_of([missing]).rounds == 7, "a round one side of which was not read is left out on both"
    assert energy_of([_unread(r)]) is None


def test_the_sides_take_turns_so_the_rounds_energy_is_read_over_are_balanced_in_order():
    kept = _rounds([STEADY_MHZ] * 8).ref_first
    assert kept.count(True) == kept.count(False)


# -- the record, the summary ----------------------------------------------------------------------------------

def test_the_record_keeps_each_round_and_an_old_record_reads_without_them():
    measured = _measured(_rounds([STEADY_MHZ] * 4 + [1755.0] * 4, reasons=POWER_CAP))
    info = conditions_info(measured, None)
    assert info["read"] and len(info["rounds"]) == 8 and info["flagged"] == 4
    assert info["summary"] == conditions_text([measured.first])
    assert "fp32 blocks at 1980 MHz" in info["summary"] and "power cap in 4 of 8 rounds" in info["summary"]
    assert BlockConditions.from_info(info["rounds"][5]["mode"]).sm_mhz == 1755.0
    record = SpeedRecord.from_info({"ampbench_schema": 4, "model": "gpt", "mode": "amp_bf16", "conditions": info})
    assert record.energy == Energy.from_info(info["energy"]) and record.energy.ratio == pytest.approx(0.3)
    old = SpeedRecord.from_info({"ampbench_schema": 4, "model": "gpt", "mode": "amp_bf16"})
    assert old.conditions is None and old.energy is None
    assert conditions_info(_unread_measurement(measured), "no CUDA device") == {"read": False,
                                                                                 "why_unread": "no CUDA device"}


def test_the_summary_says_once_why_nothing_was_read_and_per_cell_what_was():
    from ampbench.plugin.summary import conditions_lines

    unread = [SpeedRecord(model=m, mode="amp_bf16", conditions={"read": False, "why_unread": "no CUDA device"})
              for m in ("mlp", "gpt")]
    assert conditions_lines(unread) == ["ampbench: clocks and energy not read: no CUDA device", ""]
    read = SpeedRecord(model="gpt", mode="amp_bf16",
                       conditions=conditions_info(_measured(_rounds([STEADY_MHZ] * 8)), None))
    lines = conditions_lines([*unread, read])
    assert len(lines) == 3 and lines[1].startswith("  gpt amp_bf16: fp32 blocks at 1980 MHz, mode blocks at 1980 MHz")
    assert "0.3 J per step against fp32's 1 J (0.30x)" in lines[1]


# -- the report, the exports, the baseline file ------------------------------------------------------------

def _run_with_energy():
    """The synthetic H100 run, its gpt amp_bf16 cell's card read: energy per step 0.3x fp32's."""
    import json
    from pathlib import Path

    from ampbench.results import parse_run

    doc = json.loads((Path(__file__).parent / "data" / "synthetic_h100_device.json").read_text())
    cell = next(b for b in doc["benchmarks"] if b["name"] == "test_speed[gpt-amp_bf16]")
    cell["extra_info"]["conditions"] = conditions_info(_measured(_rounds([STEADY_MHZ] * 8)), None)
    return parse_run(doc, "run.json")


def test_the_report_and_the_exports_carry_the_energy_ungated():
    from ampbench.export import bmf, cell_margins, gated_figures
    from ampbench.report.html import render_html
    from ampbench.report.markdown import render_markdown
    from ampbench.report.speed_cells import ENERGY_TITLE

    run = _run_with_energy()
    energy = [f for f in gated_figures(run).figures if f.measure == "energy-ratio"]
    assert len(energy) == 1 and energy[0].test_id == "test_speed[gpt-amp_bf16]"
    assert energy[0].value == pytest.approx(0.3) and energy[0].tolerance is None and energy[0].verdict is None
    assert energy[0].margin is None and cell_margins(gated_figures(run))["test_speed[gpt-amp_bf16]"].measure \
        != "energy-ratio", "a figure held to no line gives no margin"
    assert "energy-ratio" in bmf(gated_figures(run))["test_speed[gpt-amp_bf16]"]
    markdown = render_markdown(run)
    assert f"### {ENERGY_TITLE}" in markdown and "| gpt | amp_bf16 | 1 | 0.3 | 0.30x |" in markdown
    assert ENERGY_TITLE.replace("'", "&#39;") in render_html(run, [])


def test_a_run_without_reads_has_no_energy_anywhere():
    from ampbench.export import gated_figures
    from ampbench.report.markdown import render_markdown
    from ampbench.report.speed_cells import ENERGY_TITLE

    run = _run_with_energy()
    old = [c.with_values(conditions=None) if isinstance(c, SpeedRecord) else c for c in run.cells]
    from dataclasses import replace

    run = replace(run, cells=old)
    assert not [f for f in gated_figures(run).figures if f.measure == "energy-ratio"]
    assert ENERGY_TITLE not in render_markdown(run)


def test_a_baseline_entry_keeps_the_energy_ratio_as_it_keeps_the_memory_ratio():
    from ampbench.baselines.entries import SpeedEntry

    assert SpeedEntry.from_figures({"speedup": 2.0, "energy_ratio": 0.3}).energy_ratio == 0.3


@pytest.mark.parametrize("nvml_on, why", [(True, "no CUDA device"), (False, "not asked for (--perf-nvml off)")])
def test_a_cpu_speed_cell_records_once_why_its_card_was_not_read(nvml_on, why):
    from pathlib import Path

    from ampbench.models import get_model
    from ampbench.modes import get_mode
    from ampbench.settings import PerfSettings
    from ampbench.speed import sides
    from ampbench.speed.cell import measure_speed, policy

    cpu, spec = torch.device("cpu"), get_model("mlp")
    settings = PerfSettings(device=cpu, models=("mlp",), precisions=("amp_bf16",), tier="quick",
                            baseline_dir=Path("b"), update_baselines=False, tolerance=0.005, strict=False,
                            min_rounds=5, memory_cap_gib=None, data_root=None, loader_workers=0, pin_memory=False,
                            loss_scaler="torch.amp:GradScaler", block_seconds=0.002, cudnn_benchmark=False,
                            gate="device", nvml=nvml_on)
    assert policy(cpu, settings).read_conditions is nvml_on
    side = lambda mode: sides.prepare_side(spec, mode, cpu, True, policy(cpu, settings))  # noqa: E731
    cell = measure_speed(spec, get_mode("amp_bf16"), side(get_mode("fp32")), lambda: side(get_mode("amp_bf16")),
                         settings=settings, device=cpu, test_id="test_speed[mlp-amp_bf16]", source=None, software={},
                         peak_tflops=lambda dtype: None, prepared=lambda identity: None)
    assert cell.record.conditions == {"read": False, "why_unread": why} and cell.record.energy is None
    assert "conditions" in cell.record.to_info()


def _recorded_cells():
    """(test id, fp32's and the mode's device round times in seconds per step, the check it was judged by) of
    each speed cell of a real quick-tier run on an H100."""
    from pathlib import Path

    from ampbench.results import load_run
    from ampbench.results.ratios import DEVICE
    from ampbench.results.schema import FP32_SIDE, MODE_SIDE

    run = load_run(Path(__file__).parent / "data" / "h100_speed_device.json")
    for cell in run.of_kind(SpeedRecord):
        device = cell.ratio(DEVICE)
        ref, mode = device.side(FP32_SIDE).round_ms, device.side(MODE_SIDE).round_ms
        if cell.mode != "fp32" and ref and mode and device.baseline_speedup and device.tolerance is not None:
            yield (cell.test_id, [t / 1e3 for t in ref], [t / 1e3 for t in mode],
                   SpeedupCheck(cell.model, cell.mode, device.baseline_speedup, device.tolerance))


def test_a_recorded_run_whose_mode_blocks_lose_their_clock_is_never_failed_by_it():
    """The H100 run's own rounds, under a fake NVML trace: fp32's blocks at 1980 MHz, the mode's at 1980 in its
    first round and 10% lower under a power cap after, each dropped block's time lengthened by its clock. The
    drop fails no cell; the cell the run slowed on purpose (resnet50 amp_fp16, a spin kernel) still fails on
    its cycles: the reads hide no regression."""
    low, failed_unread, cells, failed_steady = 1782.0, 0, 0, 0
    for test_id, ref, mode, check in _recorded_cells():
        n = len(mode)
        mhz = [STEADY_MHZ] + [low] * (n - 1)
        dropped = Rounds(tuple(ref), tuple(t * STEADY_MHZ / m for t, m in zip(mode, mhz)), 10, 10,
                         tuple(_block(STEADY_MHZ) for _ in range(n)),
                         tuple(_block(m, POWER_CAP if m != STEADY_MHZ else 0) for m in mhz))
        steady = Rounds(tuple(ref), tuple(mode), 10, 10, tuple(_block(STEADY_MHZ) for _ in range(n)),
                        tuple(_block(STEADY_MHZ) for _ in range(n)))
        failed_unread += judge(_unread_measurement(_measured(dropped)), check)[0] is Verdict.REGRESSION
        verdict, judgement = judge(_measured(dropped), check)
        at_steady = judge(_measured(steady), check)
        assert (verdict is Verdict.REGRESSION) == (at_steady[0] is Verdict.REGRESSION), f"{test_id}: {judgement}"
        assert at_steady == judge(_unread_measurement(_measured(steady)), check), test_id
        cells, failed_steady = cells + 1, failed_steady + (at_steady[0] is Verdict.REGRESSION)
    assert cells >= 20 and failed_unread >= cells // 2, "the drop fails most cells where the clocks are not read"
    assert failed_steady == 1, "the run's one slowed cell fails, with its clocks read or not"
