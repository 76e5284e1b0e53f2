"""Memory cells: the suite's ``ampbench.suite.memory``, collected here."""

from ampbench.suite.memory import (
    _memory_references,
    memory_cap_bytes,
    memory_reference,
    needs_cuda,
    test_memory,
    test_oom_recovery,
)

__all__ = ["test_memory", "test_oom_recovery", "memory_reference", "memory_cap_bytes",
           "needs_cuda", "_memory_references"]
