"""One local Ray cluster per test session, on loopback, with the dashboard (the debugger
and TUI tests read it). Test modules that define Ray worker classes are importable by the
workers through PYTHONPATH."""
from __future__ import annotations

import contextlib
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


def ray_cli_env(**extra) -> dict:
    """The environment of a user's shell talking to a cluster on this machine: no RAY_ADDRESS of
    the session, and Ray 2.60's token auth mode when this machine's clusters use a token."""
    from pathlib import Path
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if (Path.home() / ".ray" / "auth_token").exists() or os.environ.get("RAY_AUTH_TOKEN"):
        env["RAY_AUTH_MODE"] = "token"
    return dict(env, **extra)


def task_listed(name: str, timeout: float = 30) -> bool:
    """Whether the session cluster's dashboard lists a task named `name` within `timeout` s (task
    events reach the GCS about once a second). Asked at the session's own dashboard by URL: another
    test's cluster may run on this machine too."""
    import time

    from rldbg.dashboard import Dashboard
    dash, deadline = Dashboard(DASHBOARD_URL), time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dash.tasks(filters=[("name", "=", name)], limit=10):
            return True
        time.sleep(0.5)
    return False


def tasks_of_actors(class_name: str) -> tuple[int, list]:
    """(how many actors of `class_name` the session cluster has had, the names of the tasks any of
    them has in the dashboard's task list), each actor's tasks asked by its id: however many
    other tasks the session made, none of theirs can be missed."""
    from rldbg.dashboard import Dashboard
    dash = Dashboard(DASHBOARD_URL)
    actors = dash.actors(filters=[("class_name", "=", class_name)])
    return len(actors), [t.get("name") for a in actors for t in dash.tasks(filters=[("actor_id", "=", a["actor_id"])])]


def stop_child(proc, timeout: float = 60) -> None:
    """End a helper process the tests hold by its stdin (cluster_host.py, drivers): close it and wait,
    killing it when it does not finish in `timeout` seconds."""
    import subprocess
    proc.stdin.close()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def cluster_host(*flags):
    """A 2-node cluster held by tests/cluster_host.py (its own ports; `flags` as it takes them):
    yields (info, process); info = {"address", "dashboard", "nodes": [{"node_id", "head"}]}."""
    import json
    import subprocess
    proc = subprocess.Popen([sys.executable, os.path.join(TESTS, "cluster_host.py"), "2", *flags],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ray_cli_env())
    try:
        yield json.loads(proc.stdout.readline()), proc
    finally:
        stop_child(proc)


@pytest.fixture(scope="session")
def two_nodes():
    """A real 2-node cluster beside the session's, shared by the multi-node tests (cluster_host)."""
    with cluster_host() as (info, _proc):
        yield info



# Tiers, fastest first, so a failing unit test shows within a minute of `python -m pytest` (CI runs
# the README's command as it is): unit tests, then tests on the session's Ray cluster, then the
# `slow` end-to-end runs (the trainer or a VeRL program as a subprocess, clusters of their own).
# `python -m pytest -m "not slow"` runs the first two tiers alone.
def _tier(item) -> int:
    if item.get_closest_marker("slow"):
        return 2
    return 1 if "ray_cluster" in item.fixturenames else 0


def pytest_collection_modifyitems(config, items):
    items.sort(key=_tier)   # stable: each tier keeps the files' order
