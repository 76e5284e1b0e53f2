"""``ampbench baselines export``: the reviewable baseline file written from the history. Each speed cell
the history has counted runs of gets its level and learned spread (``reference.overlay``), the software
of its latest counted run, and, where the file had no entry of it, how its latest run measured it; every
other entry of the file is kept as it is."""

from __future__ import annotations

from pathlib import Path

from ampbench.baselines.store import BaselineStore
from ampbench.history.reference import HistoryBaselines
from ampbench.history.store import History

# what a baseline entry's software names (the plugin's `software` fixture keeps the same)
SOFTWARE = ("torch", "cuda", "cudnn", "driver", "device", "capability", "inductor", "triton", "torchao")


def gpu_of(history: History, gpu: str | None) -> tuple[str, str]:
    """(GPU model, its slug): `gpu`, or the history's only GPU model; a HistoryError names the choices."""
    runs = [r for r in history.runs() if not r.smoke and r.world_size <= 1]
    models = {r.gpu: r.gpu_slug for r in runs}
    if gpu is not None:
        if gpu not in models:
            raise history.fail(f"no single-GPU run on {gpu!r}; it holds {', '.join(sorted(models)) or 'none'}")
        return gpu, models[gpu]
    if len(models) != 1:
        raise history.fail(f"--gpu is needed: the history holds runs on {', '.join(sorted(models)) or 'no GPU'}")
    return next(iter(models.items()))


def export(history: History, gpu: str | None, directory: Path) -> tuple[Path, int]:
    """Write `directory`/<slug>.json from the history (atomically, merged entry by entry); the path and
    the number of speed entries it wrote."""
    model, slug = gpu_of(history, gpu)
    store = BaselineStore.open(directory, model, slug)
    learned = HistoryBaselines(store, history)
    written = 0
    for test_id in sorted(learned.learned()):
        figures = learned.figures(test_id)
        if figures is None:
            continue
        ran_on = learned.latest_software(test_id) or store.software(test_id) or {}
        store.record(test_id, figures, {k: v for k, v in ran_on.items() if k in SOFTWARE and v is not None})
        written += 1
    if not written:
        raise history.fail(f"no counted speed run on {model}: nothing to export")
    return store.write(), written
