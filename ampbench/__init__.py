"""ampbench: a regression suite for mixed-precision training speed, memory and loss scaling.

The package, by job (``models/`` is the model zoo, ``ampbench.models``):

- what is measured: ``modes`` (the precision modes' table), ``train`` (one training step), ``fp8``,
  ``loss_scaler``, ``device`` (the device under test);
- the cells: ``speed/``, ``memory/``, ``distributed/``, ``convergence/``, ``pipeline/`` (the input
  pipeline), with ``stats`` and ``verdict`` to judge them and ``progress`` for the lines that say how
  far a cell or a command has got;
- the run: ``settings`` (the ``--perf-*`` options), ``plugin/`` (the pytest plugin, entry point
  ``pytest11``; ``slowdown``, the speed gate's own check, loads its plugin.slowdown), ``suite/`` (the
  cell tests a project collects), ``results/`` (the records), ``baselines/`` and ``history/``;
- the ``ampbench`` command: ``cli/`` (its subcommands, arguments and exit statuses), ``report/`` (pages
  and comparisons of saved runs), ``export/``;
- ``files/``: reading a file a user named, writing atomically, and the default paths.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path

__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent
_ZOO = _HERE.parent / "models"  # the zoo in a source checkout: the top-level models/ beside this package


class _SourceZoo(MetaPathFinder):
    """``ampbench.models`` from a source checkout's top-level models/: where the package is imported from
    its tree (an editable install, or the tree put on sys.path), not from a wheel, which holds the zoo as
    ampbench/models (pyproject's package-dir). First on sys.meta_path, so that another tree's editable
    install never lends this tree its zoo."""

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        if fullname != "ampbench.models":
            return None
        return importlib.util.spec_from_file_location(fullname, _ZOO / "__init__.py",
                                                      submodule_search_locations=[str(_ZOO)])


if not (_HERE / "models").is_dir() and (_ZOO / "__init__.py").is_file():
    sys.meta_path.insert(0, _SourceZoo())
