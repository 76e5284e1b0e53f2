"""ampbench's speed, memory and convergence cells, run here over the models --perf-models names (this
project's lenet5 by default: pyproject.toml's addopts) and held against baselines/ of this folder."""

# pytest collects the tests and fixtures this module holds: ampbench.suite.__all__ names them all
from ampbench.suite import *  # noqa: F401,F403
