"""Convergence parity on real data, and why loss scaling exists.

``test_convergence[model-mode]``: each mode trains from the fp32 cell's seed, on the same real digits in
the same order, for the same budget, and must reach fp32's held-out accuracy within a margin (held in
this GPU's baseline file as ``margin``; ``ampbench.convergence.training`` has the budgets), with a finite loss
throughout. The fp8 modes are held against compiled amp_bf16 instead (their ``parity_mode``):
fp8 changes only the converted Linear layers of a model that otherwise trains in bf16, and mnist_cnn's
hidden layer (9216 x 128) is one torchao converts; WRN-28-10's only Linear layer is its head, so its fp8
cells skip. Pure fp16 (``fp16``, Apex O3) may lag as it did in "Mixed Precision Training on Tesla T4 and P100" (2019):
then the cell is an expected
failure (xfail) whose reason gives the figures.

``test_underflow_without_loss_scaling``: gradients below fp16's range flush to zero unless the loss is
scaled, and the test says how many.
"""

from __future__ import annotations

import pytest

from ampbench.baselines.entries import ConvergenceEntry
from ampbench.convergence import parity, training, underflow
from ampbench.convergence.images import load_digits
from ampbench.device import release
from ampbench.modes import label, parity_mode_of

SEED = 0


@pytest.fixture(scope="session")
def _results() -> dict:
    """(model, mode, compiled) -> ConvergenceResult of the current model's cells, the parity modes' among them."""
    return {}


def _remember(results: dict, key: tuple, result: training.ConvergenceResult) -> None:
    if any(k[0] != key[0] for k in results):
        results.clear()  # one model's results at a time
    results[key] = result


def _train(model_spec, mode, device, smoke, budget):
    config, _, _ = training.image_config(model_spec, smoke, num_classes=10)
    return training.train_to_accuracy(model_spec, mode, device, load_digits(), config=config, budget=budget, seed=SEED)


# the zoo models that take images and train in seconds (ModelSpec.convergence), in the runs each names
@pytest.mark.cells(kind="convergence")
@pytest.mark.benchmark(group="convergence")  # no timing: its figure is an accuracy
def test_convergence(record_result, model_spec, mode, perf_settings, perf_device, baseline_source, software, _results,
                     fail_on_oom, fits_in_memory):
    fits_in_memory()
    smoke = perf_settings.smoke
    test_id = f"test_convergence[{model_spec.name}-{mode.name}]"
    budget = training.budget_for(model_spec.name, perf_device)
    what = f"{model_spec.name} {mode.name}"

    # fp32 for most modes; compiled amp_bf16 for fp8, which keeps the rest of the model in bf16
    ref_mode = parity_mode_of(mode)
    ref_key = (model_spec.name, ref_mode.name, ref_mode.compile)
    ref = _results.get(ref_key)
    if ref is None and ref_mode != mode:
        # the parity mode's own cell did not run first (filtered out by --perf-precisions, or a compiled
        # parity mode that has no cell): train it here
        ref = fail_on_oom(lambda: _train(model_spec, ref_mode, perf_device, smoke, budget),
                          f"{model_spec.name} {label(ref_mode)} reference", budget.batch_size)
        _remember(_results, ref_key, ref)
        release(perf_device)

    result: training.ConvergenceResult = fail_on_oom(lambda: _train(model_spec, mode, perf_device, smoke, budget),
                                                 what, budget.batch_size)
    _remember(_results, (model_spec.name, mode.name, mode.compile), result)
    ref = ref if ref is not None else result
    release(perf_device)

    entry = baseline_source.entry(test_id) if baseline_source is not None else None
    baseline = entry if isinstance(entry, ConvergenceEntry) else None
    cell = parity.parity_cell(result, ref, budget, baseline, str(perf_device), SEED, label(ref_mode))
    record_result(cell.record)
    if perf_settings.update_baselines and baseline_source is not None:
        baseline_source.record(test_id, cell.baseline_figures(), software)

    if cell.outcome is parity.Outcome.PASS:
        return
    if cell.expected_lag:
        pytest.xfail(f"expected: {cell.record.message}. Why: {cell.lag_reason}")
    pytest.fail(cell.failure(), pytrace=False)


@pytest.mark.benchmark(group="underflow")  # no timing: its figures are accuracies and underflow shares
def test_underflow_without_loss_scaling(record_result, perf_device):
    """The same fp16 run twice, differing only in the loss scale: without one the gradients flush to
    zero and nothing is learned; with one (2^16) it learns what fp32 learns."""
    report: underflow.UnderflowReport = underflow.underflow_demo(perf_device, seed=SEED)
    ref, bare, scaled = report.fp32, report.unscaled, report.scaled
    summary = report.summary()
    record_result(report.record(str(perf_device)))
    print(summary)

    # the premise: fp32 learns this problem, and its gradients really lie below fp16's range
    assert ref.accuracy >= 0.85, f"underflow demo: fp32 accuracy {ref.accuracy:.3f}, expected >= 0.85; {summary}"
    assert report.grad_median < underflow.FP16_SMALLEST_SUBNORMAL, (
        f"underflow demo: median fp32 gradient {report.grad_median:.2e}, expected below fp16's smallest "
        f"subnormal {underflow.FP16_SMALLEST_SUBNORMAL:.2e}; {summary}")
    # without scaling: the gradients flush to zero, and nothing is learned
    assert bare.underflow_fraction >= 0.9, (
        f"underflow demo, {bare.label}: {100 * bare.underflow_fraction:.1f}% of gradient elements underflowed, "
        f"expected >= 90%; {summary}")
    assert bare.accuracy <= min(0.5, ref.accuracy - 0.3), (
        f"underflow demo, {bare.label}: accuracy {bare.accuracy:.3f}, expected it to fail to learn "
        f"(<= {min(0.5, ref.accuracy - 0.3):.3f}); {summary}")
    # with scaling: the same gradients survive and the run learns what fp32 learns
    assert scaled.underflow_fraction <= 0.05, (
        f"underflow demo, {scaled.label}: {100 * scaled.underflow_fraction:.1f}% of gradient elements "
        f"underflowed, expected <= 5%; {summary}")
    assert scaled.accuracy >= ref.accuracy - 0.05, (
        f"underflow demo, {scaled.label}: accuracy {scaled.accuracy:.3f}, expected >= fp32's "
        f"{ref.accuracy:.3f} - 0.05; {summary}")
