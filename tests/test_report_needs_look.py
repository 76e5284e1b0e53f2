"""The report's "Needs a look": one line per cell (the deciding figure, its change, its line, the kernel
that moved most by a short name) with the message and the kernel table behind it, on the page and in
summary.md."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ampbench.report import build_report, load_run
from ampbench.report.needs_look import MovedKernel, flag_cell, needs_a_look, parse_changes, short_kernel
from ampbench.results import ConvergenceRecord, MemoryRecord, Verdict
from tests import records

# resnet50 amp_fp16 made slower on the GPU: a regression
RUN = Path(__file__).parent / "data" / "h100_speed_device.json"


@pytest.mark.parametrize("name, short", [
    ("at::cuda::spin_kernel", "spin_kernel"),
    ("cudnn::batchnorm_fwtr_nhwc_semiPersist", "batchnorm_fwtr_nhwc_semiPersist"),
    ("cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_f16_64x128_64x3_nt_align8>",
     "cutlass_80_tensorop_s16816gemm_f16_64x1…"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float>>",
     "vectorized_elementwise_kernel"),
    ("nvjet_sm90_hsh_64x512_64x2_1x2_h_ssched_bz_coopB_TNT", "nvjet_sm90_hsh_64x512_64x2_1x2_h_ssched…"),  # cut at 40
])
def test_a_kernels_short_name_drops_namespaces_and_template_arguments(name, short):
    assert short_kernel(name) == short


def test_the_kernel_that_moved_most_is_read_from_the_cells_changes():
    text = ("kernels per step +1.384 ms against the baseline; new: at::cuda::spin_kernel 1.335 ms, "
            "cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_f16_64x128_64x3_nt_align8> 0.376 ms; vanished: "
            "cutlass::Kernel2 0.746 ms; changed: (other kernels) 3.614->4.226 ms (+0.612), "
            "cudnn::batchnorm_fwtr_nhwc_semiPersist 3.565->3.580 ms (+0.014)")
    kernels = parse_changes(text)
    assert MovedKernel("at::cuda::spin_kernel", 1.335, "new") in kernels
    assert MovedKernel("cutlass::Kernel2", -0.746, "vanished") in kernels
    assert MovedKernel("cudnn::batchnorm_fwtr_nhwc_semiPersist", 0.014, "changed") in kernels
    assert not any(k.name.startswith("(") for k in kernels)  # the lump below the profile's cut is no kernel
    assert parse_changes(None) == [] and parse_changes("kernels per step +0.1 ms against the baseline") == []


def test_the_regression_of_a_real_run_is_one_short_line():
    run = load_run(RUN)
    (f,) = needs_a_look(run)
    cell = f.cell
    assert cell.test_id == "test_speed[resnet50-amp_fp16]" and len(cell.message) > 1000
    assert f.summary == "device speedup 5.226x (-4.7% vs 5.483x), line 5.455x; kernel spin_kernel +1.335 ms (new)"
    assert len(f.kernels) == len(cell.kernels) and f.kernel_changes[0].startswith("kernels per step")


def test_the_deciding_figure_is_the_one_whose_verdict_needs_a_look():
    """A compiled cell that held over fp32 but fell against its versus side: the line shows the versus ratio."""
    cell = records.speed(test_id="test_speed[gpt-amp_bf16-compiled]", model="gpt", mode="amp_bf16 compiled",
                       verdict=Verdict.REGRESSION, device_speedup=6.1, device_speedup_low=6.0, device_speedup_high=6.2,
                       device_verdict=Verdict.PASS, versus="amp_bf16", versus_speedup=1.05, versus_speedup_low=1.04,
                       versus_speedup_high=1.06, versus_baseline_speedup=1.10, versus_line=1.089,
                       versus_tolerance=0.01, versus_verdict=Verdict.REGRESSION, message="m")
    assert flag_cell(cell).summary == "speedup over amp_bf16 1.050x (-4.5% vs 1.100x), line 1.089x"


def test_memory_convergence_and_other_cells_get_their_own_line():
    memory = MemoryRecord(test_id="test_memory[gpt-bf16]", model="gpt", mode="bf16", verdict=Verdict.REGRESSION,
                          memory_ratio=0.63, baseline_memory_ratio=0.55, tolerance=0.05, message="m")
    assert flag_cell(memory).summary == "memory ratio 0.630x (+14.5% vs 0.550x), line 0.578x"
    conv = ConvergenceRecord(test_id="test_convergence[mnist_cnn-bf16]", model="mnist_cnn", mode="bf16",
                             verdict=Verdict.REGRESSION, accuracy=0.14, accuracy_ref=0.92, margin=0.08, message="m")
    assert flag_cell(conv).summary == "accuracy 14.0% (-78.0 pts vs fp32's 92.0%), line 84.0%"
    crashed = records.speed(test_id="test_speed[mlp-fp16]", model="mlp", mode="fp16", verdict=Verdict.NON_FINITE,
                          message="x" * 300)
    assert flag_cell(crashed).figure is None and len(flag_cell(crashed).summary) == 140


def test_the_page_folds_each_cells_details_and_summary_md_keeps_the_line(tmp_path):
    run = load_run(RUN)
    stalled = replace(run, cells=[replace(c, verdict=Verdict.REGRESSION, message=run.cells[16].message,
                                          kernel_changes=run.cells[16].kernel_changes, kernels=run.cells[16].kernels)
                                  if i < 10 else c for i, c in enumerate(run.cells)])
    files = build_report(stalled)
    html, md = files["index.html"].decode(), files["summary.md"].decode()
    section = html[html.index("<h2>Needs a look</h2>"):]
    section = section[:section.index("</ul>\n", section.index('<ul class="flag look">'))]
    n = len(needs_a_look(stalled))
    assert n == 11 and section.count("<li><details><summary>") == n and section.count("</summary>") == n
    for summary in (part.split("</summary>")[0] for part in section.split("<summary>")[1:]):
        assert len(summary) < 600 and "cutlass_80_tensorop" not in summary and "&lt;" not in summary, summary
    assert section.count('<table class="kernels">') == n
    lines = md[md.index("### Needs a look"):].split("\n\n")[1].splitlines()
    assert len(lines) == n and all(len(line) < 200 and "kernel spin_kernel" in line for line in lines), lines
