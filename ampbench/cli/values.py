"""Argument types the commands share: argparse calls each on an option's text, and its error names what
the option expects (argparse puts the option's name before it)."""

from __future__ import annotations

import argparse
import math
from typing import Callable


def whole_number(low: int, high: int, why: str = "") -> Callable[[str], int]:
    """A type for a whole number in [low, high]; `why` says why the bounds are what they are."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects a whole number, got {value!r}") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must lie in [{low}, {high}]{why}, got {value}")
        return number

    return parse


def fraction(high: float, example: str) -> Callable[[str], float]:
    """A type for a number in (0, high); `example` shows one ("0.03 for 3%")."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects a number, got {value!r}") from None
        if not 0 < number < high:
            raise argparse.ArgumentTypeError(f"must lie in (0, {high:g}), e.g. {example}, got {value}")
        return number

    return parse


# a relative difference, as report's and compare's tolerances and fidelity's --target take it
relative = fraction(1, "0.03 for 3%")


def seconds_or_none(value: str) -> float | None:
    """A timeout: seconds above 0, or 0 for no limit (None)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a number of seconds, got {value!r}") from None
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise argparse.ArgumentTypeError(f"expects seconds above 0, or 0 for no limit, got {value}")
    return seconds or None
