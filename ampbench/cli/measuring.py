"""``ampbench fidelity`` and ``ampbench fp8-width``, the commands that measure: their arguments, declared
here apart from their work (``fidelity``, ``fp8_width``), which imports torch and the zoo; the other
commands, and every --help, start without them. The handlers import the work when a command runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from ampbench.cli.common_args import add_device
from ampbench.cli.values import relative, whole_number

_count = whole_number(1, 100)


# what each command's help says of it (argparse fills the text to the terminal's width)
_FIDELITY_ABOUT = """For each MODEL:MODE cell, measure the wall-clock speedup over fp32 the way the speed tests do
and the way a plain, hand-written training loop with the same good practice does (channels_last for convnets on
CUDA, the fused optimizer), alternating in one process, --repeats times each, and print both and their difference.
Only the autocast modes have a plain loop. Without a CUDA device it stops at once, saying so: the models would run
their smoke shapes, whose figures only show that the check works (--force runs them)."""

_FIDELITY_EXITS = """Exit status: 0 every difference within --target, 1 one beyond it, 2 bad usage; 0 without a CUDA
device, where nothing is measured, or with --force the smoke shapes' differences are no finding."""

_FP8_WIDTH_ABOUT = """Build MODEL at each width (its depth, tokens and head width kept; heads and feed-forward
scaled with it), time --mode against compiled amp_bf16 in device time the way a compiled speed cell does, print each
width's speedup with its 99% interval as it is measured, and the width where it crosses 1. Each width compiles both
sides: about a minute per width on an H100."""


def _widths(value: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(w) for w in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects whole numbers separated by commas, got {value!r}") from None
    if any(w < 16 for w in widths) or len(set(widths)) != len(widths):
        raise argparse.ArgumentTypeError(f"expects distinct widths of at least 16, got {value!r}")
    return widths  # measured in the order given: the most telling first, should time run out


def add_parser(sub: argparse._SubParsersAction) -> None:
    fid = sub.add_parser(
        "fidelity", help="check that the harness measures the speedup a plain training loop gets",
        description=_FIDELITY_ABOUT, epilog=_FIDELITY_EXITS)
    fid.add_argument("cells", nargs="*", metavar="MODEL:MODE",
                     help="cells to check (default: resnet50 and gpt, each in amp_bf16 and amp_fp16)")
    add_device(fid)
    fid.add_argument("--repeats", type=_count, default=2, metavar="N",
                     help="measurements of each side per cell, alternating; the medians are compared (default: 2)")
    fid.add_argument("--target", type=relative, default=0.03, metavar="FRACTION",
                     help="largest relative difference between the two speedups that passes (default: 0.03)")
    fid.add_argument("--cudnn-benchmark", action="store_true",
                     help="cuDNN autotuning on for both sides, like --perf-cudnn-benchmark on (default: off, "
                          "cuDNN's heuristics)")
    fid.add_argument("--force", action="store_true",
                     help="without a CUDA device, run the check all the same on the smoke shapes: minutes, for "
                          "figures that only show the check works (default: stop at once, saying so)")
    fid.add_argument("--naive", action="store_true",
                     help="also time a naive loop (contiguous tensors, the optimizer's default implementation) "
                          "against the same plain fp32 loop: what good practice is worth (default: off)")
    fid.set_defaults(handler=_fidelity)

    fw = sub.add_parser(
        "fp8-width", help="measure the width at which fp8 training starts to pay on this GPU",
        description=_FP8_WIDTH_ABOUT,
        epilog="Exit status: 0 measured, 2 bad usage or a mode this device cannot run.",
    )
    fw.add_argument("model", metavar="MODEL", help="a decoder with a width rule: llama or gpt")
    fw.add_argument("--widths", type=_widths, default=None, metavar="W[,W...]",
                    help="model widths to measure (default: llama 1024,1536,2048,3072,4096; gpt 768,1536,2304)")
    fw.add_argument("--mode", default="fp8_tensorwise", choices=("fp8_tensorwise", "fp8_rowwise"),
                    metavar="MODE", help="fp8_tensorwise or fp8_rowwise (default: fp8_tensorwise)")
    add_device(fw)
    fw.add_argument("--json", type=Path, default=None, metavar="PATH",
                    help="also write every width's figures and the crossover to PATH (default: none)")
    fw.set_defaults(handler=_fp8_width)


def _fidelity(args: argparse.Namespace) -> int:
    from ampbench.cli import fidelity

    return fidelity.command(args)


def _fp8_width(args: argparse.Namespace) -> int:
    from ampbench.cli import fp8_width

    return fp8_width.command(args)
