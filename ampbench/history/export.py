"""``ampbench baselines export``: the reviewable baseline files written from the history. Each speed cell
the history has counted runs of gets its level and learned spread (``baseline_source.overlay``), the software
of its latest counted run, and, where the file had no entry of it, how its latest run measured it; every
other entry of the file is kept as it is. The distributed cells go the same way into the file of their N
GPUs (``<slug>-x<N>.json``, ``<slug>-x<N>-<M>nodes.json`` over M hosts), one per GPU count and node
count the history holds their runs on. ``--kernels-only`` changes nothing but the kernel lists: each entry
takes its latest counted run's, where that run ran the software the entry names, so that a kernel list cut
shorter by an older suite (the 20 largest) is compared as today's is."""

from __future__ import annotations

from pathlib import Path

from ampbench.baselines.file import BaselineFile
from ampbench.history.baseline_source import DISTRIBUTED_CELLS, SPEED_CELLS, HistoryBaselines, LearnedCells
from ampbench.history.model import NEW_CARD
from ampbench.history.store import History
from ampbench.results import cluster_name, cluster_shape, cluster_stem, slug_problem

# what a baseline entry's software names (the plugin's `software` fixture keeps the same)
SOFTWARE = ("torch", "cuda", "cudnn", "driver", "device", "capability", "inductor", "triton", "torchao")


def model_slugs(history: History) -> dict[str, str]:
    """The GPU models the history holds GPU runs of, with their slugs; a HistoryError where a run carries a
    slug its GPU's name does not make (a file imported before slugs were checked): its baseline file
    would be written outside the folder, or into another GPU's."""
    slugs = {}
    for r in history.runs():
        if r.smoke:
            continue
        problem = slug_problem(r.gpu_slug, r.gpu)
        if problem is not None:
            raise history.fail(f"run {r.id} ({r.source}): {problem}; no baseline file is written from it (remove the "
                               "run, or import its file again with its gpu_slug mended)")
        slugs[r.gpu] = r.gpu_slug
    return slugs


def gpu_of(history: History, gpu: str | None) -> tuple[str, str]:
    """(GPU model, its slug): `gpu`, or the history's only GPU model; a HistoryError names the choices."""
    models = model_slugs(history)
    if gpu is not None:
        if gpu not in models:
            raise history.fail(f"no run on {gpu!r}; it holds {', '.join(sorted(models)) or 'none'}")
        return gpu, models[gpu]
    if not models:
        smoke = len(history.runs())
        only = (f"only {smoke} CPU smoke run{'s' * (smoke != 1)}, whose figures no baseline takes" if smoke
                else "nor any other")
        raise history.fail(f"holds no GPU run, {only}: nothing to export")
    if len(models) != 1:
        raise history.fail(f"--gpu is needed: the history holds runs on {', '.join(sorted(models))}")
    return next(iter(models.items()))


def gpu_counts(history: History, model: str) -> list[tuple[int, int]]:
    """The (GPU count, node count) of `model` the history holds distributed cells' runs on."""
    return sorted(shape for g in history.series_gpus() if (shape := cluster_shape(g, model)) is not None)


def write_baselines(history: History, gpu: str | None,
                    directory: Path, kernels_only: bool = False) -> list[tuple[Path, int]]:
    """Write `directory`/<slug>.json and each <slug>-x<N>.json from the history (atomically, merged entry
    by entry); each file written with the number of entries it got."""
    model, slug = gpu_of(history, gpu)
    files = [(model, slug, SPEED_CELLS)] + [
        (cluster_name(model, n, nodes), cluster_stem(slug, n, nodes), DISTRIBUTED_CELLS)
        for n, nodes in gpu_counts(history, model)]
    one = _kernels_of if kernels_only else _export_one
    written = [out for name, stem, cells in files if (out := one(history, name, stem, cells, directory, model))]
    if not written and kernels_only:
        raise history.fail(f"no kernel list to write: no entry of {model}'s baseline files has a latest counted run "
                           "that lists kernels and ran the software the entry names")
    if not written:
        raise history.fail(f"no counted speed or distributed run on {model}: nothing to export")
    return written


def _export_one(history: History, name: str, slug: str, cells: LearnedCells, directory: Path,
                device: str) -> tuple[Path, int] | None:
    store = BaselineFile.open(directory, name, slug)
    learned = HistoryBaselines(store, history, cells=cells, card=NEW_CARD)  # a file serves any card
    written = 0
    for test_id in sorted(learned.learned()):
        figures = learned.figures(test_id)
        if figures is None:
            continue
        on_file = store.software(test_id) or {}
        ran_on = learned.latest_software(test_id) or on_file
        software = {k: v for k, v in ran_on.items() if k in SOFTWARE and v is not None}
        # `ampbench spread` holds a run to the GPU its entry names: the history files runs by GPU model, and
        # a run appended before it kept the compute capability takes the file's where it recorded one
        software.setdefault("device", device)
        if on_file.get("capability") is not None and on_file.get("device") == device:
            software.setdefault("capability", on_file["capability"])
        store.record(test_id, figures, software)
        written += 1
    return (store.write(), written) if written else None


def _kernels_of(history: History, name: str, slug: str, cells: LearnedCells, directory: Path,
                device: str) -> tuple[Path, int] | None:
    """The file's entries, each with its latest counted run's kernel list where that run ran the entry's
    software; nothing else of them changed."""
    from ampbench.baselines.spread import software_difference

    store = BaselineFile.open(directory, name, slug)
    learned = HistoryBaselines(store, history, cells=cells, card=NEW_CARD)
    written = 0
    for test_id in sorted(learned.learned()):
        entry = store.figures(test_id)
        if entry is None:
            continue
        software, kernels = store.software(test_id), (learned.latest_record(test_id) or {}).get("kernels")
        ran_on = {"device": device, **(learned.latest_software(test_id) or {})}  # the history files runs by model
        if not kernels or software_difference(software or {}, ran_on) is not None:
            continue
        store.record(test_id, {**entry, "kernels": kernels}, software or {})
        written += 1
    return (store.write(), written) if written else None

