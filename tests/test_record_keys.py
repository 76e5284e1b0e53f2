"""One key, one meaning, in the records a run writes: no record key spells the fp32 side as "ref", a side
is keyed one way in every record, a top-level key holds one kind of value in every kind of record, and the
speed and memory records stay nested (their figures of a side, a device queue, a largest-batch search are
groups), as the paired record does (its figures by name), each under a cap of top-level keys."""

from __future__ import annotations

import re
from collections import defaultdict

# keys of a record written now that still spell a side as "ref", each with why; for a rename to follow
# (docs/glossary.md, "Names in code that use a word otherwise")
REF_KEYS = {
    "accuracy_ref": "ConvergenceRecord and UnderflowRecord: the parity mode's accuracy (fp32's, or compiled "
                    "amp_bf16's for fp8), not only fp32's side: to nest by side with the convergence record",
}
# the largest a speed record may grow at its top level: its figures of a side and of its device queue are
# nested (schema 3)
SPEED_TOP_LEVEL_KEYS = 30
# the largest a memory record may grow at its top level: its figures of a side and of its largest-batch
# search are nested (schema 4)
MEMORY_TOP_LEVEL_KEYS = 20
# the largest a paired record (an A/B run's cell) may grow at its top level: its figures are nested by name
PAIRED_TOP_LEVEL_KEYS = 20


def _keys(value: object, path: str = "") -> list[str]:
    """Every key of a JSON value, at any depth, by its path."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in [f"{path}{k}", *_keys(v, f"{path}{k}.")]]
    if isinstance(value, list):
        return [p for v in value for p in _keys(v, path)]
    return []


def _written_now() -> dict[str, dict]:
    """A record of every kind, each figure it declares set, as this version writes it."""
    import dataclasses
    import typing

    from ampbench.results import FP32_SIDE, MODE_SIDE, RECORD_TYPES, VERSUS_SIDE, RatioFigures, StepFigures
    from ampbench.results.base import FigureGroup

    def filled(cls: type) -> object:
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in ("test_id", "detail", "verdict") or f.name.startswith("_"):
                continue
            hint = str(typing.get_type_hints(cls).get(f.name, ""))
            values[f.name] = {"list": [1.0], "dict": {"x": 1.0}, "bool": True, "str": "x"}.get(
                next((k for k in ("list", "dict", "bool", "str") if k in hint), ""), 1.0)
        return values

    out = {}
    for cls in RECORD_TYPES:
        values = {k: v for k, v in filled(cls).items() if k not in (*cls.GROUPS, "ratios")}
        groups = {}
        for key, group in cls.GROUPS.items():
            figures = group.figures(**filled(group.figures))
            groups[key] = {FP32_SIDE: figures, MODE_SIDE: figures, VERSUS_SIDE: figures} if group.by_side else figures
        ratios = {}
        if getattr(cls, "RATIOS", None):
            steps = StepFigures(step_ms=1.0, round_ms=[1.0])
            ratio = RatioFigures(**{k: v for k, v in filled(RatioFigures).items() if k != "sides"},
                                 sides={MODE_SIDE: steps, FP32_SIDE: steps, VERSUS_SIDE: steps})
            ratios = {"ratios": {name: ratio for name in cls.RATIOS}}
        assert all(issubclass(g.figures, FigureGroup) for g in cls.GROUPS.values())
        out[cls.KIND] = cls(**values, **groups, **ratios).to_info()
    return out


def test_a_speed_record_written_now_has_at_most_30_keys_at_its_top_level():
    info = _written_now()["speed"]
    assert len(info) <= SPEED_TOP_LEVEL_KEYS, sorted(info)


def test_a_memory_record_written_now_has_at_most_20_keys_at_its_top_level():
    info = _written_now()["memory"]
    assert len(info) <= MEMORY_TOP_LEVEL_KEYS, sorted(info)


def test_a_paired_record_written_now_has_at_most_20_keys_at_its_top_level():
    info = _written_now()["paired"]
    assert len(info) <= PAIRED_TOP_LEVEL_KEYS, sorted(info)


def test_no_record_key_spells_the_fp32_side_as_ref():
    """A side is a key of "sides" (``schema.FP32_SIDE``: the glossary's fp32 side), never a "ref" prefix
    or suffix of a figure's name, in a record of any kind as this version writes it."""
    spelled = {path: kind for kind, info in _written_now().items() for path in _keys(info)
               if re.search(r"(^|_)ref(_|$)", path.rsplit(".", 1)[-1])}
    unexplained = {p: k for p, k in spelled.items() if p.rsplit(".", 1)[-1] not in REF_KEYS}
    assert unexplained == {}, "a record key names fp32's side as ref: nest it under sides.fp32"
    stale = sorted(set(REF_KEYS) - {p.rsplit(".", 1)[-1] for p in spelled})
    assert stale == [], "REF_KEYS lists a key no record writes: drop its entry"


def test_a_side_is_keyed_one_way_in_every_record():
    """Every "sides" object of every record, and of every ratio, is keyed by the sides' names only."""
    from ampbench.results import FP32_SIDE, MODE_SIDE, SIDES_KEY, VERSUS_SIDE

    names = set()
    for info in _written_now().values():
        stack = [info]
        while stack:
            value = stack.pop()
            if isinstance(value, dict):
                names |= set(value[SIDES_KEY]) if isinstance(value.get(SIDES_KEY), dict) else set()
                stack += list(value.values())
    assert names == {MODE_SIDE, FP32_SIDE, VERSUS_SIDE}


def test_a_record_key_means_one_thing_in_every_kind():
    """A top-level key that two kinds of record write holds the same kind of value in both (a number,
    a word, a list, an object): the same name, one meaning."""
    kinds: dict[str, set[str]] = defaultdict(set)
    for info in _written_now().values():
        for key, value in info.items():
            kinds[key].add(type(value).__name__ if not isinstance(value, (int, float)) or isinstance(value, bool)
                           else "number")
    assert {k: sorted(v) for k, v in kinds.items() if len(v) > 1} == {}
