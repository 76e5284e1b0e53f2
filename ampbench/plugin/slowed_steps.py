"""Steps slowed on purpose, for the speed gate's own check (``ampbench.plugin.slowdown``, the pytest plugin
that names the cells): ``Slowdown`` replaces ``Trainer.step`` by one that appends extra work worth a
fraction of the step to the named cells' steps, calibrated once per trainer on the figure the speed gate
reads (device time on CUDA, wall time on the CPU, a distributed rank's own first steps), and, for an fp8
cell named with EMULATE, turns torchao's emulated matmul on while its trainers are built."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ampbench import fp8, train
from ampbench.models import REGISTRY, ModelSpec, get_model
from ampbench.modes import MODES, PrecisionMode, get_mode
from ampbench.speed import devicetime, held
from ampbench.speed.timing import time_block

ENV = "AMPBENCH_SLOWDOWN"
# set (to 1) where the slowed cells are to be left untagged (--perf-slowdown-untagged): the ranks of a
# distributed cell then name no slowdown in their documents, which is where its record takes its tag
UNTAGGED_ENV = "AMPBENCH_SLOWDOWN_UNTAGGED"
CALIBRATION_STEPS = 5  # plain steps to settle, then as many timed: the step's own time

Cell = tuple[str, str]  # (model, precision mode)
# the slowdown of an fp8 cell that runs its matmuls in torchao's emulation, as a spec names it
EMULATE = "emulate"
# how extra_info and the header name it
EMULATED = "torchao's emulated fp8 matmul"
# a spec's MODEL or MODE that names every one (``parse``)
ANY = "*"


class Targets(dict[Cell, float | str]):
    """{(model, mode): fraction or EMULATE}, and which of them only a wildcard named (`broad`): a run need not
    train every cell '*:*:14' names, only those named one by one."""

    broad: frozenset[Cell] = frozenset()


def parse(spec: str) -> Targets:
    """'MODEL:MODE:FRACTION|emulate[,...]' -> {(model, mode): fraction or EMULATE}; ValueError saying
    what is wrong. MODEL or MODE `ANY` names every model or mode: '*:*:14' makes each step of every cell,
    both sides of each ratio, 15 times its own time, a card that much slower at everything, as far as the
    time a run takes goes (its ratios stay as they were). A later item overrides an earlier one."""
    targets, broad, named = Targets(), set[Cell](), set[Cell]()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        parts = item.split(":")
        if len(parts) != 3:
            raise ValueError(f"{item!r} is not MODEL:MODE:FRACTION, e.g. resnet50:amp_fp16:0.01")
        model, mode, fraction = parts
        try:
            models = list(REGISTRY) if model == ANY else [get_model(model).name]
            modes = list(MODES) if mode == ANY else [get_mode(mode).name]
        except KeyError as exc:
            raise ValueError(f"{item!r}: {exc.args[0]}") from None
        if fraction == EMULATE and mode == ANY:
            raise ValueError(f"{item!r}: {EMULATE} names one fp8 mode, not {ANY}")
        value = _fraction(item, mode, fraction)
        cells = [(m, p) for m in models for p in modes]
        targets.update(dict.fromkeys(cells, value))
        (broad if ANY in (model, mode) else named).update(cells)
    targets.broad = frozenset(broad - named)
    return targets


def _fraction(item: str, mode: str, fraction: str) -> float | str:
    """An item's FRACTION (or EMULATE, for an fp8 mode), or ValueError saying what is wrong."""
    if fraction == EMULATE:
        if get_mode(mode).fp8_recipe is None:
            fp8_modes = ", ".join(m.name for m in MODES.values() if m.fp8_recipe)
            raise ValueError(f"{item!r}: {EMULATE} slows an fp8 mode's matmuls ({fp8_modes}); {mode} has none")
        return EMULATE
    try:
        value = float(fraction)
    except ValueError:
        raise ValueError(f"{item!r}: the fraction {fraction!r} is not a number (nor {EMULATE}, "
                         "for an fp8 mode)") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{item!r}: the fraction must be a finite number above 0, e.g. 0.01 for 1%")
    return value


def _device_ms_per_step(trainer: train.Trainer) -> tuple[float, str]:
    """The trainer's device time per step as the speed gate measures it: graph replay, else kernel time."""
    try:
        graph = devicetime.capture(trainer)
    except devicetime.CaptureError:
        return devicetime.profile_steps(trainer, CALIBRATION_STEPS).kernel_ms, "profiler kernel time"
    graph.replay(CALIBRATION_STEPS)
    steps = 4 * CALIBRATION_STEPS
    return time_block(trainer.device, lambda: graph.replay(steps)) / steps * 1e3, "graph replay"


def _spin_cycles(device: torch.device, seconds: float) -> int:
    """How many cycles of ``torch.cuda._sleep`` take `seconds` on `device` (the rate the held blocks'
    spin is sized by, measured once per device)."""
    return int(seconds * held.spin_cycles_per_second(device))


def _wall_ms_per_step(trainer: train.Trainer) -> tuple[float, str]:
    """The trainer's wall-clock time per step, from an idle device to the end of a few plain steps."""
    return time_block(trainer.device, lambda: trainer.run(CALIBRATION_STEPS)) / CALIBRATION_STEPS * 1e3, "wall clock"


MsPerStep = Callable[[train.Trainer], tuple[float, str]]  # a step's time in ms, and how it was measured
# the extra work of one step of a trainer for a fraction of its step, and how it was sized, in words
Calibrator = Callable[[train.Trainer, float], tuple[Callable[[], None], str]]


def _extra_work(device: torch.device, step_ms: float, how: str, fraction: float) -> tuple[Callable[[], None], str]:
    """Extra work worth `fraction` of a step of `step_ms` (timed as `how` says), and how it was sized, in
    words: a spin kernel on CUDA, a busy wait on the CPU."""
    extra = fraction * step_ms / 1e3
    if device.type == "cuda":
        cycles = _spin_cycles(device, extra)
        return (lambda: torch.cuda._sleep(cycles)), f"{step_ms:.3f} ms per step ({how}), {cycles} spin cycles added"
    # a busy wait, not a sleep: the core stays occupied, as the step's own work would keep it
    return _busy_wait(extra), f"step {step_ms:.3f} ms, {extra * 1e3:.3f} ms of busy wait added"


def _busy_wait(seconds: float) -> Callable[[], None]:
    def spin() -> None:
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:
            pass

    return spin


def _sized_on(measure: MsPerStep) -> Calibrator:
    """Extra work worth the fraction of the step as `measure` times it."""

    def calibrate(trainer: train.Trainer, fraction: float) -> tuple[Callable[[], None], str]:
        step_ms, how = measure(trainer)
        return _extra_work(trainer.device, step_ms, how, fraction)

    return calibrate


# per device type: how a step's extra work is sized
CALIBRATE: dict[str, Calibrator] = {"cuda": _sized_on(_device_ms_per_step), "cpu": _sized_on(_wall_ms_per_step)}


# a rank's calibration on its own steps: so many to settle, then so many timed. Five in all: a worker's
# warm-up takes at least that many steps before its first timed block (two and a probe of three in the
# smoke pass; on CUDA eleven or more come before its step is captured as a graph, which no host sync
# of the calibration may meet)
IN_PLACE_SETTLE, IN_PLACE_TIMED = 2, 3


@dataclass
class _InPlace:
    """A rank's calibration on its own steps as they run: IN_PLACE_SETTLE to settle, IN_PLACE_TIMED timed."""

    settled: int = 0
    times: list[float] = field(default_factory=list)


_CALIBRATING = object()  # a trainer's marker while its calibration steps run plain
# what the slowdown keeps on a trainer it slows: its extra work (or _CALIBRATING, or a rank's _InPlace),
# and whether its fp8 matmuls are emulated
SPIN_ATTR, EMULATED_ATTR = "_slowdown_spin", "_slowdown_emulated"


def _mark(trainer: train.Trainer, name: str, value: object) -> None:
    """Keep `value` on `trainer` under `name`: the slowdown's own state, which Trainer does not declare."""
    setattr(trainer, name, value)


@dataclass
class Slowdown:
    """Trainer.step replaced by one that appends extra work to the named cells' steps, and, for cells
    named with EMULATE, fp8.float8_config by one that turns torchao's emulation on while their
    trainers are built."""

    targets: dict[Cell, float | str]
    calibrate: dict[str, Calibrator] = field(default_factory=lambda: CALIBRATE)  # per device type
    source: str = ENV  # where the targets were named: the flag or the environment
    # a distributed rank's: calibrated on its own first steps as they run, never on steps of its own. A
    # rank that ran steps its peers did not would leave them in a collective: a slowdown on one node's
    # ranks alone (the others have none) must add no step
    in_place: bool = False
    # whether what slowed a step is kept in `applied`, to be named in the cell's record; not where the
    # slowed cells are to come as a real regression (--perf-slowdown-untagged)
    tagged: bool = True
    original: Callable | None = None  # Trainer.step as it was before install()
    original_init: Callable | None = None  # Trainer.__init__
    original_config: Callable | None = None  # fp8.float8_config
    building: Cell | None = None  # the cell whose trainer is being built
    applied: float | str | None = None  # what first slowed a step since the last clear, as extra_info tags it

    # split once: step() runs inside every timed block, of every cell, slowed or not
    spins: dict[Cell, float] = field(init=False)  # the cells given extra work, and its fraction
    emulated: set[Cell] = field(init=False)  # the cells whose fp8 matmuls are emulated

    def __post_init__(self) -> None:
        self.spins = {cell: how for cell, how in self.targets.items() if not isinstance(how, str)}
        self.emulated = {cell for cell, how in self.targets.items() if how == EMULATE}

    # the methods are replaced on the class, from outside the code they slow: mypy sees an assignment to
    # a method (method-assign), which is what this does
    def install(self) -> None:
        self.original = train.Trainer.step
        train.Trainer.step = lambda trainer, *args, **kwargs: self.step(trainer, *args, **kwargs)  # type: ignore[method-assign]
        if self.emulated:
            self.original_init, self.original_config = train.Trainer.__init__, fp8.float8_config
            train.Trainer.__init__ = lambda trainer, spec, mode, *args, **kwargs: self.init(  # type: ignore[method-assign]
                trainer, spec, mode, *args, **kwargs)
            fp8.float8_config = self.float8_config

    def uninstall(self) -> None:
        assert self.original is not None, "uninstall() follows install()"
        train.Trainer.step = self.original  # type: ignore[method-assign]
        if self.original_init is not None:
            assert self.original_config is not None, "install() keeps both or neither"
            train.Trainer.__init__ = self.original_init  # type: ignore[method-assign]
            fp8.float8_config = self.original_config

    def init(self, trainer: train.Trainer, spec: ModelSpec, mode: PrecisionMode, *args: Any, **kwargs: Any) -> None:
        assert self.original_init is not None, "install() keeps Trainer.__init__ where it replaces it"
        self.building = (spec.name, mode.name)
        try:
            self.original_init(trainer, spec, mode, *args, **kwargs)
        finally:
            self.building = None
        if (spec.name, mode.name) in self.emulated:
            _mark(trainer, EMULATED_ATTR, True)
            print(f"\nampbench.slowdown: {spec.name} {mode.name}: {EMULATED} (Float8LinearConfig emulate=True)",
                  flush=True)

    def float8_config(self, mode: PrecisionMode) -> Any:
        assert self.original_config is not None, "install() keeps fp8.float8_config where it replaces it"
        config = self.original_config(mode)
        if self.building is not None and self.building in self.emulated:
            return dataclasses.replace(config, emulate=True)
        return config

    @property
    def _original_step(self) -> Callable[..., torch.Tensor]:
        """Trainer.step as it was, which the replaced one calls: kept by install() before replacing it."""
        assert self.original is not None, "install() keeps Trainer.step before replacing it"
        return self.original

    def step(self, trainer: train.Trainer, *args: Any, **kwargs: Any) -> torch.Tensor:
        original = self._original_step
        if getattr(trainer, EMULATED_ATTR, False):
            self._applies(EMULATED)
        fraction = self.spins.get((trainer.spec.name, trainer.mode.name))
        spin = getattr(trainer, SPIN_ATTR, None)
        if fraction is None or trainer.device.type not in self.calibrate or spin is _CALIBRATING:
            return original(trainer, *args, **kwargs)
        if self.in_place and (spin is None or isinstance(spin, _InPlace)):
            return self._step_in_place(trainer, spin or _InPlace(), fraction, args, kwargs)
        if spin is None:
            _mark(trainer, SPIN_ATTR, _CALIBRATING)
            for _ in range(CALIBRATION_STEPS):  # settle before calibrating
                original(trainer, *args, **kwargs)
            spin, how = self.calibrate[trainer.device.type](trainer, fraction)
            _mark(trainer, SPIN_ATTR, spin)
            _announce(trainer, how, fraction)
        loss = original(trainer, *args, **kwargs)
        spin()
        self._applies(fraction)
        return loss

    def _applies(self, how: float | str) -> None:
        if self.tagged and self.applied is None:
            self.applied = how

    def _step_in_place(self, trainer: train.Trainer, state: _InPlace, fraction: float, args: tuple,
                       kwargs: dict[str, Any]) -> torch.Tensor:
        """One of a rank's first steps: plain while it settles, then timed one by one (each from an idle
        device) until the spin can be sized on them."""
        original = self._original_step
        _mark(trainer, SPIN_ATTR, state)
        if state.settled < IN_PLACE_SETTLE:
            state.settled += 1
            return original(trainer, *args, **kwargs)
        loss = None

        def one() -> None:
            nonlocal loss
            loss = original(trainer, *args, **kwargs)

        state.times.append(time_block(trainer.device, one))
        if len(state.times) == IN_PLACE_TIMED:
            step_ms = sum(state.times) / len(state.times) * 1e3  # wall clock, as timed in place
            spin, how = _extra_work(trainer.device, step_ms, "wall clock", fraction)
            _mark(trainer, SPIN_ATTR, spin)
            _announce(trainer, how, fraction)
        assert loss is not None, "time_block ran the step"
        return loss


def _announce(trainer: train.Trainer, how: str, fraction: float) -> None:
    """Once per cell, where its extra work is sized: the log shows what a slowed run added."""
    print(f"\nampbench.slowdown: {trainer.spec.name} {trainer.mode.name}: {how} ({fraction:.1%} of the step)",
          flush=True)
