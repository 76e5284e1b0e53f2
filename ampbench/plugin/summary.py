"""The end of a ``pytest perf/`` run: what the suite concluded, as one table per kind of cell that ran
(model by mode), then the cells that need a look with their messages. A pytest plugin, registered by
``ampbench.plugin.session`` as ``ampbench-summary`` where ampbench acts; ``-p no:ampbench-summary`` turns it off.

It also trims pytest-benchmark's own table to the benchmarks whose figures are training-step times
(speed and distributed cells, and the steps a memory cell times at its largest batch), as
``ampbench.plugin.entries`` trims the JSON: a test that hands pytest-benchmark a round of something else
(a project's own cell of an untimed kind) says nothing as a wall time.

Tests hand their records over with ``keep_record`` (the ``record_result`` fixture does), into ``config.stash``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import pytest

from ampbench.results import (
    DISTRIBUTED_RATIOS,
    FP32_MODE,
    MODE_SIDE,
    SPEED_RATIOS,
    ConvergenceRecord,
    DistributedRecord,
    MemoryRecord,
    PipelineRecord,
    RatioKind,
    Record,
    SpeedRecord,
    Verdict,
)
from ampbench.results.ratios import DEVICE
from ampbench.results.run import timed_entry
from ampbench.results.schema import with_cell_params
from ampbench.settings import PerfSettings
from ampbench.stats import SpeedupEstimate

PLUGIN_NAME = "ampbench-summary"
RECORDS_KEY = pytest.StashKey[list[tuple[str, Record]]]()  # (node id, record) of every cell, in the order kept
FAILED_KEY = pytest.StashKey[dict[str, str]]()  # node id -> "failed" or "xfailed", for the cells' own tests
SMOKE_SUMMARY = ("smoke run: figures are not comparable (a CPU pass on tiny shapes checks the code path; nothing is "
                 "held against baselines)")
NOT_MEASURED = "-"


def keep_record(config: pytest.Config, nodeid: str, record: Record) -> None:
    """Keep a cell's record for the summary at the end of the session."""
    config.stash.setdefault(RECORDS_KEY, []).append((nodeid, record))


def annotate(config: pytest.Config, nodeid: str, **values: Any) -> None:
    """Set `values` on the kept record of `nodeid`: what a plugin learns of a cell once its test has
    run (``ampbench.slowdown``'s tag), so that the run history holds it as the JSON does."""
    kept = config.stash.get(RECORDS_KEY, [])
    for i, (kept_id, record) in enumerate(kept):
        if kept_id == nodeid:
            kept[i] = (kept_id, record.with_values(**values))


# -- formatting ------------------------------------------------------------------------------------

def _num(value: float | None, spec: str, suffix: str = "") -> str:
    return NOT_MEASURED if value is None or not math.isfinite(value) else f"{value:{spec}}{suffix}"


def _interval(est: SpeedupEstimate | None, pct: bool = False) -> str:
    if est is None:
        return NOT_MEASURED
    if pct:
        return f"{est.speedup:.1%} [{est.low:.1%}, {est.high:.1%}]"
    return f"{est.speedup:.3f}x [{est.low:.3f}, {est.high:.3f}]"


def _verdict(v: Verdict | None) -> str:
    return NOT_MEASURED if v is None else str(v)


def _yes(value: bool | None) -> str:
    return NOT_MEASURED if value is None else ("yes" if value else "no")


def _points(delta: float | None, scale_of: float | None) -> str:
    if delta is None:
        return NOT_MEASURED
    # accuracies are written as fractions (or, by older writers, percentages)
    return f"{delta * (100 if (scale_of or 0) <= 1 else 1):+.1f} pts"


@dataclass(frozen=True)
class Column:
    header: str
    show: Callable[[Any], str]


@dataclass(frozen=True)
class Table:
    """How one kind of cell is summarised: a title and its columns after model and mode."""

    title: str
    columns: tuple[Column, ...]


def _speed_figure(r: SpeedRecord, kind: RatioKind) -> str:
    # fp32 against itself checks the method; its "speedup" is no finding
    return "reference" if r.mode == FP32_MODE else _interval(r.estimate(kind))


def _speed_columns(kind: RatioKind) -> tuple[Column, Column]:
    """A speed ratio's figure and its own verdict."""
    return (Column(kind.column, lambda r: _speed_figure(r, kind)),
            Column(f"{kind.name} verdict", lambda r: _verdict(r.ratio(kind).verdict)))


def _speed_ratios() -> tuple[Column, ...]:
    """A speed cell's ratios over fp32 (its table's rows with a matrix), each with its own verdict."""
    return tuple(column for kind in SPEED_RATIOS.values() if kind.title for column in _speed_columns(kind))


def _distributed_column(kind: RatioKind) -> Column:
    return Column(kind.column, lambda r: _interval(r.estimate(kind), pct=kind.share))


def _distributed_ratios() -> tuple[Column, ...]:
    return tuple(_distributed_column(kind) for kind in DISTRIBUTED_RATIOS.values())


def tables() -> dict[type[Record], Table]:
    """How each kind of cell is summarised, read off the tables of ratios when asked."""
    return {
        SpeedRecord: Table("speed cells ({n}), speedups over fp32 with their intervals", (
            *_speed_ratios(),
            # share of the eager step the device waited for the host
            Column("idle", lambda r: _num(r.side(MODE_SIDE).idle_share, ".0%")),
            Column("host-bound", lambda r: _yes(r.side(MODE_SIDE).host_bound)),
            Column("method", lambda r: r.ratio(DEVICE).method or NOT_MEASURED),
        )),
        MemoryRecord: Table("memory cells ({n}), against fp32", (
            Column("memory ratio", lambda r: _num(r.memory_ratio, ".3f", "x")),
            Column("largest batch", lambda r: _num(r.side(MODE_SIDE).max_batch, "d")
                   if isinstance(r.side(MODE_SIDE).max_batch, int)
                   else NOT_MEASURED if r.batch_searched else r.NOT_SEARCHED),
            Column("largest-batch ratio", lambda r: _num(r.max_batch_ratio, ".2f", "x")),
            Column("verdict", lambda r: _verdict(r.verdict)),
        )),
        ConvergenceRecord: Table("convergence cells ({n}), held-out accuracy against fp32's", (
            Column("accuracy", lambda r: _num(r.accuracy, ".4f")),
            Column("fp32", lambda r: _num(r.accuracy_ref, ".4f")),
            Column("delta",
                   lambda r: "reference" if r.mode == FP32_MODE else _points(r.accuracy_delta, r.accuracy_ref)),
            Column("verdict", lambda r: _verdict(r.verdict) + (f" ({r.reason})" if r.reason else "")),
        )),
        PipelineRecord: Table("input-pipeline cells ({n}), samples/s", (
            Column("loader-fed", lambda r: _num(r.throughput_loader, ",.0f")),
            Column("resident", lambda r: _num(r.throughput_resident, ",.0f")),
            Column("loader alone", lambda r: _num(r.throughput_loader_only, ",.0f")),
            Column("fed/resident", lambda r: _num(r.loader_ratio, ".0%")),
            Column("verdict", lambda r: _verdict(r.verdict)),
        )),
        DistributedRecord: Table("distributed cells ({n}), against fp32 under the same parallelism", (
            Column("comm", lambda r: r.comm or NOT_MEASURED),
            Column("ranks", lambda r: (_num(r.world_size, "d") if isinstance(r.world_size, int) else NOT_MEASURED)
                   + (f" on {r.nodes} nodes" if isinstance(r.nodes, int) and r.nodes > 1 else "")),
            *_distributed_ratios(),
            Column("comm share", lambda r: _num(r.side(MODE_SIDE).comm_share, ".0%")),
            # the most idle rank's, of the mode's step
            Column("idle", lambda r: _num(r.side(MODE_SIDE).idle_share, ".0%")),
            Column("verdict", lambda r: _verdict(r.verdict)),
        )),
    }


def table(kind: type[Record], records: Sequence[Record]) -> list[str]:
    """Lines of the table of one kind's cells (a title, the header, a rule, one row per cell, in the
    order given); no lines where none ran. A figure a cell did not measure shows as "-"."""
    if not records:
        return []
    spec = tables()[kind]
    headers = ["model", "mode", *(c.header for c in spec.columns)]
    rows = [[r.model or NOT_MEASURED, r.mode or NOT_MEASURED, *(c.show(r) for c in spec.columns)] for r in records]
    widths = [max(len(text) for text in column) for column in zip(headers, *rows)]

    def line(texts: Sequence[str]) -> str:
        return "  ".join(text.ljust(width) for text, width in zip(texts, widths)).rstrip()

    return [f"ampbench: {spec.title.format(n=len(rows))}", line(headers), line(["-" * w for w in widths]),
            *map(line, rows)]


def needs_a_look_lines(cells: Iterable[tuple[str, Record]], outcomes: dict[str, str]) -> list[str]:
    """One line per cell whose verdict fails or warns, or whose test failed or failed as expected, with
    its message."""
    lines = []
    for nodeid, r in cells:
        outcome = outcomes.get(nodeid)
        if not ((r.verdict is not None and r.verdict.needs_a_look) or outcome):
            continue
        what = ", ".join(t for t in (str(r.verdict) if r.verdict else "", f"test {outcome}" if outcome else "") if t)
        lines.append(f"  {r.test_id or nodeid} ({what}): {r.message or 'no message'}")
    return [f"ampbench: cells that need a look ({len(lines)})", *lines] if lines else []


def outlier_card_lines(records: Iterable[Record]) -> list[str]:
    """One line per outlier card (``history.cards``) and one per cell it was named in, with its figures:
    its fp32 step, its model's level and how far off it lies. It informs; no cell failed of it."""
    cards: dict[str, list[SpeedRecord]] = {}
    for r in records:
        if isinstance(r, SpeedRecord) and r.card.outlier:
            cards.setdefault(r.card.uuid or "a card without a UUID", []).append(r)
    lines = []
    for uuid, named in cards.items():
        lines.append(f"ampbench: an outlier card: {uuid}, in {len(named)} cell{'s' * (len(named) != 1)} (its fp32 "
                     "device time per step beyond the spread of its GPU model's cards; no cell failed of it)")
        for r in named:
            c = r.card
            lines.append(f"  {r.test_id}: fp32 step {_num(c.step_ms, '.3f', ' ms')} against the model's "
                         f"{_num(c.level_ms, '.3f', ' ms')} from {c.cards} card(s): {_num(c.off, '+.1%')}, "
                         f"{_num(c.z, '+.1f')} spreads of {_num(c.spread, '.1%')} ({c.source})")
    return lines


def conditions_lines(records: Sequence[Record]) -> list[str]:
    """The card's conditions over each speed cell's device-time blocks, per side, and its energy per step
    (``gate.conditions``); where no cell's were read, why, once."""
    speed = [(r, r.conditions) for r in records if isinstance(r, SpeedRecord) and isinstance(r.conditions, dict)]
    read = [(r, c) for r, c in speed if c.get("read")]
    if not read:
        why = next((c.get("why_unread") for _, c in speed if c.get("why_unread")), None)
        return [f"ampbench: clocks and energy not read: {why}", ""] if why else []
    lines = [f"ampbench: the card's clocks and energy over the device-time blocks ({len(read)} cells)"]
    for r, conditions in read:
        text = f"  {r.model} {r.mode}: {conditions.get('summary') or 'no block read'}"
        flagged = conditions.get("flagged")
        text += f"; {flagged} rounds flagged" if flagged else ""
        if r.energy is not None:
            text += (f"; {r.energy.mode_j:.3g} J per step against fp32's {r.energy.fp32_j:.3g} J "
                     f"({r.energy.ratio:.2f}x)")
        lines.append(text)
    return [*lines, ""]


def summary_lines(cells: Sequence[tuple[str, Record]], outcomes: dict[str, str]) -> list[str]:
    """Everything the summary writes: the smoke note on a CPU run, a table per kind, the cells that
    need a look; no lines where no ampbench cell ran."""
    if not cells:
        return []
    records = [r for _, r in cells]
    lines = []
    devices = {r.device for r in records if r.device}
    if devices and all(d.split(":")[0] == "cpu" for d in devices):
        lines.append(f"ampbench: {SMOKE_SUMMARY}")
    for kind in tables():
        rows = table(kind, [r for r in records if type(r) is kind])
        lines += [*rows, ""] if rows else []
    cards = outlier_card_lines(records)
    return lines + conditions_lines(records) + ([*cards, ""] if cards else []) + needs_a_look_lines(cells, outcomes)


def _time_model(settings: PerfSettings | None, records: Sequence[Record]) -> list[str]:
    """The time model's line (``speed.jobtime.summary_line``) on a CUDA run; none on the CPU."""
    if settings is None or settings.device.type != "cuda":
        return []
    from ampbench.speed import jobtime
    from ampbench.speed.cell import policy

    line = jobtime.summary_line(records, policy(settings.device, settings))
    return [line] if line else []


# -- the plugin ------------------------------------------------------------------------------------

class SummaryPlugin:
    """The hooks, with the session's config at hand (its state lives in ``config.stash``)."""

    def __init__(self, config: pytest.Config, settings: PerfSettings | None = None):
        self.config = config
        self.settings = settings  # the session's, handed over where it registers the summary

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and (report.failed or hasattr(report, "wasxfail")):
            outcome = "xfailed" if hasattr(report, "wasxfail") else "failed"
            self.config.stash.setdefault(FAILED_KEY, {})[report.nodeid] = outcome

    def pytest_terminal_summary(self, terminalreporter) -> None:
        cells = self.config.stash.get(RECORDS_KEY, [])
        lines = summary_lines(cells, self.config.stash.get(FAILED_KEY, {}))
        if lines:
            terminalreporter.section("ampbench summary")
        for text in lines + _time_model(self.settings, [r for _, r in cells]):
            terminalreporter.write_line(text)

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_benchmark_group_stats(self, config: pytest.Config, benchmarks: list[dict], group_by: str):
        """pytest-benchmark's table without the ampbench cells whose figures are no step times, every cell
        named by its model_name and mode_name (``results.schema.with_cell_params``: a distributed cell's too)."""
        from pytest_benchmark.plugin import pytest_benchmark_group_stats as group_stats

        timed = [b for b in benchmarks if timed_entry(b)]
        for bench in timed:  # this run's (pytest-benchmark's Metadata) and those it compares with (dicts)
            if isinstance(bench, dict):
                bench["params"] = with_cell_params(bench.get("params"))
            else:
                bench.params = with_cell_params(getattr(bench, "params", None))
        return group_stats(config=config, benchmarks=timed, group_by=group_by)


def register_summary(config: pytest.Config, settings: PerfSettings | None = None) -> None:
    """Register the summary as ``ampbench-summary``, unless ``-p no:ampbench-summary`` blocked the name;
    `settings`, the session's, tell it the device (and policy) its time model is of."""
    if not config.pluginmanager.is_blocked(PLUGIN_NAME):
        config.pluginmanager.register(SummaryPlugin(config, settings), PLUGIN_NAME)
