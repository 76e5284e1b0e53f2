"""A kind of ratio is one row of its table (``ampbench.results.ratios``): a row added there, and nothing
else, is held by the records, the baseline entries, the spread, the history (its series, its rule, the
`--figure` choices), the report, the summary and the speed cell itself; and every name a row gives is
the one each reader uses."""

from __future__ import annotations

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
from ampbench.history.ingest import figures_of
from ampbench.history.learn import rule_for
from ampbench.history.reference import SPEED_CELLS
from ampbench.plugin.summary import table
from ampbench.report.html import render_html
from ampbench.report.markdown import render_markdown
from ampbench.results import MODE_SIDE, SPEED_RATIOS, RatioFigures, Run, SpeedRecord, Verdict
from ampbench.results.ratios import DEVICE, DISTRIBUTED_RATIOS, WALL, history_figures, of_history
from ampbench.speed.ratio import Ratio
from ampbench.verdict import UNLEARNED_TOLERANCE
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


def test_the_speed_cell_times_and_records_a_new_kind(host):
    from ampbench.models import get_model
    from ampbench.modes import get_mode
    from ampbench.settings import PerfSettings
    from ampbench.speed import sides
    from ampbench.speed.cell import measure_speed, policy

    cpu, spec = torch.device("cpu"), get_model("mlp")
    settings = PerfSettings(device=cpu, models=("mlp",), precisions=("amp_bf16",), tier="quick", baseline_dir=Path("b"),
                            update_baselines=False, tolerance=0.005, strict=False, min_rounds=5, memory_cap_gib=None,
                            data_root=None, loader_workers=0, pin_memory=False, loss_scaler="torch.amp:GradScaler",
                            block_seconds=0.002, cudnn_benchmark=False, gate="device", compile=(False,))
    side = lambda mode: sides.prepare_side(spec, mode, cpu, True, policy(cpu, settings))  # noqa: E731
    cell = measure_speed(spec, get_mode("amp_bf16"), side(get_mode("fp32")), lambda: side(get_mode("amp_bf16")),
                         settings=settings, device=cpu, test_id="test_speed[mlp-amp_bf16]", store=None, software={},
                         peak_tflops=lambda dtype: None, prepared=lambda identity: None)
    host = cell.record.ratio(HOST)
    assert list(cell.record.ratios) == ["device", "wall", "host"] and host.speedup > 0 and host.side(MODE_SIDE).round_ms
    assert host.verdict is Verdict.NO_BASELINE and "host" not in cell.record.gated  # the device gates
    assert "; host: speedup" in cell.record.message


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
