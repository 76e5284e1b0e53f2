"""``ampbench export``: a run's gated figures in the formats dashboards read (``formats``), each figure
the one the suite judges (``figures``), never one side's time."""

from ampbench.export.figures import Figure, Figures, cell_margins, gated_figures
from ampbench.export.formats import (
    CONBENCH_REFUSAL,
    MARGIN_MEASURE,
    ExportError,
    bmf,
    github,
    github_margin,
    over_the_line,
    pytest_benchmark,
)

__all__ = ["CONBENCH_REFUSAL", "MARGIN_MEASURE", "ExportError", "Figure", "Figures", "bmf", "cell_margins",
           "gated_figures", "github", "github_margin", "over_the_line", "pytest_benchmark"]
