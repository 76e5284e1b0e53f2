"""A pytest plugin that really slows chosen precision modes of chosen models down, from outside the
measured code path, to show that the speed gate catches a slowdown:

    pytest perf/test_speed.py -p ampbench.slowdown --perf-slowdown resnet50:amp_fp16:0.01
    AMPBENCH_SLOWDOWN=resnet50:amp_fp16:0.01,gpt:amp_bf16:0.01 pytest perf/test_speed.py -p ampbench.slowdown
    pytest perf/test_speed.py -p ampbench.slowdown --perf-slowdown gpt:fp8_tensorwise:emulate --perf-compile on
    pytest perf/test_distributed.py -p ampbench.slowdown --perf-slowdown resnet50:amp_bf16:0.03

Every training step of each named (model, mode) gets extra work worth FRACTION of the step's own time,
appended after the step. On CUDA it is a spin kernel (``torch.cuda._sleep``) queued on the stream: it
is part of the step, so a CUDA graph of the step captures it too, and no host sync is added. The number
of spin cycles is calibrated once per trainer on the figure the speed gate reads: the step replayed as
a CUDA graph, or the profiler's kernel time where it cannot be captured; so the fraction is of device
time, not of a host-bound wall step. On the CPU the extra work is a busy wait of FRACTION of the wall
time of a few plain steps. Steps of other cells run unchanged.

Cells that train in worker processes (the distributed tests' torchrun ranks) are slowed too: the plugin
passes its spec on in the environment (``AMPBENCH_SLOWDOWN``, and itself in the worker's plugin list,
``ampbench.distributed.launch.WORKER_PLUGINS_ENV``), and each rank installs the same slowdown before it builds
a trainer (``worker_configure``). There the fraction is of the wall time of the trainer's own first
steps, timed as they run, on CUDA too (the spin is a kernel, so it counts in the cell's device time as
well): capturing a step that holds collectives as a CUDA graph is no calibration to risk on every rank,
and a rank that ran steps of its own would leave its peers in a collective. Over several nodes, a
slowdown given to one node's pytest slows that node's ranks alone, and each rank's document says so, so
that node 0's record of the cell names it (``ampbench.distributed.launch.injected``).

``MODEL:fp8_MODE:emulate`` slows an fp8 cell the way a broken fp8 stack would: its trainers convert their
Linear layers with torchao's emulated float8 matmul (``Float8LinearConfig(emulate=True)``: the fp8
operands upcast and multiplied in high precision) in place of the fp8 tensor-core matmul, by wrapping
``ampbench.fp8.float8_config`` while a trainer of that model and mode is built.

Each slowed cell says so in its extra_info (``injected_slowdown``: the fraction, or the emulated
matmul), so that ``ampbench spread`` never takes it for a sample of its noise; so does every other
cell a slowed trainer took part in (a versus side of a compiled cell). ``--perf-slowdown-untagged``
leaves them untagged, as a real regression would come: the run history then judges and learns from
them as from any run, which is how to check that it never learns a slowdown as noise. The ranks of a
distributed cell take it from the environment too (``slowed_steps.UNTAGGED_ENV``), since their
documents are where that cell's record takes its tag.
"""

from __future__ import annotations

import os

import pytest

from ampbench.baselines.spread import INJECTED_KEY
from ampbench.distributed.launch import WORKER_PLUGINS_ENV, worker_plugins
from ampbench.modes import FP32_MODE, MODES
from ampbench.plugin import summary
from ampbench.plugin.entries import cell_of, item_entry
from ampbench.plugin.options import GROUP
from ampbench.plugin.slowed_steps import ANY, EMULATE, EMULATED, ENV, UNTAGGED_ENV, Cell, Slowdown, parse
from ampbench.settings import value_error_type

SLOWDOWN = pytest.StashKey[Slowdown]()
HEADER_CELLS = 8  # the most slowed cells the header names one by one
# the environment pytest_configure set for worker processes, undone at unconfigure
_WORKER_ENV = pytest.StashKey[pytest.MonkeyPatch]()


def spec_of(targets: dict[Cell, float | str]) -> str:
    """The spec string `parse` reads back as `targets`."""
    return ",".join(f"{model}:{mode}:{how}" for (model, mode), how in targets.items())


def _pass_on_to_workers(targets: dict[Cell, float | str], tagged: bool) -> pytest.MonkeyPatch:
    """Name the targets, whether they are tagged, and this plugin in the environment torchrun's ranks
    inherit; undo() puts it back."""
    env = pytest.MonkeyPatch()
    env.setenv(ENV, spec_of(targets))
    if tagged:
        env.delenv(UNTAGGED_ENV, raising=False)
    else:
        env.setenv(UNTAGGED_ENV, "1")
    plugins = worker_plugins()
    if __name__ not in plugins:
        env.setenv(WORKER_PLUGINS_ENV, ",".join([*plugins, __name__]))
    return env


def worker_configure() -> Slowdown | None:
    """In a distributed worker's rank (``ampbench.distributed.launch.load_worker_plugins``): slow the cells that
    $AMPBENCH_SLOWDOWN names, each by a fraction of its wall-clock step as its first steps take it (the
    rank runs no step of its own); None where it names none."""
    targets = parse(os.environ.get(ENV, ""))
    if not targets:
        return None
    slowdown = Slowdown(targets, in_place=True, tagged=os.environ.get(UNTAGGED_ENV) != "1")
    slowdown.install()
    return slowdown


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(*GROUP)
    group.addoption("--perf-slowdown", metavar="MODEL:MODE:FRACTION[,...]", default=None, type=value_error_type(parse),
                    help="extra work worth FRACTION of each training step added to MODEL's MODE, or, with "
                         f"{EMULATE} in place of FRACTION, an fp8 MODE's matmuls in torchao's emulation, to show "
                         f"the speed gate catches a slowdown; {ANY} for MODEL or MODE names every one "
                         f"('{ANY}:{ANY}:14': a card 15 times slower, as the run's time goes) (default: ${ENV}, "
                         "else none)")
    group.addoption("--perf-slowdown-untagged", action="store_true", default=False,
                    help="leave the slowed cells' records untagged, as a real regression comes: the run history "
                         "judges and learns from them as from any run (default: tagged, never a sample of the "
                         "cell's level or noise)")


def pytest_configure(config: pytest.Config) -> None:
    targets = config.getoption("perf_slowdown")
    if targets is None:
        try:
            targets = parse(os.environ.get(ENV, ""))
        except ValueError as exc:
            raise pytest.UsageError(f"{ENV}: {exc}") from None
    if targets:
        slowdown = Slowdown(targets, source="--perf-slowdown" if config.getoption("perf_slowdown") else ENV,
                            tagged=not config.getoption("perf_slowdown_untagged"))
        slowdown.install()
        config.stash[SLOWDOWN] = slowdown
        config.stash[_WORKER_ENV] = _pass_on_to_workers(targets, slowdown.tagged)


def pytest_unconfigure(config: pytest.Config) -> None:
    slowdown = config.stash.get(SLOWDOWN, None)
    if slowdown is not None:
        slowdown.uninstall()
        config.stash[_WORKER_ENV].undo()


def trained_by(item: pytest.Item) -> set[Cell]:
    """The (model, mode)s an ampbench cell trains, from its parameters: its own, and the sides it is
    held against (fp32, the parity mode: a compiled fp8 cell's amp_bf16); none for a test that
    is no cell."""
    cell = cell_of(item)
    if cell is None or cell[1] not in MODES:
        return set()
    model, mode = cell
    return {(model, mode), (model, FP32_MODE), (model, MODES[mode].parity_mode)}


def pytest_collection_finish(session: pytest.Session) -> None:
    """A slowed cell the run's cells do not train would be announced and never slowed: the run would
    pass, showing nothing. (A run of tests that are no cells, such as this plugin's own, is left be.)"""
    slowdown = session.config.stash.get(SLOWDOWN, None)
    cells = set().union(*map(trained_by, session.items))
    if slowdown is None or not cells:
        return
    # named by a wildcard: need not all be trained
    broad: frozenset[tuple[str, str]] = getattr(slowdown.targets, "broad", frozenset())
    missing = [f"{model}:{mode}" for model, mode in slowdown.targets if (model, mode) not in cells | broad]
    if missing:
        raise pytest.UsageError(f"{slowdown.source}: no cell of this run trains {', '.join(missing)}; run it "
                                "(--perf-models, --perf-precisions) or leave it out")


def _tag(how: float | str) -> float | str:
    return EMULATED if how == EMULATE else how


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    slowdown = item.config.stash.get(SLOWDOWN, None)
    if slowdown is not None:
        slowdown.applied = None
    yield
    info = item_entry(item)
    if slowdown is not None and info is not None and slowdown.tagged:
        # the cell named, or any cell one of whose trainers was slowed (a compiled cell's versus side)
        model, mode = info.get("model"), info.get("mode")
        how = slowdown.targets.get((model, mode)) if isinstance(model, str) and isinstance(mode, str) else None
        if how is not None:
            info[INJECTED_KEY] = _tag(how)
        elif slowdown.applied is not None:
            info[INJECTED_KEY] = slowdown.applied
        if INJECTED_KEY in info:  # the record the run history appends, which the cell kept before this
            summary.annotate(item.config, item.nodeid, **{INJECTED_KEY: info[INJECTED_KEY]})


def pytest_report_header(config: pytest.Config) -> str | None:
    slowdown = config.stash.get(SLOWDOWN, None)
    if slowdown is None:
        return None
    said = [f"{m} {p} " + (EMULATED if how == EMULATE else f"+{how:.1%}") for (m, p), how in slowdown.targets.items()]
    if len(said) > HEADER_CELLS:  # a wildcard's every cell: how many, and by how much
        hows = dict.fromkeys(EMULATED if how == EMULATE else f"+{how:.1%}" for how in slowdown.targets.values())
        said = [f"{len(said)} cells ({', '.join(hows)})"]
    return f"ampbench.slowdown: steps slowed on purpose: {', '.join(said)}"


