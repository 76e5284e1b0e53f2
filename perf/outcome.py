"""How a speed-like cell's verdict ends its test: ``ampbench.suite.outcome``, read here by perf/test_distributed.py."""

from ampbench.suite.outcome import conclude, finish, record_step_times

__all__ = ["conclude", "finish", "record_step_times"]
