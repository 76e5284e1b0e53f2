"""The run JSON an A/B run (``ampbench ab``) writes: pytest-benchmark's shape, one ``benchmarks`` entry per
cell measured, each a `PairedRecord` under ``extra_info``, so that ``load_run`` and every reader of a run
(``ampbench report``, ``compare``, ``export``) read it as they read a run of the suite. An entry names its
cell as the suite's would (its test id, its node id, ``params`` with ``schema.CELL_PARAMS``); it carries
no ``stats``, as pytest-benchmark timed nothing."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from ampbench.files.write import write_atomic
from ampbench.results.paired import PairedRecord
from ampbench.results.run import entry_group, parse_run

# where the suite's cell tests live, for an entry's node id ("perf/test_speed.py::test_speed[gpt-amp_fp16]")
CELL_TESTS_FOLDER = "perf"


def cell_nodeid(test_id: str) -> str:
    """The node id of the suite's test whose id is `test_id`: its function's file under CELL_TESTS_FOLDER
    ('test_memory[gpt-fp32]' -> 'perf/test_memory.py::test_memory[gpt-fp32]')."""
    function = test_id.split("[", 1)[0]
    return f"{CELL_TESTS_FOLDER}/{function}.py::{test_id}"


def paired_entry(record: PairedRecord, fullname: str | None = None) -> dict[str, Any]:
    """The ``benchmarks`` entry of one paired cell: named by the cell it measured (its ``cell``, else its test
    id), grouped, with the model and mode as ``params`` as the suite's entries have them, and its record."""
    name = record.cell or record.test_id
    if not name:
        raise ValueError("a paired record names the cell it measured (its cell or test_id)")
    params = {"model_name": record.model, "mode_name": record.mode}
    inside = name[name.find("[") + 1:-1] if "[" in name and name.endswith("]") else None
    return {"group": entry_group(record.kind, record.model), "name": name,
            "fullname": fullname or cell_nodeid(name), "params": params, "param": inside,
            "extra_info": record.to_info()}


def paired_document(records: Sequence[PairedRecord], machine_info: Mapping[str, Any],
                    commit_info: Mapping[str, Any], *, when: datetime | None = None,
                    version: str | None = None) -> dict[str, Any]:
    """The whole run JSON of `records`: `machine_info` (with its ``ampbench`` entry: device, torch...) and
    `commit_info` as pytest-benchmark writes them, the time (now, in UTC, unless `when`) and the writer's
    version (ampbench's unless `version`)."""
    if version is None:
        from ampbench import __version__ as version
    stamp = (when or datetime.now(timezone.utc)).isoformat()
    return {"machine_info": dict(machine_info), "commit_info": dict(commit_info),
            "benchmarks": [paired_entry(r) for r in records], "datetime": stamp, "version": version}


def write_paired_run(path: Path | str, records: Sequence[PairedRecord], machine_info: Mapping[str, Any],
                     commit_info: Mapping[str, Any], *, when: datetime | None = None) -> Path:
    """Write the run JSON of `records` to `path` atomically, once the run reader accepts it (``parse_run``:
    RunError names what is wrong), so that no reader ever meets a paired run it refuses. Returns the path."""
    path = Path(path)
    document = paired_document(records, machine_info, commit_info, when=when)
    parse_run(document, path)
    write_atomic(path, document)
    return path
