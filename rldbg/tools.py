"""External programs rldbg and its tests run (py-spy; node), found beside the running Python first,
then on PATH: `venv/bin/rldbg` run without the venv on PATH must still find `venv/bin/py-spy`.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find(name: str) -> str | None:
    """Full path of executable `name`, or None."""
    for base in {Path(sys.executable).parent, Path(sys.executable).resolve().parent}:
        cand = base / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which(name)
