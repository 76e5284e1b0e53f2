"""The device under test: what it can run, what it is called, and how fast its matmul units are."""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

import torch

from ampbench import fp8
from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode
from ampbench.results import cluster_stem, model_slug

T = TypeVar("T")

def resolve(name: str, flag: str = "--perf-device") -> torch.device:
    """'auto' means CUDA where there is one, else the CPU; errors name the option, `flag`, it came from."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise RuntimeError(f"{flag} {name}: not a device this suite runs on (auto, cpu, cuda or cuda:N)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{flag} {name}: no CUDA device is visible to torch {torch.__version__}")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        # checked here: torch would answer "invalid device ordinal" in every test instead
        count = torch.cuda.device_count()
        raise RuntimeError(f"{flag} {name}: there is no CUDA device {device.index}; torch sees {count} "
                           f"(cuda:0 to cuda:{count - 1})")
    if device.type == "cuda" and device.index is None:
        # an explicit index: some torch.cuda calls (set_per_process_memory_fraction) refuse a bare "cuda"
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else (0, 0)


@dataclass(frozen=True)
class Capability:
    check: Callable[[torch.device], bool]  # does this device have it
    missing: str  # the skip reason when it does not
    found: Callable[[torch.device], str] | None = None  # what is there instead, added to the reason


def _found_capability(device: torch.device) -> str:
    if device.type != "cuda":
        return f"found no CUDA device ({device.type})"
    return f"found compute capability {'.'.join(map(str, _capability(device)))}"


def _found_torchao(device: torch.device) -> str:
    return fp8.torchao_problem() or "torchao usable"


# On the CPU every dtype runs (slowly): the smoke pass exercises the same code path, not tensor cores.
# fp8 is the exception: torch._scaled_mm has no fast CPU path, and torchao's float8 training targets GPUs.
CAPABILITIES: dict[str, Capability] = {
    "tf32": Capability(
        lambda d: d.type == "cuda" and _capability(d) >= (8, 0),
        "TF32 needs an NVIDIA GPU of compute capability 8.0 (Ampere) or newer",
    ),
    "fp16": Capability(
        lambda d: d.type == "cpu" or _capability(d) >= (7, 0),
        "fp16 tensor cores need an NVIDIA GPU of compute capability 7.0 (Volta) or newer",
    ),
    "bf16": Capability(
        lambda d: d.type == "cpu" or (d.type == "cuda" and _capability(d) >= (8, 0)),
        "bf16 needs an NVIDIA GPU of compute capability 8.0 (Ampere) or newer",
    ),
    "fp8": Capability(
        lambda d: d.type == "cuda" and _capability(d) >= (8, 9),
        "fp8 tensor cores need an NVIDIA GPU of compute capability 8.9 (Ada, Hopper) or newer",
        _found_capability,
    ),
    "torchao": Capability(
        lambda d: fp8.torchao_problem() is None,
        "fp8 training runs through torchao's float8",
        _found_torchao,
    ),
}


def unsupported_reason(mode: PrecisionMode, device: torch.device) -> str | None:
    """Why `mode` cannot run on `device` (every need it lacks), or None if it can."""
    missing = []
    for need in mode.needs:
        cap = CAPABILITIES[need]
        if not cap.check(device):
            missing.append(f"{cap.missing}: {cap.found(device)}" if cap.found else cap.missing)
    return f"{mode.name} on {device_name(device)}: {'; '.join(missing)}" if missing else None


def cell_unsupported_reason(mode: PrecisionMode, device: torch.device, spec: ModelSpec, config: Any) -> str | None:
    """Why `spec` at `config` cannot train in `mode` on `device`: what the device lacks, or, for an fp8
    mode, that the model has no Linear layer to convert; None if it can."""
    return unsupported_reason(mode, device) or fp8.unconvertible_reason(mode, spec, config)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': the baseline file's stem (``results.model_slug``)."""
    return model_slug(name)


def cluster_slug(name: str, count: int, nodes: int = 1) -> str:
    """Baseline file stem of `count` GPUs of one model: 'nvidia-h200' for one, 'nvidia-h200-x2' for two,
    'nvidia-h200-x2-2nodes' for two on two hosts."""
    if count < 1 or nodes < 1:
        raise ValueError(f"a GPU count and a node count must be at least 1, got {count} and {nodes}")
    return cluster_stem(gpu_slug(name), count, nodes)


def configure_backends(device: torch.device, cudnn_benchmark: bool = False) -> None:
    """Settings every measurement shares: cuDNN's heuristics choose its algorithms, as in PyTorch's
    default (with `cudnn_benchmark`, it times the candidates for each new shape instead, seconds per
    convnet and dtype: docs/design.md); on the CPU the smoke pass's tiny shapes run on one thread,
    because on a small, busy runner OpenMP's spin-waiting makes a 1 ms step take 100 ms."""
    torch.backends.cudnn.benchmark = cudnn_benchmark
    if device.type == "cpu":
        torch.set_num_threads(1)


def is_out_of_memory(exc: BaseException) -> bool:
    """Out of memory from the caching allocator, or from a library that allocates on its own."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc) if isinstance(exc, RuntimeError) else ""
    return any(s in text for s in ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED"))


def first_line(exc: BaseException) -> str:
    """An exception's first line: allocator messages run to a paragraph of advice."""
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def catch_oom(fn: Callable[[], T]) -> tuple[T | None, str | None]:
    """(fn(), None), or (None, a description) if the device ran out of memory.

    The description is built inside the handler and the exception dropped with it: the traceback
    holds the frames, and so the tensors, of the failed work, which must be freed before the next
    cell runs. Call ``ampbench.device.release()`` afterwards.
    """
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001 - anything but running out of memory propagates
        if not is_out_of_memory(exc):
            raise
        peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
        return None, f"peak memory {peak:.2f} GiB; {first_line(exc)}"


def card_memory_gib(device: torch.device) -> float | None:
    """The card's whole memory in GiB; None off CUDA."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).total_memory / 2**30


def release(device: torch.device) -> None:
    """Collect reference cycles (a failed step's traceback and frames form them) and give the
    allocator's cached blocks back, so the next cell starts from the same allocator state."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def freeze_survivors() -> None:
    """Collect, then set every object alive now (torch's and the suite's modules, the collected tests)
    where the collector no longer looks, so that each ``release`` walks only what was made since: a full
    collection over torch's import graph takes ~0.2 s, and a full tier releases over a hundred times.
    Call it before the first trainer exists: what is frozen is never collected."""
    gc.collect()
    gc.freeze()


_primed: set[torch.device] = set()  # devices whose long-lived library allocations exist


def prime_libraries(device: torch.device) -> None:
    """Make the allocations that live as long as the process (cuBLAS's workspace for this stream)
    before anything is measured, so no cell's figures depend on whether it ran first in the session.
    Once per device: they outlive every cell (``empty_cache`` leaves them)."""
    if device.type != "cuda" or device in _primed:
        return
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.ones(16, 16, device=device, dtype=dtype, requires_grad=True)
        torch.nn.functional.linear(x, x, x[0]).sum().backward()
    torch.cuda.synchronize(device)
    _primed.add(device)


def unprime(device: torch.device) -> None:
    """Forget that `device`'s long-lived library allocations exist, once they were given back
    (``plugin.leftover``): the next ``prime_libraries`` makes them again, before anything is measured."""
    _primed.discard(device)


# matmul dtype of the peak measurement -> (tensor dtype, TF32 on)
PEAK_DTYPES: dict[str, tuple[torch.dtype, bool]] = {
    "fp32": (torch.float32, False),
    "tf32": (torch.float32, True),
    "fp16": (torch.float16, False),
    "bf16": (torch.bfloat16, False),
    "fp8": (torch.float8_e4m3fn, False),  # tensorwise-scaled e4m3 x e4m3 -> bf16, as torchao's forward matmul
}


def _matmul_for(dtype: torch.dtype, device: torch.device) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if dtype.itemsize > 1:
        return torch.mm
    one = torch.ones((), dtype=torch.float32, device=device)
    # cuBLASLt's fp8 matmul takes its second operand column-major: b.t() of a row-major b is
    return lambda a, b: torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)


def _random_matrix(n: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    if dtype.itemsize > 1:
        return torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    return torch.randn(n, n, device=device, generator=gen).to(dtype)  # randn makes no fp8


def measure_peak_tflops(device: torch.device, dtype_name: str, n: int = 8192, repeats: int = 10) -> float:
    """Achieved TFLOP/s of an n x n x n matrix product on random data: the ceiling a training step's
    TFLOP/s is held against. Measured, not read off a datasheet, because boards of one name differ in
    clocks and power limits."""
    dtype, tf32 = PEAK_DTYPES[dtype_name]
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        a, b = _random_matrix(n, dtype, device, gen), _random_matrix(n, dtype, device, gen)
        mm = _matmul_for(dtype, device)
        for _ in range(3):  # warm-up: cuBLAS handle, heuristics, clocks out of idle
            mm(a, b)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeats):
                mm(a, b)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            import time

            t0 = time.perf_counter()
            for _ in range(repeats):
                mm(a, b)
            seconds = time.perf_counter() - t0
        return 2.0 * n**3 * repeats / seconds / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def machine_info(device: torch.device) -> dict:
    """What pytest-benchmark's machine_info should carry so two runs can be told apart."""
    info: dict = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": device_name(device),
        # compiled modes run Inductor (part of torch, so torch's version) and its Triton kernels
        "inductor": torch.__version__,
        "triton": _version_of("triton"),
        "torchao": fp8.installed_torchao(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu_slug=gpu_slug(props.name),
            capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            memory_gib=round(props.total_memory / 2**30, 2),
            # which card: runs on one card are no independent samples of the spread between cards
            uuid=card_uuid(device),
        )
        info.update(_driver_and_clocks(device))
    return info


def card_uuid(device: torch.device) -> str | None:
    """The UUID of the card `device` is, as torch reports it; None on the CPU or where torch has none."""
    if device.type != "cuda":
        return None
    return str(getattr(torch.cuda.get_device_properties(device), "uuid", "")) or None


def _version_of(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver_and_clocks(device: torch.device) -> dict:
    """Driver version and clocks from NVML if nvidia-ml-py is installed, else nvidia-smi, else nothing."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            return {
                "driver": pynvml.nvmlSystemGetDriverVersion(),
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "power_limit_w": pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML absent or refused: fall back to nvidia-smi
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    fields = "driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit"
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits", f"--id={index}"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return {}
    values = [v.strip() for v in out.split(",")]
    keys = ["driver", "sm_clock_mhz", "max_sm_clock_mhz", "mem_clock_mhz", "power_limit_w"]
    return dict(zip(keys, values))


@contextlib.contextmanager
def cudnn_heuristics() -> Iterator[None]:
    """cuDNN benchmark mode off for the duration, for work that is not timed: with it every new
    shape and dtype autotunes (seconds per model), and the algorithms it tries have
    workspaces that make a peak depend on timing rather than on the batch."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved
