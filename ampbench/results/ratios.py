"""Every kind of ratio a timed cell holds, one frozen row each: the speed cell's device-time speedup, its
wall-clock speedup and a compiled cell's ratio over its versus side; the distributed cell's speedups and
scaling efficiencies. A row carries every name the ratio has (its key under a record's ``ratios``, its
figures in a baseline entry and in a record of the first schema, its series in a run history, its
column, its matrix and the words of a cell's messages) and every rule (the --perf-gate value that gates
it, its tolerance's floor and its tolerance until a spread is learned, the clock that times it, whether
it is measured by a device-time method, over the versus side, recorded with its steps, judged apart from
its cell).

Everything else reads the rows: the records (``timed``), the baseline entries, the spread and the run
history, the report, the summary and the cells themselves. A new kind of ratio is one row in its table,
and, where no clock times it yet, its clock (``speed.clocks.CLOCKS``; a distributed cell's,
``distributed.clocks.DIST_CLOCKS``). The tables are dicts, read when used, as ``modes.MODES`` is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ampbench.tolerance import UNLEARNED_TOLERANCE, WALL_TOLERANCE_FLOOR

RECORD_AGAIN = "record with --perf-update-baselines"


@dataclass(frozen=True)
class RatioKind:
    """Every name and rule of one kind of ratio. In message templates {method}, {figure} and {over} are
    the ratio's: how its device time is measured, what its check calls it, the side it is over."""

    name: str  # its key under a record's "ratios" and a baseline entry's ratios: "device", "wall", ...
    prefix: str  # of its figures in a baseline entry and in a record of schema 1: "device_", ""
    label: str  # what the gated figures of a run call it (the report's needs-a-look list, `ampbench export`)
    column: str  # its column in the end-of-session summary
    gate: str  # the --perf-gate value that gates it (settings.GATES)
    floor: float = 0.0  # its tolerance's floor beside the user's --perf-tolerance
    unlearned: float = UNLEARNED_TOLERANCE  # its tolerance's floor until a between-run spread is learned
    # the clock that times its two sides in a speed cell, by its name in ``speed.clocks.CLOCKS``; in a
    # distributed cell, which of the cell's figures it is, by its name in ``distributed.clocks.DIST_CLOCKS``
    clock: str = "wall"
    same_method: bool = False  # held only against a baseline measured by the same device-time method
    over: bool = False  # a ratio over the versus side (the entry names it under "versus"), not over fp32
    steps: bool = False  # its step and round times are recorded, and its interval across runs
    stores_tolerance: bool = False  # a recording stores the tolerance it gives (what the file guards)
    stores_fallback: bool = False  # a recording stores why its device time fell back (null where none)
    learned: bool = True  # a run history learns its level and noise: its series is a `history --figure`
    share: bool = False  # shown as a percentage (a scaling efficiency), not as a factor
    # a distributed cell's record holds its verdict and tolerance apart; where not, its verdict is the cell's
    own_verdict: bool = True
    heading: str = ""  # how a cell's message introduces it
    failing: str = ""  # what a failing cell's message calls it
    short: str = ""  # what a malformed estimate is called
    noun: str = ""  # what `ampbench spread` calls it
    scope: str = ""  # the progress line while it is timed; the clock a chart of it names
    missing: str = ""  # why it is unchecked where the entry lacks it
    other_method: str = ""  # what starts the sentence where the entry measured it by another method
    no_entry: str = ""  # why it is unchecked without an entry ("" where the cell says it once)
    called: str = ""  # what a warning of its device time's fallback calls it
    title: str = ""  # its matrix's heading in the report; none where "" (a ratio over the versus side)
    # (figure, name) of the figures whose names break the prefix rule: in a record of schema 1 ("" where
    # that schema had none), and in a baseline entry
    renamed: tuple[tuple[str, str], ...] = ()
    entry_renamed: tuple[tuple[str, str], ...] = ()

    def flat(self, figure: str) -> str:
        """The name a record of schema 1 gives `figure` of this ratio ("" where it held none)."""
        return _named(figure, self.prefix, dict(self.renamed))

    def entry_key(self, figure: str) -> str:
        """The name a baseline entry gives `figure` of this ratio (``entries.RatioEntry``)."""
        return _named(figure, self.prefix, dict(self.entry_renamed))

    def rule(self, floor: float) -> tuple[float, float]:
        """(the floor, the unlearned tolerance) of its tolerance under the user's `floor`: what every
        verdict of it, from a baseline file or a history, holds it to (``tolerance.tolerance_for``)."""
        return max(floor, self.floor), self.unlearned

    @property
    def history(self) -> str:
        """Its series' name in a run history (``history.ingest``): the name schema 1 gave its value."""
        return self.flat("speedup")


def _named(figure: str, prefix: str, renamed: dict[str, str]) -> str:
    """`figure`'s name: as `renamed` gives it, else under `prefix` ("" where that name is another figure's)."""
    if figure in renamed:
        return renamed[figure]
    name = prefix + figure
    return "" if name in renamed.values() else name


def ratio_label(kind: RatioKind, cell: object) -> str:
    """What the gated figures of a run call `cell`'s ratio of `kind` (its label, over the cell's versus
    side where it is over one); a distributed cell has no versus side."""
    return kind.label.format(over=getattr(cell, "versus", None))


_DEVICE_METHOD: dict[str, Any] = dict(clock="device", same_method=True,
                                      missing="no device-time baseline: " + RECORD_AGAIN,
                                      other_method="device time ", stores_tolerance=True)

# a wall-clock speedup on a shared host wanders more than device time (``tolerance.WALL_TOLERANCE_FLOOR``)
WALL = RatioKind(name="wall", prefix="", label="wall-clock speedup", column="wall speedup", gate="wall",
                 floor=WALL_TOLERANCE_FLOOR, steps=True, heading="wall", failing="wall-clock speedup over fp32",
                 short="wall-clock", noun="wall-clock speedup", scope="wall clock",
                 missing="no wall-clock baseline: " + RECORD_AGAIN,
                 title="Wall-clock speedup of eager steps on this host", renamed=(("verdict", "wall_verdict"),))
DEVICE = RatioKind(name="device", prefix="device_", label="device speedup", column="device speedup", gate="device",
                   steps=True, stores_fallback=True, heading="device time ({method})",
                   failing="device-time speedup over fp32", short="device-time", noun="device-time speedup",
                   scope="device time", called="device time", title="Speedup over fp32 in device time (the gate)",
                   **_DEVICE_METHOD)
# a compiled cell's second ratio is a device-time figure: it holds the cell wherever device time does
VERSUS = RatioKind(name="versus", prefix="versus_", label="speedup over {over}", column="speedup over its versus side",
                   gate="device", over=True, heading="{figure} ({method})", failing="{figure}", short="{figure}",
                   noun="ratio over the versus side", scope="over its versus side",
                   no_entry="no baseline for this GPU", called="{figure}",
                   renamed=(("step_ms_ref", "versus_step_ms"),),
                   **{**_DEVICE_METHOD, "missing": "no baseline of this ratio over {over}: " + RECORD_AGAIN,
                      "other_method": ""})

# a distributed cell's device time: the least busy rank's per round (``distributed.figures.per_round_min``),
# the gate by default
DIST_DEVICE = RatioKind(name="device", prefix="device_", label="device speedup", column="device speedup",
                        gate="device", stores_fallback=True, heading="device time ({method})",
                        failing="device-time speedup over fp32 under the same parallelism", short="device-time",
                        noun="device-time speedup", called="device time", renamed=(("confidence", "confidence"),),
                        **_DEVICE_METHOD)
# its wall-clock figures, timed by its launch and judged there: reported beside its device time, gating
# under --perf-gate wall or both, or where its entry holds no device time
DIST_WALL = RatioKind(name="wall", prefix="", label="wall-clock speedup", column="wall speedup", gate="wall",
                      heading="speedup", failing="speedup over fp32 under the same parallelism", short="speedup",
                      noun="wall-clock speedup", missing="no baseline", renamed=(("verdict", "wall_verdict"),))
# its scaling efficiency, N-GPU samples/s over N x 1-GPU ones: its verdict is the cell's
SCALING = RatioKind(name="scaling", prefix="scaling_", label="scaling efficiency", column="scaling efficiency",
                    gate="wall", clock="scaling", learned=False, share=True, own_verdict=False,
                    heading="scaling efficiency", failing="scaling efficiency", short="scaling efficiency",
                    noun="scaling efficiency", missing="no baseline",
                    renamed=(("speedup", "scaling_efficiency"), ("speedup_low", "scaling_efficiency_low"),
                             ("speedup_high", "scaling_efficiency_high"), ("rounds", "rounds"),
                             ("confidence", "confidence"), ("baseline_speedup", "baseline_scaling_efficiency"),
                             ("verdict", "")),
                    entry_renamed=(("speedup", "scaling_efficiency"), ("ci_low", "scaling_efficiency_low"),
                                   ("ci_high", "scaling_efficiency_high"), ("noise", "scaling_noise")))
# in device time: rank 0's 1-GPU graph replays over the N-GPU ones, gating beside the device-time speedup
DEVICE_SCALING = RatioKind(name="device_scaling", prefix="device_scaling_", label="device scaling efficiency",
                           column="device scaling", gate="device", share=True,
                           heading="scaling efficiency in device time ({method})",
                           failing="scaling efficiency in device time", short="device scaling efficiency",
                           noun="device scaling efficiency", called="device scaling efficiency",
                           renamed=(("speedup", "device_scaling_efficiency"),
                                    ("speedup_low", "device_scaling_efficiency_low"),
                                    ("speedup_high", "device_scaling_efficiency_high"), ("rounds", "device_rounds"),
                                    ("confidence", "confidence"),
                                    ("baseline_speedup", "baseline_device_scaling_efficiency")),
                           **{**_DEVICE_METHOD, "clock": "device_scaling",
                              "missing": "no device-time scaling baseline: " + RECORD_AGAIN})

# a speed cell's ratios, in the order the cell times them; a distributed cell's, in the order it judges them
SPEED_RATIOS: dict[str, RatioKind] = {k.name: k for k in (DEVICE, WALL, VERSUS)}
DISTRIBUTED_RATIOS: dict[str, RatioKind] = {k.name: k for k in (DIST_DEVICE, DIST_WALL, SCALING, DEVICE_SCALING)}


def of_history(figure: str) -> RatioKind | None:
    """The ratio whose series a history names `figure` (a speed cell's first, where a distributed cell's
    shares its name); None for a figure that is no ratio (the memory ratio, an accuracy)."""
    return next((k for table in (SPEED_RATIOS, DISTRIBUTED_RATIOS) for k in table.values() if k.history == figure),
                None)


def history_figures() -> tuple[str, ...]:
    """The series of ratios a history learns, the gated device-time ones first, as `history changes`
    looks at them and `--figure` names them."""
    learned = [k for table in (SPEED_RATIOS, DISTRIBUTED_RATIOS) for k in table.values() if k.learned]
    names = [k.history for k in sorted(learned, key=lambda k: k.gate != "device")]
    return tuple(dict.fromkeys(names))  # a distributed ratio may share a speed ratio's series name
