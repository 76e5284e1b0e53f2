"""Speed cells: the suite's ``ampbench.suite.speed``, collected here."""

from ampbench.suite.speed import _fp32_cache, _versus_cache, fp32_side, test_speed, versus_sides

__all__ = ["test_speed", "fp32_side", "versus_sides", "_fp32_cache", "_versus_cache"]
