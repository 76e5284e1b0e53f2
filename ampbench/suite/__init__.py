"""The suite's cell tests, installed with the package so that a project of its own runs them over its
models: `speed` (each mode timed against fp32), `memory` (peak memory and the largest batch, on a GPU)
and `convergence` (held-out accuracy on real digits against fp32's); `distributed` (DDP and FSDP2
across ranks) and `pipeline` (the DataLoader-fed step of the CIFAR-shaped models), collected by this
repository's perf/test_distributed.py and perf/test_input_pipeline.py only, not by the star import below;
`outcome` ends a timed cell's test by its verdict. This repository's perf/test_speed.py, test_memory.py and
test_convergence.py re-export
them, and so does a project's own test module::

    from ampbench.suite import *  # noqa: F403 - pytest collects the tests and fixtures named in __all__

Their fixtures (some private to a module) are in ``__all__`` too: pytest finds a module's fixtures
among its attributes.

The rule: cells (tests over models x precision modes) in ampbench/suite, each with a perf/ shim; properties in perf/.
"""

from ampbench.suite.convergence import _results, test_convergence, test_underflow_without_loss_scaling
from ampbench.suite.memory import (
    _fp32_memories,
    fp32_memory,
    memory_cap_bytes,
    needs_cuda,
    test_memory,
    test_oom_recovery,
)
from ampbench.suite.speed import _fp32_cache, _versus_cache, fp32_side, test_speed, versus_sides

__all__ = [
    "test_speed", "fp32_side", "versus_sides", "_fp32_cache", "_versus_cache",
    "test_memory", "test_oom_recovery", "fp32_memory", "memory_cap_bytes", "needs_cuda", "_fp32_memories",
    "test_convergence", "test_underflow_without_loss_scaling", "_results",
]
