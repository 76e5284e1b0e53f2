"""The suite's settings: one frozen object built from the ``--perf-*`` options, with validators whose
errors name the flag. Importable without pytest or torch; ``ampbench.plugin.options`` wires it to the
command line."""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

from ampbench.modes import MODES, versus_of

if TYPE_CHECKING:
    import torch

# The floor of every cell's tolerance: --perf-tolerance's default, and `ampbench compare`'s --tolerance's.
# It sits below 1% so that a 1% slowdown lies below the line rather than on it (docs/design.md); cells that
# move more between runs or cards get more through their recorded noise and learned between-run spread.
DEFAULT_TOLERANCE = 0.005
# --perf-rounds' and --perf-block-seconds' defaults: what the suite measures with unless told otherwise.
# A judged speedup is first looked at after five rounds: all five above its line is a pass (the sequential
# sign test, ``speed.sequential``), and device time holds to 0.1-0.6% per round, so most cells need no
# more; a cell on its line gets more looks, up to 48 rounds. A figure without a baseline, and a
# recording, take at least eight (the fewest for a 99% interval).
DEFAULT_MIN_ROUNDS = 5
DEFAULT_BLOCK_SECONDS = 0.1
# --perf-compile-ahead's default on CUDA: compiled sides compiled at once (``speed.ahead``). Each process
# also starts Inductor's pool of compile workers, which share the host's cores, and holds one side's
# training state on the GPU (up to 14 GB for the compile tier's models on an H200)
DEFAULT_COMPILE_AHEAD = 4
# --perf-gate's choices, and the figures each lets fail a speed cell
GATES: dict[str, tuple[str, ...]] = {"device": ("device",), "wall": ("wall",), "both": ("device", "wall")}
# --perf-compile: which of eager and torch.compile'd training the speed cells run
COMPILE_CHOICES = {"off": (False,), "on": (True,), "both": (False, True)}


@dataclass(frozen=True)
class Tier:
    """What a --perf-tier selects where --perf-models, --perf-precisions and --perf-compile do not."""

    name: str
    # its models; None: those whose ModelSpec takes them in (its tier, or in_compile_tier for "compile")
    models: tuple[str, ...] | None = None
    modes: tuple[str, ...] | None = None  # its precision modes; None: every mode
    compile: str = "off"  # the --perf-compile it runs with unless given
    # compiled cells only: a test collects cells where it has the compile axis (test_speed) or its kind
    # takes models in the "compile" run (their ModelSpec field of that kind), and the other tests none
    compiled_only: bool = False
    # the memory test searches each cell's largest batch (most of that test's time); else it measures the
    # default batch only
    memory_search: bool = True


# The compile tier guards what teams train with on Hopper today, meant to fit 10 minutes on one GPU: its
# cold compiles dominate it (fp8's the longest), so it takes the models where compile and fp8 have
# something to say (ModelSpec.in_compile_tier: a convnet, GPT-2 small, a Llama-3-8B-wide decoder) in
# bf16 autocast and fp8. Compiled amp_fp16 runs in the full tier. Timings: docs/design.md.
def _always_compiled_and_their_versus() -> tuple[str, ...]:
    """The rows that always compile (fp8) and the modes they are timed against (amp_bf16), in table
    order: a new row of either kind joins the compile tier by its fields alone."""
    always = [name for name, row in MODES.items() if row.compile]
    versus = {v.name for name in always if (v := versus_of(MODES[name])) is not None}  # every row that compiles has one
    return tuple(name for name in MODES if name in versus or name in always)


TIERS: dict[str, Tier] = {t.name: t for t in (
    Tier("quick", memory_search=False),
    Tier("full"),
    Tier("compile", modes=_always_compiled_and_their_versus(), compile="on", compiled_only=True),
)}


def tier_help(tiers: dict[str, Tier], model_names: Callable[[str], list[str]], modes: dict) -> str:
    """--perf-tier's help, read off the tier table: each tier's models, modes and memory cells.
    `model_names(tier)` lists the models a tier takes in by their ModelSpec; `modes` is MODES."""
    parts = []
    for t in tiers.values():
        names = t.models or model_names(t.name)
        every_model = t.models is None and names == model_names("full")
        chosen = t.modes or tuple(m for m, row in modes.items() if not row.compile
                                  and (t.name == "full" or not row.full_tier_only))
        what = "compiled cells only (as under --perf-compile on), " if t.compiled_only else ""
        what += "every model" if every_model else ", ".join(names)
        what += (" in every mode" if len(chosen) == len(modes) or (every_model and t.modes is None)
                 else f" in {', '.join(chosen)}")
        if not t.compiled_only:
            what += "; memory with each cell's largest batch" if t.memory_search else "; memory at the default batch"
        parts.append(f"{t.name}: {what}")
    return ". ".join(parts) + " (default: quick)"


@dataclass(frozen=True)
class Nodes:
    """The hosts the distributed cells' launches span (``--perf-nnodes`` and the rendezvous options): one
    (torchrun's --standalone) by default; past one, torchrun's c10d rendezvous at node 0's `endpoint`,
    where node 0 runs the cells and writes the results and every other node runs its ranks of node 0's
    launches (``ampbench.distributed.nodes``)."""

    count: int = 1
    rank: int = 0  # this node's; 0 holds the results
    endpoint: str | None = None  # HOST:PORT of the rendezvous store, on node 0
    rdzv_id: str = "ampbench"  # the same on every node of one run; another run at the same endpoint takes another

    @property
    def standalone(self) -> bool:
        return self.count == 1

    @property
    def leads(self) -> bool:
        """Whether this node runs the cells and writes the results (node 0, and a standalone run's one)."""
        return self.rank == 0

    def per_node(self, world_size: int) -> int:
        """The ranks each node runs of `world_size` (every node runs as many)."""
        return world_size // self.count

    def describe(self) -> str:
        return "one node" if self.standalone else f"node {self.rank} of {self.count} (rendezvous {self.endpoint})"


@dataclass(frozen=True)
class PerfSettings:
    device: torch.device  # where models train; cpu means the smoke pass on tiny shapes
    models: tuple[str, ...]  # model names under test, registry order
    precisions: tuple[str, ...]  # precision mode names under test, table order
    tier: str  # a key of TIERS: "quick", "full" or "compile"
    baseline_dir: Path  # folder of <gpu-slug>.json baseline files
    update_baselines: bool  # record or merge this run's figures into the baseline file
    tolerance: float  # smallest relative drop that counts as a regression (cells with more noise get more)
    strict: bool  # an inconclusive speed verdict fails instead of warning
    min_rounds: int  # interleaved rounds before the first look at the interval
    memory_cap_gib: float | None  # cap for the largest-batch search; None: a fraction of the card
    data_root: Path | None  # folder with CIFAR-10 on disk, read by the input-pipeline test; None: digits only
    loader_workers: int  # DataLoader worker processes for input-pipeline tests
    pin_memory: bool  # DataLoader pin_memory for input-pipeline tests
    loss_scaler: str  # MODULE:CALLABLE of the scaler the loss-scaling properties test
    block_seconds: float  # target length of each side's timed block in a speed round (CUDA)
    cudnn_benchmark: bool  # cuDNN autotuning for the speed tests (memory and convergence never tune)
    gate: str  # which speedup's verdict fails a speed cell: device, wall or both
    compile: tuple[bool, ...] = (False,)  # speed cells run eager (False), compiled (True) or both
    # compiled sides compiled at once ahead of the first timed cell (``speed.ahead``); 0: each in its cell
    compile_ahead: int = 0
    nodes: Nodes = Nodes()  # the hosts the distributed cells span
    # the card's clocks, throttle reasons and energy read from NVML around each device-time block (--perf-nvml)
    nvml: bool = True
    # --perf-memory-limit: the run behaves as if the card had this much memory (``memory.limit``); None: the card's
    memory_limit_gib: float | None = None
    # --perf-time-budget: seconds the whole run may take, and when they run out (``time.monotonic``); None: unbounded
    time_budget_s: float | None = None
    deadline: float | None = None

    @property
    def smoke(self) -> bool:
        """On the CPU the suite runs the same code on tiny shapes and holds nothing against baselines."""
        return self.device.type == "cpu"


# argparse prefixes a type= function's error with "argument --flag: ", so these messages leave the flag
# out: naming it again printed it twice.


def names_validator(valid: Callable[[], list[str]], what: str) -> Callable[[str], tuple[str, ...]]:
    """A type= function for a comma-separated list of names, each checked against `valid()`."""

    def parse(value: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in value.split(",") if n.strip())
        if not names:
            raise argparse.ArgumentTypeError(f"needs at least one {what} name; valid: {', '.join(valid())}")
        unknown = [n for n in names if n not in valid()]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(map(repr, unknown))}; valid {what}s: {', '.join(valid())}"
            )
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # each would run as cells of their own, under ids that no later run would match
            raise argparse.ArgumentTypeError(f"{what} {', '.join(map(repr, twice))} named more than once")
        return names

    return parse


_T = TypeVar("_T")


def value_error_type(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """A type= function that runs `parse` and makes its ValueError the option's error, in its own words:
    argparse would say only "invalid value" of a ValueError."""

    def checked(value: str) -> _T:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return checked


def number_validator(kind: type, low: float, high: float | None = None, *,
                     low_open: bool = False) -> Callable[[str], int | float]:
    """A type= function for a finite number in [low, high] (or (low, high] with low_open)."""

    def parse(value: str) -> int | float:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expects {'an' if kind is int else 'a'} {kind.__name__}, got {value!r}") from None
        # NaN fails every comparison, so the range check below would let it through
        if not math.isfinite(number):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {value}")
        too_low = number <= low if low_open else number < low
        if too_low or (high is not None and number > high):
            bounds = (f"{'(' if low_open else '['}{low}, "
                      f"{high if high is not None else 'inf'}{']' if high is not None else ')'}")
            raise argparse.ArgumentTypeError(f"must lie in {bounds}, got {value}")
        return number

    parse.kind = kind  # type: ignore[attr-defined]  # what the option holds, for the option tests
    return parse


def device_validator() -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value == "auto":
            return value
        import torch  # the default, auto, is taken without it: a run that uses no ampbench test imports none

        try:
            device = torch.device(value)
        except RuntimeError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a device (auto, cpu, cuda, cuda:N)") from None
        if device.type not in ("cpu", "cuda"):
            raise argparse.ArgumentTypeError(f"device type {device.type!r} is not supported (cpu or cuda)")
        return value

    return parse


def directory_validator(must_exist: bool) -> Callable[[str], Path]:
    def parse(value: str) -> Path:
        path = Path(value).expanduser()
        if must_exist and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{value!r} is not a directory")
        if path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{value!r} exists and is not a directory")
        return path

    return parse


def scaler_validator() -> Callable[[str], str]:
    def parse(value: str) -> str:
        module, sep, attr = value.partition(":")
        if not sep or not module or not attr:
            raise argparse.ArgumentTypeError(f"expects MODULE:CALLABLE, e.g. torch.amp:GradScaler, got {value!r}")
        return value

    return parse


def endpoint_validator() -> Callable[[str], str]:
    """A type= function for HOST:PORT (an IPv6 host in brackets, [::1]:29500), the port in [1, 65535]."""

    def parse(value: str) -> str:
        host, sep, port = value.strip().rpartition(":")
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not bare or ":" in host and bare == host:
            raise argparse.ArgumentTypeError(f"expects HOST:PORT, e.g. node0.example:29500, got {value!r}")
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise argparse.ArgumentTypeError(f"the port of {value!r} must be a number in [1, 65535]")
        return f"{host}:{int(port)}"

    return parse


def rdzv_id_validator() -> Callable[[str], str]:
    """A type= function for a rendezvous id: letters, digits, '-', '_' and '.', at most 64 of them (it
    names each launch's rendezvous, with the launch's number after it)."""

    def parse(value: str) -> str:
        text = value.strip()
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", text):
            raise argparse.ArgumentTypeError(f"expects 1 to 64 letters, digits, '-', '_' or '.', got {value!r}")
        return text

    return parse
