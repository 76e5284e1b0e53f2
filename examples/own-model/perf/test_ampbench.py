"""ampbench's speed, memory and convergence cells, run here over the models --perf-models names (this
project's lenet5 by default: pyproject.toml's addopts) and held against baselines/ of this folder."""

from ampbench.suite import (_memory_references, _reference_cache, _results, _versus_cache, memory_cap_bytes,
                            memory_reference, needs_cuda, reference, test_convergence, test_memory, test_oom_recovery,
                            test_speed, test_underflow_without_loss_scaling, versus_sides)

# pytest collects the tests and fixtures it finds among the module's names
__all__ = ["test_speed", "reference", "versus_sides", "_reference_cache", "_versus_cache",
           "test_memory", "test_oom_recovery", "memory_reference", "memory_cap_bytes", "needs_cuda", "_memory_references",
           "test_convergence", "test_underflow_without_loss_scaling", "_results"]
