"""Input pipeline cells: the suite's ``ampbench.suite.pipeline``, collected here."""

from ampbench.suite.pipeline import _pipeline_datasets, test_input_pipeline

__all__ = ["test_input_pipeline", "_pipeline_datasets"]
