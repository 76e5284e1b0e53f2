"""What a run JSON (``pytest perf/ --benchmark-json``) must hold for a report or a comparison to trust it:
one table per level of the file and per kind of cell, read by `report.parse_run` before it builds a Run.

A figure that reaches a verdict (a speedup and its interval, a memory or batch ratio, an accuracy, a
recorded tolerance, the verdict itself) must have its type and range, or the file is refused: a NaN or
"2.3x" speedup would otherwise be read as "no figure" and pass silently. Figures that are only shown
(step time, throughput, peak bytes...) are not listed: `Cell.number` shows an unusable one as a dash.
JSON null, where a field is optional, means "not measured" (e.g. memory on a CPU run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Field:
    """One field: its JSON type ("string", "integer", "number", "boolean", "object", "array") and, for
    numbers, the range it must lie in."""

    type: str
    required: bool = False
    low: float | None = None  # inclusive
    above: float | None = None  # exclusive
    below: float | None = None  # exclusive
    high: float | None = None  # inclusive

    def expected(self) -> str:
        what = {"string": "a string", "integer": "an integer", "number": "a finite number", "boolean": "true or false",
                "object": "an object", "array": "a list"}[self.type]
        bounds = [f">= {self.low:g}" if self.low is not None else "", f"> {self.above:g}" if self.above is not None else "",
                  f"< {self.below:g}" if self.below is not None else "", f"<= {self.high:g}" if self.high is not None else ""]
        bounds = [b for b in bounds if b]
        return f"{what} {' and '.join(bounds)}" if bounds else what

    def problem(self, value: Any) -> str | None:
        """Why `value` does not fit, or None."""
        if self.type in ("number", "integer"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (self.type == "integer" and not isinstance(value, int)):
                return f"is {_shown(value)}"
            if not math.isfinite(value):
                return f"is {value}"
            if ((self.low is not None and value < self.low) or (self.above is not None and value <= self.above)
                    or (self.below is not None and value >= self.below) or (self.high is not None and value > self.high)):
                return f"is {value:g}"
            return None
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

# the top level, as pytest-benchmark writes it
DOCUMENT = {
    "benchmarks": Field("array", required=True),
    "machine_info": OBJECT,
    "commit_info": OBJECT,
    "datetime": STRING,
}
# machine_info.ampbench: what tells two runs' hardware and software apart
MACHINE = {"device": STRING, "torch": STRING, "cuda": STRING, "driver": STRING, "capability": STRING}
# every entry of "benchmarks"
BENCHMARK = {"name": Field("string", required=True), "extra_info": OBJECT}
# extra_info of every ampbench cell, whatever its kind
CELL = {
    "ampbench_schema": Field("integer", required=True),
    "kind": Field("string", required=True),
    "model": STRING,
    "mode": STRING,
    "device": STRING,
    "verdict": STRING,
    "message": STRING,
}
# extra_info by kind: the figures a report or a comparison judges
CELL_KINDS: dict[str, dict[str, Field]] = {
    "speed": {
        "speedup": POSITIVE,
        "speedup_low": POSITIVE,
        "speedup_high": POSITIVE,
        "speedup_across_low": POSITIVE,
        "speedup_across_high": POSITIVE,
        "baseline_speedup": POSITIVE,
        "tolerance": NON_NEGATIVE,
        "rounds": COUNT,
        "confidence": Field("number", above=0, below=1),
    },
    "memory": {
        "memory_ratio": POSITIVE,
        "max_batch_ratio": POSITIVE,
        "tolerance": NON_NEGATIVE,
    },
    "convergence": {
        # a fraction or a percentage, as the report reads it
        "accuracy": Field("number", low=0, high=100),
        "accuracy_ref": Field("number", low=0, high=100),
    },
    "input_pipeline": {
        "input_bound": Field("boolean"),
    },
}
# fields of one kind that must be in this order where all are present (an interval holds its estimate)
ORDERED: dict[str, tuple[tuple[str, ...], ...]] = {
    "speed": (("speedup_low", "speedup", "speedup_high"), ("speedup_across_low", "speedup_across_high")),
}


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


def check_cell(info: Mapping[str, Any], where: str) -> list[str]:
    """The problems of one ampbench cell's extra_info (`where` is e.g. "benchmarks[3].extra_info")."""
    problems = check(info, CELL, where)
    kind = info.get("kind")
    if problems or not isinstance(kind, str):
        return problems
    problems = check(info, CELL_KINDS.get(kind, {}), where)
    if problems:
        return problems
    for names in ORDERED.get(kind, ()):
        values = [info.get(n) for n in names]
        if all(v is not None for v in values) and any(a > b for a, b in zip(values, values[1:])):
            shown = ", ".join(f"{where}.{n} {v:g}" for n, v in zip(names, values))
            problems.append(f"{shown}: out of order; expected {' <= '.join(names)}")
    return problems
