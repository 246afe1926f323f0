"""Loader for rldbg's VeRL integration, registered as a `verl.plugins` entry point.

VeRL imports every `verl.plugins` entry point while `import verl` runs, in every process that
imports it: the driver, VeRL's TaskRunner actor and each worker (before any worker module
loads). This module is that entry point, outside the `rldbg` package so that VeRL's entry point
names no rldbg internals: with RLDBG_VERL unset it costs an environment lookup and the switch's
name (rldbg's package loads its names on first use, and rldbg.switches imports nothing).
"""
import os

from rldbg.switches import VERL

if os.environ.get(VERL, "").strip() not in ("", "0"):
    from rldbg.integrations.verl import install_from_env

    install_from_env()
