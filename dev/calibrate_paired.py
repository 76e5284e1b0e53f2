"""The between-process prior of `ampbench ab`'s paired statistic (``ab.paired.PairRule.prior_sd``), measured
from A/A runs: comparisons of a tree with itself (``WHAT=aa dev/ab_check.sh``), whose every pair's log ratio
d = ln(head / base) is noise.

A pair's d has variance 2 tau^2 + the two runs' own variances (each run states its own, from its interval:
the record's ``base_sds`` and ``head_sds``), tau the sd of ln(value) between two fresh processes of one cell
on one card. So per kind of figure, over every cell's pairs,

    tau^2 = (the pooled variance of d about each cell's own mean - the mean of the runs' own variances) / 2,

with the cells' pairs less one each as its degrees of freedom (each cell's mean is its own: a cell the
head really moved says nothing of the noise; an A/A run has none). Printed per figure beside the rule in
force, with what to set (the prior_dof kept at most ~8: docs/design.md, "Paired A/B"):

    python dev/calibrate_paired.py ab-check-out/ab.json other-card/ab.json
    python dev/calibrate_paired.py --json runs/*.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ampbench.ab.figures import PAIRED_FIGURES  # noqa: E402
from ampbench.results import PairedRecord, load_run  # noqa: E402

# the most degrees of freedom a prior is given, whatever the A/A runs behind it (ab/paired.py's rules)
MAX_PRIOR_DOF = 8


@dataclass(frozen=True)
class Calibration:
    """What A/A pairs of one kind of figure say of its between-process sd."""

    figure: str
    cells: int
    pairs: int
    dof: int  # pairs less one per cell
    sd_d: float  # the pooled sd of d about each cell's mean
    run_sd: float  # the root mean of the runs' own variances (one run's)
    tau: float  # the between-process sd implied (0 where the runs' own errors explain the spread)

    def to_info(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _pairs(record: PairedRecord, figure: str) -> list[tuple[float, float]] | None:
    """(d, the pair's own variance) of each pair of `record`'s `figure`; None where it has none or lacks sds."""
    fig = record.figures.get(figure)
    if fig is None or not fig.base_runs or not fig.head_runs:
        return None
    base_sds = fig.base_sds or [None] * len(fig.base_runs)
    head_sds = fig.head_sds or [None] * len(fig.head_runs)
    out = []
    for b, h, sb, sh in zip(fig.base_runs, fig.head_runs, base_sds, head_sds):
        if not (isinstance(b, (int, float)) and isinstance(h, (int, float)) and b > 0 and h > 0):
            continue
        own = (sb or 0.0) ** 2 + (sh or 0.0) ** 2 if sb is not None and sh is not None else math.nan
        out.append((math.log(h / b), own))
    return out


def calibrate(records: list[PairedRecord], figure: str) -> Calibration | None:
    """The calibration of `figure` over the cells of `records` with 2 pairs or more; None where none has."""
    ss, own, dof, pairs, cells = 0.0, [], 0, 0, 0
    for record in records:
        found = _pairs(record, figure)
        if not found or len(found) < 2:
            continue
        ds = [d for d, _ in found]
        mean = sum(ds) / len(ds)
        ss += sum((d - mean) ** 2 for d in ds)
        own += [v for _, v in found]
        dof, pairs, cells = dof + len(ds) - 1, pairs + len(ds), cells + 1
    if dof == 0:
        return None
    var_d = ss / dof
    known = [v for v in own if not math.isnan(v)]
    # a run without a stated sd counts as exact: the whole spread is then laid on the processes
    own_pair = sum(known) / len(known) if known else 0.0
    return Calibration(figure, cells, pairs, dof, math.sqrt(var_d), math.sqrt(own_pair / 2),
                       math.sqrt(max(0.0, var_d - own_pair) / 2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="A/B run JSONs of A/A comparisons (ampbench ab -o)")
    parser.add_argument("--json", action="store_true", help="print the calibrations as JSON")
    args = parser.parse_args(argv)
    records: list[PairedRecord] = []
    for path in args.runs:
        try:
            records += load_run(path).of_kind(PairedRecord)
        except (OSError, ValueError) as error:
            parser.error(f"{path}: {error}")
    if not records:
        parser.error("no paired cell in the runs given: pass the JSON `ampbench ab -o` wrote")
    found = {name: calibrate(records, name) for name in PAIRED_FIGURES}
    if args.json:
        print(json.dumps({n: c.to_info() if c else None for n, c in found.items()}, indent=1))
        return 0
    print(f"{'figure':12s} {'cells':>5s} {'pairs':>5s} {'dof':>4s} {'sd of d':>8s} {'run sd':>8s} {'tau':>8s}"
          f"   in force (prior sd, dof)  ->  suggested")
    for name, c in found.items():
        rule = PAIRED_FIGURES[name].rule
        if c is None:
            print(f"{name:12s} no cell with 2 pairs or more")
            continue
        print(f"{name:12s} {c.cells:5d} {c.pairs:5d} {c.dof:4d} {c.sd_d:8.4%} {c.run_sd:8.4%} {c.tau:8.4%}"
              f"   {rule.prior_sd:.4%}, {rule.prior_dof:g}  ->  {c.tau:.4%}, {min(c.dof, MAX_PRIOR_DOF)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
