"""The input pipeline: whether a real DataLoader keeps a training step fed. Pure harness, no pytest; the
cell test is ``ampbench.suite.pipeline`` (collected by perf/test_input_pipeline.py).

Its modules, by job: `cifar` reads CIFAR-10 from a data root through torchvision (never downloading) and
serves in-memory images the same way; `measure` times a step fed by a DataLoader against the same step on
device-resident batches and says whether the loader caps it.
"""
