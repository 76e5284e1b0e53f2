"""The cells a bisect measures, as the user names them: a speed cell's test id, ``test_speed[gpt-amp_fp16]``
(``-compiled`` at the end for its compiled cell), or the ``model:mode`` pair the slowdown plugin and
``ampbench fidelity`` take; and the pytest arguments that run exactly that cell."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ampbench.modes import MODES

_TEST_ID = re.compile(r"^test_speed\[(?P<model>[A-Za-z0-9_.]+)-(?P<mode>[A-Za-z0-9_]+?)(?P<compiled>-compiled)?\]$")
_PAIR = re.compile(r"^(?P<model>[A-Za-z0-9_.]+):(?P<mode>[A-Za-z0-9_]+)(?P<compiled>:compiled)?$")


@dataclass(frozen=True)
class BisectCell:
    model: str
    mode: str
    compiled: bool = False

    @property
    def test_id(self) -> str:
        """The id pytest gives the cell: ``test_speed[gpt-amp_fp16]``. A mode whose row always compiles
        (fp8) keeps its own id; every other mode's compiled cell ends in ``-compiled``."""
        row = MODES.get(self.mode)
        suffix = "-compiled" if self.compiled and not (row is not None and row.compile) else ""
        return f"test_speed[{self.model}-{self.mode}{suffix}]"

    @property
    def name(self) -> str:
        return f"{self.model}:{self.mode}" + (":compiled" if self.compiled else "")

    def __str__(self) -> str:
        return self.test_id


def named_cell(text: str) -> BisectCell:
    """A cell from its test id or its ``model:mode`` pair; ValueError naming what is wrong."""
    text = text.strip()
    found = _TEST_ID.match(text) or _PAIR.match(text)
    if found is None:
        raise ValueError(f"cell {text!r} is neither a speed cell's test id (test_speed[gpt-amp_fp16]) nor "
                         "MODEL:MODE (gpt:amp_fp16)")
    mode = found["mode"]
    if mode not in MODES:
        raise ValueError(f"cell {text!r}: unknown precision mode {mode!r}; valid modes: {', '.join(MODES)}")
    return BisectCell(found["model"], mode, bool(found["compiled"]) or MODES[mode].compile)


def pytest_args(cells: list[BisectCell], test_file: str) -> list[str]:
    """The arguments that make pytest run these cells and nothing else: their node ids in `test_file`
    (the module that collects the suite's speed test), with the models and modes that parametrize them."""
    models = ",".join(dict.fromkeys(c.model for c in cells))
    modes = ",".join(dict.fromkeys(c.mode for c in cells))
    kinds = {c.compiled for c in cells if not MODES[c.mode].compile}
    # a mode whose row always compiles (fp8) runs wherever --perf-precisions names it, whatever this says
    compile_choice = "both" if kinds == {True, False} else "on" if kinds == {True} else "off"
    return [*(f"{test_file}::{c.test_id}" for c in cells),
            "--perf-models", models, "--perf-precisions", modes, "--perf-compile", compile_choice]
