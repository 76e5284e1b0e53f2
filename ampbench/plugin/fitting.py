"""Whether a cell fits the memory it is given, for the ``fits_in_memory`` fixture: the sides each kind of cell
keeps alive at once, their need (``memory.fit``: recorded peaks, else a probe, once per side in a session) and
the limit it is held to. A convergence cell trains at its own batch and config, which no memory cell records:
under a limit its mode is probed as it trains (its parity mode is its own cell's). Without --perf-memory-limit
only a recorded need larger than the whole card skips a cell, and nothing is probed: an unlimited run measures
what it did before."""

from __future__ import annotations

from typing import Any

from ampbench.memory import fit
from ampbench.memory.limit import limit_bytes
from ampbench.modes import FP32_MODE, PrecisionMode, compiled, get_mode, label, versus_of
from ampbench.settings import PerfSettings

# (model, mode label, batch, kind of cell) -> (peak bytes, ran out): each side probed once per session
_probed: dict[tuple[str, str, int, str], tuple[int, bool]] = {}


def _memory_id(model: str, mode: PrecisionMode) -> str | None:
    """The memory cell that records `mode`'s peak; none for a compiled side (memory cells run eager)."""
    return None if mode.compile else f"test_memory[{model}-{mode.name}]"


def cell_sides(test: str, model: str, mode: PrecisionMode) -> list[tuple[PrecisionMode, fit.KeptSide]]:
    """The trainers a cell of `test` keeps alive at once: a speed cell's fp32 side (compiled where the cell
    is), its mode's, and a compiled cell's versus side; a memory cell's one trainer. None for other tests."""
    if test == "test_memory":
        return [(mode, fit.KeptSide(label(mode), _memory_id(model, mode)))]
    if test != "test_speed":
        return []
    ref = compiled(get_mode(FP32_MODE), mode.compile)
    modes = [ref, mode] + ([v] if (v := versus_of(mode)) is not None else [])
    return [(m, fit.KeptSide(label(m), _memory_id(model, m))) for m in modes]


def _probe(spec: Any, mode: PrecisionMode, device: Any, smoke: bool,
           trains: tuple[Any, int] | None = None) -> tuple[int, bool]:
    """`mode`'s probed peak at the model's default batch, or at `trains` (config, batch)."""
    from ampbench.memory.peak import probe_peak

    batch = trains[1] if trains else spec.batch_size_for(smoke)
    key = (spec.name, label(mode), batch, "convergence" if trains else "default")
    if key not in _probed:
        config, size = trains if trains else (None, None)
        _probed[key] = probe_peak(spec, mode, device, smoke=smoke, config=config, batch_size=size)
    return _probed[key]


def probed_need(spec: Any, modes: list[PrecisionMode], device: Any, smoke: bool,
                trains: tuple[Any, int] | None = None) -> fit.Need | None:
    """Each side's peak from a probe (at `trains`, a convergence cell's config and batch, where given); None
    where a side compiles (a probe would compile it cold)."""
    if any(m.compile for m in modes):
        return None
    peaks, ran_out = [], False
    for m in modes:
        peak, out = _probe(spec, m, device, smoke, trains)
        peaks.append(peak)
        ran_out = ran_out or out
        if out:  # the sides after it need not be probed: the cell does not fit
            break
    return fit.Need(tuple(peaks), "probed, out of memory" if ran_out else "probed", at_least=ran_out)


def cell_misfit(test_id: str, test: str, settings: PerfSettings, device: Any, source: Any, spec: Any,
                mode: PrecisionMode) -> str | None:
    """Why the cell `test_id` of `test` (its function's name) does not fit; None where it fits or nothing
    says otherwise."""
    if device.type != "cuda":
        return None
    if test == "test_convergence":
        return _convergence_misfit(settings, device, spec, mode)
    sides = cell_sides(test, spec.name, mode)
    if not sides:
        return None
    batch = spec.batch_size_for(settings.smoke)
    entry_of = source.entry if source is not None else (lambda _: None)
    need = fit.recorded_need(entry_of, test_id if test == "test_speed" else None, [s for _, s in sides], batch)
    import torch

    if settings.memory_limit_gib is None:
        total = torch.cuda.mem_get_info(device)[1]
        if need is not None and not need.fits(total):
            return fit.message(_what(spec.name, mode, test), batch, need, total, "the card's memory")
        return None
    limit = limit_bytes(settings.memory_limit_gib)
    if need is None:
        need = probed_need(spec, [m for m, _ in sides], device, settings.smoke)
    if need is None or need.fits(limit):
        return None
    return fit.message(_what(spec.name, mode, test), batch, need, limit)


def _convergence_misfit(settings: PerfSettings, device: Any, spec: Any, mode: PrecisionMode) -> str | None:
    """A convergence cell under a limit: its mode probed at the config and batch it trains at."""
    if settings.memory_limit_gib is None:
        return None
    from ampbench.convergence import training

    batch = training.budget_for(spec.name, device).batch_size
    config, _, _ = training.image_config(spec, settings.smoke, num_classes=10)
    need = probed_need(spec, [mode], device, settings.smoke, (config, batch))
    limit = limit_bytes(settings.memory_limit_gib)
    if need is None or need.fits(limit):
        return None
    return fit.message(f"{spec.name} {label(mode)}", batch, need, limit)


def _what(model: str, mode: PrecisionMode, test: str) -> str:
    return f"{model} {label(mode)}" + (" with its fp32 side" if test == "test_speed" else "")
