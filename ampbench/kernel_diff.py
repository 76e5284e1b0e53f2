"""How a cell's kernels moved against an earlier side's: two kernel lists per step (each of {"name", "ms"},
names normalised by ``speed.devicetime.normalise_kernel_name``) compared into one line of text, the
kernels that moved most first. A cell's failure message, the history's changes and a bisect's outcome
name what moved with it. Nothing here imports torch."""

from __future__ import annotations

import re


def _kernel_key(name: str) -> str:
    # an anonymous namespace left "at::native::::name" in lists recorded by an older normaliser
    return re.sub(r"(?:::){2,}", "::", name)


def _same_names(side: dict[str, float], other: dict[str, float]) -> dict[str, float]:
    """`side` with each name the other side lists only in its short form (template arguments stripped,
    as lists recorded by an older normaliser keep CUTLASS wrappers: ``cutlass::Kernel2`` for
    ``cutlass::Kernel2<cutlass_80_tensorop_...>``) summed under that short form, so one kernel is not
    reported as vanished under one name and new under the other."""
    out: dict[str, float] = {}
    for name, ms in side.items():
        short = re.sub(r"<.*>$", "", name)
        key = short if name not in other and short != name and short in other and short not in side else name
        out[key] = out.get(key, 0.0) + ms
    return out


OTHER_KERNELS = "(other kernels)"  # a kernel list's lump of the kernels below its cut: a list that has one is cut


def _cut(kernels: dict[str, float]) -> float | None:
    """The time of the least kernel a cut list names (a kernel it does not name took no more); None for
    a list that names every kernel."""
    named = [ms for name, ms in kernels.items() if name != OTHER_KERNELS]
    return min(named) if OTHER_KERNELS in kernels and named else None


def kernel_changes(baseline: list | None, measured: list | None, top: int = 5,
                   against: str = "the baseline") -> str | None:
    """The kernels whose device time per step moved most against a baseline's kernel list (each list of
    {"name", "ms"}, names normalised by ``devicetime.normalise_kernel_name``), largest move first; None
    where either side has no list. A kernel one list names and the other does not is new (or vanished)
    only where the other list would have named it: it names every kernel, or its cut lies below this
    kernel's time. Otherwise it lay under that list's cut (an older list kept fewer kernels), and is
    named apart as unknown, never as new: five kernels under an old list's cut once read as new while the
    kernel really added went unnamed. The lump under the cut ("(other kernels)") is no kernel of its own.
    `against` names the earlier side in the text."""
    if not baseline or not measured:
        return None
    old = {_kernel_key(k["name"]): float(k["ms"]) for k in baseline if isinstance(k, dict) and "name" in k}
    new = {_kernel_key(k["name"]): float(k["ms"]) for k in measured if isinstance(k, dict) and "name" in k}
    old, new = _same_names(old, new), _same_names(new, old)
    old_cut, new_cut = _cut(old), _cut(new)
    names = [n for n in dict.fromkeys([*new, *old]) if n != OTHER_KERNELS]
    moves: list[tuple[float, str, str]] = []  # (change in ms, section, its item)
    unknown: list[str] = []
    for n in names:
        if n in new and n in old:
            if new[n] != old[n]:
                moves.append((new[n] - old[n], "changed",
                              f"{n} {old[n]:.3f}->{new[n]:.3f} ms ({new[n] - old[n]:+.3f})"))
        elif n in new:
            if old_cut is None or new[n] > old_cut:
                moves.append((new[n], "new", f"{n} {new[n]:.3f} ms"))
            else:
                unknown.append(f"{n} {new[n]:.3f} ms")
        elif new_cut is None or old[n] > new_cut:
            moves.append((-old[n], "vanished", f"{n} {old[n]:.3f} ms"))
        else:
            unknown.append(f"{n} {old[n]:.3f} ms (under this run's cut)")
    moves.sort(key=lambda m: -abs(m[0]))
    parts: dict[str, list[str]] = {}
    for _, section, item in moves[:top]:
        parts.setdefault(section, []).append(item)
    text = "; ".join(f"{section}: {', '.join(items)}" for section, items in parts.items())
    if unknown:
        cut = f" (its least kernel {old_cut:.3f} ms)" if old_cut is not None else ""
        text += ("; " if text else "") + f"not in {against}'s shorter list{cut}: {', '.join(unknown[:top])}"
    total = sum(new.values()) - sum(old.values())
    return f"kernels per step {total:+.3f} ms against {against}; " + text if text else None
