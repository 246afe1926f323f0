"""One local Ray cluster per test session, on loopback, with the dashboard (the debugger
and TUI tests read it). Test modules that define Ray worker classes are importable by the
workers through PYTHONPATH."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = str(Path(__file__).parent)
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_DEBUG"] = "1"  # Ray's debugpy breakpoints (the default in 2.60; explicit for clarity)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [TESTS, os.environ.get("PYTHONPATH")] if p)
sys.path.insert(0, TESTS)

DASHBOARD_PORT = int(os.environ.get("RLDBG_TEST_DASHBOARD_PORT", "8270"))
DASHBOARD_URL = f"http://127.0.0.1:{DASHBOARD_PORT}"


@pytest.fixture(scope="session")
def ray_cluster():
    """Yields the dashboard URL of the session's cluster."""
    import ray

    if not ray.is_initialized():
        # address="local": our own cluster even when another (a `ray start`) is recorded on this machine.
        ray.init(address="local", num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=True,
                 dashboard_host="127.0.0.1", dashboard_port=DASHBOARD_PORT, log_to_driver=False)
    try:
        yield DASHBOARD_URL
    finally:
        ray.shutdown()
