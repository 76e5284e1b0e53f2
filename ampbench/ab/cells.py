"""The cells an A/B run measures, as pytest selects them: the speed and memory cells of the tier (the
default), or the cells the user names: a pytest node id (``perf/test_speed.py::test_speed[gpt-amp_fp16]``), a
test id (``test_speed[gpt-amp_fp16]``, ``test_memory[gpt-fp32]``) or MODEL:MODE, its speed cell (where the
mode has one) and its memory cell."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from ampbench.modes import FP32_MODE, MODES

# the files whose cells an A/B run gates by default; a project of its own names its module (--tests)
TEST_FILES = ("perf/test_speed.py", "perf/test_memory.py")
_TEST_ID = re.compile(r"^(?P<test>test_[a-z_]+)\[(?P<model>[A-Za-z0-9_.]+)-(?P<mode>[A-Za-z0-9_]+?)(-compiled)?\]$")
_PAIR = re.compile(r"^(?P<model>[A-Za-z0-9_.]+):(?P<mode>[A-Za-z0-9_]+)$")


def _file_of(test: str, files: Sequence[str]) -> str:
    """The file among `files` that holds `test`: the one named after it, else the only one."""
    named = [f for f in files if Path(f).stem == test]
    if named or len(files) == 1:
        return (named or list(files))[0]
    raise ValueError(f"no file of {', '.join(files)} is named after {test}: name the one that holds it (--tests)")


def node_ids(cell: str, files: Sequence[str] = TEST_FILES) -> tuple[list[str], str, str]:
    """(the node ids, the model, the mode) of one named cell, its tests in `files`; ValueError naming what is
    wrong."""
    text = cell.strip()
    if "::" in text:
        test_id = text.split("::", 1)[1]
        found = _TEST_ID.match(test_id)
        if found is None:
            raise ValueError(f"cell {cell!r}: {test_id!r} is no cell's test id (test_speed[gpt-amp_fp16])")
        return [text], found["model"], found["mode"]
    found = _TEST_ID.match(text)
    if found is not None:
        return [f"{_file_of(found['test'], files)}::{text}"], found["model"], found["mode"]
    found = _PAIR.match(text)
    if found is None:
        raise ValueError(f"cell {cell!r} is neither a node id, a test id (test_speed[gpt-amp_fp16]) nor MODEL:MODE "
                         "(gpt:amp_fp16)")
    model, mode = found["model"], found["mode"]
    if mode not in MODES:
        raise ValueError(f"cell {cell!r}: unknown precision mode {mode!r}; valid modes: {', '.join(MODES)}")
    # fp32 is every speed cell's other side, and has no speed cell of its own; its memory cell is its peak
    tests = ["test_memory"] if mode == FP32_MODE else ["test_speed", "test_memory"]
    return [f"{_file_of(test, files)}::{test}[{model}-{mode}]" for test in tests], model, mode


def selection(cells: Sequence[str], files: Sequence[str] = TEST_FILES) -> list[str]:
    """The pytest arguments that run the named cells (the tier's speed and memory cells where none is
    named): their node ids, and the models and modes that parametrize them."""
    if not cells:
        return list(files)
    ids, models, modes = [], [], []
    for cell in cells:
        found, model, mode = node_ids(cell, files)
        ids += found
        models.append(model)
        modes.append(mode)
    return [*dict.fromkeys(ids), "--perf-models", ",".join(dict.fromkeys(models)),
            "--perf-precisions", ",".join(dict.fromkeys(modes))]
