"""A compiled speed cell's second ratio: the mode against its versus side (itself eager: the compile gain;
compiled amp_bf16 for the fp8 modes), timed in device time like the first, judged against its own
baseline figure, joining the cell's verdict under the device gate, recorded, read back and shown in the
report's matrices."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.file import BaselineError, measurement_mismatch, validate_entry
from ampbench.models import get_model
from ampbench.modes import compiled, get_mode, label, versus_figure, versus_of
from ampbench.report import build_report, render_markdown
from ampbench.report.speed_cells import COMPILE_GAIN_TITLE, versus_matrices
from ampbench.results import FP32_SIDE, VERSUS_SIDE, Run, SpeedRecord, Verdict
from ampbench.results.ratios import DEVICE, VERSUS
from ampbench.settings import PerfSettings
from ampbench.speed import sides
from ampbench.speed.cell import measure_speed, policy
from ampbench.speed.clocks import CLOCKS, Clock
from ampbench.speed.compiled import VersusSides, served
from ampbench.speed.ratio import Ratio
from ampbench.speed.timing import PairedTimer, RoundsPolicy
from ampbench.tolerance import UNLEARNED_TOLERANCE
from tests import records
from tests.references import against_entry, entry_check, file_reference

CPU = torch.device("cpu")
AMP_BF16, FP8_T = get_mode("amp_bf16"), get_mode("fp8_tensorwise")


# -- which side, and what the ratio is called ----------------------------------------------------------

def test_a_compiled_mode_is_held_against_itself_eager_and_fp8_against_compiled_amp_bf16():
    assert versus_of(AMP_BF16) is None and versus_figure(AMP_BF16) is None  # an eager cell has one ratio
    assert versus_of(compiled(AMP_BF16)) == AMP_BF16
    assert versus_figure(compiled(AMP_BF16)) == "compile gain over amp_bf16"
    for name in ("fp8_tensorwise", "fp8_rowwise"):
        assert versus_of(get_mode(name)) == compiled(AMP_BF16)
        assert versus_figure(get_mode(name)) == "speedup over amp_bf16 compiled"
    assert served(["amp_fp16", "amp_bf16", "fp8_rowwise"]) == {"amp_bf16 compiled"}
    assert served(["amp_fp16", "amp_bf16"]) == set()


# -- timing and judging the ratio, on stand-in sides ---------------------------------------------------

POLICY = sides.SpeedPolicy(0, 0.0, 0.01, RoundsPolicy(8, 12, 0.001, 5.0), RoundsPolicy(8, 8, 1.0, 5.0), extend_to=16)


class FakeTiming:
    """Stands in for a device clock (``clocks.device_clock``): each round the versus side takes
    `versus_s`, the mode `mode_s`, with a little alternating noise, so the ratio's interval is narrow and
    known."""

    method, fallback = "graph", None

    def __init__(self, versus_s: float, mode_s: float):
        self.versus_s, self.mode_s, self.timers = versus_s, mode_s, 0

    def timer(self, versus, side, policy) -> PairedTimer:
        self.timers += 1
        wobble = iter([1.0, 1.001, 0.999] * 100)
        return PairedTimer(lambda: self.versus_s * next(wobble), lambda: self.mode_s * next(wobble), 1, 1)


def _versus(monkeypatch, mode, versus_s, mode_s, baseline, gated=True):
    timing = FakeTiming(versus_s, mode_s)
    monkeypatch.setitem(CLOCKS, "device", lambda versus, side: Clock(
        lambda policy: timing.timer(versus, side, policy), timing.method, timing.fallback))
    ratio = Ratio.between(VERSUS, object(), object(), versus_figure(mode), label(versus_of(mode)))
    return against_entry(ratio, "gpt", label(mode), SpeedEntry.of(baseline), 0.005).time(POLICY, gated), timing


def versus_check(model, mode, baseline, method, floor):
    ratio = Ratio(VERSUS, versus_figure(mode), label(versus_of(mode)), method)
    return entry_check(ratio, model, label(mode), SpeedEntry.of(baseline), floor)


def _recorded(vs, previous, comparable, measured_with):
    alike = previous is not None and measurement_mismatch(SpeedEntry.of(previous), measured_with) is None
    return vs.recorded(SpeedEntry.of(previous), comparable, alike, POLICY, 0.005)


def _entry(speedup: float, versus: str = "amp_bf16", **more) -> dict:
    return {"speedup": 2.0, "versus": versus, "versus_speedup": speedup, "versus_noise": 0.001,
            "versus_method": "graph", **more}


def test_without_a_baseline_the_ratio_is_measured_and_says_why_it_is_not_judged(monkeypatch):
    vs, _ = _versus(monkeypatch, compiled(AMP_BF16), 1.3, 1.0, None)
    assert vs.verdict is Verdict.NO_BASELINE and vs.check is None
    assert vs.estimate.speedup == pytest.approx(1.3, rel=0.01)
    assert (vs.message.startswith("compile gain over amp_bf16 (graph): 1.30")
            and "no baseline for this GPU" in vs.message)
    figures = vs.figures()
    assert vs.over == "amp_bf16" and figures.verdict is Verdict.NO_BASELINE
    assert figures.side(VERSUS_SIDE).step_ms == pytest.approx(1300, rel=0.01) and figures.baseline_speedup is None


@pytest.mark.parametrize("entry, why", [
    ({"speedup": 2.0}, "no baseline of this ratio over amp_bf16"),
    (_entry(1.3, versus="amp_bf16 compiled"), "no baseline of this ratio over amp_bf16"),  # another side's figure
    (_entry(1.3, versus_method="kernels"), "measured by kernels in the baseline and by graph here"),
])
def test_an_entry_without_a_comparable_figure_of_the_ratio_holds_nothing(entry, why):
    check, reason = versus_check("gpt", compiled(AMP_BF16), entry, "graph", 0.005)
    assert check is None and why in reason


def test_the_ratio_passes_at_its_baseline_with_a_tolerance_from_its_own_noise(monkeypatch):
    # until its spread is learned, at least the unlearned floor; beyond it, twice its recorded noise
    vs, _ = _versus(monkeypatch, compiled(AMP_BF16), 1.3, 1.0, _entry(1.3, versus_noise=0.004))
    assert vs.verdict is Verdict.PASS and vs.check.tolerance == UNLEARNED_TOLERANCE
    assert vs.check.figure == "compile gain over amp_bf16" and vs.figures().baseline_speedup == 1.3
    vs, _ = _versus(monkeypatch, compiled(AMP_BF16), 1.3, 1.0, _entry(1.3, versus_noise=0.02))
    assert vs.check.tolerance == pytest.approx(0.04)


def test_an_fp8_cell_slower_than_its_baseline_over_compiled_bf16_is_a_confirmed_regression(monkeypatch):
    vs, timing = _versus(monkeypatch, FP8_T, 1.0, 1.0, _entry(1.2, versus="amp_bf16 compiled"))
    assert vs.verdict is Verdict.REGRESSION and timing.timers == 2  # a second, independent batch agreed
    assert "gpt fp8_tensorwise: speedup over amp_bf16 compiled 1.00" in vs.message
    assert vs.figures().confirm_speedup == pytest.approx(1.0, rel=0.01)


def test_a_ratio_that_does_not_gate_gets_its_first_look_only(monkeypatch):
    vs, timing = _versus(monkeypatch, FP8_T, 1.0, 1.0, _entry(1.2, versus="amp_bf16 compiled"), gated=False)
    assert vs.verdict is Verdict.REGRESSION and timing.timers == 1 and vs.confirmation is None


def test_a_recording_stores_the_ratio_pooled_with_its_noise_and_tolerance(monkeypatch):
    vs, timing = _versus(monkeypatch, compiled(AMP_BF16), 1.3, 1.0, None)
    figures = _recorded(vs, None, False, MEASURED_WITH)
    assert timing.timers == 2  # the recording's noise batch
    assert figures["versus"] == "amp_bf16" and figures["versus_method"] == "graph"
    assert figures["versus_speedup"] == pytest.approx(1.3, rel=0.01)
    assert figures["versus_rounds"] == vs.estimate.rounds + 8  # both batches pooled
    assert figures["versus_tolerance"] == max(0.005, 2 * figures["versus_noise"], UNLEARNED_TOLERANCE)
    validate_entry("test_speed[gpt-amp_bf16-compiled]", {"figures": {**figures, "speedup": 2.0}}, Path("b.json"))


MEASURED_WITH = {"cudnn_benchmark": True, "block_seconds": 0.1}
LEARNED_VERSUS = {"versus": "amp_bf16", "versus_method": "graph", "versus_speedup": 1.25,
                  "versus_between_run_sd": 0.002,
                  "versus_between_run_count": 12, "versus_between_run_runs": ["a", "b"], **MEASURED_WITH}


def test_a_re_recording_on_other_software_keeps_the_ratios_learned_spread_and_its_tolerance(monkeypatch):
    vs, _ = _versus(monkeypatch, compiled(AMP_BF16), 1.3, 1.0, None)
    figures = _recorded(vs, LEARNED_VERSUS, False, MEASURED_WITH)
    assert figures["versus_between_run_sd"] == 0.002 and figures["versus_between_run_count"] == 12
    assert figures["versus_between_run_runs"] == ["a", "b"]
    assert figures["versus_tolerance"] < UNLEARNED_TOLERANCE
    # measured with other settings or over another side, the ratio is another figure: its spread goes
    for previous, measured in (({**LEARNED_VERSUS, "versus": "amp_fp16"}, MEASURED_WITH),
                               (LEARNED_VERSUS, {**MEASURED_WITH, "block_seconds": 0.4})):
        other = _recorded(vs, previous, False, measured)
        assert "versus_between_run_sd" not in other and other["versus_tolerance"] >= UNLEARNED_TOLERANCE


def test_a_baseline_file_with_an_unusable_ratio_is_refused():
    with pytest.raises(BaselineError, match="versus_speedup"):
        validate_entry("test_speed[gpt-fp8_rowwise]", {"figures": {"speedup": 2.0, "versus_speedup": -1.0}},
                       Path("b.json"))


# -- the cell, end to end on the CPU: real trainers, a baseline the ratio cannot meet ------------------

class FakeStore:
    """The parts of a BaselineFile that measure_speed reads and writes."""

    exists, path = True, Path("baselines/test.json")

    def __init__(self, figures: dict | None):
        self.stored, self.recorded = figures, {}

    def figures(self, test_id):
        return self.stored

    def entry(self, test_id):
        return SpeedEntry.of(self.stored)

    def software(self, test_id):
        return None

    def reference(self, test_id, kind, floor):
        return file_reference(kind, floor, self.entry(test_id))

    def record(self, test_id, figures, software):
        self.recorded[test_id] = figures


def _settings(**overrides) -> PerfSettings:
    base = PerfSettings(device=CPU, models=("mlp",), precisions=("amp_bf16",), tier="quick", baseline_dir=Path("b"),
                        update_baselines=False, tolerance=0.005, strict=False, min_rounds=8, memory_cap_gib=None,
                        data_root=None, loader_workers=0, pin_memory=False, loss_scaler="torch.amp:GradScaler",
                        block_seconds=0.002, cudnn_benchmark=False, gate="device", compile=(True,))
    return replace(base, **overrides)


def _cell(store: FakeStore, settings: PerfSettings):
    """mlp's compiled amp_bf16 cell, on eager trainers (what is timed does not matter here, only what
    the cell makes of it): the ratio over amp_bf16 eager cannot reach the baseline's 100x."""
    spec = get_model("mlp")
    pol = policy(CPU, settings)
    side = lambda mode: sides.prepare_side(spec, mode, CPU, True, pol)  # noqa: E731
    identities = []
    cell = measure_speed(spec, compiled(AMP_BF16), side(get_mode("fp32")), lambda: side(AMP_BF16),
                         versus=lambda: side(AMP_BF16), settings=settings, device=CPU,
                         test_id="test_speed[mlp-amp_bf16-compiled]", source=store, software={"torch": "x"},
                         peak_tflops=lambda dtype: None, prepared=identities.append)
    return cell, identities


def test_a_regressed_compile_gain_fails_the_cell_and_its_message_names_the_ratio():
    entry = {"speedup": 0.01, "device_speedup": 0.01, "device_method": "wall", "versus": "amp_bf16",
             "versus_speedup": 100.0, "versus_method": "wall"}
    cell, identities = _cell(FakeStore(entry), _settings())
    record = cell.record
    assert identities and identities[0].mode == "amp_bf16 compiled"
    assert (record.ratio(DEVICE).verdict in (Verdict.PASS, Verdict.IMPROVED)
            and record.ratio(VERSUS).verdict is Verdict.REGRESSION)
    assert record.verdict is Verdict.REGRESSION and not cell.problems
    assert record.message.startswith("compile gain over amp_bf16 regression: device time (wall): ")
    assert "mlp amp_bf16 compiled: compile gain over amp_bf16" in record.message
    versus = record.ratio(VERSUS)
    assert record.versus == "amp_bf16" and versus.baseline_speedup == 100.0
    assert versus.speedup_low <= versus.speedup <= versus.speedup_high


def test_under_the_wall_gate_the_ratio_is_reported_but_holds_nothing():
    entry = {"speedup": 0.01, "device_speedup": 0.01, "device_method": "wall", "versus": "amp_bf16",
             "versus_speedup": 100.0, "versus_method": "wall"}
    record = _cell(FakeStore(entry), _settings(gate="wall"))[0].record
    assert record.ratio(VERSUS).verdict is Verdict.REGRESSION and record.verdict is not Verdict.REGRESSION
    # card admission reads the cell's fp32 step; a source that is no baseline file or history holds no level
    assert record.card.step_ms == record.ratio(DEVICE).side(FP32_SIDE).step_ms > 0, record.card
    assert record.card.outlier is None and record.card.unchecked.startswith("no other card's fp32 step")


def test_recording_a_compiled_cell_stores_its_second_ratio():
    store = FakeStore(None)
    cell, _ = _cell(store, _settings(update_baselines=True))
    figures = store.recorded["test_speed[mlp-amp_bf16-compiled]"]
    assert figures["versus"] == "amp_bf16" and figures["versus_method"] == "wall"
    assert figures["versus_speedup"] > 0 and figures["versus_noise"] >= 0
    assert figures["versus_tolerance"] >= 0.005 and figures["versus_rounds"] == 16
    assert "compile_s" in figures and cell.record.ratio(VERSUS).speedup is not None


def test_an_eager_cell_has_no_versus_side():
    spec = get_model("mlp")
    with pytest.raises(ValueError, match="a versus side is needed exactly where the cell is compiled"):
        measure_speed(spec, AMP_BF16, None, lambda: None, versus=lambda: None, settings=_settings(), device=CPU,
                      test_id="t", source=None, software={}, peak_tflops=lambda d: None, prepared=lambda r: None)


# -- the versus sides kept between cells ---------------------------------------------------------------

def test_compiled_amp_bf16s_own_side_serves_the_fp8_cells_and_other_versus_sides_go():
    sides = VersusSides(served(["amp_fp16", "amp_bf16", "fp8_tensorwise", "fp8_rowwise"]))
    built = []

    def make(name):
        return lambda: built.append(name) or name

    # amp_fp16 compiled: its eager side serves this cell only
    assert sides.get("gpt", get_mode("amp_fp16"), make("amp_fp16")) == "amp_fp16"
    assert sides.offer("gpt", compiled(get_mode("amp_fp16")), "amp_fp16 compiled side") == "amp_fp16 compiled side"
    assert sides.settle() and sides.side is None
    # amp_bf16 compiled: timed against amp_bf16 eager; its own side is kept in its place
    sides.get("gpt", AMP_BF16, make("amp_bf16"))
    sides.offer("gpt", compiled(AMP_BF16), "amp_bf16 compiled side")
    assert not sides.settle() and sides.side == "amp_bf16 compiled side"
    # both fp8 cells are timed against it: nothing more is built or compiled
    for _ in range(2):
        assert sides.get("gpt", versus_of(FP8_T), make("compiled again")) == "amp_bf16 compiled side"
        sides.offer("gpt", FP8_T, "fp8 side")
        assert not sides.settle()
    assert built == ["amp_fp16", "amp_bf16"]
    # another model's cells build their own
    assert sides.get("llama", versus_of(FP8_T), make("llama amp_bf16 compiled")) == "llama amp_bf16 compiled"


# -- records and the report ----------------------------------------------------------------------------

def _record(model: str, mode: str, versus: str | None, value: float | None, verdict=Verdict.PASS) -> SpeedRecord:
    ratio = {} if versus is None else dict(
        versus=versus, versus_method="graph", versus_speedup=value, versus_speedup_low=value * 0.99,
        versus_speedup_high=value * 1.01, versus_rounds=8, versus_verdict=verdict, versus_baseline_speedup=value)
    return records.speed(test_id=f"test_speed[{model}-{mode.replace(' compiled', '-compiled')}]", model=model,
                         mode=mode,
                       device="cuda:0", speedup=2.0, speedup_low=1.9, speedup_high=2.1, rounds=8, confidence=0.99,
                       device_speedup=2.0, device_speedup_low=1.98, device_speedup_high=2.02, device_rounds=8,
                       device_method="graph", device_verdict=Verdict.PASS, verdict=verdict, **ratio)


def test_a_record_keeps_its_second_ratio_through_json_and_checks_its_interval():
    record = _record("gpt", "fp8_rowwise", "amp_bf16 compiled", 0.92, Verdict.REGRESSION)
    info = json.loads(json.dumps(record.to_info()))
    back = SpeedRecord.from_info(info, record.test_id)
    assert back == record and back.estimate(VERSUS).speedup == 0.92 and back.ratio(VERSUS).verdict is Verdict.REGRESSION
    assert _record("gpt", "amp_bf16", None, None).estimate(VERSUS) is None
    info["ratios"]["versus"]["speedup_low"] = 0.95  # above its own estimate
    assert any("extra_info.ratios.versus.speedup_low" in p
               for p in SpeedRecord.problems(info, "benchmarks[0].extra_info"))


def _run() -> Run:
    cells = [
        _record("gpt", "amp_bf16", None, None),
        _record("gpt", "amp_fp16 compiled", "amp_fp16", 1.10),
        _record("gpt", "amp_bf16 compiled", "amp_bf16", 1.15),
        _record("gpt", "fp8_tensorwise", "amp_bf16 compiled", 0.95, Verdict.REGRESSION),
        _record("gpt", "fp8_rowwise", "amp_bf16 compiled", 0.88),
        _record("llama", "amp_bf16 compiled", "amp_bf16", 1.05),
        _record("llama", "fp8_rowwise", "amp_bf16 compiled", 1.21),
    ]
    return Run(Path("run.json"), {"device": "NVIDIA H100 80GB HBM3"}, "2026-01-01T00:00:00", {}, cells)


def test_the_report_has_a_matrix_of_compile_gains_and_one_of_fp8_over_compiled_bf16():
    gains, fp8 = versus_matrices(_run())
    assert gains.title == COMPILE_GAIN_TITLE and gains.modes == ["amp_fp16 compiled", "amp_bf16 compiled"]
    assert [(m, [e.value if e else None for e in row]) for m, row in gains.rows] == [
        ("gpt", [1.10, 1.15]), ("llama", [None, 1.05])]
    assert fp8.title == "Speedup over amp_bf16 compiled, in device time"
    assert fp8.modes == ["fp8_tensorwise", "fp8_rowwise"]
    assert [(m, [e.value if e else None for e in row]) for m, row in fp8.rows] == [
        ("gpt", [0.95, 0.88]), ("llama", [None, 1.21])]
    assert fp8.rows[0][1][0].verdict == "regression" and fp8.rows[0][1][0].estimate.low == pytest.approx(0.9405)
    assert versus_matrices(Run(Path("r.json"), {}, None, {}, [_record("gpt", "amp_bf16", None, None)])) == []


def test_summary_md_and_index_html_show_each_ratio_with_its_interval():
    run = _run()
    md = render_markdown(run)
    gains = md[md.index(f"### {COMPILE_GAIN_TITLE}"):]
    assert "| gpt | 1.10x [1.09, 1.11] ✅ | 1.15x [1.14, 1.16] ✅ |" in gains
    assert "| llama | - | 1.05x [1.04, 1.06] ✅ |" in gains
    fp8 = md[md.index("### Speedup over amp_bf16 compiled, in device time"):]
    assert "| model | fp8_tensorwise | fp8_rowwise |" in fp8 and "0.95x [0.94, 0.96] ❌" in fp8
    html = build_report(run)["index.html"].decode()
    section = html[html.index("<h2>Speedup over amp_bf16 compiled"):]
    assert "1.21x" in section and "[1.20, 1.22]" in section and 'class="v v-regression"' in section
    assert f"<h2>{COMPILE_GAIN_TITLE}</h2>" in html


def test_the_fixtures_of_eager_runs_show_no_versus_matrix():
    run = json.loads((Path(__file__).parent / "data" / "h100_speed_device.json").read_text())
    assert "versus" not in json.dumps(run)
    from ampbench.report import load_run

    assert versus_matrices(load_run(Path(__file__).parent / "data" / "h100_speed_device.json")) == []


def test_compare_holds_the_ratio_over_the_versus_side_against_the_old_run():
    from ampbench.report.compare import compare_cells

    old = _record("gpt", "fp8_tensorwise", "amp_bf16 compiled", 0.86)
    rows = compare_cells(old, _record("gpt", "fp8_tensorwise", "amp_bf16 compiled", 0.80))
    versus = [r for r in rows if r.figure == "over amp_bf16 compiled"]
    assert [r.figure for r in rows][0] == "device speedup" and len(versus) == 1
    assert versus[0].verdict is Verdict.REGRESSION and "speedup over amp_bf16 compiled 0.800x" in versus[0].message
    assert compare_cells(old, old)[1].verdict is Verdict.PASS
    # a ratio over another side, or measured another way, has nothing old to be held against
    other = compare_cells(_record("gpt", "fp8_tensorwise", "amp_bf16", 0.86), old)[1]
    assert other.verdict is Verdict.NO_BASELINE
    assert len(compare_cells(_record("gpt", "amp_bf16", None, None), _record("gpt", "amp_bf16", None, None))) == 1
