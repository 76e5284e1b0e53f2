"""Where a cell's reference comes from (``ampbench.baselines.source.BaselineSource``): the committed
file's store and the run history over it both are one, member by member, with the protocol's
parameters, so that a cell annotated with the protocol takes either."""

from __future__ import annotations

import inspect

import pytest

from ampbench.baselines.file import BaselineFile
from ampbench.baselines.source import BaselineSource
from ampbench.history.baseline_source import HistoryBaselines
from ampbench.history.store import open_history

MEMBERS = ("path", "exists", "pending", "figures", "entry", "reference", "software", "record", "write")


def _stores(tmp_path):
    store = BaselineFile(path=tmp_path / "gpu-x.json", gpu="GPU X")
    return {"file": store, "history": HistoryBaselines(store, open_history(f"sqlite:///{tmp_path / 'h.sqlite'}"))}


def test_the_protocol_names_what_the_cells_read_and_record():
    members = {n for n, v in vars(BaselineSource).items()
               if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    assert members == set(MEMBERS)


@pytest.mark.parametrize("kind", ["file", "history"])
def test_both_stores_are_baseline_sources(tmp_path, kind):
    store = _stores(tmp_path)[kind]
    assert isinstance(store, BaselineSource)
    for name in MEMBERS:
        declared = getattr(BaselineSource, name)
        if isinstance(declared, property):
            continue  # an attribute or a property; isinstance saw it
        got = inspect.signature(getattr(type(store), name)).parameters
        want = inspect.signature(declared).parameters
        assert list(got) == list(want), f"{type(store).__name__}.{name}{tuple(got)}: the protocol's is {tuple(want)}"


@pytest.mark.parametrize("kind", ["file", "history"])
def test_a_recorded_entry_is_written_and_read_back_through_the_protocol(tmp_path, kind):
    store: BaselineSource = _stores(tmp_path)[kind]
    figures = {"margin": 0.03, "accuracy": 0.97, "accuracy_ref": 0.98, "reference": "fp32", "steps": 10,
               "batch_size": 16, "data": "digits", "finite": True, "within_margin": True}
    assert not store.exists and store.figures("test_convergence[mlp-bf16]") is None
    store.record("test_convergence[mlp-bf16]", figures, {"torch": "2.14"})
    assert set(store.pending) == {"test_convergence[mlp-bf16]"}
    assert store.write() == store.path and store.path.exists()
    assert store.figures("test_convergence[mlp-bf16]") == figures
    assert store.software("test_convergence[mlp-bf16]") == {"torch": "2.14"}
    assert store.exists and store.pending == {}
