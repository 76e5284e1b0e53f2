"""What one figure of a baseline entry must be: the `Rule`s that ``ampbench.baselines.entries`` attaches to
its fields and ``ampbench.baselines.schema`` checks files against."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Rule:
    """What one figure of a kind of entry must be, where a test reads it."""

    check: Callable[[Any], bool]
    expected: str  # completes "<value> is not ..."
    required: bool = False


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive(required: bool = False) -> Rule:
    return Rule(lambda v: is_number(v) and v > 0, "a finite positive number", required)


def non_negative(required: bool = False) -> Rule:
    return Rule(lambda v: is_number(v) and v >= 0, "a finite number >= 0", required)


def count(low: int, required: bool = False) -> Rule:
    return Rule(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low, f"an integer >= {low}", required)


def fraction_or_null() -> Rule:
    return Rule(lambda v: v is None or (is_number(v) and 0 <= v <= 1), "null or a finite number in [0, 1]")


def or_null(rule: Rule) -> Rule:
    """`rule`, or null: for a figure whose writers write null where nothing was learned of it (a spread
    between cards measured at 0, no prior pooled in), which its readers take as absent."""
    return Rule(lambda v: v is None or rule.check(v), f"null or {rule.expected}", rule.required)


BOOL = Rule(lambda v: isinstance(v, bool), "true or false")
STR_OR_NULL = Rule(lambda v: v is None or isinstance(v, str), "a string or null")
