"""How N GPUs of one model are named where one GPU's name would be: in a baseline file's header, its file
stem, and the history's series of a distributed cell. Here, not beside ``device.gpu_slug``, so that the
history's commands find a file without importing torch."""

from __future__ import annotations

import re

# a baseline file's stem: lowercase letters and digits in words joined by single dashes, so that it names
# a file in the baseline folder and nothing outside it
_STEM = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


def model_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': the baseline file stem of a GPU model (here, not
    beside the device code, so that importing and exporting runs check it without torch); ValueError where
    the name makes none."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"cannot make a file name from device name {name!r}")
    return slug


def slug_problem(slug: object, gpu: str) -> str | None:
    """Why `slug`, as a run or a history carries it, is not the file stem of GPU model `gpu` (``model_slug``):
    a stem that reaches outside the baseline folder ('../x', '/etc/x') or names another GPU's file would be
    written there. None where it is."""
    try:
        made = model_slug(gpu)
    except ValueError as exc:
        return str(exc)
    if slug == made:
        return None
    if not isinstance(slug, str) or not _STEM.fullmatch(slug):
        return f"its gpu_slug {slug!r} is no file stem (lowercase letters, digits and dashes); {gpu!r} makes {made!r}"
    return f"its gpu_slug {slug!r} is not the stem of its GPU {gpu!r}, which makes {made!r}"


def is_stem(stem: str) -> bool:
    """Whether `stem` names a file in a folder and nothing else: lowercase words joined by dashes."""
    return bool(_STEM.fullmatch(stem))


def cluster_name(gpu: str, world_size: int, nodes: int = 1) -> str:
    """What N GPUs of one model are called where one GPU's name would be: in a baseline file's header and
    in the history's series of a distributed cell ('NVIDIA H200 x2'); N GPUs over several hosts are
    another cluster ('NVIDIA H200 x2 on 2 nodes'): their collectives cross a network."""
    return f"{gpu} x{world_size}" + (f" on {nodes} nodes" if nodes > 1 else "")


def cluster_stem(slug: str, world_size: int, nodes: int = 1) -> str:
    """The baseline file stem of the GPUs ``cluster_name`` names, from their model's stem `slug`:
    'nvidia-h200' for one, 'nvidia-h200-x2' for two, 'nvidia-h200-x2-2nodes' for two on two hosts. Here,
    not beside ``device.gpu_slug``, so that the history's commands find a file without importing torch."""
    return slug + (f"-x{world_size}" if world_size > 1 else "") + (f"-{nodes}nodes" if nodes > 1 else "")


def cluster_shape(name: str, gpu: str) -> tuple[int, int] | None:
    """(N, nodes) where `name` is ``cluster_name(gpu, N, nodes)``; None where it names no GPUs of model `gpu`."""
    head, _, count = name.rpartition(" x")
    count, _, spread = count.partition(" on ")
    nodes = spread.removesuffix(" nodes") if spread.endswith(" nodes") else ("1" if not spread else "")
    return (int(count), int(nodes)) if head == gpu and count.isdigit() and nodes.isdigit() else None


def cluster_size(name: str, gpu: str) -> int | None:
    """N where `name` is ``cluster_name(gpu, N)``, N GPUs on one node; None where it names no such GPUs."""
    shape = cluster_shape(name, gpu)
    return shape[0] if shape is not None and shape[1] == 1 else None
