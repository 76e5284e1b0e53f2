"""What a timed ratio's rounds say of the card that ran them (``ampbench.nvml``): which rounds ran its two
sides under different conditions (`round_flag`), whether a regression holds in cycle space and in the rounds
at steady clocks (`ConditionsCheck`, which the judge asks: ``gate.judge.judge``), a cell's energy per step
(`energy_of`), and what its record and the run's summary say of them (`conditions_info`).

A round is flagged where its two sides' SM clocks lie more than `CLOCK_GAP` apart, or where one side's block
ran under a power or thermal throttle (``nvml.THROTTLES``) the other's did not. A card that throttles during
one side's blocks moves the ratio by the clock alone: device time x SM clock (cycles per step) takes the
clock out, so a regression stands only where its cycles agree and so do the rounds at steady clocks (where
they are enough to judge; else the cycles decide); otherwise it is inconclusive and says why. Rounds
without reads, or none flagged, leave the verdict as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ampbench.gate.measurement import Measurement, Rounds
from ampbench.nvml import BlockConditions, Energy
from ampbench.stats import SpeedupEstimate, estimate_speedup, median, min_rounds, relative_spread
from ampbench.verdict import SpeedupCheck, Verdict

# Two sides of a round whose SM clocks lie further apart than this (|ln(a/b)|) ran on different cards, in
# effect. It is the tolerance a figure has until its spread is learned (``tolerance.UNLEARNED_TOLERANCE``):
# a clock gap below it cannot by itself carry a ratio across its line. How often idle and busy cards cross it
# is to be measured (docs/design.md, "Clocks and energy").
CLOCK_GAP = 0.03


def round_flag(ref: BlockConditions | None, mode: BlockConditions | None, gap: float = CLOCK_GAP) -> str | None:
    """Why a round's two blocks (the side it is over's, the mode's) ran under different conditions, or None
    where they did not or were not read."""
    if ref is None or mode is None:
        return None
    why = []
    if relative_spread(ref.sm_mhz, mode.sm_mhz) > gap:
        why.append(f"SM clock {ref.sm_mhz:.0f} MHz against the mode's {mode.sm_mhz:.0f}")
    # a throttle both sides ran under held both alike (a card at its power cap through every heavy block):
    # the ratio compares like with like; one that only one side ran under moved that side alone
    one_side = [t for t in dict.fromkeys((*ref.throttles, *mode.throttles))
                if (t in ref.throttles) != (t in mode.throttles)]
    if one_side:
        why.append(" and ".join(one_side) + (" in the mode's blocks only" if all(t in mode.throttles for t in one_side)
                                             else " in fp32's blocks only" if not any(t in mode.throttles
                                                                                         for t in one_side)
                                             else " in one side's blocks only"))
    return "; ".join(why) or None


@dataclass(frozen=True)
class _Paired:
    """Rounds of one or more sets, side by side: times, conditions and order."""

    ref: tuple[float, ...]
    mode: tuple[float, ...]
    ref_conditions: tuple[BlockConditions | None, ...]
    mode_conditions: tuple[BlockConditions | None, ...]
    ref_first: tuple[bool, ...]

    @classmethod
    def of(cls, sets: Sequence[Rounds]) -> "_Paired":
        def conditions(r: Rounds, side: tuple[BlockConditions | None, ...]) -> tuple[BlockConditions | None, ...]:
            return side if len(side) == len(r.mode_times) else (None,) * len(r.mode_times)

        return cls(tuple(t for r in sets for t in r.ref_times), tuple(t for r in sets for t in r.mode_times),
                   tuple(c for r in sets for c in conditions(r, r.ref_conditions)),
                   tuple(c for r in sets for c in conditions(r, r.mode_conditions)),
                   tuple(f for r in sets for f in r.ref_first))

    def estimate(self, keep: Sequence[int], confidence: float, cycles: bool = False) -> SpeedupEstimate | None:
        """The estimate of the rounds `keep`, in cycles per step where `cycles` (time x the block's SM clock);
        None where they are too few for an interval of `confidence`."""
        if len(keep) < min_rounds(confidence):
            return None

        def scaled(times: tuple[float, ...], conds: tuple[BlockConditions | None, ...], i: int) -> float:
            c = conds[i]
            return times[i] * (c.sm_mhz if cycles and c is not None else 1.0)

        return estimate_speedup([scaled(self.ref, self.ref_conditions, i) for i in keep],
                                [scaled(self.mode, self.mode_conditions, i) for i in keep], confidence,
                                [self.ref_first[i] for i in keep])


@dataclass(frozen=True)
class ConditionsCheck:
    """The card's say in a ratio's verdict: a regression found in rounds some of which ran under different
    clocks or a throttle stands only where it holds in cycle space (device time x SM clock, over the rounds
    read) and in the rounds at steady clocks, where those are enough to judge; otherwise it is inconclusive,
    and says the clocks explain it."""

    gap: float = CLOCK_GAP

    def flags(self, sets: Sequence[Rounds]) -> list[str | None]:
        """Each round's flag (`round_flag`), over `sets` in turn."""
        return self._flags(_Paired.of(sets))

    def _flags(self, p: _Paired) -> list[str | None]:
        return [round_flag(r, m, self.gap) for r, m in zip(p.ref_conditions, p.mode_conditions)]

    def judge(self, verdict: Verdict, check: SpeedupCheck, measured: Measurement) -> tuple[Verdict, str]:
        """`verdict` (the rounds' own, confirmed where it is a regression) with the card's say, and what it
        adds to the judgement ("" where no round was flagged)."""
        p = _Paired.of(_sets(measured))
        flags = self._flags(p)
        flagged = [f for f in flags if f is not None]
        if not flagged:
            return verdict, ""
        note = f"{len(flagged)} of {len(flags)} rounds under unsteady clocks ({flagged[0]})"
        if verdict is not Verdict.REGRESSION:
            return verdict, note
        confidence = measured.estimate.confidence
        read = [i for i, (r, m) in enumerate(zip(p.ref_conditions, p.mode_conditions))
                if r is not None and m is not None]
        cycles = p.estimate(read, confidence, cycles=True)
        steady = p.estimate([i for i in read if flags[i] is None], confidence)
        in_cycles = cycles is not None and check.classify(cycles) is Verdict.REGRESSION
        # too few steady rounds to judge leave cycle space to decide: a card whose every round is flagged must
        # still fail a regression its cycles show, or the reads would switch its gate off
        at_steady = steady is None or check.classify(steady) is Verdict.REGRESSION
        said = (f"in cycle space {cycles if cycles is not None else 'too few rounds'}; "
                f"at steady clocks {steady if steady is not None else 'too few rounds'}")
        if in_cycles and at_steady:
            return verdict, f"{note}; confirmed {said}"
        return Verdict.INCONCLUSIVE, f"{note}; not a regression: the card's clocks explain the drop ({said})"


CONDITIONS = ConditionsCheck()  # the judge's


def _sets(measured: Measurement) -> list[Rounds]:
    """A measurement's sets of rounds: its first, and its confirming set where it took one."""
    return [r for r in (measured.first, measured.confirming) if r is not None]


def energy_of(sets: Sequence[Rounds]) -> Energy | None:
    """The energy per step of each side over the rounds of `sets` where both sides' counter was read; None
    where no round was."""
    return _energy(_Paired.of(sets), sets)


def _energy(p: _Paired, sets: Sequence[Rounds]) -> Energy | None:
    steps = [(r.ref_steps, r.mode_steps) for r in sets for _ in r.mode_times]
    both = [(r.energy_mj, m.energy_mj, s) for r, m, s in zip(p.ref_conditions, p.mode_conditions, steps)
            if r is not None and m is not None and r.energy_mj is not None and m.energy_mj is not None]
    ref_j, mode_j = sum(b[0] for b in both) / 1e3, sum(b[1] for b in both) / 1e3
    if not both or ref_j <= 0 or mode_j <= 0:
        return None
    return Energy(ref_j / sum(s[0] for *_, s in both), mode_j / sum(s[1] for *_, s in both), len(both))


def conditions_text(sets: Sequence[Rounds], check: ConditionsCheck = CONDITIONS) -> str:
    """The conditions of a ratio's rounds per side, in words: "fp32 blocks at 1980 MHz, mode blocks at 1755 MHz,
    power cap in 4 of 12 rounds"; "" where none was read."""
    return _text(_Paired.of(sets), check)


def _text(p: _Paired, check: ConditionsCheck) -> str:
    read = [(r, m) for r, m in zip(p.ref_conditions, p.mode_conditions) if r is not None and m is not None]
    if not read:
        return ""
    text = (f"fp32 blocks at {median([r.sm_mhz for r, _ in read]):.0f} MHz, "
            f"mode blocks at {median([m.sm_mhz for _, m in read]):.0f} MHz")
    counts: dict[str, int] = {}
    for r, m in read:
        for name in dict.fromkeys((*r.throttles, *m.throttles)):
            counts[name] = counts.get(name, 0) + 1
    gaps = sum(relative_spread(r.sm_mhz, m.sm_mhz) > check.gap for r, m in read)
    said = [f"{name} in {n} of {len(read)} rounds" for name, n in counts.items()]
    said += [f"clocks {check.gap:.0%}+ apart in {gaps} of {len(read)} rounds"] if gaps else []
    return ", ".join([text, *said])


def conditions_info(measured: Measurement, why_unread: str | None, check: ConditionsCheck = CONDITIONS
                    ) -> dict[str, Any]:
    """A speed record's ``conditions``: of the device-time ratio's rounds, each side's block per round (and the
    round's flag), the rounds flagged, the words of `conditions_text`, and the energy per step (``nvml.Energy``);
    where nothing was read, only why (`why_unread`)."""
    sets = _sets(measured)
    p = _Paired.of(sets)
    if not any(c is not None for c in (*p.ref_conditions, *p.mode_conditions)):
        return {"read": False, "why_unread": why_unread or "no block was read"}
    flags = check._flags(p)

    def block(c: BlockConditions | None) -> dict[str, Any] | None:
        return c.to_info() if c is not None else None

    rounds = [{"fp32": block(r), "mode": block(m), "flag": f}
              for r, m, f in zip(p.ref_conditions, p.mode_conditions, flags)]
    energy = _energy(p, sets)
    return {"read": True, "clock_gap": check.gap, "rounds": rounds, "confirming_from": len(measured.first.mode_times)
            if measured.confirming is not None else None, "flagged": sum(f is not None for f in flags),
            "summary": _text(p, check), "energy": energy.to_info() if energy is not None else None}
