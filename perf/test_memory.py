"""Memory cells: the suite's ``ampbench.suite.memory``, collected here."""

from ampbench.suite.memory import (
    _fp32_memories,
    fp32_memory,
    memory_cap_bytes,
    needs_cuda,
    test_memory,
    test_oom_recovery,
)

__all__ = ["test_memory", "test_oom_recovery", "fp32_memory", "memory_cap_bytes",
           "needs_cuda", "_fp32_memories"]
