"""A cell's result as a typed record: one frozen dataclass per kind of cell, whose fields are the keys of
its pytest-benchmark ``extra_info``. A test builds the record and writes ``to_info()``; every reader
(report, compare, spread, the terminal summary) gets it back with ``from_info()`` and reads attributes.

Each field says how it is read back (`checked`, `number`, `text`, `flag`, `raw`): a figure that reaches
a verdict is `checked` against its schema `Field` and a file holding a bad one is refused
(``problems``); a figure that is only shown is taken where usable and None otherwise. Keys a record
type does not name (figures of a newer writer, or a kind's open-ended breakdown) stay in `detail`, and
are written back as they came. A record may hold parts that are no key of their own (a timed record's
ratios, ``timed``): it reads, checks and writes them through ``_parts``, ``_part_problems`` and
``_part_info``, whose figures are declared and read as a record's are (``read_fields``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, TypeVar

from ampbench.results.schema import (
    CELL,
    FLAT_SIDES_SCHEMAS,
    KIND_KEY,
    OBJECT,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    SIDES_KEY,
    STRING,
    VERDICT,
    Field,
    check,
    check_order,
    read_verdict,
)
from ampbench.verdict import Verdict

R = TypeVar("R", bound="Record")

_READ = "read"  # field metadata: how the field's JSON value is read back
_SPEC = "spec"  # field metadata: the schema Field a checked value must fit
_OWN = "own"  # field metadata: the field is the record's own, not a key of extra_info


def checked(spec: Field) -> Any:
    """A field whose value reaches a verdict: a file with an unusable one is refused."""
    return field(default=None, metadata={_READ: "checked", _SPEC: spec})


def number() -> Any:
    """A figure that is only shown: a finite int or float, else None."""
    return field(default=None, metadata={_READ: "number"})


def text() -> Any:
    return field(default=None, metadata={_READ: "text"})


def flag() -> Any:
    return field(default=None, metadata={_READ: "flag"})


def scalar() -> Any:
    """A figure that is a number or a word, only shown: a finite number or a string, else None."""
    return field(default=None, metadata={_READ: "scalar"})


def part(factory: Any = dict) -> Any:
    """A part of the record that is no key of extra_info: read and written by the record's ``_parts`` (a
    `Group` of ``Record.GROUPS``, or a timed record's ratios)."""
    return field(default_factory=factory, metadata={_OWN: True})


def raw() -> Any:
    """A list or an object, kept as the JSON has it (round times, kernel lists, loss curves)."""
    return field(default=None, metadata={_READ: "raw"})


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


_READERS = {
    "number": _number,
    "text": lambda v: v if isinstance(v, str) else None,
    "flag": lambda v: v if isinstance(v, bool) else None,
    "raw": lambda v: v if isinstance(v, (list, dict)) else None,
    "scalar": lambda v: v if isinstance(v, str) else _number(v),
}


def encode(value: Any) -> Any:
    if isinstance(value, Verdict):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def reading(cls: type) -> tuple[tuple[str, str | None, Any], ...]:
    """(name, how it is read, its schema Field) of each figure a dataclass declares with `checked`,
    `number`, `text`, `flag`, `scalar` or `raw`."""
    return tuple((f.name, f.metadata.get(_READ), f.metadata.get(_SPEC)) for f in dataclasses.fields(cls)
                 if not f.metadata.get(_OWN))


def read_fields(fields: tuple[tuple[str, str | None, Any], ...], info: Mapping[str, Any],
                key: Any = None) -> tuple[dict[str, Any], str | None]:
    """The values of `fields` (``reading``) in `info`, each under its name or ``key(name)`` (where that is
    "", absent), and the reason a legacy verdict carried. Never raises: a checked value that does not fit
    is read as None (``problems`` says why, where asked)."""
    # once per figure of every cell a reader reads: a figure absent (most are, of any one cell) costs a look-up
    values: dict[str, Any] = {}
    reason = None
    get = info.get
    for name, how, spec in fields:
        at = key(name) if key else name
        raw = get(at) if at else None
        if raw is None:
            values[name] = None
        elif how == "checked":
            raw = raw if spec.problem(raw) is None else None
            if spec is VERDICT:
                raw, legacy = read_verdict(raw)
                reason = reason or legacy
            values[name] = raw
        else:
            values[name] = _READERS[how](raw) if how in _READERS else raw
    return values, reason


_SPECS: dict[type, dict[str, Field]] = {}  # field_specs of a type, its figures under their own names


def field_specs(cls: type, key: Any = None) -> dict[str, Field]:
    """The schema Field of each checked figure `cls` declares, by its name (or ``key(name)``)."""
    if key is None and cls in _SPECS:  # asked once per figure group of every cell a reader checks
        return _SPECS[cls]
    specs = {key(f.name) if key else f.name: f.metadata[_SPEC] for f in dataclasses.fields(cls)
             if _SPEC in f.metadata and (key is None or key(f.name))}
    if key is None:
        _SPECS[cls] = specs
    return specs


@dataclass(frozen=True)
class FigureGroup:
    """A group of figures a record holds under one key of its own (a side's, the device queue's): declared
    and read as a record's figures are; it writes the figures it holds, and is false where it holds none."""

    @classmethod
    def read(cls: type[F], info: Mapping[str, Any], key: Any = None) -> F:
        """The figures `info` holds, each under its name or ``key(name)``."""
        return cls(**read_fields(_figures_reading(cls), info, key)[0])

    def to_info(self) -> dict[str, Any]:
        return {name: encode(value) for name, _, _ in _figures_reading(type(self))
                if (value := getattr(self, name)) is not None}

    def __bool__(self) -> bool:
        for name, _, _ in _figures_reading(type(self)):
            if getattr(self, name) is not None:
                return True
        return False


F = TypeVar("F", bound=FigureGroup)
_FIGURES_READING: dict[type, tuple] = {}


def _figures_reading(cls: type) -> tuple[tuple[str, str | None, Any], ...]:
    # asked for every figure of every cell a reader reads: made once per type
    if cls not in _FIGURES_READING:
        _FIGURES_READING[cls] = reading(cls)
    return _FIGURES_READING[cls]


@dataclass(frozen=True)
class Group:
    """A key of a record that holds `figures` as an object, or, `by_side`, one such object per side
    (``{"mode": {...}, "fp32": {...}}``: schema 3). Records of the schemas `flat_schemas` (1 and 2; 1 to 3
    for a memory cell's search, nested in schema 4) held the same figures flat, under the names `flat`
    gives (figure -> key; per side, side -> figure -> key): they read into the same figures."""

    figures: type[FigureGroup]
    flat: Mapping[str, Any]
    by_side: bool = False
    flat_schemas: tuple[int, ...] = FLAT_SIDES_SCHEMAS

    def _flat(self) -> list[Mapping[str, str]]:
        return list(self.flat.values()) if self.by_side else [self.flat]

    def flat_names(self) -> frozenset[str]:
        """Every key a record of a schema that held the group flat held of it."""
        return frozenset(k for names in self._flat() for k in names.values())

    def from_flat(self, values: Mapping[str, Any]) -> Any:
        """The group of `values`, which name its figures flat, as `flat` does (a record of a schema that held
        the group flat; a memory cell's figures, which its baseline entry keeps flat)."""
        if not self.by_side:
            return self.figures.read(values, self.flat.get)
        read = {side: self.figures.read(values, names.get) for side, names in self.flat.items()}
        return {side: figures for side, figures in read.items() if figures}

    def read(self, info: Mapping[str, Any], key: str) -> Any:
        """The group of the cell whose extra_info is `info`: its figures, or its figures by side."""
        if info.get(SCHEMA_KEY) in self.flat_schemas:
            return self.from_flat(info)
        held = info.get(key)
        if not self.by_side:
            return self.figures.read(held) if isinstance(held, dict) else self.figures()
        held = held if isinstance(held, dict) else {}
        return {side: self.figures.read(figures) for side, figures in held.items() if isinstance(figures, dict)}

    def taken(self, info: Mapping[str, Any], key: str) -> frozenset[str]:
        """The keys of `info` the group reads."""
        return self.flat_names() if info.get(SCHEMA_KEY) in self.flat_schemas else frozenset({key})

    def to_info(self, value: Any) -> dict[str, Any]:
        if not self.by_side:
            return value.to_info()
        return {side: figures.to_info() for side, figures in value.items() if figures}

    def problems(self, info: Mapping[str, Any], key: str, where: str) -> list[str]:
        specs = field_specs(self.figures)
        if info.get(SCHEMA_KEY) in self.flat_schemas:
            return [p for names in self._flat() for p in check(info, field_specs(self.figures, names.get), where)]
        problems = check(info, {key: OBJECT}, where)
        if problems or not isinstance(info.get(key), dict):
            return problems
        held, at = info[key], f"{where}.{key}" if where else key
        if not self.by_side:
            return check(held, specs, at)
        problems = check(held, {side: OBJECT for side in held}, at)
        return problems or [p for side, figures in held.items() for p in check(figures, specs, f"{at}.{side}")]


_INFO_FIELDS: dict[type, tuple[dataclasses.Field, ...]] = {}  # Record.info_fields, per record type
_READING: dict[type, tuple] = {}  # Record._reading, per record type


@dataclass(frozen=True)
class Record:
    """What every cell carries: who it is and what it concluded. Subclasses add their kind's figures."""

    KIND: ClassVar[str] = ""
    # whether pytest-benchmark's own figures for a cell of this kind are training-step times (its
    # terminal table lists only those)
    TIMED: ClassVar[bool] = False
    # checked figures that must be ascending where all are present (an interval holds its estimate)
    ORDERED: ClassVar[tuple[tuple[str, ...], ...]] = ()
    # the parts that hold a group of figures under one key, by the key (its field's name): a side's figures
    # by side under "sides", the device queue's under "device_queue", a memory cell's search under
    # "max_batch_search"
    GROUPS: ClassVar[Mapping[str, Group]] = {}

    test_id: str = field(default="", metadata={_OWN: True})  # pytest-benchmark's name of the cell
    model: str | None = checked(STRING)
    mode: str | None = checked(STRING)
    device: str | None = checked(STRING)
    verdict: Verdict | None = checked(VERDICT)
    message: str | None = checked(STRING)
    detail: Mapping[str, Any] = field(default_factory=dict, metadata={_OWN: True})

    @property
    def kind(self) -> str:
        return self.KIND

    @classmethod
    def times_steps(cls, info: Mapping[str, Any]) -> bool:
        """Whether pytest-benchmark's figures of the cell whose extra_info is `info` are training-step times."""
        return cls.TIMED

    @classmethod
    def info_fields(cls) -> list[dataclasses.Field]:
        # asked once per field of every cell a reader reads: made once per record type
        if cls not in _INFO_FIELDS:
            _INFO_FIELDS[cls] = tuple(f for f in dataclasses.fields(cls) if not f.metadata.get(_OWN))
        return list(_INFO_FIELDS[cls])

    @classmethod
    def build(cls: type[R], **values: Any) -> R:
        """A record of `values`, the names no field has kept in `detail` (a kind's open-ended figures)."""
        names = {f.name for f in dataclasses.fields(cls)}
        own = {k: v for k, v in values.items() if k in names}
        detail = {**own.pop("detail", {}), **{k: v for k, v in values.items() if k not in names}}
        return cls(**own, detail=detail)

    def with_values(self: R, **values: Any) -> R:
        """This record with `values` set: a field's by its name, the rest into `detail`."""
        names = {f.name for f in dataclasses.fields(self)}
        own = {k: v for k, v in values.items() if k in names}
        extra = {k: v for k, v in values.items() if k not in names}
        return dataclasses.replace(self, **own, detail={**self.detail, **extra})

    def to_info(self, *, only_set: bool = False) -> dict[str, Any]:
        """extra_info of this cell; `only_set` leaves out what is None (a cell's identity, written
        before it measures, so that a cell failing later is still recognisable)."""
        info: dict[str, Any] = {SCHEMA_KEY: SCHEMA_VERSION, KIND_KEY: self.kind}
        for f in self.info_fields():
            value = getattr(self, f.name)
            if value is not None or not only_set:
                info[f.name] = encode(value)
        info.update(self._part_info(only_set))
        info.update(self.detail)
        return info

    def _part_info(self, only_set: bool) -> dict[str, Any]:
        """The keys of extra_info that hold the record's parts (its groups; a timed record's ratios)."""
        info = {}
        for key, group in self.GROUPS.items():
            value = group.to_info(getattr(self, key))
            if value or not only_set:
                info[key] = value or None  # a group of nothing measured is null, as an unmeasured figure is
        return info

    @classmethod
    def _parts(cls, info: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
        """The record's parts read from `info`, by field, and the keys of `info` they took."""
        parts = {key: group.read(info, key) for key, group in cls.GROUPS.items()}
        return parts, frozenset(k for key, group in cls.GROUPS.items() for k in group.taken(info, key))

    @classmethod
    def _part_problems(cls, info: Mapping[str, Any], where: str) -> list[str]:
        return [p for key, group in cls.GROUPS.items() for p in group.problems(info, key, where)]

    def side(self, name: str) -> Any:
        """The figures of one side (``schema.MODE_SIDE``, ``schema.FP32_SIDE``) of a record that holds its
        figures by side; none where it did not measure that side."""
        group = self.GROUPS.get(SIDES_KEY)
        if group is None:
            raise TypeError(f"a {self.kind} record holds no figures by side")
        return self.sides.get(name) or group.figures()  # type: ignore[attr-defined]

    def value(self, name: str) -> Any:
        """A figure by its key: a field, or one kept in `detail`."""
        names = {f.name for f in self.info_fields()}
        return getattr(self, name) if name in names else self.detail.get(name)

    @classmethod
    def problems(cls, info: Mapping[str, Any], where: str) -> list[str]:
        """Why `info` cannot be read as this kind of cell (`where` is e.g. "benchmarks[3].extra_info")."""
        problems = check(info, CELL, where)
        if problems:
            return problems
        problems = check(info, field_specs(cls), where) + cls._part_problems(info, where)
        if problems:
            return problems
        return [p for names in cls.ORDERED for p in check_order(info, names, where)]

    @classmethod
    def from_info(cls: type[R], info: Mapping[str, Any], test_id: str = "") -> R:
        """The record of a cell's extra_info. Never raises: a checked value that does not fit (see
        ``problems``, which the run reader asks first) is read as None."""
        fields, known = cls._reading()
        values, reason = read_fields(fields, info)
        if reason and "reason" in values and values["reason"] is None:
            values["reason"] = reason
        parts, taken = cls._parts(info)
        detail = {k: v for k, v in info.items() if k not in known and k not in taken}
        return cls(test_id=test_id, detail=detail, **values, **parts)

    @classmethod
    def _reading(cls) -> tuple[tuple[tuple[str, str | None, Any], ...], frozenset[str]]:
        """(name, how it is read, its schema Field) of each field, and every key the record reads itself:
        made once per record type, as from_info runs once per cell of a run."""
        if cls not in _READING:
            fields = reading(cls)
            _READING[cls] = fields, frozenset({name for name, _, _ in fields} | {SCHEMA_KEY, KIND_KEY})
        return _READING[cls]


@dataclass(frozen=True)
class OtherRecord(Record):
    """A cell of a kind this version does not know (a newer writer's): identity, verdict and message only."""

    other_kind: str = field(default="", metadata={_OWN: True})

    @property
    def kind(self) -> str:
        return self.other_kind

    @classmethod
    def from_info(cls, info: Mapping[str, Any], test_id: str = "") -> OtherRecord:
        record = super().from_info(info, test_id)
        kind = info.get(KIND_KEY)
        return dataclasses.replace(record, other_kind=kind if isinstance(kind, str) else "")
