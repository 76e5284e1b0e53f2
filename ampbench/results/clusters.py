"""How N GPUs of one model are named where one GPU's name would be: in a baseline file's header, its file
stem, and the history's series of a distributed cell. Here, not beside ``device.gpu_slug``, so that the
history's commands find a file without importing torch."""

from __future__ import annotations


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
