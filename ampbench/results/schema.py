"""What a run JSON (``pytest perf/ --benchmark-json``) must hold for a report or a comparison to trust it:
the schema version, the frame pytest-benchmark writes around the cells, and the `Field` specs that the
record types attach to their figures.

A figure that reaches a verdict (a speedup and its interval, a memory or batch ratio, an accuracy, a
recorded tolerance, the verdict itself) must have its type and range, or the file is refused: a NaN or
"2.3x" speedup would otherwise be read as "no figure" and pass silently. Figures that are only shown
(step time, throughput, peak bytes...) are read leniently: an unusable one becomes None, shown as a dash.
JSON null, where a field is optional, means "not measured" (e.g. memory on a CPU run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ampbench.verdict import Verdict

# extra_info["ampbench_schema"] of every cell this version writes, and the versions it reads: schema 1 held a
# timed cell's ratios flat, each figure under its ratio's prefix; schema 2 holds them by name under RATIOS_KEY;
# schema 3 holds each side's figures by side under SIDES_KEY (schemas 1 and 2 held them flat, the fp32
# side's named three ways: ref_prepare_s, busy_ms_ref, peak_mem_ref_bytes), and a group of figures of one
# thing under one key (the device queue's); schema 4 holds a memory cell's largest-batch search under one
# key too (schemas 1 to 3 held its figures flat: max_batch_limit, search_steps, cap_bytes...)
SCHEMA_VERSION = 4
READABLE_SCHEMAS = (1, 2, 3, 4)
FLAT_RATIOS_SCHEMA = 1
FLAT_SIDES_SCHEMAS = (1, 2)
FLAT_SEARCH_SCHEMAS = (1, 2, 3)

# where a record holds its figures by side, and the sides' keys there: the cell's mode, the fp32 side (never
# "ref": docs/glossary.md), a compiled cell's versus side
SIDES_KEY = "sides"
MODE_SIDE, FP32_SIDE, VERSUS_SIDE = "mode", "fp32", "versus"

# verdicts that cells of schema 1 wrote before the vocabulary was one: (verdict, reason)
LEGACY_VERDICTS: dict[str, tuple[Verdict, str]] = {"below margin": (Verdict.REGRESSION, "below margin")}

_VALUES = {v.value: v for v in Verdict}


def read_verdict(value: Any) -> tuple[Verdict | None, str | None]:
    """(verdict, the reason a legacy value carried) of a cell's verdict string; (None, None) for null.
    Call only on a value `Field("verdict")` accepts."""
    if value is None:
        return None, None
    if value in LEGACY_VERDICTS:
        return LEGACY_VERDICTS[value]
    return _VALUES[value], None


@dataclass(frozen=True)
class Field:
    """One field: its JSON type ("string", "integer", "number", "boolean", "object", "array" or
    "verdict", a string of the verdict vocabulary) and, for numbers, the range it must lie in."""

    type: str
    required: bool = False
    low: float | None = None  # inclusive
    above: float | None = None  # exclusive
    below: float | None = None  # exclusive
    high: float | None = None  # inclusive

    def expected(self) -> str:
        if self.type == "verdict":
            return "one of " + ", ".join(repr(v.value) for v in Verdict)
        what = {"string": "a string", "integer": "an integer", "number": "a finite number", "boolean": "true or false",
                "object": "an object", "array": "a list"}[self.type]
        bounds = [f">= {self.low:g}" if self.low is not None else "",
                  f"> {self.above:g}" if self.above is not None else "",
                  f"< {self.below:g}" if self.below is not None else "",
                  f"<= {self.high:g}" if self.high is not None else ""]
        bounds = [b for b in bounds if b]
        return f"{what} {' and '.join(bounds)}" if bounds else what

    def problem(self, value: Any) -> str | None:
        """Why `value` does not fit, or None."""
        if self.type in ("number", "integer"):
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (self.type == "integer" and not isinstance(value, int))):
                return f"is {_shown(value)}"
            if not math.isfinite(value):
                return f"is {value}"
            if ((self.low is not None and value < self.low) or (self.above is not None and value <= self.above)
                    or (self.below is not None and value >= self.below)
                    or (self.high is not None and value > self.high)):
                return f"is {value:g}"
            return None
        if self.type == "verdict":
            return (None if isinstance(value, str) and (value in _VALUES or value in LEGACY_VERDICTS)
                    else f"is {_shown(value)}")
        python = {"string": str, "boolean": bool, "object": dict, "array": list}[self.type]
        return None if isinstance(value, python) else f"is {_shown(value)}"


def _shown(value: Any) -> str:
    kind = {str: "a string", bool: "a boolean", list: "a list", dict: "an object", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
    if value is None or isinstance(value, (dict, list)):
        return kind
    text = repr(value)
    return f"{text[:40]}… ({kind})" if len(text) > 40 else f"{text} ({kind})"


STRING, OBJECT = Field("string"), Field("object")
POSITIVE = Field("number", above=0)  # a speedup or a ratio to fp32
NON_NEGATIVE = Field("number", low=0)
COUNT = Field("integer", low=0)
BOOLEAN = Field("boolean")
VERDICT = Field("verdict")
CONFIDENCE = Field("number", above=0, below=1)
ACCURACY = Field("number", low=0, high=100)  # a fraction or a percentage, as the report reads it

# the cells that time no training step, each an entry of "benchmarks" without stats, beside them
# (``ampbench.plugin.entries``): readers of pytest-benchmark's format require stats of every benchmark
UNTIMED_KEY = "ampbench_untimed"
# the top level, as pytest-benchmark writes it
DOCUMENT = {
    "benchmarks": Field("array", required=True),
    UNTIMED_KEY: Field("array"),
    "machine_info": OBJECT,
    "commit_info": OBJECT,
    "datetime": STRING,
}
# machine_info.ampbench: what tells two runs' hardware and software apart
MACHINE = {"device": STRING, "torch": STRING, "cuda": STRING, "driver": STRING, "capability": STRING}
# every entry of "benchmarks"
BENCHMARK = {"name": Field("string", required=True), "extra_info": OBJECT}
# the top-level list of cells whose test stopped with an error before pytest-benchmark timed them: entries
# as in "benchmarks", of verdict "error", without timing (ampbench.plugin.entries)
ERRORS_KEY = "ampbench_errors"
# extra_info of every ampbench cell, whatever its kind (its figures: the record type of its kind)
CELL = {"ampbench_schema": Field("integer", required=True), "kind": Field("string", required=True)}
# the keys of those
SCHEMA_KEY, KIND_KEY = "ampbench_schema", "kind"
# where a timed cell's ratios lie, by name (``timed.TimedRecord``)
RATIOS_KEY = "ratios"


def check(mapping: Mapping[str, Any], table: Mapping[str, Field], where: str) -> list[str]:
    """The problems of `mapping` against `table`, each naming its field by its path from the top of the file."""
    problems = []
    for name, spec in table.items():
        at = f"{where}.{name}" if where else name
        if name not in mapping or (mapping[name] is None and not spec.required):
            if spec.required:
                problems.append(f"{at} is missing; expected {spec.expected()}")
            continue
        why = spec.problem(mapping[name])
        if why is not None:
            problems.append(f"{at} {why}; expected {spec.expected()}")
    return problems


def check_order(mapping: Mapping[str, Any], names: tuple[str, ...], where: str) -> list[str]:
    """A problem where the figures `names`, all present, are not in ascending order (an interval holds
    its estimate)."""
    values: list[Any] = [mapping.get(n) for n in names]
    if any(v is None for v in values) or all(a <= b for a, b in zip(values, values[1:])):
        return []
    shown = ", ".join(f"{where}.{n} {v:g}" for n, v in zip(names, values))
    return [f"{shown}: out of order; expected {' <= '.join(names)}"]


# the parameters every cell's entry in the run JSON names its cell by
CELL_PARAMS = ("model_name", "mode_name")


def with_cell_params(params: Any) -> Any:
    """`params` of a cell's test with its ``model_name`` and ``mode_name``: a distributed cell's test
    names them first in its ``dist_cell`` (model, mode, comm variant), which is kept; anything else as
    it is."""
    dist = params.get("dist_cell") if isinstance(params, dict) else None
    if isinstance(dist, (tuple, list)) and len(dist) >= 2 and not all(k in params for k in CELL_PARAMS):
        return {**params, "model_name": dist[0], "mode_name": dist[1]}
    return params
