"""How well `ampbench history changes` finds change points, on synthetic series with known changes.

    python dev/bench_changes.py               # the chosen detector: precision/recall, false changes, time
    python dev/bench_changes.py --compare     # ruptures configurations, each calibrated to the same rate
    python dev/bench_changes.py --calibrate   # fit the penalty (changes.PENALTY) to pure noise

A series is a cell's ln values over 8 to 60 runs: normal noise of sd SD (a device-time speedup's
between-run spread), and with probability STRAY per run a stray run 4 to 8 sd off (a throttled card, a
busy host). A change series steps by 0.5 to 5 sd at a run k with at least MIN_RUNS runs on either side.
A reported change is right at k exactly, or near within one run; precision counts the reported changes
that are near a true one. Every run is seeded: the same command prints the same table.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ampbench.history import changes  # noqa: E402
from ampbench.history.learn import learn  # noqa: E402
from ampbench.history.series import Point, Series  # noqa: E402

SD = 0.0025
STRAY = 0.03
STEPS = (0.5, 1.0, 2.0, 3.0, 5.0)
LENGTHS = (8, 60)
TARGET = 0.0003  # false changes per pure-noise series the penalty is fitted to: a third of the requirement


def noise(rng: np.random.Generator, n: int, stray: float = STRAY) -> np.ndarray:
    """ln values of an unchanged cell, in units of SD."""
    z = rng.standard_normal(n)
    hit = rng.random(n) < stray
    z[hit] += rng.choice([-1.0, 1.0], hit.sum()) * rng.uniform(4, 8, hit.sum())
    return z


def stepped(rng: np.random.Generator, step: float, stray: float = STRAY) -> tuple[np.ndarray, int, float]:
    """A series that moves by `step` sd, up or down, at run k: (values, k, the signed step)."""
    n = int(rng.integers(LENGTHS[0], LENGTHS[1] + 1))
    k = int(rng.integers(changes.MIN_RUNS, n - changes.MIN_RUNS + 1))
    z = noise(rng, n, stray)
    signed = step * rng.choice([-1.0, 1.0])
    z[k:] += signed
    return z, k, signed


def as_series(z: np.ndarray, failing_from: int | None = None) -> Series:
    """`z` as a history's series, every run counted but those from `failing_from` on."""
    points = tuple(Point(f"r{i}", "", math.exp(SD * x), None, None, failing_from is None or i < failing_from, False)
                   for i, x in enumerate(z))
    return Series("synthetic", "test_speed[x-y]", "device_speedup", points)


def product(shape: tuple[float, float] | None = None) -> Callable[..., list[int]]:
    """The detector as `history changes` runs it: the series' learned noise, then find_changes."""
    def detect(z: np.ndarray, failing_from: int | None = None) -> list[int]:
        series = as_series(z, failing_from)
        return [c.index for c in changes.find_changes(series, shape, replay=learn(series).replay)]
    return detect


def ruptures_detector(kind: str, c: float) -> Callable[[np.ndarray], list[int]]:
    """A plain ruptures configuration on the ln values scaled by the true noise, penalty c ln(n)."""
    import ruptures

    make = {"pelt-l2": lambda: ruptures.KernelCPD(kernel="linear", min_size=2, jump=1),  # PELT, l2 cost, in C
            "pelt-l1": lambda: ruptures.Pelt(model="l1", min_size=2, jump=1),
            "binseg-l2": lambda: ruptures.Binseg(model="l2", min_size=2, jump=1),
            "binseg-l1": lambda: ruptures.Binseg(model="l1", min_size=2, jump=1),
            "pelt-rbf": lambda: ruptures.KernelCPD(kernel="rbf",
                                                   params={"gamma": changes.GAMMA}, min_size=2, jump=1)}[kind]
    return lambda z: [int(b) for b in make().fit(z).predict(pen=c * math.log(len(z)))[:-1]]


def critical(detect_at: Callable[[np.ndarray, float], list[int]], z: np.ndarray, low: float) -> float:
    """The smallest penalty (above `low`) at which `z` shows no change: a false change below it."""
    if not detect_at(z, low):
        return low
    high = 64.0
    for _ in range(18):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if detect_at(z, mid) else (low, mid)
    return high


def null_set(count: int, seed: int, stray: float = STRAY) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [noise(rng, int(n), stray) for n in rng.integers(LENGTHS[0], LENGTHS[1] + 1, count)]


def change_set(count: int, seed: int, stray: float = STRAY) -> list[tuple[np.ndarray, float, int, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        step = STEPS[i % len(STEPS)]
        out.append((step, *stepped(rng, step, stray)))
    return [(z, step, k, signed) for step, z, k, signed in out]


# a drop this many sd fails its verdict (about a learned tolerance), so those runs do not count
FAILS_AT = 3.0


def table(detect: Callable[..., list[int]], cases, nulls, plain: bool = False) -> list[str]:
    """Recall (exact, near; also where both sides hold 4 runs or more), precision by step size, and
    false changes on pure noise. A product detector is told which runs failed their verdict; a `plain`
    one takes the values alone."""
    rows = {s: [0, 0, 0, 0, 0, 0, 0] for s in STEPS}  # series, exact, near, reported, right, series 4+, exact 4+
    for z, step, k, signed in cases:
        found = detect(z) if plain else detect(z, k if signed <= -FAILS_AT else None)
        r, wide = rows[step], min(k, len(z) - k) >= 4
        r[0] += 1
        r[1] += k in found
        r[2] += any(abs(b - k) <= 1 for b in found)
        r[3] += len(found)
        r[4] += sum(abs(b - k) <= 1 for b in found)
        r[5] += wide
        r[6] += wide and k in found
    lines = ["| step (noise sd) | series | recall at k | recall within 1 | recall at k, 4+ runs a side | precision |",
             "|---|---|---|---|---|---|"]
    for step, (n, exact, near, reported, right, n4, exact4) in rows.items():
        precision = f"{right / reported:.2f}" if reported else "-"
        lines.append(f"| {step:g} | {n} | {exact / n:.2f} | {near / n:.2f} | {exact4 / n4:.2f} | {precision} |")
    false = sum(bool(detect(z)) for z in nulls)
    lines.append(f"false changes: {false} of {len(nulls)} pure-noise series "
                 f"({false / len(nulls) * 1000:.2f} per 1,000)")
    return lines


def timed(detect: Callable[[np.ndarray], list[int]], series: list[np.ndarray]) -> float:
    t0 = time.perf_counter()
    for z in series:
        detect(z)
    return (time.perf_counter() - t0) / len(series)


def calibrate(count: int, learned: bool = True) -> tuple[float, float]:
    """The penalty a + b ln(n) that holds every band of lengths to TARGET false changes, with the
    smallest mean penalty over the lengths (the most recall); with the learned noise, or without
    (``changes.PENALTY_OWN_SCALE``)."""
    nulls = null_set(count, seed=101)
    crit = []
    for z in nulls:
        series = as_series(z)
        logs = series.log_values()
        scale = changes.noise_scale(logs, learn(series).pooled.sd if learned else None)
        crit.append(critical(lambda _, pen: changes.change_points(logs, scale, (pen, 0.0)), z, 1.0))
    crit = np.array(crit)
    logn = np.log([len(z) for z in nulls])
    bands = [(logn >= math.log(a)) & (logn < math.log(b)) for a, b in ((8, 16), (16, 32), (32, 61))]
    best = None
    for b in np.arange(0.0, 3.01, 0.05):
        a = max(np.quantile(crit[m] - b * logn[m], 1 - TARGET, method="higher") for m in bands)
        mean = a + b * np.mean(np.log(np.arange(LENGTHS[0], LENGTHS[1] + 1)))
        if best is None or mean < best[0]:
            best = (mean, float(a), float(b))
    return round(best[1], 2), round(best[2], 2)


def compare(count: int) -> None:
    """Each configuration's penalty c ln(n) calibrated to TARGET on the same pure noise (scaled by the
    true sd), then its table; the product's own detector last."""
    nulls, cases = null_set(count, seed=202), change_set(2000, seed=303)
    for stray in (STRAY, 0.0):
        print(f"\n### stray runs {stray:.0%}")
        nulls_s, cases_s = null_set(count, seed=202, stray=stray), change_set(2000, seed=303, stray=stray)
        for kind in ("pelt-l2", "pelt-l1", "binseg-l2", "binseg-l1", "pelt-rbf"):
            at = lambda z, c, kind=kind: ruptures_detector(kind, c)(z)  # noqa: E731
            crit = np.array([critical(at, z, 0.5) for z in nulls_s])
            c = float(np.quantile(crit, 1 - TARGET, method="higher")) * 1.0001
            detect = ruptures_detector(kind, c)
            print(f"\n{kind}, penalty {c:.2f} ln(n), {timed(detect, nulls_s[:200]) * 1e3:.2f} ms per series")
            print("\n".join(table(detect, cases_s, nulls_s[: count // 2], plain=True)))
    print("\nproduct (pelt-rbf, noise from the series, fitted penalty):")
    print("\n".join(table(product(), cases, nulls)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", action="store_true", help="compare ruptures configurations (minutes)")
    parser.add_argument("--calibrate", action="store_true", help="fit changes.PENALTY to pure noise")
    parser.add_argument("--series", type=int, default=20000, metavar="N", help="pure-noise series (default: 20000)")
    args = parser.parse_args()
    if args.calibrate:
        print("PENALTY =", calibrate(args.series))
        print("PENALTY_OWN_SCALE =", calibrate(args.series, learned=False))
        return
    if args.compare:
        compare(args.series)
        return
    detect = product()
    nulls = null_set(args.series, seed=404)
    print(f"pelt-rbf as `history changes` runs it; noise sd {SD:.2%}, stray runs {STRAY:.0%}, "
          f"{LENGTHS[0]}-{LENGTHS[1]} runs\n")
    print("\n".join(table(detect, change_set(5000, seed=505), nulls)))
    clean = table(detect, change_set(5000, seed=606, stray=0.0), null_set(args.series, seed=707, stray=0.0))
    print("\nwithout stray runs\n" + "\n".join(clean))
    print(f"\n{timed(detect, nulls[:2000]) * 1e3:.3f} ms per series (learn + find_changes)")


if __name__ == "__main__":
    main()
