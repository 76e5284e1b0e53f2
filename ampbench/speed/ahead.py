"""Compiling ahead: the compiled sides a run will time, each compiled cold in a process of its own, several
at once, into the run's own Inductor cache, before the first cell that times or weighs anything.

Why: a compiled side's first step is dynamo and Inductor compiling it, 10-65 s a side on an H200's host,
and one process compiles its sides one after another: that was most of the compile tier's time. Compiling
is CPU work that processes can do side by side. Each process compiles the side from nothing (the run's
cache starts empty), so the time it measures is a cold compile, the figure the cell reports and its
compile-time check reads; the cell's own first step then reads the cache. A side whose compile in its
cell does not come whole from the cache (a process that failed, a graph that differs, a slowdown plugin
that rebuilt the cell) keeps the time its cell measured, as every side did before.

The timed rounds never overlap these processes: the plugin waits for the last of them before the first
test that times or weighs (everything but the convergence cells, whose figures are accuracies).

``python -m ampbench.speed.ahead --model M --mode MODE`` is one such process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

if TYPE_CHECKING:
    import torch

# a process still compiling after this long is stopped; its side compiles in its cell
WORKER_TIMEOUT_S = 900.0
# steps after the first: a graph the second step compiles (a guard the first step's inputs did not
# settle) is compiled here too, so the cell's warm-up reads it from the cache as well
AFTER_FIRST_STEPS = 2
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@dataclass(frozen=True)
class AheadSide:
    """One compiled side of the run: a model and a row of the mode table, compiled whatever the row says."""

    model: str
    mode: str

    @property
    def label(self) -> str:
        return f"{self.model} {self.mode} compiled"


@dataclass(frozen=True)
class Compiled:
    """What compiling one side ahead gave: its cold first step in seconds, or why there is none; and
    where its process's time went (starting: imports, the device and the compiler's warm-up; the whole
    process, as its parent saw it)."""

    seconds: float | None = None
    error: str | None = None
    starting_s: float | None = None
    process_s: float | None = None

    def describe(self) -> str:
        if self.seconds is None:
            return f"no time ({self.error})"
        return (f"first step {self.seconds:.1f} s; {self.process_s or 0.0:.1f} s in its process, "
                f"{self.starting_s or 0.0:.1f} s of it starting")


class CacheReads:
    """Inductor's cache reads from here on: whether the compiles since came whole from the cache."""

    def __init__(self) -> None:
        self.hits, self.misses = self._counts()

    @staticmethod
    def _counts() -> tuple[int, int]:
        from torch._dynamo.utils import counters

        return int(counters["inductor"]["fxgraph_cache_hit"]), int(counters["inductor"]["fxgraph_cache_miss"])

    def whole(self) -> bool:
        """At least one graph read from the cache since, and none compiled anew (with the caches off,
        neither counts)."""
        hits, misses = self._counts()
        return hits > self.hits and misses == self.misses


def compile_settings(cache_dir: str | None) -> None:
    """Dynamo's and Inductor's settings wherever a run compiles: in its pytest process and in each process
    that compiles ahead, alike, since Inductor's cache key holds its config. Without `cache_dir` every
    cache is off, so each compile is a cold one; with it, Inductor caches into that folder, which the run
    made empty."""
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    if cache_dir is None:
        inductor_config.force_disable_caches = True
    else:
        os.environ[CACHE_ENV] = cache_dir
        inductor_config.force_disable_caches = False
        # the cache holds compiled graphs and kernels, never the launch configs a kernel's first run
        # picks by timing its candidates on the device: picked in a process timing them beside three
        # others on the same device, a pointwise kernel of gpt fp8_tensorwise ran 3x slower (0.32 -> 1.0
        # ms) and failed its cell at -3.4%; each cell picks its own, alone on the device, as it would
        # have with no cache at all
        inductor_config.autotune_local_cache = False
    # every mode of a model compiles the same forward under other guards (dtypes, autocast): past
    # dynamo's default limit of 8 graphs per function it would run the rest eager, without a word
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 64)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 1024)


def plan(cells: Iterable[tuple[str, str]], skips: Callable[[str, str], bool],
         costs: Mapping[AheadSide, float] | None = None) -> list[AheadSide]:
    """The compiled sides that the compiled cells `cells` (model, mode row name) are timed with: each
    cell's mode, the model's compiled fp32 side, and a versus side that compiles; each once, none that
    `skips` (model, mode: the cell would skip), the dearest first where `costs` knows them (the longest
    compile last would leave the other processes idle: on an H200, ten sides compiled 4 at a time took
    178 s with the fp32 sides, whose cost no entry held, started last)."""
    from ampbench.modes import FP32_MODE, compiled, get_mode, versus_of

    sides: dict[AheadSide, None] = {}
    for model, mode_name in cells:
        if skips(model, mode_name):
            continue
        mode = compiled(get_mode(mode_name))
        versus = versus_of(mode)
        for name in (FP32_MODE, mode_name, *([versus.name] if versus is not None and versus.compile else [])):
            sides.setdefault(AheadSide(model, name), None)
    known = dict(costs or {})
    # a side without a cost of its own (the fp32 side: a baseline entry holds its mode's compile time)
    # compiles about as long as its model's dearest known side, the same graph in other dtypes
    by_model: dict[str, float] = {}
    for side, cost in known.items():
        by_model[side.model] = max(cost, by_model.get(side.model, 0.0))
    return sorted(sides, key=lambda s: -known.get(s, by_model.get(s.model, 0.0)))


def compile_threads(workers: int, cores: int | None = None) -> int:
    """Inductor's compile workers for each of `workers` processes: the host's cores shared among them."""
    return max(1, (cores or os.cpu_count() or 1) // max(1, workers))


class CompileAhead:
    """The processes compiling the run's compiled sides, `workers` at a time, into `cache_dir`."""

    def __init__(self, sides: list[AheadSide], *, device: str, smoke: bool, workers: int, cache_dir: str,
                 cudnn_benchmark: bool = False, timeout_s: float = WORKER_TIMEOUT_S) -> None:
        self.sides, self.device, self.smoke, self.workers = sides, device, smoke, workers
        self.cudnn_benchmark = cudnn_benchmark
        self.cache_dir, self.timeout_s = cache_dir, timeout_s
        self._pool: ThreadPoolExecutor | None = None
        self._futures: dict[AheadSide, Future[Compiled]] = {}
        self._results: dict[AheadSide, Compiled] | None = None
        self._live: set[subprocess.Popen[str]] = set()  # the processes compiling now
        self._stopped = False
        self.started = self.seconds = 0.0

    def start(self) -> "CompileAhead":
        self.started = time.perf_counter()
        self._pool = ThreadPoolExecutor(max_workers=max(1, self.workers), thread_name_prefix="ampbench-ahead")
        self._futures = {side: self._pool.submit(self._compile, side) for side in self.sides}
        return self

    @property
    def done(self) -> int:
        return sum(f.done() for f in self._futures.values())

    @property
    def finished(self) -> bool:
        """Whether its outcomes are in: every process ended and waited for."""
        return self._results is not None

    def wait(self, tick: Callable[[int, int], None] | None = None) -> dict[AheadSide, Compiled]:
        """Every side's outcome, once the last process has ended; `tick(done, all)` every second meanwhile."""
        if self._results is None:
            while tick is not None and self.done < len(self._futures):
                tick(self.done, len(self._futures))
                time.sleep(1.0)
            self._results = {side: f.result() for side, f in self._futures.items()}
            if self._pool is not None:
                self._pool.shutdown()
            self.seconds = time.perf_counter() - self.started
        return self._results

    def seconds_of(self, model: str, mode: str) -> float | None:
        """The cold compile time measured ahead for a side, or None (not compiled ahead, or it failed)."""
        outcome = self.wait().get(AheadSide(model, mode))
        return outcome.seconds if outcome is not None else None

    def failures(self) -> dict[AheadSide, str]:
        return {side: c.error for side, c in self.wait().items() if c.error is not None}

    def stop(self) -> None:
        """End every process still compiling (a session stopped early); their sides give no time."""
        self._stopped = True
        for process in list(self._live):
            process.kill()
        self.wait()

    def _compile(self, side: AheadSide) -> Compiled:
        if self._stopped:
            return Compiled(error="not started: the run stopped")
        env = {**os.environ, CACHE_ENV: self.cache_dir,
               "TORCHINDUCTOR_COMPILE_THREADS": str(compile_threads(self.workers))}
        command = [sys.executable, "-m", "ampbench.speed.ahead", "--model", side.model, "--mode", side.mode,
                   "--device", self.device, *(["--smoke"] if self.smoke else []),
                   *(["--cudnn-benchmark"] if self.cudnn_benchmark else [])]
        began = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._live.add(process)
        if self._stopped:  # stopped while this one started
            process.kill()
        try:
            out, err = process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            return Compiled(error=f"still compiling after {self.timeout_s:.0f} s")
        finally:
            self._live.discard(process)
        lines = out.strip().splitlines()
        if process.returncode != 0 or not lines:
            tail = (err.strip().splitlines() or ["no output"])[-1]
            return Compiled(error=f"exit status {process.returncode}: {tail[:300]}")
        said = json.loads(lines[-1])
        return Compiled(seconds=float(said["compile_s"]), starting_s=said.get("starting_s"),
                        process_s=time.perf_counter() - began)


def compile_one(model: str, mode_name: str, device_name: str, smoke: bool,
                cudnn_benchmark: bool = False) -> tuple[float, float]:
    """Build `model`'s trainer in `mode_name` compiled and run its first steps; the first one's seconds,
    timed as ``sides.prepare_side`` times a side's first step, and the seconds before it. The backends are
    set as the session sets them: Inductor's cache key holds some of their settings (the CPU's thread count
    among them)."""
    began = time.perf_counter()
    import torch

    from ampbench import models
    from ampbench.device import configure_backends, prime_libraries
    from ampbench.modes import compiled, get_mode
    from ampbench.speed.timing import sync
    from ampbench.train import Trainer

    models.check_entry_points()
    compile_settings(os.environ.get(CACHE_ENV))
    device = torch.device(device_name)
    configure_backends(device, cudnn_benchmark)
    prime_libraries(device)
    warm_compiler(device)
    trainer = Trainer(models.get_model(model), compiled(get_mode(mode_name)), device, smoke=smoke)
    start = time.perf_counter()
    trainer.run(1)
    sync(device)
    seconds = time.perf_counter() - start
    trainer.run(AFTER_FIRST_STEPS)
    sync(device)
    return seconds, start - began


def warm_compiler(device: torch.device) -> None:
    """Compile a one-line function first: what a process pays once for its first compile (importing
    Inductor, starting its pool of compile workers, a C++ compiler's headers on the CPU) is then no part
    of the side's compile time, as it is none of a side compiled in a session that compiled before it."""
    import torch

    from ampbench.speed.timing import sync

    torch.compile(lambda x: (x * 2.0).relu().sum())(torch.ones(8, device=device))
    sync(device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ampbench.speed.ahead",
        description="Compile one side of a speed cell (a model in a precision mode, compiled) into the Inductor "
                    f"cache that ${CACHE_ENV} names, and print its first step's seconds as JSON. The pytest "
                    "plugin starts these processes; a cell then reads the cache.")
    parser.add_argument("--model", required=True, metavar="MODEL", help="a model of the zoo")
    parser.add_argument("--mode", required=True, metavar="MODE", help="a row of the precision mode table")
    parser.add_argument("--device", default="cuda", metavar="DEVICE", help="the torch device (default: cuda)")
    parser.add_argument("--smoke", action="store_true", help="the model's smoke-sized config, as on the CPU")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="cuDNN autotuning, as --perf-cudnn-benchmark on")
    args = parser.parse_args(argv)
    seconds, starting = compile_one(args.model, args.mode, args.device, args.smoke, args.cudnn_benchmark)
    print(json.dumps({"compile_s": seconds, "starting_s": starting}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
