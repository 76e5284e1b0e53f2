"""The ``ampbench`` command's arguments: every subcommand, its options, their validators and help. The
commands themselves are in the other modules of ``ampbench.cli``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ampbench.cli import bisect as bisect_cli
from ampbench.cli import history as history_cli
from ampbench.cli import record as record_cli
from ampbench.cli.values import fraction, whole_number
from ampbench.export import cli as export_cli
from ampbench.files import paths
from ampbench.history.connect import store_url
from ampbench.report.compare import DEFAULT_ACCURACY_TOLERANCE, DEFAULT_MEMORY_TOLERANCE, DEFAULT_TOLERANCE


# argparse prefixes a type= function's error with "argument --flag: ", so the messages leave the flag out


_fraction = fraction(1, "0.03 for 3%")
_count = whole_number(1, 100)


def _add_tolerances(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tolerance", type=_fraction, default=DEFAULT_TOLERANCE, metavar="FRACTION",
                   help="smallest relative drop of a speedup that counts as a regression; cells measured with "
                        f"more noise get more, as in the suite (default: {DEFAULT_TOLERANCE})")
    p.add_argument("--memory-tolerance", type=_fraction, default=DEFAULT_MEMORY_TOLERANCE,
                   metavar="FRACTION", help="relative growth of a memory ratio, or shrinkage of the largest batch, "
                                            f"that counts as a regression (default: {DEFAULT_MEMORY_TOLERANCE})")
    p.add_argument("--accuracy-tolerance", type=_fraction, default=DEFAULT_ACCURACY_TOLERANCE,
                   metavar="FRACTION", help="relative drop of a convergence test's accuracy that counts as a "
                                            f"regression (default: {DEFAULT_ACCURACY_TOLERANCE})")
    p.add_argument("--strict", action="store_true",
                   help="an inconclusive verdict fails too (exit status 1), like pytest's --perf-strict")
    p.add_argument("--allow-missing", action="store_true",
                   help="a test the old run had and the new one lacks (deselected, skipped, crashed) does not fail; "
                        "without it, it does (exit status 1)")
    p.add_argument("--cross-device", action="store_true",
                   help="judge runs from different devices (e.g. a CPU smoke run against a GPU run) by their ratios "
                        "over fp32; without it, such a pair is refused (exit status 2)")


def _widths(value: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(w) for w in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects whole numbers separated by commas, got {value!r}") from None
    if any(w < 16 for w in widths) or len(set(widths)) != len(widths):
        raise argparse.ArgumentTypeError(f"expects distinct widths of at least 16, got {value!r}")
    return widths  # measured in the order given: the most telling first, should time run out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ampbench",
        description="Reports and comparisons of ampbench runs, i.e. of the JSON written by "
                    "`pytest perf/ --benchmark-json RUN.json`; the per-GPU baseline files; the fidelity check.",
        epilog="Exit status: 0 fine, 1 a failing verdict: a regression, a non-finite or failed-reference convergence "
               "cell (or an inconclusive verdict under --strict, a test the new run lost, a fidelity difference "
               "beyond --target), 2 bad usage, a file that is not a usable ampbench run or baseline file, or runs "
               "from different devices.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    lst = sub.add_parser("list", help="the models and precision modes a run can name",
                         description="List the models (tier, batch on a GPU and on the CPU, whether the CPU smoke "
                                     "pass and the compile tier run them, the published benchmark each reproduces) "
                                     "and the precision modes (dtypes, loss scaling, tiers, what each needs of the "
                                     "device: compute capability, torchao, torch.compile).")
    lst.add_argument("--json", action="store_true", help="print them as JSON (default: two tables)")

    rep = sub.add_parser(
        "report", help="turn a run into DIR/index.html, DIR/summary.md and PNG charts",
        description="Write DIR/index.html (one self-contained file: open it in a browser), DIR/summary.md (for a CI "
                    "job summary, e.g. >> $GITHUB_STEP_SUMMARY) and PNG charts of speedup, memory, largest batch and "
                    "throughput. With --compare, also the change of every test against an older run, with its verdict. "
                    "The report is written to a temporary folder and moved into place at the end, so a failure leaves "
                    "no partial report.",
    )
    rep.add_argument("run", type=Path, metavar="RUN.json", help="benchmark JSON of the run to report on")
    rep.add_argument("--compare", type=Path, metavar="OLD.json", default=None,
                     help="an older run of the same suite to compare with (e.g. the last run on main)")
    rep.add_argument("-o", "--output", type=Path, metavar="DIR", default=Path("report"),
                     help="folder for the report; an earlier report there is replaced, a folder holding anything "
                          "the report did not write is refused (default: report)")
    rep.add_argument("--junit", type=Path, metavar="JUNIT.xml", default=None,
                     help="pytest's --junitxml file of the same run: its failed tests are listed at the top")
    rep.add_argument("--history", type=store_url, metavar="URL", default=None,
                     help="a run history (an SQLite file, sqlite:///PATH or postgresql://...): add a trend chart of "
                          "each speed cell's device-time speedup over its runs and the tolerance learned "
                          "(default: none, no trends)")
    rep.add_argument("--gpu", metavar="NAME", default=None,
                     help="with --history: the GPU model whose runs are drawn (default: the run's own)")
    rep.add_argument("--fail-on-regression", action="store_true",
                     help="exit with status 1 when a verdict fails (a regression, non-finite training, an fp32 reference "
                          "that did not learn), by the run's own verdicts or against --compare")
    _add_tolerances(rep)

    cmp_ = sub.add_parser(
        "compare", help="per-test verdicts of NEW.json against OLD.json; exit status 1 on a regression",
        description="Hold every test of NEW.json against the same test in OLD.json with the suite's statistics: "
                    "OLD's speedup is the baseline, NEW's 99% interval must not lie wholly below baseline x "
                    "(1 - tolerance). Memory ratio, largest batch and accuracy are held to relative tolerances.",
    )
    cmp_.add_argument("old", type=Path, metavar="OLD.json", help="the earlier run (the baseline)")
    cmp_.add_argument("new", type=Path, metavar="NEW.json", help="the run to judge")
    cmp_.add_argument("--changes-only", action="store_true", help="list only tests whose verdict is not pass")
    cmp_.add_argument("--markdown", type=Path, metavar="FILE", default=None,
                      help="also write the comparison as markdown to FILE (e.g. $GITHUB_STEP_SUMMARY is appended to)")
    _add_tolerances(cmp_)

    spr = sub.add_parser(
        "spread", help="learn each speed cell's run-to-run spread from saved runs into a baseline file",
        description="For every speed entry of BASELINE.json, gather the recorded speedup and the speedup of each "
                    "RUN.json made on the same GPU and software (driver, torch, CUDA, cuDNN) and measured the same "
                    "way, and store the standard deviation of their logarithms as the entry's between_run_sd (with "
                    "between_run_count values behind it); the entry's speedup becomes the geometric mean of those "
                    "values, the recording's own kept as recorded_speedup. Each run is one value. The device-time "
                    "speedup's spread is learned the same way into the device_ figures, from runs whose device time "
                    "was measured by the entry's method (device_method), and device_tolerance is refreshed. A "
                    "cell's tolerance then allows for that spread (Student's t with count - 1 degrees of freedom), "
                    "and the suite reports each speedup's 99% interval across runs as well as within its own run. "
                    "Pass every run to count, all of unchanged software and code: the figures are replaced, not "
                    "accumulated (unless --add), and a cell that failed in such a run counts (it was a false "
                    "alarm). Cells with an injected slowdown and the run that recorded the baseline do not count. "
                    "The file is rewritten atomically; other figures and entries are kept.",
    )
    spr.add_argument("baseline", type=Path, metavar="BASELINE.json", help="the baseline file to add the spread to")
    spr.add_argument("runs", type=Path, nargs="+", metavar="RUN.json",
                     help="benchmark JSON of independent runs of the suite on that GPU, unchanged software")
    spr.add_argument("--add", action="store_true",
                     help="add these runs to the spread each entry already holds (its count, centre and sd, which "
                          "pool exactly with new values) instead of learning it from these runs alone: for runs made "
                          "since, when the earlier runs' JSON is gone. A run the entry lists as counted is not "
                          "counted again (default: off)")
    spr.add_argument("--dry-run", action="store_true", help="print what would be stored, write nothing")

    bas = sub.add_parser("baselines", help="show or merge baseline files (baselines/<gpu-slug>.json)",
                         description="Show or merge the per-GPU baseline files that pytest --perf-update-baselines "
                                     "writes.")
    bas_sub = bas.add_subparsers(dest="baselines_command", required=True, metavar="ACTION")
    show = bas_sub.add_parser(
        "show", help="render a baseline file as Markdown",
        description="Render BASELINE.json as Markdown: the GPU and the software it was recorded on, then a table "
                    "per kind of test (speed, memory, convergence) with one row per model and precision mode. "
                    "A figure an entry lacks shows as '-'. The pages under docs/results/ are made with this.",
    )
    show.add_argument("baseline", type=Path, metavar="BASELINE.json", help="the baseline file to render")
    show.add_argument("--format", choices=("md",), default="md", help="output format (default: md)")
    show.add_argument("-o", "--output", type=Path, metavar="FILE", default=None,
                      help="write to FILE (atomically) instead of standard output")
    merge = bas_sub.add_parser(
        "merge", help="merge baseline files of one GPU, recorded by separate runs, test by test",
        description="Merge RECORDED.json files into BASELINE.json test by test: where several files hold the "
                    "same test, the entry recorded last wins; a test only one file holds is kept. For baselines "
                    "recorded in parts (by model, on several runners) by runs that each started from the "
                    "committed file, so that each part's file also holds the other parts' older entries. Every "
                    "file must be of the same GPU. BASELINE.json is rewritten atomically; it is created where it "
                    "does not exist yet.",
    )
    merge.add_argument("baseline", type=Path, metavar="BASELINE.json", help="the baseline file to merge into")
    merge.add_argument("recorded", type=Path, nargs="+", metavar="RECORDED.json",
                       help="baseline files written by --perf-update-baselines on other runs")
    merge.add_argument("--dry-run", action="store_true", help="print what would be merged, write nothing")
    export = history_cli.with_store(bas_sub.add_parser(
        "export", help="write a GPU's baseline files from the run history",
        description="Write DIR/<gpu-slug>.json from the history: each speed cell with counted runs gets the level "
                    "of its runs since its last accepted change and the between-run spread of all of them, pooled "
                    "with the file's own spread from other runs; the file's other entries are kept. The "
                    "distributed cells go the same way into DIR/<gpu-slug>-x<N>.json, one per GPU count the "
                    "history holds. The files stay what CI without a history reads and what a review sees.",
        epilog="Exit status: 0 written, 2 the store, an unknown GPU or a file that cannot be written."))
    export.add_argument("--gpu", metavar="NAME", default=None,
                        help="the GPU model, e.g. 'NVIDIA H100 80GB HBM3' (default: the history's only one)")
    export.add_argument("--baseline-dir", type=Path, metavar="DIR", default=paths.BASELINE_DIR,
                        help=f"folder of the baseline files (default: {paths.BASELINE_DIR})")
    export.add_argument("--kernels-only", action="store_true",
                        help="change nothing but the entries' kernel lists: each takes its latest counted run's, where "
                             "that run ran the software the entry names (default: the whole entry from the history)")
    record_cli.add_parser(bas_sub)

    fid = sub.add_parser(
        "fidelity", help="check that the harness measures the speedup a plain training loop gets",
        description="For each MODEL:MODE cell, measure the wall-clock speedup over fp32 the way the speed tests "
                    "do and the way a plain, hand-written training loop with the same good practice does "
                    "(channels_last for convnets on CUDA, the fused optimizer), alternating in one process, "
                    "--repeats times each, and print both and their difference. Only the autocast modes have a "
                    "plain loop. Without a CUDA device it stops at once, saying so: the models would run their "
                    "smoke shapes, whose figures only show that the check works (--force runs them).",
        epilog="Exit status: 0 every difference within --target, 1 one beyond it, 2 bad usage; 0 without a CUDA "
               "device, where nothing is measured, or with --force the smoke shapes' differences are no finding.",
    )
    fid.add_argument("cells", nargs="*", metavar="MODEL:MODE",
                     help="cells to check (default: resnet50 and gpt, each in amp_bf16 and amp_fp16)")
    fid.add_argument("--device", default="auto", metavar="DEVICE",
                     help="auto, cpu, cuda or cuda:N (default: auto, CUDA where torch sees it)")
    fid.add_argument("--repeats", type=_count, default=2, metavar="N",
                     help="measurements of each side per cell, alternating; the medians are compared (default: 2)")
    fid.add_argument("--target", type=_fraction, default=0.03, metavar="FRACTION",
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

    fw = sub.add_parser(
        "fp8-width", help="measure the width at which fp8 training starts to pay on this GPU",
        description="Build MODEL at each width (its depth, tokens and head width kept; heads and feed-forward "
                    "scaled with it), time --mode against compiled amp_bf16 in device time the way a compiled "
                    "speed cell does, print each width's speedup with its 99% interval as it is measured, and "
                    "the width where it crosses 1. Each width compiles both sides: about a minute per width on "
                    "an H100.",
        epilog="Exit status: 0 measured, 2 bad usage or a mode this device cannot run.",
    )
    fw.add_argument("model", metavar="MODEL", help="a decoder with a width rule: llama or gpt")
    fw.add_argument("--widths", type=_widths, default=None, metavar="W[,W...]",
                    help="model widths to measure (default: llama 1024,1536,2048,3072,4096; gpt 768,1536,2304)")
    fw.add_argument("--mode", default="fp8_tensorwise", choices=("fp8_tensorwise", "fp8_rowwise"),
                    metavar="MODE", help="fp8_tensorwise or fp8_rowwise (default: fp8_tensorwise)")
    fw.add_argument("--device", default="auto", metavar="DEVICE",
                    help="auto, cpu, cuda or cuda:N (default: auto, CUDA where torch sees it)")
    fw.add_argument("--json", type=Path, default=None, metavar="PATH",
                    help="also write every width's figures and the crossover to PATH (default: none)")
    history_cli.add_parser(sub)
    export_cli.add_parser(sub)
    bisect_cli.add_parser(sub)
    return parser
