"""What the history decided of a cell, with its numbers: ``ampbench history explain TEST_ID`` (every run
of the cell's series, counted or held back and why; the level segments; the noise within and between
cards; each card's level and tolerance; the changes found), and the runs each run of ``history runs``
held back as suspect. Reads the store and the baseline file the gate pools in; decides nothing itself:
the replay (``replay``), the model (``model``), the settling and the changes (``changes``) do.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Hashable

from ampbench.history.changes import find_changes, settled
from ampbench.history.learn import learned_from, percent
from ampbench.history.model import NEW_CARD
from ampbench.history.replay import Replay
from ampbench.history.report_changes import shown_change
from ampbench.history.series import Series
from ampbench.history.statuses import SUSPECT
from ampbench.history.store import History
from ampbench.printable import plural
from ampbench.results.ratios import DEVICE


def replay_of(history: History, gpu: str, test_id: str, figure: str, baseline_dir: Path | None) -> Replay:
    """The cell's series replayed as the gate replays it, the baseline file's spread pooled in, settled."""
    series = history.series(gpu, test_id, figure)
    return settled(series, _prior(history, gpu, test_id, figure, series, baseline_dir))


def _prior(history: History, gpu: str, test_id: str, figure: str, series: Series, baseline_dir: Path | None):
    from ampbench.baselines.file import BaselineError, BaselineFile
    from ampbench.history.baseline_source import DISTRIBUTED_CELLS, SPEED_CELLS, prior_for

    cells = DISTRIBUTED_CELLS if DISTRIBUTED_CELLS.covers(test_id) else SPEED_CELLS
    kinds = {kind.history: kind for kind in cells.ratios}  # the ratios its entry holds, by their series
    if baseline_dir is None or figure not in kinds:
        return None
    slug = _file_stem(history, gpu)
    if slug is None:
        return None
    try:
        store = BaselineFile.open(baseline_dir, gpu, slug)
    except BaselineError:
        return None
    return prior_for(kinds[figure], cells.entry.of(store.figures(test_id)), series)


def _file_stem(history: History, gpu: str) -> str | None:
    """The stem of the baseline file the plugin holds `gpu`'s series to: its GPU model's slug, or, for N
    GPUs of one model (``results.cluster_name``), theirs: <slug>-x<N>. None where the history holds no
    run of the model."""
    from ampbench.history.export import model_slugs
    from ampbench.results import cluster_shape, cluster_stem

    # the runs are filed by their GPU model, a distributed cell's series by the N GPUs it ran on
    for model, slug in model_slugs(history).items():
        if model == gpu:
            return slug
        if (shape := cluster_shape(gpu, model)) is not None:
            return cluster_stem(slug, *shape)
    return None


def gpu_of_cell(history: History, test_id: str, figure: str, gpu: str | None) -> str:
    """`gpu`, or the only GPU (a model, or N of one) the history holds `test_id`'s series on; HistoryError
    where `gpu` is given and holds no run of it (a misspelt GPU would explain an empty series)."""
    if gpu is not None and history.series(gpu, test_id, figure).points:
        return gpu
    gpus = [g for g in history.series_gpus() if history.series(g, test_id, figure).points]
    if gpu is not None:
        raise history.fail(f"{test_id} {figure}: no run on --gpu {gpu!r}; " + (
            f"it has runs on {', '.join(repr(g) for g in gpus)}" if gpus
            else "it has no run in the history; `ampbench history runs` lists the runs"))
    if len(gpus) != 1:
        raise history.fail(f"{test_id} {figure}: "
                           + (f"--gpu is needed: it has runs on {', '.join(gpus)}" if gpus
                              else "no run in the history; `ampbench history runs` lists them"))
    return gpus[0]


def _short(card: Hashable) -> str:
    if card == NEW_CARD:
        return "a new card"
    return "no card recorded" if card is None else str(card).replace("GPU-", "")[:8]


def explain(history: History, test_id: str, gpu: str | None = None, figure: str = DEVICE.history,
            baseline_dir: Path | None = None, floor: float | None = None) -> list[str]:
    """The lines ``history explain`` prints of `test_id`'s `figure` on `gpu`."""
    from ampbench.settings import DEFAULT_TOLERANCE

    gpu = gpu_of_cell(history, test_id, figure, gpu)
    replay = replay_of(history, gpu, test_id, figure, baseline_dir)
    points, statuses = replay.points, replay.statuses
    states = Counter(s.state for s in statuses)
    lines = [f"{test_id} {figure} on {gpu}: {plural(len(points), 'run')}: "
             + ", ".join(f"{n} {state}" for state, n in states.most_common())]
    lines += ["", "runs (oldest first):"]
    for s, p in zip(statuses, points):
        dev = shown_change(s.deviation) if s.deviation is not None else "-"
        sd = f"{s.sd:.2%}" if s.sd is not None else "-"
        reason = s.reason
        if s.deviation is not None and reason.startswith(f"{s.deviation:+.2%} "):
            # the replay words a deviation as its ln step, which beyond tenfold reads as an absurd percentage
            reason = dev + reason[len(f"{s.deviation:+.2%}"):]
        lines.append(f"  #{s.index + 1:<3} {p.run_id[:12]:12} {p.when[:16].replace('T', ' ')}  {_short(p.card):16} "
                     f"{p.value:.4g}  {dev:>7} (sd {sd:>5})  seg {s.segment + 1}  {s.state}: {reason}")
    lines += ["", *_noise_lines(replay), "", *_level_lines(replay, floor or DEFAULT_TOLERANCE)]
    changes = find_changes(replay.as_series(), replay=replay)
    moved = replay.moved_from()
    lines += ["", "changes: " + ("none" if not changes else "; ".join(
        f"{shown_change(c.step)} at run #{c.index + 1} ({c.run_after.run_id})" + (" (accepted)" if c.accepted else "")
        + (" (the gate's: its runs failed or were held back)" if c.index == moved else "") for c in changes))]
    return lines


def _noise_lines(replay: Replay) -> list[str]:
    m = replay.model
    lines = ["noise (sd of ln value):"]
    if m.sigma is None:
        lines.append(f"  not learned: {plural(m.count, 'counted value')} in {plural(m.levels, 'group')}, no degree of "
                     "freedom")
    else:
        file = f", {m.prior_count} of them from the baseline file" if m.prior_count else ""
        lines.append(f"  about each segment's level: {percent(m.sigma)} from {plural(m.count, 'value')}{file}, "
                     f"{plural(m.levels, 'level')}, {plural(m.dof, 'degree')} of freedom")
    if m.sigma_w is not None:
        lines.append(f"  within a card: {percent(m.sigma_w)}, {m.dof_w} degrees of freedom in {m.groups} "
                     f"(segment, card) groups; between cards: {percent(m.tau)}")
    lines.append("  run to run, every run of the segment (robust, the replay's floor): "
                 f"{percent(replay.robust_scale())}")
    return lines


def _level_lines(replay: Replay, floor: float) -> list[str]:
    seen = [c for c in dict.fromkeys(p.card for p, s in zip(replay.points, replay.statuses)
                                     if s.counts and s.segment == replay.segment)]
    lines = [f"levels and tolerances (segment {replay.segment + 1}, floor {percent(floor)}):"]
    for card in [*seen, NEW_CARD]:
        b = learned_from(replay, floor, card=card)
        if b.level is None:
            lines.append(f"  {_short(card)}: learning (no counted run in the segment)")
            continue
        pred = replay.model.predict(card)
        how = "its own level" if pred is not None and pred.own_card else "the segment's level"
        sd = f"predicted sd {percent(pred.sd)}" if pred is not None and pred.sd is not None else "no noise learned"
        lines.append(f"  {_short(card)}: {b.level:.4g} ({how}, {plural(len(b.level_runs), 'run')}), {sd}, "
                     f"tolerance {percent(b.tolerance)} ({b.state}), line {b.level * (1 - b.tolerance):.4g}")
    if replay.pending:
        lines.append("held back now: " + ", ".join(f"#{i + 1} {replay.points[i].run_id}" for i in replay.pending))
    return lines


def suspect_runs(history: History, gpus: list[str], figure: str = DEVICE.history) -> Counter:
    """How many cells of each run (by id) the history holds back as suspect, over the series of `gpus`."""
    held: Counter = Counter()
    for gpu in gpus:
        for series in history.series_of(gpu, figure).values():
            replay = settled(series)
            held.update(series.points[s.index].run_id for s in replay.statuses if s.state == SUSPECT)
    return held
