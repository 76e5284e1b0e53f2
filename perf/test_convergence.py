"""Convergence cells: the suite's ``ampbench.suite.convergence``, collected here."""

from ampbench.suite.convergence import _results, test_convergence, test_underflow_without_loss_scaling

__all__ = ["test_convergence", "test_underflow_without_loss_scaling", "_results"]
