"""The speed figures that summary.md and index.html both show, as data: the device-time and wall-clock
matrices, the host-bound cells and the kernel changes. Each page only formats what is chosen here, so
the two never disagree on which cells are listed or which verdict a figure carries."""

from __future__ import annotations

from dataclasses import dataclass

from ampbench.report.format import VERDICT_ORDER
from ampbench.report.run import Cell, Run, order_modes
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Verdict


@dataclass(frozen=True)
class SpeedFigure:
    """One of a speed cell's two speedups and the extra_info keys it is written under."""

    name: str  # "device" or "wall"
    key: str  # the speedup
    prefix: str  # of its interval's keys, as `Cell.estimate` reads them
    verdict_key: str  # its own verdict (a cell's `verdict` is the gated one)
    baseline_key: str
    title: str  # a matrix's heading where both figures are shown
    short: str  # what a chart or a legend calls it


DEVICE = SpeedFigure("device", "device_speedup", "device_", "device_verdict", "device_baseline_speedup",
                     "Speedup over fp32 in device time (the gate)", "device time")
WALL = SpeedFigure("wall", "speedup", "", "wall_verdict", "baseline_speedup",
                   "Wall-clock speedup of eager steps on this host", "wall clock")
FIGURES = (DEVICE, WALL)

# how each device-time method measured, as ampbench.devicetime.METHODS names them (that module needs torch)
METHODS = {
    "graph": "CUDA-graph replay of the whole step",
    "kernels": "the profiler's kernel durations summed, where the step could not be captured",
    "wall": "the wall clock, on a device without CUDA",
}
# device verdicts under which a cell's kernel changes are only drift, not news
QUIET_DEVICE_VERDICTS = (None, Verdict.PASS.value, Verdict.NO_BASELINE.value)


@dataclass(frozen=True)
class MatrixEntry:
    """One model-by-mode cell of a matrix: the figure, its interval where complete, and its verdict."""

    value: float
    estimate: SpeedupEstimate | None
    verdict: str | None
    method: str | None  # the device-time method; None on the wall figure or where not written


def has_figure(run: Run, figure: SpeedFigure) -> bool:
    return any(c.number(figure.key) is not None for c in run.of_kind("speed"))


def used_methods(run: Run) -> list[str]:
    """The device-time methods the run's speed cells were measured by, in METHODS' order (known ones only)."""
    seen = {c.get("device_method") for c in run.of_kind("speed")
            if c.number(DEVICE.key) is not None and isinstance(c.get("device_method"), str)}
    return [m for m in METHODS if m in seen]


def matrix(run: Run, figure: SpeedFigure) -> tuple[list[str], list[tuple[str, list[MatrixEntry | None]]]]:
    """(modes, [(model, one entry or None per mode)]): models down, modes across, in the run's order."""
    cells = run.of_kind("speed")
    modes = order_modes(c.mode for c in cells)
    by_key: dict[tuple[str, str], Cell] = {}
    for c in cells:
        by_key.setdefault((c.model, c.mode), c)
    rows = []
    for model in dict.fromkeys(c.model for c in cells):
        rows.append((model, [_entry(by_key.get((model, mode)), figure) for mode in modes]))
    return modes, rows


def _entry(cell: Cell | None, figure: SpeedFigure) -> MatrixEntry | None:
    value = cell.number(figure.key) if cell is not None else None
    if value is None:
        return None
    # a run from before the device-time gate has one speedup and its verdict under "verdict"
    own = cell.get(figure.verdict_key)
    method = cell.get("device_method") if figure is DEVICE else None
    return MatrixEntry(value, cell.estimate(figure.prefix), own if isinstance(own, str) else cell.verdict,
                       method if isinstance(method, str) else None)


def host_bound_cells(run: Run) -> list[Cell]:
    """Speed cells whose eager step left the device idle more than a tenth of the time."""
    return [c for c in run.of_kind("speed") if c.get("host_bound") is True]


def kernel_change_cells(run: Run) -> list[tuple[Cell, str]]:
    """(cell, its kernel changes against the baseline) for every speed cell that has them: the notable
    ones first (regressions, then inconclusive, improved...), the rest after them in run order."""
    found = [(c, c.get("kernel_changes")) for c in run.of_kind("speed")]
    found = [(c, text) for c, text in found if isinstance(text, str) and text]
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}

    def order(item: tuple[Cell, str]) -> tuple[bool, int]:
        verdict = item[0].get("device_verdict")
        return not notable(item[0]), rank.get(verdict if isinstance(verdict, str) else "", len(rank))

    return sorted(found, key=order)


def notable(cell: Cell) -> bool:
    """Whether a cell's device verdict makes its kernel changes worth a line in a short summary."""
    return cell.get("device_verdict") not in QUIET_DEVICE_VERDICTS
