"""Shared by the VeRL tests: skip cleanly without VeRL, build and tear down real worker groups."""
from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path

import pytest

if importlib.util.find_spec("verl") is None:
    pytest.skip("verl is not installed (pip install -e '.[verl]')", allow_module_level=True)


TESTS = Path(__file__).parent


def program_env(**extra) -> dict:
    """The environment a test runs a VeRL program in: none of the session's rldbg switches or
    Ray address, the tests and the repo importable, Ray on loopback, then `extra`."""
    env = dict(os.environ)
    for k in ("RLDBG_VERL", "RLDBG_TRACE", "RLDBG_BREAKPOINTS", "RAY_ADDRESS", "SLOW_RANK", "SLOW_METHOD"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent), env.get("PYTHONPATH", "")])
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def sweep(prog) -> None:
    """Whatever the finished program's own Ray cluster left behind: Ray makes its driver a process
    group leader (the program runs in a session of its own), and an agent still starting when that
    cluster went down can outlive it, orphaned."""
    try:
        os.killpg(prog.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def require_entry_point() -> None:
    """Workers load the integration through rldbg's `verl.plugins` entry point; without it the
    tests would measure nothing, so say how to get it instead of failing obscurely."""
    from importlib.metadata import entry_points

    if not any(ep.value == "rldbg_verl_plugin" for ep in entry_points(group="verl.plugins")):
        raise AssertionError("rldbg's verl.plugins entry point is not installed: run `pip install -e .` "
                             "(or `pip install .`) so that processes importing verl can load rldbg_verl_plugin")


def group(cls, name_prefix=None, n=2):
    import ray
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool([n], use_gpu=False, max_colocate_count=1)
    kw = {"name_prefix": name_prefix} if name_prefix else {}
    return RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(cls)), **kw)


def teardown(*groups) -> None:
    import ray
    from ray.util.placement_group import remove_placement_group

    for wg in groups:
        for w in wg.workers:
            ray.kill(w)
    for wg in groups:
        for pg in getattr(getattr(wg, "resource_pool", None), "pgs", None) or []:
            try:
                remove_placement_group(pg)
            except Exception:
                pass


def batch(rows=8):
    import torch
    from verl import DataProto

    return DataProto.from_dict({"x": torch.arange(rows * 4).reshape(rows, 4)})
