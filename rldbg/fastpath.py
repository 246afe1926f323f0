"""Which implementation the hot paths run: the C one, built at install when a compiler is there,
or the Python, which is always there and which C defers to for everything off its fast path.
RLDBG_PURE_PYTHON=1 picks Python (to compare, or to rule C out). Three of them:

C: the user API's recording (rldbg/_api_c.c; the Python is rldbg.api's); IMPLEMENTATION says
which runs. CHROME: the exporter's per-event reading and formatting (rldbg/trace/_chrome_c.c; the
Python is rldbg.trace.export's and chrome_text's); EXPORT_IMPLEMENTATION says which runs. LINES:
`rldbg report`'s first look at a trace's lines (rldbg/trace/_lines_c.c; without it every event is
parsed by orjson in rldbg.trace.load_pieces); READ_IMPLEMENTATION says which runs. Each is None
when its extension is not built or is switched off.
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

CHROME = None
if C is not None:   # built and switched on together
    try:
        from rldbg.trace import _chrome_c as CHROME
    except ImportError:
        CHROME = None

EXPORT_IMPLEMENTATION = "python" if CHROME is None else "c"


LINES = None
if C is not None:
    try:
        from rldbg.trace import _lines_c as LINES
    except ImportError:
        LINES = None

READ_IMPLEMENTATION = "python" if LINES is None else "c"
