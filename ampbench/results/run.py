"""The run reader: load and validate one ampbench ``--benchmark-json`` file into a Run of records.
Nothing here imports torch or pytest."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from ampbench.files.read import DuplicateKey, OverlongInteger, UnreadableFile, parse_json, read_text
from ampbench.results.base import OtherRecord, Record
from ampbench.results.cells import ConvergenceRecord, MemoryRecord, PipelineRecord, UnderflowRecord
from ampbench.results.paired import PairedRecord
from ampbench.results.schema import (
    BENCHMARK,
    DOCUMENT,
    ERRORS_KEY,
    KIND_KEY,
    MACHINE,
    READABLE_SCHEMAS,
    SCHEMA_KEY,
    UNTIMED_KEY,
    check,
)
from ampbench.results.timed import DistributedRecord, SpeedRecord
from ampbench.stats import finite_number

# every kind of cell, in the order reports list them
RECORD_TYPES: tuple[type[Record], ...] = (SpeedRecord, MemoryRecord, ConvergenceRecord, PipelineRecord,
                                          DistributedRecord, UnderflowRecord, PairedRecord)
KINDS = tuple(t.KIND for t in RECORD_TYPES)
_BY_KIND = {t.KIND: t for t in RECORD_TYPES}
R = TypeVar("R", bound=Record)


def record_type(kind: Any) -> type[Record]:
    """The record type of a cell's kind; OtherRecord for a kind this version does not know."""
    return _BY_KIND.get(kind, OtherRecord) if isinstance(kind, str) else OtherRecord


def entry_group(kind: str, model: str | None) -> str:
    """pytest-benchmark's group of a cell's entry: its kind and its model ("input pipeline: resnet50")."""
    kind = kind.replace("_", " ")
    return f"{kind}: {model}" if model else kind


def timed_entry(bench: dict) -> bool:
    """Whether pytest-benchmark's figures of a benchmarks entry are training-step times: any entry that
    is no ampbench cell, and the cells whose kind times steps (``Record.times_steps``)."""
    info = bench.get("extra_info") or {}
    return SCHEMA_KEY not in info or record_type(info.get(KIND_KEY)).times_steps(info)


class RunError(ValueError):
    """A file that cannot be reported on; the message names the file and what is wrong with it."""

    def __init__(self, path: Path | str, problem: str):
        self.path = Path(path)
        super().__init__(f"{path}: {problem}")


@dataclass
class Run:
    """One benchmark JSON written by ``pytest perf/ --benchmark-json``."""

    path: Path
    machine: dict  # machine_info["ampbench"]
    datetime: str | None
    commit: dict
    cells: list[Record]
    foreign: list[str] = field(default_factory=list)  # names of benchmarks without ampbench results (ignored)
    # (kind, model, mode) -> the first such cell, and kind -> its cells: made once, on first use, so that
    # a report reads a run of N cells in time linear in N
    _by_cell: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _by_kind: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def gpu(self) -> str:
        device = self.machine.get("device")
        if isinstance(device, str) and device:
            return device
        devices = {c.device for c in self.cells if c.device}
        return ", ".join(sorted(devices)) or "unknown device"

    @property
    def smoke(self) -> bool:
        """A CPU run: the smoke pass on tiny shapes, whose figures compare with nothing."""
        device = self.machine.get("device")
        devices = {device} if isinstance(device, str) and device else {c.device for c in self.cells if c.device}
        return bool(devices) and all(d.split(":")[0] == "cpu" for d in devices)

    @property
    def label(self) -> str:
        """How a run is named in a comparison: its file name and its date."""
        when = (self.datetime or "")[:16].replace("T", " ")
        return f"{self.path.name} ({when})" if when else self.path.name

    def _indexed(self) -> None:
        if self._by_kind or not self.cells:
            return
        for c in self.cells:
            self._by_kind.setdefault(type(c), []).append(c)
            self._by_cell.setdefault((type(c), c.model, c.mode), c)

    def of_kind(self, kind: type[R]) -> list[R]:
        self._indexed()
        return list(self._by_kind.get(kind, ()))

    def kinds(self) -> list[str]:
        seen = list(dict.fromkeys(c.kind for c in self.cells))
        return [k for k in KINDS if k in seen] + [k for k in seen if k not in KINDS]

    def models(self) -> list[str]:
        """Models in the order the run met them, which is the registry's order."""
        return list(dict.fromkeys(model_of(c) for c in self.cells))

    def cell(self, kind: type[R], model: str, mode: str) -> R | None:
        """The first cell of `kind` for `model` and `mode`, in run order."""
        self._indexed()
        return self._by_cell.get((kind, model, mode))

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
            f"{name} {m[key]:g} MHz"
            for name, key in (("SM", "sm_clock_mhz"), ("max SM", "max_sm_clock_mhz"), ("mem", "mem_clock_mhz"))
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


def model_of(cell: Record) -> str:
    """The model of a run's cell: every cell of a parsed run names one (``parse_run`` reads it off the test
    id where the record lacks it)."""
    assert cell.model is not None, "parse_run gives every cell its model"
    return cell.model


def mode_of(cell: Record) -> str:
    """The precision mode of a run's cell, which every cell of a parsed run names (``model_of``)."""
    assert cell.mode is not None, "parse_run gives every cell its mode"
    return cell.mode


UNNAMED = "-"  # the mode of a cell whose test id names none


def _params(name: str) -> str:
    """What is inside a test id's brackets: 'test_speed[gpt-amp_bf16]' -> 'gpt-amp_bf16'; '' without them."""
    return name[name.find("[") + 1 : name.rfind("]")] if "[" in name and name.endswith("]") else ""


def split_id(name: str) -> tuple[str, str]:
    """'test_speed[wide_resnet28_10-amp_fp16]' -> ('wide_resnet28_10', 'amp_fp16'): model names and
    mode names hold underscores but no dashes, so the last dash separates them."""
    inside = _params(name)
    model, sep, mode = inside.rpartition("-")
    return (model, mode) if sep else (inside or name, UNNAMED)


def _numbered(record: Record) -> bool:
    """Whether a cell's test id is the one pytest makes of a repeated parameter set: the id its model, mode
    (and comm variant) make, with pytest's counter after it ('mlp-amp_bf16_0', 'gpt-fp8_tensorwise1')."""
    if not record.model or not record.mode:
        return False
    comm = getattr(record, "comm", None)
    inside = _params(record.test_id)
    # a compiled cell's mode reads "amp_bf16 compiled", and its id "amp_bf16-compiled" or "amp_bf16"
    for mode in {record.mode.replace(" ", "-"), record.mode.split(" ")[0]}:
        base = f"{record.model}-{mode}" + (f"-{comm}" if comm else "")
        counter = inside[len(base):].removeprefix("_") if inside.startswith(base) else ""
        if counter.isascii() and counter.isdigit():
            return True
    return False


def _repeat_problems(cells: list[Record], positions: list[str]) -> list[str]:
    """A run holds each test once, under the id its parameters make: a test id met twice (two runs in one
    file), or one pytest numbered because a model, mode or comm variant was named twice, matches no test
    of another run, and would be judged by whichever copy a reader met first or last."""
    problems = []
    first: dict[str, str] = {}
    for cell, where in zip(cells, positions):
        if cell.test_id in first:
            problems.append(f"{where} repeats the test id {cell.test_id} of {first[cell.test_id]}; "
                            "a run holds each test once")
        first.setdefault(cell.test_id, where)
    numbered = [c.test_id for c in cells if _numbered(c)]
    if numbered:
        shown = ", ".join(numbered[:4]) + (f" and {len(numbered) - 4} more" if len(numbered) > 4 else "")
        problems.append(f"test ids {shown} end in the counter pytest adds to repeated parameters (a model, mode or "
                        "comm variant named twice, e.g. --perf-models mlp,mlp): they match no test of another run; "
                        "rerun naming each once")
    return problems


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
        document = parse_json(text)
    except DuplicateKey as exc:
        raise RunError(path, str(exc)) from None
    except OverlongInteger as exc:
        raise RunError(path, exc.problem) from None
    except json.JSONDecodeError as exc:
        raise RunError(path, _truncation_problem(text, exc)) from None
    except RecursionError:
        raise RunError(path, "is not a benchmark JSON: its values are nested too deeply to read") from None
    return parse_run(document, path)


def _refuse(path: Path, problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise RunError(path, "; ".join(problems[:3]) + more)


def _entries(document: dict, path: Path) -> list[tuple[str, Any]]:
    """(where, entry) of every cell: those pytest-benchmark timed, those that time nothing, then those
    whose test stopped with an error."""
    errors = document.get(ERRORS_KEY)
    if errors is not None and not isinstance(errors, list):
        raise RunError(path, f"{ERRORS_KEY} is not a list; ampbench writes one entry per cell whose test stopped")
    entries = [(f"benchmarks[{i}]", b) for i, b in enumerate(document["benchmarks"])]
    entries += [(f"{UNTIMED_KEY}[{i}]", b) for i, b in enumerate(document.get(UNTIMED_KEY) or ())]
    return entries + [(f"{ERRORS_KEY}[{i}]", b) for i, b in enumerate(errors or [])]


def _read_cell(bench: Any, where: str, path: Path, foreign: list[str], problems: list[str]) -> Record | None:
    """One entry's record; None where it is no ampbench cell (its name added to `foreign`) or is wrong
    (what is wrong added to `problems`)."""
    if not isinstance(bench, dict):
        raise RunError(path, f"{where} is not an object; pytest-benchmark writes one per test")
    _refuse(path, check(bench, BENCHMARK, where))
    info = bench.get("extra_info") or {}
    name = bench["name"]
    if SCHEMA_KEY not in info:
        foreign.append(name)
        return None
    if info[SCHEMA_KEY] not in READABLE_SCHEMAS:
        raise RunError(
            path,
            f"{where}.extra_info.{SCHEMA_KEY} of {name} is {info[SCHEMA_KEY]!r}: written with ampbench schema "
            f"{info[SCHEMA_KEY]!r}; this ampbench reads schema {', '.join(map(str, READABLE_SCHEMAS))} (report it "
            "with the ampbench version that wrote it, or rerun the suite)",
        )
    kind = record_type(info.get(KIND_KEY))
    cell_problems = kind.problems(info, f"{where}.extra_info")
    problems += [f"{p} ({name})" for p in cell_problems]
    if cell_problems:
        return None
    record = kind.from_info(info, name)
    if not record.model or not record.mode:
        id_model, id_mode = split_id(name)
        record = replace(record, model=record.model or id_model, mode=record.mode or id_mode)
    return record


def parse_run(document: Any, path: Path | str) -> Run:
    """Validate a decoded benchmark JSON document (see load_run) and read its cells as records."""
    path = Path(path)
    not_ours = "is not ampbench output"
    if not isinstance(document, dict) or not isinstance(document.get("benchmarks"), list):
        raise RunError(
            path,
            f"{not_ours}: expected pytest-benchmark's JSON (an object with a 'benchmarks' list), "
            "as written by `pytest perf/ --benchmark-json FILE`",
        )
    _refuse(path, check(document, DOCUMENT, ""))
    machine_info = document.get("machine_info") or {}
    ours = machine_info.get("ampbench")
    machine: dict = ours if isinstance(ours, dict) else {}
    _refuse(path, check(machine, MACHINE, "machine_info.ampbench"))
    cells: list[Record] = []
    positions: list[str] = []  # where each cell is: "benchmarks[3]", "ampbench_untimed[0]", "ampbench_errors[0]"
    foreign: list[str] = []
    problems: list[str] = []  # of every cell, so one message lists what is wrong across the file
    for where, bench in _entries(document, path):
        record = _read_cell(bench, where, path, foreign, problems)
        if record is not None:
            cells.append(record)
            positions.append(where)
    _refuse(path, problems + _repeat_problems(cells, positions))
    if not cells and not machine:
        problem = (
            "none of its benchmarks carries extra_info.ampbench_schema and machine_info has no 'ampbench' entry"
            if document["benchmarks"]
            else "it holds no benchmarks and machine_info has no 'ampbench' entry"
        )
        raise RunError(path, f"{not_ours}: {problem}")
    return Run(path=path, machine=machine, datetime=document.get("datetime"), commit=document.get("commit_info") or {},
               cells=cells, foreign=foreign)
