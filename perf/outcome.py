"""How a speed-like cell's verdict ends its test: ``ampbench.suite.outcome``, read here by perf/test_distributed.py."""

from ampbench.suite.outcome import STEP_TIMES, conclude, finish, record_step_times

__all__ = ["STEP_TIMES", "conclude", "finish", "record_step_times"]
