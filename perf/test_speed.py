"""Speed cells: the suite's ``ampbench.suite.speed``, collected here."""

from ampbench.suite.speed import _reference_cache, _versus_cache, reference, test_speed, versus_sides

__all__ = ["test_speed", "reference", "versus_sides", "_reference_cache", "_versus_cache"]
