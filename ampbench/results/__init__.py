"""The result format: what a cell of the suite writes into pytest-benchmark's JSON (``extra_info``) and
how it is read back. The one owner of the schema version, the verdict vocabulary and the keys.

A test builds a typed record of its kind (``SpeedRecord``, ``MemoryRecord``, ``ConvergenceRecord``,
``PipelineRecord``, ``DistributedRecord``, ``UnderflowRecord``; an A/B run writes ``PairedRecord``) and writes
``record.to_info()``; the report, compare, spread, the terminal summary and every tool read a run with
``load_run`` and get the same records back (``from_info``), never key strings. Every verdict is a
``Verdict``, whose members say whether they fail (``failing``) or deserve a look (``warns``).
Nothing here imports torch or pytest.

The modules, by job: `schema` (the version, the frame of a run JSON, the field specs), `base` (the
record machinery), `ratios` (the table of the kinds of ratio a timed cell holds, and every name of
each), `timed`, `cells` and `paired` (the records per kind), `run` (the reader), `paired_run` (the run
JSON an A/B run writes).
"""

from ampbench.modes import FP32_MODE, order_modes
from ampbench.results.base import OtherRecord, Record
from ampbench.results.cells import ConvergenceRecord, MemoryRecord, MemorySearch, PipelineRecord, UnderflowRecord
from ampbench.results.clusters import (
    cluster_name,
    cluster_shape,
    cluster_size,
    cluster_stem,
    is_stem,
    model_slug,
    slug_problem,
)
from ampbench.results.paired import FIGURE_ORDER, PairedFigure, PairedRecord
from ampbench.results.ratio_figures import RatioFigures, StepFigures
from ampbench.results.ratios import DISTRIBUTED_RATIOS, SPEED_RATIOS, RatioKind
from ampbench.results.run import KINDS, RECORD_TYPES, Run, RunError, load_run, parse_run, record_type
from ampbench.results.schema import FP32_SIDE, MODE_SIDE, READABLE_SCHEMAS, SCHEMA_VERSION, SIDES_KEY, VERSUS_SIDE
from ampbench.results.timed import (
    CardFigures,
    DeviceQueue,
    DistributedRecord,
    DistributedSide,
    SpeedRecord,
    SpeedSide,
    TimedRecord,
)
from ampbench.verdict import VERDICT_ORDER, Verdict

__all__ = [
    "CardFigures", "DISTRIBUTED_RATIOS", "FP32_SIDE", "KINDS", "MODE_SIDE", "SIDES_KEY", "VERSUS_SIDE", "DeviceQueue",
    "DistributedSide", "MemorySearch", "FIGURE_ORDER", "PairedFigure", "PairedRecord",
    "SpeedSide", "StepFigures", "READABLE_SCHEMAS", "RECORD_TYPES", "FP32_MODE", "SCHEMA_VERSION", "SPEED_RATIOS",
    "VERDICT_ORDER", "ConvergenceRecord", "DistributedRecord", "MemoryRecord", "OtherRecord", "PipelineRecord",
    "RatioFigures", "RatioKind", "Record", "Run", "RunError", "SpeedRecord", "TimedRecord", "UnderflowRecord",
    "Verdict", "cluster_name", "cluster_shape", "cluster_size", "cluster_stem", "is_stem", "load_run", "model_slug",
    "slug_problem",
    "order_modes", "parse_run", "record_type",
]
