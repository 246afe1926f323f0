"""Loader for rldbg's VeRL integration, registered as a `verl.plugins` entry point.

VeRL imports every `verl.plugins` entry point while `import verl` runs, in every process that
imports it: the driver, VeRL's TaskRunner actor and each worker (before any worker module
loads). This module is that entry point. It is deliberately outside the `rldbg` package: with
RLDBG_VERL unset it costs one environment lookup, not rldbg's own import.
"""
import os

if os.environ.get("RLDBG_VERL", "").strip() not in ("", "0"):
    from rldbg.integrations.verl import install_from_env

    install_from_env()
