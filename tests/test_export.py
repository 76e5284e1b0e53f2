"""``ampbench export``: each format against the schema its consumer documents (tests/data/consumers/, each
schema naming its source), a field missing from an export fails that check, older runs are exported
whole, and a slowdown shows, in what the dashboards read, on the slowed cells only."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.export import (
    CONBENCH_REFUSAL,
    MARGIN_MEASURE,
    bmf,
    cell_margins,
    gated_figures,
    github,
    github_margin,
    pytest_benchmark,
)
from ampbench.results import parse_run
from ampbench.results.schema import UNTIMED_KEY

jsonschema = pytest.importorskip("jsonschema", reason="the consumers' schemas are checked with jsonschema "
                                 "(pip install -e '.[test]')")

DATA = Path(__file__).parent / "data"
H100 = DATA / "h100_speed_device.json"  # a real quick-tier run on an H100, device-time speedups gated
SYNTHETIC = DATA / "synthetic_h100_device.json"  # every kind of cell, device-time speedups


def schema(name: str) -> dict:
    return json.loads((DATA / "consumers" / f"{name}.schema.json").read_text())


def problems(document, name: str) -> list[str]:
    validator = jsonschema.Draft7Validator(schema(name))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def document(path: Path) -> dict:
    return json.loads(path.read_text())


def figures_of(doc: dict, name: str = "run.json"):
    return gated_figures(parse_run(doc, name))


@pytest.mark.parametrize("path", [H100, SYNTHETIC, DATA / "synthetic_h100_quick.json", DATA / "h100_run.json",
                                  DATA / "cpu_smoke.json"])
def test_each_format_fits_its_consumers_schema(path):
    figures = figures_of(document(path), path.name)
    assert problems(bmf(figures), "bencher_bmf") == []
    assert problems(github(figures), "github_custom") == []
    if cell_margins(figures):  # a run held to no baseline has no margin, and the export refuses it
        assert problems(github_margin(figures), "github_custom") == []
    migrated = pytest_benchmark(document(path))
    assert problems(migrated, "github_pytest") == [] and problems(migrated, "bencher_pytest") == []


@pytest.mark.parametrize("name, make, drop", [
    ("bencher_bmf", lambda f: bmf(f), lambda d: d["test_speed[gpt-amp_fp16]"]["device-speedup"].pop("value")),
    ("github_custom", lambda f: github(f), lambda d: d[0].pop("unit")),
    ("github_custom", lambda f: github(f), lambda d: d[0].pop("value")),
    ("github_custom", lambda f: github(f), lambda d: d[0].update(range="0.01")),  # no ± the action reads
])
def test_a_missing_field_fails_the_check(name, make, drop):
    exported = make(figures_of(document(H100)))
    assert problems(exported, name) == []
    drop(exported)
    assert problems(exported, name), f"{name}: an export without the field still passed"


def test_an_entry_without_stats_fails_the_pytest_readers_check():
    doc = document(H100)
    del doc["benchmarks"][3]["stats"]
    assert problems(doc, "github_pytest") and problems(doc, "bencher_pytest")
    # migrated, it sits beside the benchmarks, where neither reader looks
    migrated = pytest_benchmark(doc)
    assert problems(migrated, "github_pytest") == [] and problems(migrated, "bencher_pytest") == []
    assert [e["name"] for e in migrated[UNTIMED_KEY]] == [doc["benchmarks"][3]["name"]]


def test_bmf_carries_each_gated_figure_with_its_interval():
    doc = document(H100)
    exported = bmf(figures_of(doc))
    info = next(b["extra_info"] for b in doc["benchmarks"] if b["name"] == "test_speed[gpt-amp_fp16]")
    assert exported["test_speed[gpt-amp_fp16]"] == {"device-speedup": {
        "value": info["device_speedup"], "lower_value": info["device_speedup_low"],
        "upper_value": info["device_speedup_high"]},
        MARGIN_MEASURE: {"value": pytest.approx((1 - info["device_speedup_high"] / info["device_baseline_speedup"])
                                                / info["device_tolerance"])}}
    assert len(exported) == len(doc["benchmarks"])  # every speed cell of the run


def test_every_kind_with_a_gated_figure_is_exported_and_the_rest_named():
    figures = figures_of(document(SYNTHETIC))
    measures = {f.measure for f in figures.figures}
    assert {"device-speedup", "memory-ratio", "accuracy-gap"} <= measures, measures
    gap = next(f for f in figures.figures if f.measure == "accuracy-gap")
    cell = next(c for c in figures.run.cells if c.test_id == gap.test_id)
    assert gap.value == pytest.approx(100 * (cell.accuracy - cell.accuracy_ref)) and gap.unit == "pts"
    entries = {e["name"]: e for e in github(figures)}
    memory = next(f for f in figures.figures if f.measure == "memory-ratio")
    shown = entries[f"{memory.test_id} fp32's peak memory / the mode's"]
    assert shown["value"] == pytest.approx(1 / memory.value)  # bigger is better, as the tool assumes


def test_an_older_run_without_stats_is_exported_whole(tmp_path, capsys):
    """A run as the history's unappended file writes it (name and extra_info only): nothing dropped."""
    doc = document(SYNTHETIC)
    old = {"machine_info": doc["machine_info"], "datetime": doc["datetime"], "commit_info": {},
           "benchmarks": [{"name": b["name"], "extra_info": b["extra_info"]} for b in doc["benchmarks"]]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    out = tmp_path / "bmf.json"
    assert main(["export", str(path), "--format", "bmf", "-o", str(out)]) == 0
    exported, err = json.loads(out.read_text()), capsys.readouterr().err
    figures = figures_of(doc)
    assert sum(len(m) for m in exported.values()) == len(figures.figures) + len(cell_margins(figures))
    for test_id, why in figures.left_out:  # the cells without a gated figure, each named
        assert f"{test_id} left out: {why}" in err


def test_conbench_is_refused_saying_why(tmp_path, capsys):
    assert main(["export", str(H100), "--format", "conbench", "-o", str(tmp_path / "c.json")]) == 2
    assert CONBENCH_REFUSAL in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def test_a_file_that_is_no_run_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "x.json"
    path.write_text('{"benchmarks": [{"name": "t", "stats": {}}]}')
    assert main(["export", str(path), "--format", "github"]) == 2
    assert "ampbench export: error:" in capsys.readouterr().err


# -- what the dashboards see of a slowdown ---------------------------------------------------------

SLOWED = ("test_speed[gpt-amp_bf16]", "test_speed[mlp-amp_fp16]", "test_speed[resnet50-fp16_master]")


def _slowed_run() -> dict:
    """The H100 run again, with three cells slowed by 1% of their step (the device speedup and its interval
    divided by 1.01), and every other cell moved by half its interval's half-width, alternately up and
    down: run-to-run noise inside the interval. (gpt amp_fp16, whose tolerance in this run is 3%, would
    not move beyond it with 1%.)"""
    doc = copy.deepcopy(document(H100))
    for i, bench in enumerate(doc["benchmarks"]):
        info = bench["extra_info"]
        low, high = info["device_speedup_low"], info["device_speedup_high"]
        factor = 1 / 1.01 if bench["name"] in SLOWED else 1 + (-1) ** i * 0.25 * (high - low) / info["device_speedup"]
        for key in ("device_speedup", "device_speedup_low", "device_speedup_high"):
            info[key] *= factor
    return doc


def _tolerance(entry: dict) -> float:
    line = next(x for x in entry["extra"].splitlines() if x.startswith("tolerance: "))
    return float(line.removeprefix("tolerance: ").removesuffix("%")) / 100


def test_the_slowed_cells_and_only_they_move_beyond_their_tolerance_in_both_dashboards():
    before, after = figures_of(document(H100)), figures_of(_slowed_run())
    # github-action-benchmark, customBiggerIsBetter: a bench alerts where previous / current value
    # exceeds the threshold; each cell's own tolerance stands for it here
    old = {e["name"]: e for e in github(before)}
    alerts = {e["name"].split(" ")[0] for e in github(after)
              if old[e["name"]]["value"] / e["value"] > 1 + _tolerance(e)}
    assert alerts == set(SLOWED)
    # Bencher: the metric of each benchmark and measure, against the previous one
    prev, new = bmf(before), bmf(after)
    tolerance = {f.test_id: f.tolerance for f in after.figures}
    moved = {name for name, measures in new.items()
             if measures["device-speedup"]["value"] < prev[name]["device-speedup"]["value"] * (1 - tolerance[name])}
    assert moved == set(SLOWED)


def test_the_example_dashboard_workflow_exports_a_format_and_charts_the_gpu_workflows_run():
    root = DATA.parents[1] / "examples"
    workflow, gpu = (root / "github-actions-dashboard.yml").read_text(), (root / "github-actions-gpu.yml").read_text()
    command = next(line.strip() for line in workflow.splitlines() if line.strip().startswith("ampbench export"))
    args = command.split()[1:]
    assert args[args.index("--format") + 1] == "github" and "tool: customBiggerIsBetter" in workflow
    # the artifact it fetches: by actions/download-artifact's `name:`, or by `gh run download --name`
    fetched = re.search(r"uses: actions/download-artifact@\S+\n\s+with:\n(?:\s+[\w-]+:.*\n)*?\s+name: (\S+)", workflow)
    artifact = fetched.group(1) if fetched else workflow.split("--name ")[1].split()[0]
    assert f"name: {artifact}\n" in gpu and "out.json" in gpu  # the artifact the GPU workflow uploads
    from ampbench.cli.args import build_parser
    parsed = build_parser().parse_args(args)
    assert parsed.command == "export" and parsed.format == "github"
