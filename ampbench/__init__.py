"""ampbench: a regression suite for mixed-precision training speed, memory and loss scaling."""

__version__ = "0.1.0"
