"""The speed figures that summary.md and index.html both show, as data: a matrix per ratio over fp32 (the
device-time and wall-clock speedups: the rows of ``results.ratios`` with a title), those of compiled
cells' second ratios (compile gains, fp8 over compiled amp_bf16), the host-bound cells, each cell's energy
per step against fp32's and the kernel changes. Each page only formats what is chosen here, so the two never
disagree on which cells are listed or which verdict a figure carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ampbench.modes import MODES, compiled, label, order_modes
from ampbench.nvml import Energy
from ampbench.report.figure_text import fmt_number
from ampbench.report.format import VERDICT_ORDER
from ampbench.results import FP32_MODE, MODE_SIDE, SPEED_RATIOS, RatioKind, Run, SpeedRecord
from ampbench.results.ratios import DEVICE, VERSUS
from ampbench.results.run import mode_of, model_of
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Verdict


def over_fp32() -> list[RatioKind]:
    """The speed cells' ratios over fp32 that have a matrix of their own (a row's `title`), in their
    table's order: the device-time speedup (the gate), then the wall-clock one."""
    return [kind for kind in SPEED_RATIOS.values() if kind.title]


# how each device-time method measured, as ampbench.speed.devicetime.METHODS names them (that module needs torch)
METHOD_LABELS = {
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


def has_figure(run: Run, kind: RatioKind) -> bool:
    return any(c.ratio(kind).speedup is not None for c in run.of_kind(SpeedRecord))


def used_methods(run: Run) -> list[str]:
    """The device-time methods the run's speed cells were measured by, in METHOD_LABELS' order (known ones only)."""
    seen = {r.method for c in run.of_kind(SpeedRecord) if (r := c.ratio(DEVICE)).speedup is not None and r.method}
    return [m for m in METHOD_LABELS if m in seen]


def matrix(run: Run, kind: RatioKind) -> tuple[list[str], list[tuple[str, list[MatrixEntry | None]]]]:
    """(modes, [(model, one entry or None per mode)]): models down, modes across, in the run's order.
    fp32 is the side every column's ratio is over, not a column of its own."""
    cells = run.of_kind(SpeedRecord)
    modes = [m for m in order_modes(mode_of(c) for c in cells) if m != FP32_MODE]
    return modes, _grid(cells, modes, lambda cell: _entry(cell, kind))


def _grid(cells: list[SpeedRecord], modes: list[str], entry: Callable[[SpeedRecord | None], MatrixEntry | None]
          ) -> list[tuple[str, list[MatrixEntry | None]]]:
    """[(model, one entry or None per mode)], models in the cells' order; the first cell of a model and
    mode is its entry."""
    by_key: dict[tuple[str, str], SpeedRecord] = {}
    for c in cells:
        by_key.setdefault((model_of(c), mode_of(c)), c)
    return [(model,
             [entry(by_key.get((model, mode))) for mode in modes]) for model in dict.fromkeys(map(model_of, cells))]


def _entry(cell: SpeedRecord | None, kind: RatioKind) -> MatrixEntry | None:
    ratio = cell.ratio(kind) if cell is not None else None
    if cell is None or ratio is None or ratio.speedup is None:
        return None
    # a run from before the device-time gate has one speedup and its verdict under "verdict"
    verdict = cell.verdict_of(kind)
    return MatrixEntry(ratio.speedup, cell.estimate(kind), verdict.value if verdict is not None else None,
                       ratio.method)


@dataclass(frozen=True)
class VersusMatrix:
    """The second ratios of one family of compiled cells: models down, the cells' modes across."""

    title: str
    note: str
    modes: list[str]
    rows: list[tuple[str, list[MatrixEntry | None]]]


COMPILE_GAIN_TITLE = "Compile gain: each mode compiled over itself eager, in device time"
COMPILE_GAIN_NOTE = ("Each cell: the compiled cell's device-time speedup over the same mode in eager training, "
                     "timed in the same interleaved rounds, with its interval; colour and sign: its verdict.")


def _is_compile_gain(cell: SpeedRecord) -> bool:
    """Whether a cell's second ratio is its compile gain: its versus side is its own mode, eager."""
    return cell.versus in MODES and label(compiled(MODES[cell.versus])) == cell.mode


def versus_matrices(run: Run) -> list[VersusMatrix]:
    """One matrix of compile gains, then one per other versus side (compiled amp_bf16, which the fp8
    modes are held against), each cell its second ratio with its interval and verdict; none where the
    run has no compiled cells."""
    families: dict[str, list[SpeedRecord]] = {}
    for c in run.of_kind(SpeedRecord):
        if c.versus and c.ratio(VERSUS).speedup is not None:
            families.setdefault("" if _is_compile_gain(c) else c.versus, []).append(c)
    out = []
    for versus in sorted(families, key=bool):  # compile gains first
        cells = families[versus]
        modes = order_modes(mode_of(c) for c in cells)
        rows = _grid(cells, modes, _versus_entry)
        title, note = (COMPILE_GAIN_TITLE, COMPILE_GAIN_NOTE) if not versus else (
            f"Speedup over {versus}, in device time",
            f"Each cell: the mode's device-time speedup over {versus}, timed in the same interleaved rounds, with "
            "its interval; below 1.00x the mode loses to it. Colour and sign: its verdict.")
        out.append(VersusMatrix(title, note, modes, rows))
    return out


def _versus_entry(cell: SpeedRecord | None) -> MatrixEntry | None:
    if cell is None:
        return None
    ratio = cell.ratio(VERSUS)
    if ratio.speedup is None:  # a family holds only the cells with a speedup over its versus
        return None
    verdict = ratio.verdict
    return MatrixEntry(ratio.speedup, cell.estimate(VERSUS), verdict.value if verdict is not None else None,
                       ratio.method)


def host_bound_cells(run: Run) -> list[SpeedRecord]:
    """Speed cells whose eager step left the device idle more than a tenth of the time."""
    return [c for c in run.of_kind(SpeedRecord) if c.side(MODE_SIDE).host_bound is True]


ENERGY_TITLE = "Energy per training step against fp32's"
ENERGY_NOTE = ("Joules per step from NVML's total-energy counter over each side's device-time blocks; below 1.00x the "
               "mode saves energy. Reported, not gated, until its run-to-run noise is measured.")
ENERGY_HEADERS = ("model", "mode", "fp32 J/step", "mode J/step", "energy / fp32's")


def energy_cells(run: Run) -> list[tuple[SpeedRecord, Energy]]:
    """(cell, its energy per step) of every speed cell whose card's energy counter was read, fp32's own
    cells left out (their ratio is fp32 over itself), in run order."""
    return [(c, e) for c in run.of_kind(SpeedRecord) if mode_of(c) != FP32_MODE and (e := c.energy) is not None]


def energy_row(cell: SpeedRecord, energy: Energy) -> list[str]:
    """A row of the energy table, as `ENERGY_HEADERS` names its columns."""
    return [model_of(cell), mode_of(cell), f"{energy.fp32_j:.3g}", f"{energy.mode_j:.3g}", f"{energy.ratio:.2f}x"]


OUTLIER_TITLE = "Outlier cards"
OUTLIER_NOTE = ("A card whose fp32 device time per step lies beyond the spread of its GPU model's other cards (card "
                "admission): named so that a fleet's slow card is found; no cell failed of it.")
OUTLIER_HEADERS = ("card", "cell", "fp32 ms/step", "model's level", "off", "spreads", "level from")


def outlier_cells(run: Run) -> list[SpeedRecord]:
    """The speed cells whose card was named an outlier card, in run order."""
    return [c for c in run.of_kind(SpeedRecord) if c.card.outlier]


def outlier_row(cell: SpeedRecord) -> list[str]:
    """A row of the outlier cards' table, as `OUTLIER_HEADERS` names its columns."""
    c = cell.card
    return [c.uuid or "-", cell.test_id, fmt_number(c.step_ms, ".3f"), fmt_number(c.level_ms, ".3f"),
            fmt_number(None if c.off is None else 100 * c.off, "+.1f", "%"), fmt_number(c.z, "+.1f"), c.source or "-"]


def kernel_change_cells(run: Run) -> list[tuple[SpeedRecord, str]]:
    """(cell, its kernel changes against the baseline) for every speed cell that has them: the notable
    ones first (regressions, then inconclusive, improved...), the rest after them in run order."""
    found = [(c, c.kernel_changes) for c in run.of_kind(SpeedRecord) if c.kernel_changes]
    rank: dict[Verdict | None, int] = {v: i for i, v in enumerate(VERDICT_ORDER)}

    def order(item: tuple[SpeedRecord, str]) -> tuple[bool, int]:
        verdict = item[0].ratio(DEVICE).verdict
        return not notable(item[0]), rank.get(verdict, len(rank))

    return sorted(found, key=order)


def notable(cell: SpeedRecord) -> bool:
    """Whether a cell's device verdict makes its kernel changes worth a line in a short summary."""
    verdict = cell.ratio(DEVICE).verdict
    return (verdict.value if verdict is not None else None) not in QUIET_DEVICE_VERDICTS
