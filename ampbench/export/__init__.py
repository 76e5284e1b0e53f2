"""``ampbench export``: a run's gated figures in the formats dashboards read (``formats``), each figure
the one the suite judges (``figures``), never one side's time."""

from ampbench.export.figures import Figure, Figures, gated_figures
from ampbench.export.formats import CONBENCH_REFUSAL, ExportError, bmf, github, pytest_benchmark

__all__ = ["CONBENCH_REFUSAL", "ExportError", "Figure", "Figures", "bmf", "gated_figures", "github", "pytest_benchmark"]
