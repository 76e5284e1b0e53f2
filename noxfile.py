"""The torch releases the package declares, each tested on the CPU: one nox session per release installs
torch and torchvision from PyTorch's CPU wheels, then the project as the README says (``pip install -e .``),
and runs the CPU smoke pass (``pytest perf/``) and the tests of tests/ that exercise torch itself. The
newest release installs the fp8 extra too (``pip install -e ".[fp8]"``: torchao, a 3 MB wheel without
dependencies that imports on the CPU), so that the fp8 modes' torchao code runs against the newest torch
(tests/test_fp8.py, perf/test_fp8_numerics.py), while the oldest release checks the install without it.

    nox -l                              # the sessions
    nox -s "smoke(torch='2.11')"        # the oldest release pyproject.toml admits (the GPU image's)
    nox -s "smoke(torch='newest')"      # whatever pip resolves today, as a fresh install gets it
    nox -t ci                           # the oldest and the newest, as CI runs them
    nox -s smoke -- -x                  # every release; arguments after -- go to both pytest runs

``$AMPBENCH_TORCH_INDEX`` names another index for torch and torchvision (a mirror of the CPU wheels);
whatever it is, both must come from the same one: torchvision's operators are built against one torch build.
Where the CPU wheels' index cannot be reached (a runner that sees only PyPI), the session says so and takes
both from pip's own index: PyPI's builds, which bundle CUDA and run on the CPU all the same.
A session's virtualenv is kept and reused (``.nox/``): a second run installs nothing it already has.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import nox

CPU_WHEELS = "https://download.pytorch.org/whl/cpu"

# each torch release the range torch>=2.11 admits, with the torchvision release built against it
# (torchvision pins its torch exactly); "newest" pins neither, and upgrades a reused environment
TORCHVISION_FOR = {"2.11": "0.26", "2.12": "0.27", "2.13": "0.28", "2.14": "0.29", "newest": None}
# the oldest and the newest: what CI runs (`nox -t ci` in .ci/run)
CI_RELEASES = ("2.11", "newest")
# the releases installed with the fp8 extra: the newest, as a fresh `pip install -e ".[fp8]"` pairs them (the
# extra's torchao has no dependencies, so pip keeps the torch above); every other release runs without torchao,
# as the plain install the README leads with does, and its fp8 cells skip saying so
FP8_RELEASES = ("newest",)

# the harness's fast tests that exercise torch itself (models, training steps, loss scalers, the
# profiler's traces, the data loaders, torchao's pairing); the smoke pass covers distributed launches,
# and the rest of tests/ is bookkeeping that the main `pytest` run covers once
TORCH_TESTS = [
    "tests/test_models.py",
    "tests/test_train_steps.py",
    "tests/test_rnn_weights.py",
    "tests/test_scaler_teeth.py",
    "tests/test_devicetime.py",
    "tests/test_data.py",
    "tests/test_fp8.py",
]

nox.options.sessions = ["smoke"]
nox.options.reuse_venv = "yes"


def _reachable(url: str, seconds: float = 10.0) -> bool:
    try:
        with urllib.request.urlopen(url + "/torch/", timeout=seconds):
            return True
    except (urllib.error.URLError, OSError):
        return False


def _index(session: nox.Session) -> list[str]:
    """pip's arguments naming where torch and torchvision come from: $AMPBENCH_TORCH_INDEX, else the CPU
    wheels where they can be reached, else pip's own index."""
    index = os.environ.get("AMPBENCH_TORCH_INDEX")
    if index:
        return ["--index-url", index]
    if _reachable(CPU_WHEELS):
        return ["--index-url", CPU_WHEELS]
    session.log(f"{CPU_WHEELS} cannot be reached: torch and torchvision come from pip's own index")
    return []


def _install_torch(session: nox.Session, release: str) -> None:
    vision, index = TORCHVISION_FOR[release], _index(session)
    if vision is None:
        session.install("--upgrade", "torch", "torchvision", *index)
    else:
        session.install(f"torch=={release}.*", f"torchvision=={vision}.*", *index)


@nox.session
@nox.parametrize("torch", [nox.param(r, tags=["ci"] if r in CI_RELEASES else []) for r in TORCHVISION_FOR])
def smoke(session: nox.Session, torch: str) -> None:
    """The CPU smoke pass and torch's own tests on one torch release."""
    _install_torch(session, torch)
    # README: Install (pip keeps the torch above, which the range admits)
    session.install("-e", ".[fp8]" if torch in FP8_RELEASES else ".")
    if torch in FP8_RELEASES:
        # torchao installed but not pairing with this torch would only skip the fp8 tests: fail here instead
        session.run("python", "-c", "import sys; from ampbench.fp8 import torchao_problem; sys.exit(torchao_problem())")
    # the pair really works together: a torchvision built for another torch has no operators
    session.run("python", "-c", "import torch, torchvision, torchvision.ops; "
                "print('torch', torch.__version__, 'torchvision', torchvision.__version__)")
    if torch != "newest":
        session.run("python", "-c", f"import torch, sys; sys.exit(not torch.__version__.startswith('{torch}.'))")
    session.run("pytest", "perf/", "-q", "-p", "no:cacheprovider", "--perf-device", "cpu", *session.posargs)
    session.run("pytest", *TORCH_TESTS, "-q", "-p", "no:cacheprovider", *session.posargs)
