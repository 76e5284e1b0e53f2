"""The input pipeline: does the host keep up with the GPU?

Two weak vCPUs can hide every AMP gain behind data loading: in "Mixed Precision Training on Tesla T4 and
P100" (2019), O0, O1 and O2 took the same time at batch 512. For each CIFAR-shaped model and mode this test measures the
samples/s of the
training step fed by a real DataLoader (``--perf-loader-workers``, ``--perf-pin-memory``, non_blocking
copies, the per-sample augmentation of "Mixed Precision Training on Tesla T4 and P100" (2019)) against the same step on
device-resident batches, and
reports the mode as input-bound when the loader caps its step rate. Being input-bound is a finding
about this host, not a regression, so it is a warning, never a failure.

This repository's perf/test_input_pipeline.py collects this test; ``from ampbench.suite import *`` does not.
"""

from __future__ import annotations

import math
import warnings

import pytest

from ampbench.convergence import training
from ampbench.device import release
from ampbench.pipeline import measure as pipeline

_SEED = 0  # the dataset's and the step's seed


class InputBound(UserWarning):
    """The DataLoader caps a mode's step rate, so its speedup over fp32 is hidden on this host."""


def _pipeline_config(model_spec, smoke: bool):
    """The model's own config with a 10-class head for CIFAR-10 or digits (on the CPU, the convergence
    test's shrunken smoke config: CPU fp16 convolutions are slow)."""
    try:
        config, _, _ = training.image_config(model_spec, smoke, num_classes=10)
    except ValueError as exc:
        pytest.fail(f"{model_spec.name}: its ModelSpec.input_pipeline says CIFAR-shaped, but {exc}", pytrace=False)
    return config


@pytest.fixture(scope="session")
def _pipeline_datasets() -> dict:
    return {}


# the CIFAR-shaped models (ModelSpec.input_pipeline), each in its own tier (the DPNs in the full one) or
# where --perf-models names it; the quick tier leaves out fp32 and TF32 (the rows' full_tier_only): the
# slowest consumers of a loader, they are never the ones it fails to feed
@pytest.mark.cells(kind="input_pipeline", tiered=True, modes_tiered=True)
@pytest.mark.benchmark(group="input pipeline")  # no timing: its figures are rates of a loader-fed step
def test_input_pipeline(record_result, model_spec, mode, perf_settings, perf_device, _pipeline_datasets, fail_on_oom):
    settings = perf_settings
    smoke = settings.smoke
    config = _pipeline_config(model_spec, smoke)
    key = (config.in_channels, config.image_size, str(settings.data_root))
    if key not in _pipeline_datasets:
        _pipeline_datasets[key] = pipeline.pipeline_dataset(config, settings.data_root, seed=_SEED)
    dataset, data_name = _pipeline_datasets[key]
    batch = model_spec.batch_size_for(smoke)
    # the smoke pass checks the code path; a GPU gets enough steps for a rate to mean something
    steps, warmup = (4, 2) if smoke else (30, 10)
    workers = settings.loader_workers

    result: pipeline.PipelineResult = fail_on_oom(lambda: pipeline.measure_input_pipeline(
        model_spec, mode, perf_device, config=config, dataset=dataset, data_name=data_name,
        batch_size=batch, steps=steps, warmup=warmup, workers=workers, pin_memory=settings.pin_memory, seed=_SEED),
        f"{model_spec.name} {mode.name}", batch)
    release(perf_device)

    record_result(result.record(str(perf_device)))

    for name, value in (("resident", result.resident_samples_per_s), ("loader-fed", result.loader_samples_per_s),
                        ("loader-only", result.loader_only_samples_per_s)):
        assert math.isfinite(value) and value > 0, (
            f"{model_spec.name} {mode.name}: {name} throughput is {value} samples/s, expected a positive number")
    assert result.losses_finite, f"{model_spec.name} {mode.name}: NaN/inf loss while measuring the input pipeline"
    if result.input_bound:
        warnings.warn(InputBound(result.message))
