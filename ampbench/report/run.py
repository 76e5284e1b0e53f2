"""The run reader: load and validate one ampbench ``--benchmark-json`` file into a Run of Cells, and
read the failed tests of a JUnit XML. Nothing here imports torch, pytest or ampbench.compare."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ampbench import runschema
from ampbench.inputs import UnreadableFile, read_text
from ampbench.stats import SpeedupEstimate, finite_number

SCHEMA_VERSION = 1
KINDS = ("speed", "memory", "convergence", "input_pipeline")
REFERENCE_MODE = "fp32"
# the mode table's order (docs/design.md); modes not listed here follow in the order the run met them
MODE_ORDER = ("fp32", "tf32", "amp_fp16", "amp_bf16", "fp16_master", "fp16", "bf16")
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
        text = read_text(path, "the JSON file written by `pytest perf/ --benchmark-json FILE`",
                         empty_means="the run was probably interrupted before pytest-benchmark wrote it")
    except UnreadableFile as exc:
        raise RunError(path, exc.problem) from None
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
        root = ET.fromstring(read_text(junit, "the XML file written by `pytest --junitxml FILE`"))
    except UnreadableFile as exc:
        raise RunError(junit, exc.problem) from None
    except ET.ParseError as exc:
        raise RunError(junit, f"is not JUnit XML ({exc})") from None
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
