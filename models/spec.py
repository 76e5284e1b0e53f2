"""What the harness needs to know about a model: how to build it, feed it and score it.

Each model file defines a frozen ``Config`` dataclass and one ``SPEC``: a ``ModelSpec`` holding the
full-size config (the seed's shapes, used on a GPU) and a tiny one (used for the CPU smoke pass, so the
same code path runs in CI in seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]

# the runs a test of its own kind may take a model in: the tiers of a GPU run (--perf-tier) and the CPU
# smoke pass, whose tier does not narrow these tests' selection
RUNS = ("quick", "full", "compile", "cpu_smoke")
# ModelSpec fields naming the runs of a kind of test; a test's cells marker names its kind
CELL_KINDS = ("convergence", "input_pipeline", "distributed")


@dataclass(frozen=True)
class ModelSpec:
    name: str  # registry key; appears in test ids such as test_speed[resnet50-amp_fp16]
    origin: str  # which seed write-up (or practice) the model and its shapes come from
    config: Any  # full-size config: the seed's input shape, used on a GPU
    smoke_config: Any  # tiny config of the same architecture for the CPU smoke pass
    build: Callable[[Any], nn.Module]  # build(config) -> fp32 module on the CPU, freshly initialised
    # make_batch(config, batch_size, device, generator) -> (inputs, targets), made on `device`;
    # float inputs are fp32 (the trainer casts them for pure fp16/bf16 modes)
    make_batch: Callable[[Any, int, torch.device, torch.Generator | None], Batch]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # loss(model_output, targets) -> scalar
    flops_per_sample: Callable[[Any], float]  # training FLOPs per sample (forward + backward = 3x forward)
    batch_size: int  # default batch on a GPU
    smoke_batch_size: int  # batch of the CPU smoke pass
    optimizer: str  # key of ampbench.train.OPTIMIZERS: "sgd" (convnets, MLP, LSTM) or "adamw" (transformers)
    lr: float  # learning rate that trains this model stably in every mode
    channels_last: bool = False  # memory format for 4-D activations; True where it is faster on GPUs
    tier: str = "full"  # "quick": part of the default run; "full": only with --perf-tier full
    # part of the CPU smoke pass's default selection; False where even the smoke config's fp16 step takes
    # about a second on a CPU (full-width torchvision convnets: no fp16 convolution kernels there), so
    # the smoke pass runs it only when --perf-models names it
    in_cpu_smoke: bool = True
    in_compile_tier: bool = False  # the compile tier's cells (--perf-tier compile) run it
    # The tests of a kind of their own, beside speed and memory (which run every model by the fields
    # above): each names the runs it takes the model in, of RUNS; () for none. Any run whose --perf-models
    # names the model takes it in where the tuple is not empty.
    convergence: tuple[str, ...] = ()  # test_convergence trains it on real digits (a convnet that trains in seconds)
    # test_input_pipeline feeds it CIFAR-10 through a DataLoader (it takes 3x32x32 images); the run's own
    # selection of models (the tier, the CPU smoke pass's) narrows these runs further
    input_pipeline: tuple[str, ...] = ()
    # test_distributed times it under data-parallel comm variants: on the CPU (gloo) one small model
    distributed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for kind in CELL_KINDS:
            unknown = set(getattr(self, kind)) - set(RUNS)
            if unknown:
                raise ValueError(f"{self.name}: {kind} names unknown runs {sorted(unknown)}; runs: {', '.join(RUNS)}")

    def takes_part(self, kind: str, run: str | None = None) -> bool:
        """Whether the tests of `kind` (one of CELL_KINDS) take this model in `run` (one of RUNS), or in
        any run (None: a run whose --perf-models names it)."""
        if kind not in CELL_KINDS:
            raise KeyError(f"unknown cell kind {kind!r}; kinds: {', '.join(CELL_KINDS)}")
        runs = getattr(self, kind)
        return bool(runs) if run is None else run in runs

    def config_for(self, smoke: bool) -> Any:
        return self.smoke_config if smoke else self.config

    def batch_size_for(self, smoke: bool) -> int:
        return self.smoke_batch_size if smoke else self.batch_size


def image_batch(config: Any, batch_size: int, device: torch.device, generator: torch.Generator | None = None) -> Batch:
    """Random images and class labels for image classifiers whose config has `in_channels`,
    `image_size` and `num_classes`: (B, C, H, W) fp32 inputs and (B,) int64 targets, made on `device`."""
    size = (batch_size, config.in_channels, config.image_size, config.image_size)
    x = torch.randn(size, device=device, generator=generator)
    y = torch.randint(0, config.num_classes, (batch_size,), device=device, generator=generator)
    return x, y


def token_batch(
    batch_size: int, seq_len: int, vocab_size: int, device: torch.device, generator: torch.Generator | None = None
) -> Batch:
    """Random token ids and next-token targets for language models: two (B, T) int64 tensors on `device`."""
    size = (batch_size, seq_len)
    x = torch.randint(0, vocab_size, size, device=device, generator=generator)
    y = torch.randint(0, vocab_size, size, device=device, generator=generator)
    return x, y


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy over every position: logits (B, T, vocab), targets (B, T)."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
