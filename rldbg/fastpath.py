"""Which implementation the user API's recording runs (rldbg/_api_c.c, built at install when a
compiler is there, or rldbg.api's Python, which C defers to for everything off its fast path).
RLDBG_PURE_PYTHON=1 picks Python. C is None when the extension is not built or is switched off;
IMPLEMENTATION says which runs.
"""
from __future__ import annotations

import os

PURE_PYTHON = "RLDBG_PURE_PYTHON"   # the switch; rldbg.switches passes it on to workers

C = None
if os.environ.get(PURE_PYTHON, "") in ("", "0"):
    try:
        from rldbg import _api_c as C
    except ImportError:   # no compiler at install, or a platform it does not build on
        C = None

IMPLEMENTATION = "python" if C is None else "c"
