"""`python -m ampbench`: the same command as the `ampbench` script."""

import sys

from ampbench.cli import main

sys.exit(main())
