"""One measurement of a bisect's cells in a tree: the suite's cells run by pytest (`SuiteMeasurer`), or a
step command of the user's (`CommandMeasurer`), each read back as one `StepFigure` per cell.

The suite runs as the tree's own code: the tree leads PYTHONPATH, so the ampbench a commit holds is the
one measured, and pytest runs with ``--perf-history off`` (a bisect's runs are no sample of the cell's
history) and writes its run with ``--benchmark-json``, whose speed records this reads
(``ampbench.results``). A step command prints its figures as the last line of its standard output, a
JSON object: ``{"speedup": 1.62, "low": 1.60, "high": 1.64}`` (optionally "cell", "kernels"), and exits 0.

Each measurement's process runs in a session of its own and is ended with its whole process group where
it outlives the step timeout, or where the bisect is stopped (``ampbench.children.end_group``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ampbench.bisect.cells import BisectCell, named_cell, pytest_args
from ampbench.children import STOP_GRACE, Child, TimedOut, run_pytest, tail, tree_env
from ampbench.results.ratios import SPEED_RATIOS
from ampbench.stats import SpeedupEstimate

# the grace of a measurement that ``git bisect run``'s step started: shorter than STOP_GRACE, so that when the
# driver ends the step, the step has ended its own measurement's group before the driver's SIGKILL comes
STEP_GRACE = 4.0
COMMAND_CELL = "command"  # the figure a step command prints, where it names no cell


@dataclass(frozen=True)
class StepFigure:
    """One cell's speedup in one measurement, with its interval, the suite's verdict of it (where the suite
    held it against a baseline) and the mode's top kernels, {"name", "ms"} per step (where measured)."""

    speedup: float
    low: float
    high: float
    confidence: float = 0.99
    rounds: int = 0
    verdict: str | None = None
    kernels: list | None = None

    def estimate(self) -> SpeedupEstimate:
        return SpeedupEstimate(self.speedup, self.low, self.high, self.rounds, self.confidence)

    def __str__(self) -> str:
        return f"{self.speedup:.3f}x [{self.low:.3f}, {self.high:.3f}]"


@dataclass(frozen=True)
class Measurement:
    figures: dict[str, StepFigure]  # by cell (its test id, or COMMAND_CELL)
    seconds: float
    problem: str | None = None  # why a cell has no figure: a crash, a usage error, a record missing
    device: str | None = None  # the suite's device ("cpu", "NVIDIA H200"), where the run names it
    timed_out: bool = False  # ended at the step timeout: measuring it again would only hang as long again


@dataclass
class SuiteMeasurer:
    """The suite's speed cells run by pytest in the tree. `baseline_dir`: the baseline folder it runs with;
    the bisect gives it an empty one, so that the suite judges nothing (the tree's own baselines are no part
    of a bisect) and measures each cell until its interval is as tight as `tolerance` asks."""

    cells: list[str]
    python: str
    test_file: str = "perf/test_speed.py"
    gate: str = "device"
    pytest_args: list[str] = field(default_factory=list)
    baseline_dir: str | None = None
    # --perf-tolerance: a cell without a baseline takes rounds until its interval is half this wide
    tolerance: float | None = None
    log_dir: str = "."
    timeout: float | None = None  # seconds one measurement may take (--step-timeout); None: no limit
    grace: float = STOP_GRACE

    def child(self) -> Child:
        return Child(self.timeout, self.grace)

    def parsed(self) -> list[BisectCell]:
        return [named_cell(c) for c in self.cells]

    def __call__(self, tree: Path, label: str) -> Measurement:
        run_json, log = Path(self.log_dir) / f"{label}.json", Path(self.log_dir) / f"{label}.log"
        after = list(self.pytest_args)
        if self.tolerance is not None:
            after += ["--perf-tolerance", f"{min(self.tolerance, 0.9):.6g}"]
        if self.baseline_dir is not None:
            after += ["--perf-baseline-dir", self.baseline_dir]
        t0 = time.perf_counter()
        ran = run_pytest(self.child(), self.python, tree, [*pytest_args(self.parsed(), self.test_file),
                                                            "--perf-gate", self.gate], after, run_json, log)
        seconds = time.perf_counter() - t0
        if ran.problem is not None:
            return Measurement({}, seconds, ran.problem, timed_out=ran.timed_out)
        return self.read(run_json, seconds)

    def read(self, run_json: Path, seconds: float) -> Measurement:
        """The figures of the run's speed records of these cells: the ratio the gate reads."""
        from ampbench.results import SpeedRecord
        from ampbench.results.run import RunError, load_run

        try:
            run = load_run(run_json)
        except RunError as exc:
            return Measurement({}, seconds, str(exc))
        kind = SPEED_RATIOS["wall" if self.gate == "wall" else "device"]
        records = {r.test_id: r for r in run.of_kind(SpeedRecord)}
        figures, missing = {}, []
        for cell in self.parsed():
            record = records.get(cell.test_id)
            est = record.estimate(kind) if record is not None else None
            if record is None or est is None:
                missing.append(cell.test_id)
                continue
            verdict = record.verdict_of(kind)
            figures[cell.test_id] = StepFigure(est.speedup, est.low, est.high, est.confidence, est.rounds,
                                           None if verdict is None else str(verdict), record.kernels)
        problem = f"the run holds no {kind.noun} of {', '.join(missing)}" if missing else None
        return Measurement(figures, seconds, problem, run.gpu)


@dataclass
class CommandMeasurer:
    """A step command of the user's, run by the shell in the tree; its last line of output is its figure."""

    command: str
    log_dir: str = "."
    python: str | None = None  # the interpreter a package bisect installed into: first on PATH
    timeout: float | None = None  # seconds one measurement may take (--step-timeout); None: no limit
    grace: float = STOP_GRACE

    def child(self) -> Child:
        return Child(self.timeout, self.grace)

    @property
    def cells(self) -> list[str]:
        return [COMMAND_CELL]

    def __call__(self, tree: Path, label: str) -> Measurement:
        env = tree_env(tree)
        if self.python is not None:
            env["PATH"] = os.pathsep.join([str(Path(self.python).parent), env.get("PATH", "")])
        log = Path(self.log_dir) / f"{label}.log"
        t0 = time.perf_counter()
        try:
            status, output = self.child().run(self.command, tree, env, log, shell=True)
        except TimedOut as exc:
            return Measurement({}, time.perf_counter() - t0, f"step command {exc}; its process group was ended:\n"
                                                             f"{tail(exc.output)}", timed_out=True)
        seconds = time.perf_counter() - t0
        lines = output.strip().splitlines()
        try:
            printed: Any = json.loads(lines[-1]) if lines else None
            figure = _figure(printed)
        except (ValueError, TypeError, KeyError) as exc:
            return Measurement({}, seconds, f"step command exited with status {status}; its last line is no "
                                            f"figure ({exc}), expected {{\"speedup\": S, \"low\": L, \"high\": H}}:\n"
                                            f"{tail(output)}")
        if status != 0:
            # a command that failed measured nothing it can vouch for, whatever its last line says
            return Measurement({}, seconds, f"step command exited with status {status}, a failed step, though it "
                                            f"printed the figure {figure}; a step's figure counts only where it "
                                            f"exits 0:\n{tail(output)}")
        return Measurement({str(printed.get("cell") or COMMAND_CELL): figure}, seconds)


def _figure(printed: Any) -> StepFigure:
    if not isinstance(printed, dict):
        raise ValueError("not a JSON object")
    values = [float(printed[k]) for k in ("speedup", "low", "high")]
    if not 0 < values[1] <= values[0] <= values[2]:
        raise ValueError(f"speedup {values[0]} must lie in [low {values[1]}, high {values[2]}], all above 0")
    kernels = printed.get("kernels")
    return StepFigure(values[0], values[1], values[2], kernels=kernels if isinstance(kernels, list) else None)


def measurer_of(config: Mapping[str, Any]) -> SuiteMeasurer | CommandMeasurer:
    """The measurer a step's configuration describes (`measurer_spec` wrote it)."""
    spec = dict(config["measurer"])
    kind = spec.pop("kind")
    return SuiteMeasurer(**spec) if kind == "suite" else CommandMeasurer(**spec)


def measurer_spec(measurer: SuiteMeasurer | CommandMeasurer) -> dict[str, Any]:
    return {"kind": "suite" if isinstance(measurer, SuiteMeasurer) else "command", **asdict(measurer)}
