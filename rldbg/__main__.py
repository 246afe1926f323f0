"""`python -m rldbg ...`: the same command line as the `rldbg` console script."""
import sys

from rldbg.cli import main

sys.exit(main())
