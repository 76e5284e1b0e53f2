"""Distributed speed cells (DDP and FSDP2, ``--perf-world-size`` ranks): the suite's
``ampbench.suite.distributed``, collected here."""

# re-exported for pytest to collect: the tests, their parametrisation hook, the module's marks and the fixture
# they use
from ampbench.suite.distributed import (  # noqa: F401
    _launches,
    pytest_generate_tests,
    pytestmark,
    test_ddp_speed,
    test_fsdp2_speed,
)
