"""One real training step of one model in one precision mode: forward, loss, backward, optimizer step,
with the loss scaling and master weights its ``PrecisionMode`` row asks for."""

from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Any, Callable, Iterable, Iterator, Protocol, cast
from unittest import mock

import torch
from torch import nn

from ampbench import fp8
from ampbench.models.spec import Batch, ModelSpec
from ampbench.modes import STATIC_LOSS_SCALE, PrecisionMode

NORM_LAYERS = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm, nn.RMSNorm,
               nn.modules.instancenorm._InstanceNorm)
# cuDNN's batch norm takes fp16/bf16 input with fp32 parameters natively (as Apex O2 relied on);
# CUDA's layer and group norm kernels do not, so those get their input cast around them.
NATIVELY_MIXED_NORMS = (nn.modules.batchnorm._BatchNorm,)

# Synthetic data comes as INPUT_POOL input batches and TARGET_POOL target batches, cycled
# independently (coprime sizes): every input meets conflicting targets, so the model cannot
# memorise its data. On one fixed batch it does within ~10 steps, its logits then grow without
# bound and overflow fp16, and every scaled step is skipped.
INPUT_POOL, TARGET_POOL = 2, 3

# AdamW keeps its moments in the parameters' dtype: in fp16, grad**2 underflows to 0 below ~2.4e-4
# and the update m / (sqrt(v) + eps) explodes with eps = 1e-8 (pure-fp16 GPT's weights went inf).
ADAM_EPS = {torch.float16: 1e-4}


def _any_dtensor(params: list) -> bool:
    # a DTensor exists only once torch.distributed.tensor is imported (FSDP2 imports it); importing it
    # here would cost every process that builds a trainer a second or more of start-up
    dtensor = sys.modules.get("torch.distributed.tensor")
    return dtensor is not None and any(isinstance(p, dtensor.DTensor) for p in params)


def _fused_where_possible(cls: Callable[..., torch.optim.Optimizer], params, **kwargs):
    # fused kernels also take GradScaler's scale and inf flag on the device, so a scaled step needs no
    # host sync; where a build lacks a fused kernel, the multi-tensor (foreach) path is next best.
    params = list(params)
    if not params or params[0].device.type != "cuda":
        # off CUDA there is no host sync to save, and the CPU's fused kernels are not to be trusted
        # with 16-bit parameters: torch 2.13's fused SGD drops the small updates of fp16 and bf16
        # weights that the foreach and for-loop paths land (a pure-bf16 step then changes nothing)
        return cls(params, foreach=True, **kwargs)
    if _any_dtensor(params):
        # FSDP2's sharded parameters: DTensor has no sharding rule for every fused kernel (torch 2.14
        # lacks one for _fused_sgd_, which fails only at the first step); foreach works for all. Its
        # step counts live on the GPU from the first step (capturable), as the fused kernels' do: the
        # step can then be captured as a CUDA graph, which a foreach optimizer whose counts began on
        # the host refuses
        if "capturable" in inspect.signature(cls).parameters:
            kwargs["capturable"] = True
        return cls(params, foreach=True, **kwargs)
    try:
        return cls(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return cls(params, foreach=True, **kwargs)


OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": lambda params, lr, dtype: _fused_where_possible(
        torch.optim.SGD, params, lr=lr, momentum=0.9, weight_decay=5e-4
    ),
    "adamw": lambda params, lr, dtype: _fused_where_possible(
        torch.optim.AdamW, params, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, eps=ADAM_EPS.get(dtype, 1e-8)
    ),
}


class Scaler(Protocol):
    """What a trainer asks of its loss scaler: torch.amp.GradScaler's methods, which
    ``ampbench.loss_scaler.LossScaler`` and FSDP2's ShardedGradScaler have too."""

    def scale(self, outputs: Any) -> Any: ...

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any: ...

    def update(self, new_scale: Any = None) -> None: ...

    def get_scale(self) -> float: ...

    def is_enabled(self) -> bool: ...


def _static_scaler(device: torch.device) -> Scaler:
    from ampbench.loss_scaler import LossScaler

    # a static scale: never grows, never backs off, but still skips a step whose gradients overflowed
    return LossScaler(device=device.type, init_scale=STATIC_LOSS_SCALE, growth_factor=1.0, backoff_factor=1.0)


LOSS_SCALERS: dict[str, Callable[[torch.device], Scaler]] = {
    "none": lambda device: torch.amp.GradScaler(device.type, enabled=False),
    "dynamic": lambda device: torch.amp.GradScaler(device.type),
    "static": _static_scaler,
}


def memory_format_for(spec: ModelSpec, device: torch.device) -> torch.memory_format:
    """The layout `spec`'s model and batches train in on `device`: channels_last only helps where tensor
    cores read NHWC; on the CPU it would only add copies."""
    return torch.channels_last if spec.channels_last and device.type == "cuda" else torch.contiguous_format


class MasterWeights:
    """fp32 master copies of a low-precision model's parameters (Apex O2, fastai ``to_fp16``).

    The optimizer owns ``master_params``; after backward the model's fp16 gradients are copied into
    the masters' fp32 gradients, the optimizer steps the masters, and the result is rounded back into
    the model. Parameters that are already fp32 (normalization layers) are their own masters.
    """

    def __init__(self, params: Iterable[nn.Parameter]):
        self.model_params = [p for p in params if p.requires_grad]
        self.master_params: list[torch.Tensor] = []
        self._low = []  # (model param, master) pairs that need copying
        for p in self.model_params:
            if p.dtype == torch.float32:
                self.master_params.append(p)
            else:
                master = nn.Parameter(p.detach().float().clone())
                master.grad = torch.zeros_like(master)
                self.master_params.append(master)
                self._low.append((p, master))

    def grads_to_master(self) -> None:
        # a parameter without a gradient keeps none on its master too: a zero gradient would still
        # be decayed and moved by momentum, which fp32 training does not do
        with torch.no_grad():
            for p, master in self._low:
                if p.grad is None:
                    master.grad = None
                elif master.grad is None:
                    master.grad = p.grad.float()
                else:
                    master.grad.copy_(p.grad)

    def master_to_model(self) -> None:
        if self._low:
            with torch.no_grad():
                torch._foreach_copy_([p for p, _ in self._low], [m for _, m in self._low])


def _norm_input_to_fp32(module: nn.Module, args: tuple) -> tuple:
    # the forward hook sees the cast args, so the dtype to return to is remembered here
    module._input_dtype = args[0].dtype
    return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


def _norm_output_to_input_dtype(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    # the dtype _norm_input_to_fp32 kept on the module, which nn.Module's attribute type does not know
    return output.to(cast(torch.dtype, module._input_dtype))


def flatten_rnn_weights(model: nn.Module) -> None:
    """Put every RNN's weights back into one contiguous chunk. A cast (``.to(dtype)``) or a move
    leaves them as separate tensors, and cuDNN then warns at every call and compacts them at every
    step: a pessimised path that a speed cell would time as if it were the mode's cost.

    ``flatten_parameters`` does nothing for bfloat16 weights, because ``torch.backends.cudnn.is_acceptable`` lists
    only half, float and double, although cuDNN runs bf16 RNNs (and then warns); so the check is
    widened for the call."""
    rnns = [m for m in model.modules() if isinstance(m, nn.RNNBase)]
    if not rnns:
        return
    acceptable = torch.backends.cudnn.is_acceptable

    def with_bf16(tensor: torch.Tensor) -> bool:
        if tensor.dtype == torch.bfloat16:
            return tensor.is_cuda and torch.backends.cudnn.is_available() and torch.backends.cudnn.enabled
        return acceptable(tensor)

    with mock.patch.object(torch.backends.cudnn, "is_acceptable", with_bf16):
        for module in rnns:
            module.flatten_parameters()


def cast_model(model: nn.Module, mode: PrecisionMode) -> nn.Module:
    model = model.to(mode.param_dtype)
    if mode.keep_norms_fp32:
        for module in model.modules():
            if isinstance(module, NORM_LAYERS):
                module.float()
                if not isinstance(module, NATIVELY_MIXED_NORMS):
                    module.register_forward_pre_hook(_norm_input_to_fp32)
                    module.register_forward_hook(_norm_output_to_input_dtype)
    return model


class Trainer:
    """A model, its optimizer, its loss scaler and its synthetic data, ready to train in one mode.

    ``step()`` launches a full training step and returns the loss as a device tensor: it never reads a
    value back to the host itself, so a block of steps can be timed with CUDA events.
    """

    def __init__(
        self,
        spec: ModelSpec,
        mode: PrecisionMode,
        device: torch.device,
        *,
        smoke: bool = False,
        batch_size: int | None = None,
        config=None,
        seed: int = 0,
        wrap: Callable[[nn.Module], nn.Module] | None = None,
    ):
        self.spec, self.mode, self.device = spec, mode, device
        self.config = config if config is not None else spec.config_for(smoke)
        self.batch_size = batch_size if batch_size is not None else spec.batch_size_for(smoke)
        self.memory_format = memory_format_for(spec, device)
        torch.manual_seed(seed)  # the same initial weights in every mode
        # built where it trains: initialising GPT-2's 124M parameters on the CPU and copying them over
        # costs about a second per trainer, and a model has eight trainers in a run
        with torch.device(device):
            model = spec.build(self.config)
        # Module.to takes a device and a layout at once (Tensor.to's parser reads both); its overloads list them apart
        self.model = cast_model(model, mode).to(device=device, memory_format=self.memory_format)  # type: ignore[call-overload]
        flatten_rnn_weights(self.model)
        self.model.train()
        # torchao swaps modules, so it goes before any wrapper and before the optimizer sees parameters
        self.fp8_layers = fp8.convert(self.model, mode) if mode.fp8_recipe else []
        # a parallel wrapper (DDP, FSDP2's fully_shard) goes on the cast model and before the optimizer,
        # which must hold the parameters the wrapper trains (FSDP2 replaces them with sharded ones)
        if wrap is not None:
            self.model = wrap(self.model)
        if mode.compile:
            # in place, after conversion and wrapping: the module keeps its type, names and parameters,
            # and fp8's scale, cast and transpose kernels fuse only when compiled together
            self.model.compile()
        self.master = MasterWeights(self.model.parameters()) if mode.master_weights else None
        params = self.master.master_params if self.master else list(self.model.parameters())
        self.optimizer = OPTIMIZERS[spec.optimizer](params, spec.lr, mode.param_dtype)
        self.scaler = LOSS_SCALERS[mode.loss_scaling](device)
        gen = torch.Generator(device=device).manual_seed(seed)
        batches = [self.prepare(spec.make_batch(self.config, self.batch_size, device, gen)) for _ in range(TARGET_POOL)]
        self.input_pool = [x for x, _ in batches[:INPUT_POOL]]
        self.target_pool = [y for _, y in batches]
        self.steps_taken = 0
        # off while a CUDA graph of the step is captured; always off for a compiled model, which dynamo
        # would otherwise compile a second time for the capture, where Inductor cannot compile
        self.autocast_cache = not mode.compile

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        """What capturing the step as a CUDA graph needs, restored afterwards: optimizers that keep
        their step on the device (``capturable``) and autocast without its cache."""
        groups = [g for g in self.optimizer.param_groups if "capturable" in g]
        saved = [g["capturable"] for g in groups]
        for g in groups:
            g["capturable"] = True
        cache, self.autocast_cache = self.autocast_cache, False
        try:
            yield
        finally:
            for g, value in zip(groups, saved):
                g["capturable"] = value
            self.autocast_cache = cache

    @property
    def inputs(self) -> torch.Tensor:
        """The input batch the next default step trains on."""
        return self.input_pool[self.steps_taken % len(self.input_pool)]

    @property
    def targets(self) -> torch.Tensor:
        return self.target_pool[self.steps_taken % len(self.target_pool)]

    def use_batch(self, batch: Batch | None) -> None:
        """Train on this one batch from now on, or hold none (None): the memory search probes batch
        sizes this way, a few steps each, where memorisation cannot set in."""
        self.input_pool, self.target_pool = ([batch[0]], [batch[1]]) if batch is not None else ([], [])

    def prepare(self, batch: Batch) -> Batch:
        """Cast float tensors of a batch to the model's dtype and layout (integer labels stay as they are)."""
        inputs, targets = batch
        if inputs.is_floating_point():
            inputs = inputs.to(self.mode.param_dtype)
            if inputs.dim() == 4:
                inputs = inputs.contiguous(memory_format=self.memory_format)
        return inputs, targets

    def step(self, inputs: torch.Tensor | None = None, targets: torch.Tensor | None = None) -> torch.Tensor:
        """One training step on the given batch (default: the next of the synthetic pools). Call
        inside ``math_flags()``."""
        x = self.inputs if inputs is None else inputs
        y = self.targets if targets is None else targets
        self.steps_taken += 1
        self.model.zero_grad(set_to_none=True)
        with self.mode.autocast(self.device, cache_enabled=self.autocast_cache):
            out = self.model(x)
            # the loss itself in fp32, whatever the model computed in: softmax sums overflow fp16
            loss = self.spec.loss(out.float(), y.float() if y.is_floating_point() else y)
        self.scaler.scale(loss).backward()
        if self.master is not None:
            self.master.grads_to_master()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.master is not None:
            self.master.master_to_model()
        return loss.detach()

    def run(self, steps: int) -> torch.Tensor:
        """`steps` training steps on the synthetic data, with this mode's math flags; returns the last loss."""
        with self.mode.math_flags():
            for _ in range(steps):
                loss = self.step()
        return loss
