"""What a cell leaves behind, let go at its teardown (``plugin.leftover``), on a machine without CUDA: the
post-mortem exception with a failed cell's frames, the cuBLAS workspaces under a limit, and the summary's
line of what the cells found left over."""

from __future__ import annotations

import gc
import sys
import weakref

import torch

from ampbench import device as devices
from ampbench.plugin import leftover


class _Trainer:
    """Stands in for what a failed cell's frames hold."""


def _fail_holding(trainer: _Trainer) -> None:
    raise RuntimeError("the cell failed")


def test_a_failed_cells_frames_are_let_go():
    trainer = _Trainer()
    alive = weakref.ref(trainer)
    try:
        _fail_holding(trainer)
    except RuntimeError as exc:  # as pytest's runner keeps it, for a debugger
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
    del trainer
    gc.collect()
    assert alive() is not None, "the premise: the kept traceback holds the failed frame's trainer"
    leftover.release_between_cells(torch.device("cpu"), limited=False)
    assert alive() is None
    assert not hasattr(sys, "last_value") and not hasattr(sys, "last_traceback")


def test_under_a_limit_the_cublas_workspaces_go_and_the_next_side_primes_again(monkeypatch):
    cleared, emptied = [], []
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: cleared.append(1), raising=False)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(devices, "_primed", {cuda})
    leftover.release_between_cells(cuda, limited=False)
    assert cleared == [] and devices._primed == {cuda} and emptied == [1]
    leftover.release_between_cells(cuda, limited=True)
    assert cleared == [1] and devices._primed == set() and emptied == [1, 1]


def test_the_summary_names_the_cell_that_found_the_most_left_over():
    gib = 2**30
    readings = [("perf/test_speed.py::test_speed[mlp-amp_bf16]", {"reserved_bytes": gib, "allocated_bytes": 0}),
                ("perf/test_speed.py::test_speed[gpt-amp_bf16]",
                 {"reserved_bytes": 10 * gib, "allocated_bytes": 9 * gib})]
    assert leftover.leftover_line(readings) == ("ampbench: memory left over when a cell started: at most 10.00 GiB "
                                                "reserved (9.00 GiB allocated), before test_speed[gpt-amp_bf16]")
    assert leftover.leftover_line([]) is None
