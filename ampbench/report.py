"""Turn an ampbench ``--benchmark-json`` file into a report: tables like the seeds' (mode, step time,
throughput, speedup, memory, accuracy, per GPU), PNG charts, one self-contained ``index.html`` and a
``summary.md`` short enough for a CI job summary.

Nothing here imports torch or pytest: a report is made on machines that only hold the JSON.
matplotlib is imported inside the chart functions, with the Agg backend, so importing this module
has no side effects.
"""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from ampbench import runschema
from ampbench.stats import SpeedupEstimate, finite_number
from ampbench.verdict import Verdict

if TYPE_CHECKING:  # compare imports this module, so only type checkers follow this import
    from ampbench.compare import Comparison

SCHEMA_VERSION = 1
KINDS = ("speed", "memory", "convergence", "input_pipeline")
REFERENCE_MODE = "fp32"
# DESIGN.md's table order; modes not listed here follow in the order the run met them
MODE_ORDER = ("fp32", "tf32", "amp_fp16", "amp_bf16", "fp16_master", "fp16", "bf16")
MODE_COLORS = {
    "fp32": "#7f7f7f",
    "tf32": "#9467bd",
    "amp_fp16": "#1f77b4",
    "amp_bf16": "#2ca02c",
    "fp16_master": "#17becf",
    "fp16": "#ff7f0e",
    "bf16": "#8c564b",
}
VERDICT_COLORS = {
    Verdict.PASS.value: "#2e7d32",
    Verdict.IMPROVED.value: "#1565c0",
    Verdict.REGRESSION.value: "#c62828",
    Verdict.INCONCLUSIVE.value: "#ef6c00",
    Verdict.NO_BASELINE.value: "#757575",
}
VERDICT_ICONS = {
    Verdict.PASS.value: "✅",
    Verdict.IMPROVED.value: "🚀",
    Verdict.REGRESSION.value: "❌",
    Verdict.INCONCLUSIVE.value: "⚠️",
    Verdict.NO_BASELINE.value: "➖",
}
# the same in HTML with symbols every sans-serif font has (browsers without an emoji font show boxes)
HTML_ICONS = {
    Verdict.PASS.value: "✓",
    Verdict.IMPROVED.value: "▲",
    Verdict.REGRESSION.value: "✗",
    Verdict.INCONCLUSIVE.value: "⚠",
    Verdict.NO_BASELINE.value: "–",
}
NEEDS_A_LOOK = (Verdict.REGRESSION.value, Verdict.INCONCLUSIVE.value)
# the order verdicts are listed in: what needs a look first
VERDICT_ORDER = (
    Verdict.REGRESSION.value,
    Verdict.INCONCLUSIVE.value,
    Verdict.IMPROVED.value,
    Verdict.PASS.value,
    Verdict.NO_BASELINE.value,
)
DASH = "-"


class RunError(ValueError):
    """A file that cannot be reported on; the message names the file and what is wrong with it."""

    def __init__(self, path: Path | str, problem: str):
        self.path = Path(path)
        super().__init__(f"{path}: {problem}")


# ---------------------------------------------------------------------------------------------------
# loading


@dataclass(frozen=True)
class Cell:
    """One benchmark of the run: a (model, mode) cell of one kind of test."""

    test_id: str  # pytest-benchmark's "name", e.g. test_speed[resnet50-amp_fp16]
    kind: str
    model: str
    mode: str
    info: Mapping[str, Any]  # extra_info as written by the suite

    def get(self, key: str) -> Any:
        return self.info.get(key)

    def number(self, key: str) -> float | None:
        """A finite number under `key`, else None (missing, null, NaN or not a number)."""
        return finite_number(self.info.get(key))

    @property
    def verdict(self) -> str | None:
        v = self.info.get("verdict")
        return v if isinstance(v, str) else None

    def estimate(self, prefix: str = "") -> SpeedupEstimate | None:
        """The speedup with its interval, as the suite measured it; None when incomplete. `prefix`
        "device_" reads the device-time speedup (the wall-clock one otherwise)."""
        s, lo, hi = (self.number(f"{prefix}speedup"), self.number(f"{prefix}speedup_low"),
                     self.number(f"{prefix}speedup_high"))
        if s is None or lo is None or hi is None or min(s, lo, hi) <= 0:
            return None
        rounds = self.number(f"{prefix}rounds" if prefix else "rounds")
        confidence = self.number("confidence")
        return SpeedupEstimate(
            s, lo, hi, int(rounds) if rounds is not None else 0, confidence if confidence is not None else 0.99
        )

    def across_runs(self) -> tuple[float, float] | None:
        """The speedup's interval across runs (low, high), where the baseline had a between-run spread."""
        lo, hi = self.number("speedup_across_low"), self.number("speedup_across_high")
        return (lo, hi) if lo is not None and hi is not None else None


@dataclass
class Run:
    """One benchmark JSON written by ``pytest perf/ --benchmark-json``."""

    path: Path
    machine: dict  # machine_info["ampbench"]
    datetime: str | None
    commit: dict
    cells: list[Cell]
    foreign: list[str] = field(default_factory=list)  # names of benchmarks without ampbench results (ignored)

    @property
    def gpu(self) -> str:
        device = self.machine.get("device")
        if isinstance(device, str) and device:
            return device
        devices = {c.get("device") for c in self.cells if isinstance(c.get("device"), str)}
        return ", ".join(sorted(devices)) or "unknown device"

    @property
    def label(self) -> str:
        """How a run is named in a comparison: its file name and its date."""
        when = (self.datetime or "")[:16].replace("T", " ")
        return f"{self.path.name} ({when})" if when else self.path.name

    def of_kind(self, kind: str) -> list[Cell]:
        return [c for c in self.cells if c.kind == kind]

    def kinds(self) -> list[str]:
        seen = list(dict.fromkeys(c.kind for c in self.cells))
        return [k for k in KINDS if k in seen] + [k for k in seen if k not in KINDS]

    def models(self) -> list[str]:
        """Models in the order the run met them, which is the registry's order."""
        return list(dict.fromkeys(c.model for c in self.cells))

    def cell(self, kind: str, model: str, mode: str) -> Cell | None:
        for c in self.cells:
            if c.kind == kind and c.model == model and c.mode == mode:
                return c
        return None

    def software(self) -> list[tuple[str, str]]:
        """(name, value) pairs that tell two runs' software and hardware apart."""
        m = self.machine
        pairs = [
            ("device", m.get("device")),
            ("capability", m.get("capability")),
            ("driver", m.get("driver")),
            ("torch", m.get("torch")),
            ("CUDA", m.get("cuda")),
            ("cuDNN", m.get("cudnn")),
        ]
        clocks = [
            f"{name} {m[key]:g} MHz" for name, key in (("SM", "sm_clock_mhz"), ("max SM", "max_sm_clock_mhz"), ("mem", "mem_clock_mhz"))
            if finite_number(m.get(key)) is not None
        ]
        if clocks:
            pairs.append(("clocks", ", ".join(clocks)))
        if isinstance(m.get("clocks"), (str, dict)):
            c = m["clocks"]
            pairs.append(("clocks", c if isinstance(c, str) else ", ".join(f"{k} {v}" for k, v in c.items())))
        commit = self.commit.get("id") if isinstance(self.commit, dict) else None
        if commit and commit not in ("unversioned", "unknown"):
            dirty = " (dirty)" if self.commit.get("dirty") else ""
            pairs.append(("commit", f"{str(commit)[:12]}{dirty}"))
        if self.datetime:
            pairs.append(("run", self.datetime[:19].replace("T", " ")))
        return [(k, str(v)) for k, v in pairs if v not in (None, "")]


def order_modes(modes: Iterable[str]) -> list[str]:
    seen = list(dict.fromkeys(modes))
    return [m for m in MODE_ORDER if m in seen] + [m for m in seen if m not in MODE_ORDER]


def _split_id(name: str) -> tuple[str, str]:
    """'test_speed[wide_resnet28_10-amp_fp16]' -> ('wide_resnet28_10', 'amp_fp16'): model names and
    mode names hold underscores but no dashes, so the last dash separates them."""
    inside = name[name.find("[") + 1 : name.rfind("]")] if "[" in name and name.endswith("]") else ""
    model, sep, mode = inside.rpartition("-")
    return (model, mode) if sep else (inside or name, DASH)


def _truncation_problem(text: str, exc: json.JSONDecodeError) -> str:
    # a decoder that runs off the end of the text, or a document that does not end where an object or
    # array ends, means the writer stopped early (killed job, full disk)
    stripped = text.rstrip()
    if exc.pos >= len(stripped) - 1 or (stripped[:1] in "{[" and not stripped.endswith(("}", "]"))):
        return (
            f"is truncated: the JSON stops at line {exc.lineno} column {exc.colno} ({exc.msg}); "
            "the run was probably interrupted before pytest-benchmark finished writing it"
        )
    return f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"


def load_run(path: Path | str) -> Run:
    """Read and validate one ampbench benchmark JSON; RunError names the file and the problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunError(path, "no such file") from None
    except IsADirectoryError:
        raise RunError(path, "is a directory; give the JSON file written by `pytest perf/ --benchmark-json FILE`") from None
    except OSError as exc:
        raise RunError(path, f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RunError(path, f"is not UTF-8 text (byte {exc.start}), so not a benchmark JSON") from None
    if not text.strip():
        raise RunError(path, "is empty; the run was probably interrupted before pytest-benchmark wrote it")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunError(path, _truncation_problem(text, exc)) from None
    except RecursionError:
        raise RunError(path, "is not a benchmark JSON: its values are nested too deeply to read") from None
    return parse_run(document, path)


def _refuse(path: Path, problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise RunError(path, "; ".join(problems[:3]) + more)


def parse_run(document: Any, path: Path | str) -> Run:
    """Validate a decoded benchmark JSON document against ampbench.runschema (see load_run) and read it."""
    path = Path(path)
    not_ours = "is not ampbench output"
    if not isinstance(document, dict) or not isinstance(document.get("benchmarks"), list):
        raise RunError(
            path,
            f"{not_ours}: expected pytest-benchmark's JSON (an object with a 'benchmarks' list), "
            "as written by `pytest perf/ --benchmark-json FILE`",
        )
    _refuse(path, runschema.check(document, runschema.DOCUMENT, ""))
    machine_info = document.get("machine_info") or {}
    machine = machine_info.get("ampbench") if isinstance(machine_info.get("ampbench"), dict) else {}
    _refuse(path, runschema.check(machine, runschema.MACHINE, "machine_info.ampbench"))
    cells: list[Cell] = []
    foreign: list[str] = []
    problems: list[str] = []  # of every cell, so one message lists what is wrong across the file
    for i, bench in enumerate(document["benchmarks"]):
        where = f"benchmarks[{i}]"
        if not isinstance(bench, dict):
            raise RunError(path, f"{where} is not an object; pytest-benchmark writes one per test")
        _refuse(path, runschema.check(bench, runschema.BENCHMARK, where))
        info = bench.get("extra_info") or {}
        name = bench["name"]
        if "ampbench_schema" not in info:
            foreign.append(name)
            continue
        if info["ampbench_schema"] != SCHEMA_VERSION:
            raise RunError(
                path,
                f"{name} was written with ampbench schema {info['ampbench_schema']!r}; this ampbench reads "
                f"schema {SCHEMA_VERSION} only (report it with the ampbench version that wrote it, or rerun the suite)",
            )
        problems += [f"{p} ({name})" for p in runschema.check_cell(info, f"{where}.extra_info")]
        id_model, id_mode = _split_id(name)
        cells.append(Cell(name, info.get("kind"), info.get("model") or id_model, info.get("mode") or id_mode, info))
    _refuse(path, problems)
    if not cells and not machine:
        problem = (
            "none of its benchmarks carries extra_info.ampbench_schema and machine_info has no 'ampbench' entry"
            if document["benchmarks"]
            else "it holds no benchmarks and machine_info has no 'ampbench' entry"
        )
        raise RunError(path, f"{not_ours}: {problem}")
    return Run(path=path, machine=machine, datetime=document.get("datetime"), commit=document.get("commit_info") or {},
               cells=cells, foreign=foreign)


def failed_tests(junit: Path | str) -> list[tuple[str, str]]:
    """(test name, first line of the failure) for each failed or errored test case of a JUnit XML."""
    junit = Path(junit)
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as exc:
        raise RunError(junit, f"is not readable JUnit XML: {exc}") from None
    failed = []
    for case in root.iter("testcase"):
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                name = case.get("name", "?")
                classname = case.get("classname", "")
                message = (node.get("message") or node.text or tag).strip().splitlines()
                failed.append((f"{classname}::{name}" if classname else name, message[0][:300] if message else tag))
                break
    return failed


# ---------------------------------------------------------------------------------------------------
# formatting


def fmt_number(value: float | None, spec: str = ".3g", suffix: str = "") -> str:
    return DASH if value is None else f"{value:{spec}}{suffix}"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value:.3g} ms" if value < 100 else f"{value:,.0f} ms"


def fmt_rate(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value:,.0f}/s" if value >= 100 else f"{value:.3g}/s"


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return DASH
    mib = value / 2**20
    return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def fmt_speedup(est: SpeedupEstimate | None, value: float | None = None) -> str:
    if est is not None:
        return f"{est.speedup:.2f}x [{est.low:.2f}, {est.high:.2f}]"
    return fmt_number(value, ".2f", "x")


def fmt_pct(value: float | None) -> str:
    return DASH if value is None else f"{value:+.1%}"


def fmt_accuracy(value: float | None) -> str:
    if value is None:
        return DASH
    # the suite may write a fraction or a percentage
    return f"{value:.2%}" if value <= 1.0 else f"{value:.2f}%"


def verdict_label(verdict: str | None) -> str:
    if not verdict:
        return DASH
    return f"{VERDICT_ICONS.get(verdict, '')} {verdict}".strip()


# ---------------------------------------------------------------------------------------------------
# tables


@dataclass(frozen=True)
class Row:
    """One line of a per-model table: one precision mode of one model, all kinds merged."""

    mode: str
    step_ms: float | None
    throughput: float | None
    speedup: SpeedupEstimate | None
    speedup_value: float | None
    baseline: float | None
    verdict: str | None  # the speed verdict
    peak_mem: float | None
    memory_ratio: float | None
    max_batch: float | None
    max_batch_ratio: float | None
    tflops: float | None
    accuracy: float | None
    memory_verdict: str | None = None
    convergence: str | None = None  # the convergence verdict
    messages: tuple[str, ...] = ()
    reference_only: bool = False  # built from the fp32 figures a speed cell carries, not a cell of its own
    across: tuple[float, float] | None = None  # the speedup's interval across runs, where known

    def cells(self) -> list[str]:
        """The row as text, in the order of ROW_HEADERS."""
        speed = fmt_speedup(self.speedup, self.speedup_value)
        if self.reference_only:
            speed = "1.00x (reference)"
        elif self.across is not None:
            speed += f"; across runs [{self.across[0]:.2f}, {self.across[1]:.2f}]"
        memory = fmt_bytes(self.peak_mem)
        if self.memory_ratio is not None:
            memory = f"{memory} ({self.memory_ratio:.2f}x)" if self.peak_mem is not None else f"{self.memory_ratio:.2f}x"
        batch = fmt_number(self.max_batch, ".0f")
        if self.max_batch_ratio is not None and self.max_batch is not None:
            batch = f"{batch} ({self.max_batch_ratio:.2f}x)"
        accuracy = fmt_accuracy(self.accuracy)
        if self.convergence and self.accuracy is None:
            accuracy = self.convergence
        return [
            self.mode,
            fmt_ms(self.step_ms),
            fmt_rate(self.throughput),
            speed,
            fmt_number(self.baseline, ".2f", "x"),
            verdict_label(self.verdict),
            memory,
            batch,
            fmt_number(self.tflops, ".3g"),
            accuracy,
        ]

    def flags(self) -> dict[int, str | None]:
        """Column index -> the verdict of the test behind that figure, for figures other than speed."""
        col = ROW_HEADERS.index
        return {col("peak memory (ratio)"): self.memory_verdict, col("largest batch (ratio)"): self.memory_verdict,
                col("accuracy"): self.convergence}

    def marked_cells(self, mark: Callable[[str, str | None], str]) -> list[str]:
        cells, flags = self.cells(), self.flags()
        return [mark(c, flags[i]) if i in flags else c for i, c in enumerate(cells)]


ROW_HEADERS = [
    "mode",
    "step time",
    "throughput",
    "speedup over fp32 [interval]",
    "baseline",
    "speed verdict",
    "peak memory (ratio)",
    "largest batch (ratio)",
    "TFLOP/s",
    "accuracy",
]


def model_rows(run: Run) -> dict[str, list[Row]]:
    """Per model, one Row per mode: the seeds' table (mode, time, memory, accuracy) with the suite's
    speedup, interval and verdict beside it."""
    tables: dict[str, list[Row]] = {}
    for model in run.models():
        rows = []
        modes = order_modes(c.mode for c in run.cells if c.model == model)
        for mode in modes:
            speed = run.cell("speed", model, mode)
            mem = run.cell("memory", model, mode)
            conv = run.cell("convergence", model, mode)
            if speed is None and mem is None and conv is None:
                continue  # e.g. only an input-pipeline cell: listed in its own table
            messages = tuple(
                f"{c.kind}: {c.get('message')}" for c in (speed, mem, conv) if c is not None and c.get("message")
            )
            rows.append(
                Row(
                    mode=mode,
                    step_ms=speed.number("step_ms") if speed else None,
                    throughput=speed.number("throughput") if speed else None,
                    speedup=speed.estimate() if speed else None,
                    speedup_value=speed.number("speedup") if speed else None,
                    baseline=speed.number("baseline_speedup") if speed else None,
                    verdict=speed.verdict if speed else None,
                    peak_mem=_first(mem and mem.number("peak_mem_bytes"), speed and speed.number("peak_mem_bytes")),
                    memory_ratio=_first(mem and mem.number("memory_ratio"), speed and speed.number("memory_ratio")),
                    max_batch=mem.number("max_batch") if mem else None,
                    max_batch_ratio=mem.number("max_batch_ratio") if mem else None,
                    tflops=speed.number("tflops") if speed else None,
                    accuracy=conv.number("accuracy") if conv else None,
                    memory_verdict=mem.verdict if mem else None,
                    convergence=conv.verdict if conv else None,
                    messages=messages,
                    across=speed.across_runs() if speed else None,
                )
            )
        if rows and REFERENCE_MODE not in modes:
            ref = _reference_row(run, model)
            if ref is not None:
                rows.insert(0, ref)
        if rows:
            tables[model] = rows
    return tables


def _first(*values: float | None) -> float | None:
    for v in values:
        if v is not None and v is not False:
            return v
    return None


def _reference_row(run: Run, model: str) -> Row | None:
    """The fp32 line from the reference figures every speed cell carries, where the run has no fp32
    cell of its own (so the table still reads like the seeds': fp32 first)."""
    for c in run.of_kind("speed"):
        if c.model == model and (c.number("step_ms_ref") is not None or c.number("throughput_ref") is not None):
            return Row(
                mode=REFERENCE_MODE, step_ms=c.number("step_ms_ref"), throughput=c.number("throughput_ref"),
                speedup=None, speedup_value=None, baseline=None, verdict=None,
                peak_mem=c.number("peak_mem_ref_bytes"), memory_ratio=None, max_batch=None, max_batch_ratio=None,
                tflops=None, accuracy=None, reference_only=True,
            )
    return None


def verdict_counts(cells: Iterable[Cell]) -> dict[str, dict[str, int]]:
    """Per kind, how many cells got each verdict (in VERDICT_ORDER, then others)."""
    counts: dict[str, dict[str, int]] = {}
    for c in cells:
        per = counts.setdefault(c.kind, {})
        v = c.verdict or DASH
        per[v] = per.get(v, 0) + 1
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return {k: dict(sorted(v.items(), key=lambda kv: rank.get(kv[0], len(rank)))) for k, v in counts.items()}


def foreign_note(run: Run) -> str:
    names = ", ".join(run.foreign[:8]) + (f" and {len(run.foreign) - 8} more" if len(run.foreign) > 8 else "")
    return (f"{len(run.foreign)} benchmark(s) carry no ampbench results and are left out: {names}. "
            "An ampbench test that failed before recording its figures (e.g. out of memory) looks like this.")


def attention(run: Run) -> list[Cell]:
    """Cells whose own verdict (against this GPU's baseline) needs a look: regressions first."""
    return sorted((c for c in run.cells if c.verdict in NEEDS_A_LOOK),
                  key=lambda c: (NEEDS_A_LOOK.index(c.verdict), c.test_id))


# ---------------------------------------------------------------------------------------------------
# charts


@dataclass(frozen=True)
class Chart:
    filename: str
    title: str
    caption: str
    png: bytes = field(repr=False)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _mode_color(mode: str, modes: Sequence[str]) -> str:
    if mode in MODE_COLORS:
        return MODE_COLORS[mode]
    spare = ["#e377c2", "#bcbd22", "#d62728", "#aec7e8", "#98df8a"]
    return spare[modes.index(mode) % len(spare)]


def _grouped_bars(
    run: Run,
    kind: str,
    value: Callable[[Cell], float | None],
    *,
    title: str,
    ylabel: str,
    interval: Callable[[Cell], tuple[float, float] | None] | None = None,
    marker: Callable[[Cell], float | None] | None = None,
    marker_label: str = "",
    reference_line: float | None = None,
    log: bool = False,
) -> bytes | None:
    """Bars grouped by model, one colour per mode; None when no cell has a value."""
    cells = [c for c in run.of_kind(kind) if value(c) is not None and value(c) > (0 if log else -math.inf)]
    if not cells:
        return None
    models = list(dict.fromkeys(c.model for c in cells))
    modes = order_modes(c.mode for c in cells)
    plt = _pyplot()
    width = min(0.8 / max(len(modes), 1), 0.3)
    # as wide as the HTML page's column (about 1220 px at 100 dpi), whatever the number of models
    fig, ax = plt.subplots(figsize=(12.0, 4.8), dpi=100)
    crowded = len(models) > 9
    fig.subplots_adjust(left=0.065, right=0.99, top=0.92, bottom=0.27 if crowded else 0.2)
    by_key = {(c.model, c.mode): c for c in cells}
    marked = False
    for j, mode in enumerate(modes):
        xs, ys, lo_err, hi_err, mx, my = [], [], [], [], [], []
        for i, model in enumerate(models):
            c = by_key.get((model, mode))
            if c is None:
                continue
            x = i + (j - (len(modes) - 1) / 2) * width
            y = value(c)
            xs.append(x)
            ys.append(y)
            iv = interval(c) if interval else None
            lo_err.append(max(y - iv[0], 0.0) if iv else 0.0)
            hi_err.append(max(iv[1] - y, 0.0) if iv else 0.0)
            m = marker(c) if marker else None
            if m is not None:
                mx.append(x)
                my.append(m)
        ax.bar(xs, ys, width=width * 0.92, color=_mode_color(mode, modes), label=mode, zorder=2)
        if interval and any(lo_err + hi_err):
            ax.errorbar(xs, ys, yerr=[lo_err, hi_err], fmt="none", ecolor="#222", elinewidth=1, capsize=2, zorder=3)
        if mx:
            ax.scatter(mx, my, marker="_", s=max(60, 900 * width), linewidths=2.2, color="#000",
                       label=marker_label if not marked else None, zorder=4)
            marked = True
    if reference_line is not None:
        ax.axhline(reference_line, color="#444", linestyle="--", linewidth=1, zorder=1)
    if log:
        ax.set_yscale("log")
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models, rotation=20 if crowded else 0, ha="right" if crowded else "center")
    ax.set_xlim(-0.6, len(models) - 0.4)
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left", fontsize=12)
    ax.grid(axis="y", color="#ddd", zorder=0)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(ncol=min(len(modes) + (1 if marked else 0), 8), fontsize=8, frameon=False,
              loc="upper center", bbox_to_anchor=(0.5, -0.22 if crowded else -0.12))
    return _png(fig)


def _png(fig) -> bytes:
    import io

    buf = io.BytesIO()
    # fixed margins (set where each figure is made) instead of bbox_inches="tight", which draws every
    # figure twice: a full-tier report must render in seconds
    fig.savefig(buf, format="png")
    _pyplot().close(fig)
    return buf.getvalue()


def run_charts(run: Run) -> list[Chart]:
    """The charts of one run; a chart without data (e.g. memory on a CPU smoke run) is left out."""
    charts: list[Chart] = []

    def add(filename: str, title: str, caption: str, png: bytes | None) -> None:
        if png is not None:
            charts.append(Chart(filename, title, caption, png))

    def speed_interval(c: Cell) -> tuple[float, float] | None:
        est = c.estimate()
        return (est.low, est.high) if est else None

    add(
        "speedup.png", "Speedup over fp32",
        "Bars: speedup of each mode's training step over fp32 (median of interleaved rounds); whiskers: its "
        "interval; black dash: the baseline it was held against. Above the dashed line at 1 the mode is faster.",
        _grouped_bars(run, "speed", lambda c: c.number("speedup"), title=f"Speedup over fp32 — {run.gpu}",
                      ylabel="speedup (x)", interval=speed_interval, marker=lambda c: c.number("baseline_speedup"),
                      marker_label="baseline", reference_line=1.0),
    )

    def memory_ratio(c: Cell) -> float | None:
        return c.number("memory_ratio")

    mem_kind = "memory" if any(memory_ratio(c) is not None for c in run.of_kind("memory")) else "speed"
    add(
        "memory.png", "Peak memory against fp32",
        "Peak allocated memory of one training step, as a fraction of fp32's; below 1 the mode saves memory.",
        _grouped_bars(run, mem_kind, memory_ratio, title=f"Peak memory / fp32 — {run.gpu}",
                      ylabel="memory ratio (x)", reference_line=1.0),
    )

    def batch_ratio(c: Cell) -> float | None:
        return c.number("max_batch_ratio")

    add(
        "max_batch.png", "Largest batch against fp32",
        "Largest batch that fits in memory, as a multiple of fp32's.",
        _grouped_bars(run, "memory", batch_ratio, title=f"Largest batch / fp32 — {run.gpu}",
                      ylabel="largest batch (x fp32)", reference_line=1.0),
    )
    add(
        "throughput.png", "Throughput",
        "Training samples per second of each mode (log scale: models differ by orders of magnitude).",
        _grouped_bars(run, "speed", lambda c: c.number("throughput"), title=f"Throughput — {run.gpu}",
                      ylabel="samples / s", log=True),
    )
    return charts


def comparison_chart(comparison: "Comparison") -> Chart | None:
    """Relative change of each speed test's speedup, new run against old, coloured by its verdict."""
    rows = [r for r in comparison.rows if r.figure == "speedup" and r.change is not None]
    if not rows:
        return None
    plt = _pyplot()
    height = max(2.5, 0.8 + 0.19 * len(rows))
    fig, ax = plt.subplots(figsize=(11, height), dpi=100)
    label_chars = max(len(f"{r.model} {r.mode}") for r in rows)
    fig.subplots_adjust(left=min(0.45, 0.03 + 0.0065 * label_chars), right=0.98,
                        top=1 - 0.45 / height, bottom=0.55 / height)
    ys = list(range(len(rows)))[::-1]
    changes = [r.change for r in rows]
    colors = [VERDICT_COLORS.get(r.verdict, "#999") for r in rows]
    ax.barh(ys, changes, color=colors, height=0.7, zorder=2)
    lo = [max(r.change - r.change_low, 0) if r.change_low is not None else 0 for r in rows]
    hi = [max(r.change_high - r.change, 0) if r.change_high is not None else 0 for r in rows]
    ax.errorbar(changes, ys, xerr=[lo, hi], fmt="none", ecolor="#222", elinewidth=0.9, capsize=1.5, zorder=3)
    lines = [(y, -r.tolerance) for y, r in zip(ys, rows) if r.tolerance is not None]
    if lines:
        ax.scatter([t for _, t in lines], [y for y, _ in lines], marker="|", s=70, color="#c62828",
                   zorder=4, label="regression line (-tolerance)")
        ax.legend(fontsize=8, frameon=False, loc="lower right", bbox_to_anchor=(1.0, 1.0), borderaxespad=0.2)
    ax.axvline(0, color="#444", linewidth=1)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{r.model} {r.mode}" for r in rows], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:+.0%}"))
    ax.set_xlabel("change of speedup over fp32, new against old")
    ax.set_title(f"Change per test — {comparison.new.gpu}", loc="left", fontsize=12)
    ax.grid(axis="x", color="#ddd", zorder=0)
    ax.spines[["top", "right"]].set_visible(False)
    return Chart(
        "compare.png", "Change per test",
        "Relative change of each speedup against the old run, with the new run's interval; colour is the verdict "
        "(red: regression, orange: inconclusive, green: pass, blue: improved); red tick: the cell's regression line.",
        _png(fig),
    )


# ---------------------------------------------------------------------------------------------------
# markdown


def _md_escape(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _counts_line(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {verdict_label(v)}" for v, n in counts.items())


def speedup_matrix(run: Run) -> tuple[list[str], list[list[str]]]:
    """Models down, modes across, each cell 'speedup icon': the whole run at one glance."""
    cells = run.of_kind("speed")
    modes = order_modes(c.mode for c in cells)
    rows = []
    for model in dict.fromkeys(c.model for c in cells):
        row = [model]
        for mode in modes:
            c = next((x for x in cells if x.model == model and x.mode == mode), None)
            if c is None or c.number("speedup") is None:
                row.append(DASH)
            else:
                # "no baseline" on every cell of a fresh GPU would only add noise to the matrix
                icon = "" if c.verdict == Verdict.NO_BASELINE.value else VERDICT_ICONS.get(c.verdict or "", "")
                row.append(f"{c.number('speedup'):.2f}x {icon}".strip())
        rows.append(row)
    return ["model", *modes], rows


def render_markdown(run: Run, comparison: "Comparison | None" = None, failures: Sequence[tuple[str, str]] = ()) -> str:
    """summary.md: the verdicts and the speedup matrix, short enough for $GITHUB_STEP_SUMMARY."""
    out = [f"## ampbench: {run.gpu}", ""]
    out.append(" · ".join(f"{k} {v}" for k, v in run.software() if k != "device"))
    out.append("")
    counts = verdict_counts(run.cells)
    for kind in run.kinds():
        out.append(f"- **{kind}** ({sum(counts[kind].values())} cells): {_counts_line(counts[kind])}")
    if not run.cells:
        out.append("- no ampbench results in this run (every test skipped?)")
    out.append("")
    if failures:
        out += [f"### Failed tests ({len(failures)})", ""]
        out += [f"- `{name}`: {_md_escape(msg)}" for name, msg in failures]
        out.append("")
    if run.foreign:
        out += [f"> {foreign_note(run)}", ""]
    flagged = attention(run)
    if flagged:
        out += ["### Needs a look", ""]
        out += [f"- {verdict_label(c.verdict)} `{c.test_id}`: {_md_escape(c.get('message') or '')}" for c in flagged]
        out.append("")
    headers, rows = speedup_matrix(run)
    if rows:
        out += ["### Speedup over fp32", "", _md_table(headers, rows), ""]
    if comparison is not None:
        out += render_comparison_markdown(comparison)
    tables = model_rows(run)
    if tables:
        out += ["<details><summary>Per-model tables</summary>", ""]
        for model, model_table in tables.items():
            out += [f"#### {model}", "", _md_table(ROW_HEADERS, (r.marked_cells(_flag_md) for r in model_table)), ""]
        out += ["</details>", ""]
    return "\n".join(out).rstrip() + "\n"


def render_comparison_markdown(comparison: "Comparison") -> list[str]:
    out = [f"### Compared with {comparison.old.label}", ""]
    if comparison.notes:
        out += [f"> {n}" for n in comparison.notes] + [""]
    out.append(f"{_counts_line(comparison.counts())}")
    out.append("")
    changed = [r for r in comparison.rows if r.verdict not in (Verdict.PASS.value,)]
    headers = ["test", "figure", "old", "new", "change", "verdict"]
    if changed:
        out += [_md_table(headers, (r.cells() for r in changed)), ""]
    out += ["<details><summary>Every compared test</summary>", "", _md_table(headers, (r.cells() for r in comparison.rows)),
            "", "</details>", ""]
    return out


# ---------------------------------------------------------------------------------------------------
# html: the page is templates/report.html.j2 with autoescape on; here only plain data is made for it

# the CSS class of each verdict; any other verdict string (a future kind's, or a crafted one) gets
# "v-other", so nothing from the JSON ever becomes markup
VERDICT_CLASSES = {
    Verdict.PASS.value: "v-pass",
    Verdict.IMPROVED.value: "v-improved",
    Verdict.REGRESSION.value: "v-regression",
    Verdict.INCONCLUSIVE.value: "v-inconclusive",
    Verdict.NO_BASELINE.value: "v-no-baseline",
    "missing": "v-missing",
    "new": "v-new",
}
OTHER_VERDICT_CLASS = "v-other"


def verdict_class(verdict: str) -> str:
    return VERDICT_CLASSES.get(verdict, OTHER_VERDICT_CLASS)


@dataclass(frozen=True)
class HtmlCell:
    """One table cell: text, marked with a verdict's class (and its name as a tooltip) where `cls` is set."""

    text: str
    cls: str | None = None
    title: str | None = None


def _verdict_cell(verdict: str | None) -> HtmlCell:
    if not verdict:
        return HtmlCell(DASH)
    return HtmlCell(f"{HTML_ICONS.get(verdict, '')} {verdict}".strip(), verdict_class(verdict))


def _verdict_span(verdict: str | None) -> dict | None:
    cell = _verdict_cell(verdict)
    return {"label": cell.text, "cls": cell.cls} if cell.cls else None


def _flag_cell(text: str, verdict: str | None) -> HtmlCell:
    if verdict not in NEEDS_A_LOOK:
        return HtmlCell(text)
    return HtmlCell(f"{text} {HTML_ICONS[verdict]}", verdict_class(verdict), verdict)


def _flag_md(text: str, verdict: str | None) -> str:
    return f"{text} {VERDICT_ICONS[verdict]}" if verdict in NEEDS_A_LOOK else text


def _chips(counts: Mapping[str, int]) -> list[dict]:
    return [{"count": n, "verdict": v, "cls": verdict_class(v)} for v, n in counts.items()]


def _table(headers: Sequence[str], rows: Iterable[Sequence[HtmlCell]], reference: Iterable[bool] = ()) -> dict:
    flags = list(reference)
    return {"headers": list(headers),
            "rows": [{"cells": list(r), "reference": flags[i] if i < len(flags) else False} for i, r in enumerate(rows)]}


def _figure(chart: Chart) -> dict:
    return {"title": chart.title, "caption": chart.caption, "data": base64.b64encode(chart.png).decode("ascii")}


def _run_tables(run: Run) -> dict:
    """The per-model tables and the table of other tests, as the template's `run_tables` reads them."""
    models = []
    verdict_col = ROW_HEADERS.index("speed verdict")
    for model, rows in model_rows(run).items():
        body = []
        for r in rows:
            flags = r.flags()
            cells = [_flag_cell(c, flags[i]) if i in flags else HtmlCell(c) for i, c in enumerate(r.cells())]
            cells[verdict_col] = _verdict_cell(r.verdict)
            body.append(cells)
        models.append((model, _table(ROW_HEADERS, body, [r.reference_only for r in rows])))
    others = [c for c in run.cells if c.kind not in ("speed", "memory", "convergence")]
    other_table = _table(
        ["test", "kind", "verdict", "message"],
        ([HtmlCell(c.test_id), HtmlCell(c.kind), _verdict_cell(c.verdict), HtmlCell(str(c.get("message") or DASH))]
         for c in others),
    ) if others else None
    return {"models": models, "others": other_table}


def _comparison_context(comparison: "Comparison", charts: Sequence[Chart]) -> dict:
    headers = ["test", "figure", "old", "new", "change", "verdict", "message"]
    verdict_col = headers.index("verdict")

    def table(rows: Sequence, with_message: bool) -> dict:
        body = []
        for r in rows:
            cells = [HtmlCell(c) for c in r.cells()] + ([HtmlCell(r.message)] if with_message else [])
            cells[verdict_col] = _verdict_cell(r.verdict)
            body.append(cells)
        return _table(headers if with_message else headers[:-1], body)

    old_tables = _run_tables(comparison.old)
    return {
        "old_label": comparison.old.label,
        "old_gpu": comparison.old.gpu,
        "new_gpu": comparison.new.gpu,
        "notes": list(comparison.notes),
        "counts": _chips(comparison.counts()),
        "charts": [_figure(c) for c in charts],
        "notable": table([r for r in comparison.rows if r.verdict != Verdict.PASS.value], with_message=True),
        "every": table(comparison.rows, with_message=False),
        "old_software": comparison.old.software(),
        "old_tables": old_tables,
    }


_template_cache: list = []


def _template():
    """The page template, loaded once; jinja2 is imported here so `ampbench compare` never needs it."""
    if not _template_cache:
        import jinja2

        env = jinja2.Environment(
            loader=jinja2.PackageLoader("ampbench", "templates"),
            autoescape=True,  # everything interpolated is text; the template's own markup is all there is
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        _template_cache.append(env.get_template("report.html.j2"))
    return _template_cache[0]


def render_html(run: Run, charts: Sequence[Chart], comparison: "Comparison | None" = None,
                compare_charts: Sequence[Chart] = (), failures: Sequence[tuple[str, str]] = ()) -> str:
    """index.html: one file, CSS inline and charts as data: URIs, so it opens anywhere, offline."""
    counts = verdict_counts(run.cells)
    return _template().render(
        title=f"ampbench report — {run.gpu}",
        gpu=run.gpu,
        run_file=run.path.name,
        run_software=run.software(),
        kinds=[(kind, _chips(counts[kind])) for kind in run.kinds()] if run.cells else [],
        foreign_note=foreign_note(run) if run.foreign else None,
        failures=list(failures),
        flagged=[{"verdict": _verdict_span(c.verdict), "test_id": c.test_id, "message": str(c.get("message") or "")}
                 for c in attention(run)],
        comparison=_comparison_context(comparison, compare_charts) if comparison is not None else None,
        charts=[_figure(c) for c in charts],
        run_tables_of=_run_tables(run),
    )


# ---------------------------------------------------------------------------------------------------
# writing


def build_report(run: Run, comparison: "Comparison | None" = None,
                 failures: Sequence[tuple[str, str]] = ()) -> dict[str, bytes]:
    """Every file of the report, by name, in memory: nothing touches the disk until all are made."""
    charts = run_charts(run)
    compare_charts = []
    if comparison is not None:
        chart = comparison_chart(comparison)
        if chart is not None:
            compare_charts.append(chart)
    files: dict[str, bytes] = {c.filename: c.png for c in [*charts, *compare_charts]}
    files["index.html"] = render_html(run, charts, comparison, compare_charts, failures).encode("utf-8")
    files["summary.md"] = render_markdown(run, comparison, failures).encode("utf-8")
    return files


REPORT_MARKER = ".ampbench-report.json"  # lists the files a report wrote: all it may ever replace


def _foreign_entries(directory: Path) -> list[str]:
    """What in an existing `directory` a report did not write, by its marker: every entry when the marker
    is missing or unreadable (a folder without one was not made by ``ampbench report``)."""
    entries = sorted(directory.iterdir(), key=lambda p: p.name)
    if not entries:
        return []
    owned: set[str] = set()
    try:
        marker = json.loads((directory / REPORT_MARKER).read_text(encoding="utf-8"))
        listed = marker.get("files") if isinstance(marker, dict) else None
        if isinstance(listed, list):
            owned = {n for n in listed if isinstance(n, str) and n == Path(n).name}
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    foreign = []
    for p in entries:
        if p.name == REPORT_MARKER and owned:
            continue
        # a folder or link under one of our names is still not ours to delete
        if p.name in owned and p.is_file() and not p.is_symlink():
            continue
        foreign.append(p.name + ("/" if p.is_dir() and not p.is_symlink() else ""))
    return foreign


def write_report(directory: Path | str, files: Mapping[str, bytes]) -> Path:
    """Write the report into a temp folder beside `directory`, then swap it in, so a reader never
    sees half a report and a failure leaves the previous one in place. The report lists its files in
    REPORT_MARKER; an existing `directory` is replaced only if it is empty or holds nothing but what
    its marker lists, so files of anyone else are never deleted. Returns the folder."""
    directory = Path(directory)
    if REPORT_MARKER in files or any(name != Path(name).name for name in files):
        raise ValueError(f"report file names must be plain names other than {REPORT_MARKER}: {sorted(files)}")
    if directory.is_symlink():
        raise FileExistsError(f"{directory} is a symbolic link; give the folder itself as -o")
    if directory.exists():
        if not directory.is_dir():
            raise FileExistsError(f"{directory} exists and is not a directory; choose another -o")
        foreign = _foreign_entries(directory)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise FileExistsError(
                f"{directory} does not look like an ampbench report: it holds {shown}, which no ampbench "
                f"report there wrote (by its {REPORT_MARKER}); nothing was changed. Choose another -o, or move "
                "those away"
            )
    parent = directory.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=parent))
    old = None
    swapped = False
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        marker = {"ampbench_report": 1, "files": sorted(files)}
        (tmp / REPORT_MARKER).write_bytes(json.dumps(marker, indent=1).encode("utf-8"))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a report is meant to be shared
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".old", dir=parent))
            os.replace(directory, old / "report")
        os.replace(tmp, directory)
        swapped = True
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / "report").exists() and not directory.exists():
            os.replace(old / "report", directory)
        raise
    finally:
        # the previous report goes only once the new one is in place or the old one is back
        if old is not None and (swapped or not (old / "report").exists()):
            shutil.rmtree(old, ignore_errors=True)
    return directory
