"""A kind of ratio is one row of its table (``ampbench.results.ratios``): a row added there, and nothing
else but its clock where no clock times it yet (``ampbench.speed.clocks.CLOCKS``), is held by the records,
the baseline entries, the spread, the history (its series, its rule, the `--figure` choices), the report,
the summary and the speed cell itself, which times, records, judges and gates on it; a row added to the
distributed table, reading a figure the cell measured (``ampbench.distributed.clocks.DIST_CLOCKS``), is
checked, judged, gated and written by the distributed cell; and every name a row gives is the one each
reader uses."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.schema import BaselineError, validate_entry
from ampbench.baselines.spread import spread_kinds
from ampbench.cli import history as history_cli
from ampbench.cli.args import build_parser
from ampbench.history.baseline_source import SPEED_CELLS
from ampbench.history.ingest import figures_of
from ampbench.history.learn import rule_for
from ampbench.plugin.summary import table
from ampbench.report.html import render_html
from ampbench.report.markdown import render_markdown
from ampbench.results import MODE_SIDE, SPEED_RATIOS, RatioFigures, Run, SpeedRecord, Verdict
from ampbench.results.ratios import DEVICE, DIST_WALL, DISTRIBUTED_RATIOS, WALL, history_figures, of_history
from ampbench.speed.ratio import Ratio
from ampbench.tolerance import UNLEARNED_TOLERANCE
from run_figures import page_text
from tests.references import entry_check

# a speedup over fp32 in some other clock, timed and judged as the wall clock's is, with a floor of its own
HOST = replace(WALL, name="host", prefix="host_", heading="host", label="host-time speedup", column="host speedup",
               title="Speedup over fp32 in host time", noun="host-time speedup", floor=0.02, renamed=())


@pytest.fixture
def host(monkeypatch) -> None:
    monkeypatch.setitem(SPEED_RATIOS, HOST.name, HOST)


def _figures(value: float, verdict: Verdict = Verdict.PASS) -> RatioFigures:
    return RatioFigures(speedup=value, speedup_low=value * 0.99, speedup_high=value * 1.01, rounds=8, confidence=0.99,
                        verdict=verdict)


def _record(mode: str, host_speedup: float) -> SpeedRecord:
    return SpeedRecord(test_id=f"test_speed[gpt-{mode}]", model="gpt", mode=mode, device="cuda:0", verdict=Verdict.PASS,
                       ratios={"device": _figures(2.5), "wall": _figures(2.0), "host": _figures(host_speedup)})


def test_a_record_holds_a_new_kind_by_its_name_and_reads_it_from_a_run_of_schema_1(host):
    record = _record("amp_bf16", 1.8)
    info = json.loads(json.dumps(record.to_info()))
    assert list(info["ratios"]) == ["device", "wall", "host"] and info["ratios"]["host"]["speedup"] == 1.8
    assert SpeedRecord.from_info(info, record.test_id) == record and record.estimate(HOST).speedup == 1.8
    older = SpeedRecord.from_info({"ampbench_schema": 1, "kind": "speed", "host_speedup": 1.8, "host_verdict": "pass"})
    assert older.ratio(HOST) == RatioFigures(speedup=1.8, verdict=Verdict.PASS) and not older.detail
    [bad] = SpeedRecord.problems({"ampbench_schema": 1, "kind": "speed", "host_speedup": -1.0}, "e")
    assert bad.startswith("e.host_speedup is -1")


def test_a_baseline_entry_holds_a_new_kind_under_its_prefix_and_checks_it_by_its_rule(host, tmp_path):
    figures = {"speedup": 2.0, "host_speedup": 1.7, "host_noise": 0.001, "host_method": None}
    entry = SpeedEntry.from_figures(figures)
    assert entry.ratio(HOST).speedup == 1.7 and not entry.detail and entry.to_figures() == figures
    validate_entry("test_speed[gpt-amp_bf16]", {"figures": figures}, tmp_path / "b.json")
    with pytest.raises(BaselineError, match="host_speedup"):
        validate_entry("test_speed[gpt-amp_bf16]", {"figures": {**figures, "host_speedup": -1.0}}, tmp_path / "b.json")
    check, why = entry_check(Ratio(HOST), "gpt", "amp_bf16", entry, 0.005)
    assert why == "" and check.expected == 1.7 and check.tolerance == max(HOST.floor, UNLEARNED_TOLERANCE)
    assert HOST in spread_kinds() and HOST.history == "host_speedup"


def test_a_history_keeps_a_new_kinds_series_learns_it_and_names_it_to_figure(host):
    rows = {row.name: row for row in figures_of(_record("amp_bf16", 1.8))}
    assert list(rows) == ["device_speedup", "speedup", "host_speedup"] and rows["host_speedup"].value == 1.8
    assert of_history("host_speedup") is HOST and rule_for("host_speedup", 0.005) == (0.02, UNLEARNED_TOLERANCE)
    assert HOST in SPEED_CELLS.ratios
    # the gated device-time series first, then the wall clock's and this one, then the memory cells'
    assert history_figures() == ("device_speedup", "versus_speedup",
                                 "device_scaling_efficiency", "speedup", "host_speedup")
    assert history_cli.figures()[-3:] == ("host_speedup", "memory_ratio", "max_batch_ratio")
    args = build_parser().parse_args(["history", "changes", "--figure", "host_speedup"])
    assert args.figure == "host_speedup"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["history", "explain", "test_speed[gpt-amp_bf16]", "--figure", "guessed_speedup"])


def test_the_report_and_the_summary_show_a_new_kind_in_a_matrix_and_a_column_of_its_own(host):
    run = Run(Path("run.json"), {"device": "NVIDIA H100 80GB HBM3"}, "2026-01-01T00:00:00", {},
              [_record("amp_bf16", 1.81), _record("fp16", 1.93)])
    md = render_markdown(run)
    host_matrix = md[md.index(f"### {HOST.title}"):]
    assert md.index(f"### {DEVICE.title}") < md.index(f"### {WALL.title}") < md.index(f"### {HOST.title}")
    assert "| gpt | 1.81x ✅ | 1.93x ✅ |" in host_matrix
    assert HOST.title in page_text(render_html(run, []))
    header, row = table(SpeedRecord, run.cells)[1], table(SpeedRecord, run.cells)[3]
    assert "host speedup" in header and "host verdict" in header and "1.810x [1.792, 1.828]" in row


def _cpu_settings(baseline_dir: Path):
    """A CPU run of mlp amp_bf16's eager speed cell, gated on device time, in short blocks."""
    from ampbench.settings import PerfSettings

    return PerfSettings(device=torch.device("cpu"), models=("mlp",), precisions=("amp_bf16",), tier="quick",
                        baseline_dir=baseline_dir, update_baselines=False, tolerance=0.005, strict=False, min_rounds=5,
                        memory_cap_gib=None, data_root=None, loader_workers=0, pin_memory=False,
                        loss_scaler="torch.amp:GradScaler", block_seconds=0.002, cudnn_benchmark=False, gate="device",
                        compile=(False,))


def test_the_speed_cell_times_and_records_a_new_kind(host):
    from ampbench.models import get_model
    from ampbench.modes import get_mode
    from ampbench.speed import sides
    from ampbench.speed.cell import measure_speed, policy

    cpu, spec = torch.device("cpu"), get_model("mlp")
    settings = _cpu_settings(Path("b"))
    side = lambda mode: sides.prepare_side(spec, mode, cpu, True, policy(cpu, settings))  # noqa: E731
    cell = measure_speed(spec, get_mode("amp_bf16"), side(get_mode("fp32")), lambda: side(get_mode("amp_bf16")),
                         settings=settings, device=cpu, test_id="test_speed[mlp-amp_bf16]", source=None, software={},
                         peak_tflops=lambda dtype: None, prepared=lambda identity: None)
    host = cell.record.ratio(HOST)
    assert list(cell.record.ratios) == ["device", "wall", "host"] and host.speedup > 0 and host.side(MODE_SIDE).round_ms
    assert host.verdict is Verdict.NO_BASELINE and "host" not in cell.record.gated  # the device gates
    assert "; host: speedup" in cell.record.message


# a speedup over fp32 in a clock of its own (``speed.clocks.CLOCKS``), gating the cell beside device time
STEADY = replace(WALL, name="steady", prefix="steady_", clock="steady", gate="device", label="steady speedup",
                 column="steady speedup", title="Speedup over fp32 in a steady clock", noun="steady speedup",
                 heading="steady", failing="steady speedup over fp32", short="steady", scope="steady clock",
                 missing="no steady baseline", floor=0.0, stores_tolerance=True, renamed=())
STEADY_CELL = "test_speed[mlp-amp_bf16]"


@pytest.fixture
def steady(monkeypatch) -> list[float]:
    """STEADY in the ratio table and its clock among the clocks, for one test: each round takes 16 ms on
    the side the ratio is over and `level[0]` times less on the mode's, within 0.1%."""
    from ampbench.speed.clocks import CLOCKS, Clock
    from ampbench.speed.timing import PairedTimer

    level = [1.6]
    timers = []

    def clock(over, side) -> Clock:
        def timer(policy) -> PairedTimer:
            wobble = itertools.cycle([1.0, 1.001, 0.999])
            timers.append(PairedTimer(lambda: 0.016 * next(wobble), lambda: 0.016 / level[0] * next(wobble), 1, 1))
            return timers[-1]
        return Clock(timer)
    monkeypatch.setitem(SPEED_RATIOS, STEADY.name, STEADY)
    monkeypatch.setitem(CLOCKS, STEADY.clock, clock)
    return level


def test_a_gated_kind_with_a_clock_of_its_own_is_timed_judged_recorded_and_written(steady, tmp_path):
    """A row in the ratio table and its clock, and nothing else: the speed cell times the new kind by its
    clock, records it into a baseline entry, judges it against the Reference that entry gives, gates on it
    and writes it into the record."""
    from ampbench.baselines.file import BaselineFile
    from ampbench.models import get_model
    from ampbench.modes import get_mode
    from ampbench.speed import sides
    from ampbench.speed.cell import measure_speed, policy

    cpu, spec, amp_bf16 = torch.device("cpu"), get_model("mlp"), get_mode("amp_bf16")
    settings = _cpu_settings(tmp_path)

    def cell(recording: bool) -> SpeedRecord:
        chosen = replace(settings, update_baselines=recording)
        store = BaselineFile.open(tmp_path, "GPU X", "gpu-x")
        side = lambda mode: sides.prepare_side(spec, mode, cpu, True, policy(cpu, chosen))  # noqa: E731
        record = measure_speed(spec, amp_bf16, side(get_mode("fp32")), lambda: side(amp_bf16), settings=chosen,
                               device=cpu, test_id=STEADY_CELL, source=store, software={"torch": "x"},
                               peak_tflops=lambda dtype: None, prepared=lambda identity: None).record
        if recording:
            store.write()
        return record

    recorded = cell(recording=True).ratio(STEADY)
    assert recorded.verdict is Verdict.NO_BASELINE and recorded.speedup == pytest.approx(1.6, rel=0.01)
    entry = SpeedEntry.of(BaselineFile.open(tmp_path, "GPU X", "gpu-x").figures(STEADY_CELL)).ratio(STEADY)
    assert entry.speedup == pytest.approx(1.6, rel=0.01) and entry.rounds == recorded.rounds + 8  # both sets pooled
    assert entry.tolerance is not None and entry.noise is not None

    judged = cell(recording=False)
    held = judged.ratio(STEADY)
    assert held.verdict is Verdict.PASS and held.baseline_speedup == entry.speedup
    assert held.tolerance == max(entry.tolerance, UNLEARNED_TOLERANCE)
    assert held.side(MODE_SIDE).step_ms == pytest.approx(10, rel=0.01)
    assert f"; steady: {spec.name} amp_bf16: speedup over fp32 1.6" in judged.message
    assert judged.to_info()["ratios"][STEADY.name]["speedup"] == held.speedup

    steady[0] = 1.44  # a tenth slower: below its line, confirmed by a second set of rounds, and it gates the cell
    slower = cell(recording=False)
    assert slower.ratio(STEADY).verdict is Verdict.REGRESSION and slower.verdict is Verdict.REGRESSION
    assert slower.ratio(STEADY).confirm_speedup == pytest.approx(1.44, rel=0.01)
    assert "steady speedup over fp32" in slower.message.split(": ")[0]  # named among the failing gated ratios


def test_each_name_a_row_gives_is_its_own():
    """Within a table no two kinds share a name, a prefix or a series, and no figure name of schema 1 or of
    a baseline entry stands for two figures of one kind."""
    from ampbench.baselines.entries import RatioEntry
    from ampbench.results.ratio_figures import RATIO_FIELDS as _FIELDS

    for ratios in (SPEED_RATIOS, DISTRIBUTED_RATIOS):
        kinds = list(ratios.values())
        for attribute in ("name", "prefix", "history"):
            values = [getattr(k, attribute) for k in kinds]
            assert len(set(values)) == len(values), attribute
        assert all(name == kind.name for name, kind in ratios.items())
        for kind in kinds:
            flat = [kind.flat(f) for f, _, _ in _FIELDS if kind.flat(f)]
            keys = [kind.entry_key(f) for f in RatioEntry.names() if kind.entry_key(f)]
            assert len(set(flat)) == len(flat) and len(set(keys)) == len(keys), kind.name


# a second wall-clock speedup of a distributed cell, reading the wall clock's estimate (its distributed clock,
# ``ampbench.distributed.clocks.DIST_CLOCKS``), under names and words of its own; it gates under --perf-gate wall
SPAN = replace(DIST_WALL, name="span", prefix="span_", label="span speedup", column="span speedup",
               heading="span speedup", noun="span speedup", renamed=())


@pytest.fixture
def span(monkeypatch) -> None:
    monkeypatch.setitem(DISTRIBUTED_RATIOS, SPAN.name, SPAN)


def _rank_docs(mode_s: float = 1.0) -> list[dict]:
    """Two ranks' documents: wall clock 2.0 s over `mode_s` per round, device time by the profiler about 3x."""
    rounds = 8
    return [{"rank": rank, "world_size": 2, "batch_size": 8, "ref_times": [2.0] * rounds,
             "mode_times": [mode_s] * rounds, "single_times": None, "idle_share": None, "device_method": "kernels",
             "device_fallback": "profiled", "device_ref_times": [1.5 + 0.01 * i for i in range(rounds)],
             "device_mode_times": [0.5] * rounds} for rank in range(2)]


def test_a_distributed_cell_checks_judges_gates_and_writes_a_new_kind(span, monkeypatch):
    """A row in the distributed table whose figure the run measured, and nothing else: the cell checks it
    against its baseline source's Reference, judges, confirms and group-rules it, gates on it under its row's
    gate, and writes it into the record's ratios and the message; the other figures are as they were."""
    from ampbench.baselines.entries import DistributedEntry
    from ampbench.distributed import judging
    from ampbench.distributed.figures import merge_ranks
    from ampbench.results import DistributedRecord
    from ampbench.tolerance import Reference
    from ampbench.verdict import combined
    from tests.references import file_reference

    docs = _rank_docs()
    figs = merge_ranks(docs, 0.99)  # wall 2.0x, device ~3.07x
    entry = DistributedEntry.from_figures({"speedup": 2.0, "noise": 0.001, "world_size": 2, "device_speedup": 3.0,
                                           "device_noise": 0.001, "device_method": "kernels",
                                           "span_speedup": 2.5, "span_noise": 0.001})
    assert entry.ratio(SPAN).speedup == 2.5 and not entry.detail

    def judged(against=lambda kind: file_reference(kind, 0.005, entry)) -> tuple:
        checks = judging.cell_checks(entry, figs, "gpt", "amp_bf16 fp32 x2", against)
        verdicts = judging.verdicts_of(figs, checks)
        message = judging.cell_message("gpt amp_bf16 fp32 (x2)", figs, checks, verdicts, None, gpu=True)
        return checks, verdicts, judging.ratio_figures(figs, checks, verdicts, docs), message

    checks, verdicts, ratios, message = judged()
    assert checks.of(SPAN.name).expected == 2.5 and checks.of(SPAN.name).tolerance == UNLEARNED_TOLERANCE
    assert verdicts == {"device": Verdict.PASS, "wall": Verdict.PASS, "span": Verdict.REGRESSION}
    # gated by its row's gate: not where device time holds the cell, where the wall clock's do
    assert combined(judging.gated_verdicts(verdicts, judging.gates_of("device", checks, figs))) is Verdict.PASS
    assert combined(judging.gated_verdicts(verdicts, judging.gates_of("wall", checks, figs))) is Verdict.REGRESSION
    # a confirming launch that does not repeat the drop leaves it inconclusive; one that does, a regression
    faster = merge_ranks(_rank_docs(mode_s=0.78), 0.99)  # ~2.56x
    assert judging.confirmed_by_launch(verdicts, checks, faster)[SPAN.name] is Verdict.INCONCLUSIVE
    assert judging.confirmed_by_launch(verdicts, checks, figs)[SPAN.name] is Verdict.REGRESSION

    span_part = f"; span speedup {figs.speedup}; against baseline 2.500x, line 2.425x (regression)"
    assert span_part in message
    assert list(ratios) == ["device", "wall", "span"]
    held = ratios[SPAN.name]
    assert held.speedup == figs.speedup.speedup and held.baseline_speedup == 2.5 and held.verdict is Verdict.REGRESSION
    assert held.line == checks.of(SPAN.name).line
    assert held.side(MODE_SIDE).round_ms == ratios["wall"].side(MODE_SIDE).round_ms  # read by the wall clock
    record = DistributedRecord(model="gpt", mode="amp_bf16", comm="fp32", verdict=Verdict.PASS, ratios=ratios)
    info = json.loads(json.dumps(record.to_info()))
    assert list(info["ratios"]) == ["device", "wall", "span"] and info["ratios"]["span"]["speedup"] == held.speedup
    assert DistributedRecord.from_info(info) == record and record.verdict_of(SPAN) is Verdict.REGRESSION

    # nothing else changed: without the row, the same figures, verdicts, message and recording
    with monkeypatch.context() as m:
        m.delitem(DISTRIBUTED_RATIOS, SPAN.name)
        plain_checks, plain_verdicts, plain_ratios, plain_message = judged()
        plain_recorded = judging.recorded_ratios(figs, 0.005)
    assert dict(plain_checks.checks) == {name: c for name, c in checks.checks.items() if name != SPAN.name}
    assert plain_verdicts == {name: v for name, v in verdicts.items() if name != SPAN.name}
    assert plain_ratios == {name: r for name, r in ratios.items() if name != SPAN.name}
    assert plain_message == message.replace(span_part, "")
    recorded = judging.recorded_ratios(figs, 0.005)
    assert list(recorded) == ["device", "wall", "scaling", "span"]  # a scaling efficiency unmeasured: null
    assert {name: row for name, row in recorded.items() if name != SPAN.name} == plain_recorded

    # the group rule of its history's Reference fails it where its own launch passed
    def grouped(kind):
        if kind is not SPAN:
            return file_reference(kind, 0.005, entry)
        return Reference.of(2.0, 0.005, 0.001, None, source="history",
                            group_failure=lambda value, tolerance: "below the line with run-3 and run-4")
    checks, verdicts, _, _ = judged(grouped)
    assert verdicts[SPAN.name] is Verdict.PASS
    together, why = judging.apply_group_rule(verdicts, checks, figs)
    assert together[SPAN.name] is Verdict.REGRESSION and why == "span speedup: below the line with run-3 and run-4"


def test_a_recorded_distributed_entry_holds_a_new_kind_under_its_prefix(span, tmp_path):
    """Recording a cell writes the new row's figures into its baseline entry under the row's prefix, after
    the cell's own figures, and the entry validates and reads the row back; the other figures keep their
    places."""
    from types import SimpleNamespace

    from ampbench.baselines.entries import DistributedEntry
    from ampbench.distributed.figures import merge_ranks
    from ampbench.suite.distributed import _record_entry

    recorded = []

    class Source:
        def record(self, test_id: str, figures: dict, software: dict) -> None:
            recorded.append(figures)

        def write(self) -> None:
            pass

    docs = _rank_docs()
    docs[0]["single_times"] = [0.9] * len(docs[0]["mode_times"])  # rank 0's 1-GPU side: a scaling efficiency
    figs = merge_ranks(docs, 0.99)
    settings = SimpleNamespace(block_seconds=0.1, cudnn_benchmark=False, tolerance=0.005)
    _record_entry(Source(), "test_ddp_speed[gpt-amp_bf16-fp32]", figs, docs, settings, {}, previous=None)
    (figures,) = recorded
    span_keys = ["span_speedup", "span_ci_low", "span_ci_high", "span_rounds", "span_noise"]
    assert list(figures)[-len(span_keys):] == span_keys and list(figures)[:5] == ["speedup", "ci_low", "ci_high",
                                                                                  "rounds", "noise"]
    assert [figures[k] for k in span_keys] == [figs.speedup.speedup, figs.speedup.low, figs.speedup.high,
                                               figs.speedup.rounds, figs.speedup.half_width]
    stored = json.loads(json.dumps(figures))
    validate_entry("test_ddp_speed[gpt-amp_bf16-fp32]", {"figures": stored}, tmp_path / "b.json")
    entry = DistributedEntry.from_figures(stored)
    assert entry.ratio(SPAN).speedup == figs.speedup.speedup and entry.ratio(SPAN).rounds == figs.speedup.rounds
    assert entry.ratio(DIST_WALL) == entry.ratio(SPAN) and not any(k.startswith("span_") for k in entry.detail)
    assert entry.to_figures() == stored and list(entry.to_figures()) == list(stored)
