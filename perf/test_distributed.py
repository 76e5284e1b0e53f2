"""Distributed speed cells (DDP and FSDP2, ``--perf-world-size`` ranks): the suite's
``ampbench.suite.distributed``, collected here."""

from ampbench.suite.distributed import _launches, pytest_generate_tests, pytestmark, test_ddp_speed, test_fsdp2_speed
