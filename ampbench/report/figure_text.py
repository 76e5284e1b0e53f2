"""Figures and verdicts as text, for every page and command that shows them (the report, ``ampbench
compare``): the fmt_* helpers, verdict labels with their icons, and DASH for a figure not measured."""

from __future__ import annotations

from ampbench.printable import plural  # noqa: F401 - the report's modules read it from here
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Verdict

DASH = "-"  # a figure the cell did not measure
VERDICT_ICONS: dict[str, str] = {
    Verdict.PASS: "✅",
    Verdict.IMPROVED: "🚀",
    **{v: "❌" for v in Verdict if v.failing},
    Verdict.INCONCLUSIVE: "⚠️",
    Verdict.INPUT_BOUND: "⏳",
    Verdict.EXPECTED_LAG: "🐢",
    Verdict.NO_BASELINE: "➖",
}


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


def verdict_label(verdict: Verdict | str | None) -> str:
    if not verdict:
        return DASH
    return f"{VERDICT_ICONS.get(verdict, '')} {verdict}".strip()


# how a figure of each unit a paired cell names is shown: a ratio, a time, memory; a time to 4 digits, as
# base and head lie a fraction of a percent apart
_BY_UNIT = {"x": lambda v: fmt_number(v, ".3f", "x"), "ms": lambda v: fmt_number(v, ".4g", " ms"), "bytes": fmt_bytes}


def fmt_value(value: float | None, unit: str | None) -> str:
    """A figure in its own unit (``PairedFigure.unit``); a unit this version does not know, after the number."""
    shown = _BY_UNIT.get(unit or "")
    return shown(value) if shown is not None else fmt_number(value, ".4g", f" {unit}" if unit else "")


def fmt_change(change: float | None, low: float | None = None, high: float | None = None) -> str:
    """A relative change with its interval where both ends are known: "-0.62% [-0.76%, -0.48%]"."""
    if change is None:
        return DASH
    interval = f" [{low:+.2%}, {high:+.2%}]" if low is not None and high is not None else ""
    return f"{change:+.2%}{interval}"
