"""rldbg for VeRL, with no change to VeRL's code or the program's (the README's "Using rldbg with
VeRL": RLDBG_VERL=1 loads it through a `verl.plugins` entry point in every process that imports
VeRL; `install()` does it from Python). What install() hooks, each when its VeRL module loads:
  driver   WorkerGroup._bind_worker_method: one rldbg driver call per group method (driver.py);
           step markers from RayPPOTrainer.global_steps, else from call order (steps.py)
  workers  every @register method of every Worker class runs in the rank's span (worker.py)
  engines  FSDP/Megatron offload/load helpers and rollout sleep/wake as transitions (transitions.py)
  Ray      with RLDBG_TRACE=PATH, tracing from ray.init to ray.shutdown or exit (switch.py)
The VeRL internals relied on are listed and checked in pins.py.
"""
from __future__ import annotations

import sys

from rldbg.integrations.verl.hooks import when_imported

_installed: list = []


def install(check: bool = True) -> None:
    """Hook VeRL in this process (idempotent). With `check`, VeRL's single controller is imported
    now and pins.VerlVersionError raised if it lacks an internal this relies on."""
    if _installed:
        return
    from rldbg.integrations.verl import driver, pins, steps, switch, transitions, worker

    switch.check_switch()
    _nonfinite_default()
    if check:
        import importlib

        for name in dict.fromkeys(m for m, _, _ in pins.PINNED):
            pins.check_module(importlib.import_module(name))
    _installed.append(True)

    for name, fn in [("verl.single_controller.base.worker", worker.patch_worker_module),
                     ("verl.single_controller.base.worker_group", driver.patch_worker_group_module),
                     ("verl.single_controller.ray.base", driver.patch_ray_module),
                     ("verl.trainer.ppo.ray_trainer", steps.patch_trainer_module),
                     ("verl.utils.fsdp_utils", lambda mod: transitions.patch_helpers(mod, transitions.FSDP)),
                     ("verl.utils.megatron_utils", lambda mod: transitions.patch_helpers(mod, transitions.MEGATRON)),
                     ("verl.workers.rollout.base", transitions.patch_rollout_base),
                     *[(name, transitions.patch_server) for name in transitions.SERVERS]]:
        when_imported(name, _guarded(fn))
    switch.install_trace_switch()


def _nonfinite_default() -> None:
    """On VeRL the non-finite sentinel warns unless RLDBG_ON_NONFINITE says otherwise: the run is
    the program's to stop."""
    import os

    from rldbg import sentinel, switches

    if not os.environ.get(switches.ON_NONFINITE, "").strip():
        sentinel.configure("warn")


def _guarded(fn):
    """A patch that finds VeRL's internals moved says so in one line and leaves VeRL as it is
    (its import must not fail); the driver tags only methods the worker side wrapped, so a
    half-applied integration stays consistent."""
    def run(mod):
        from rldbg.integrations.verl.pins import VerlVersionError

        try:
            fn(mod)
        except VerlVersionError as e:
            print(f"rldbg: {e}; continuing without rldbg for {mod.__name__}", file=sys.stderr)

    return run


def install_from_env() -> None:
    """The entry point's path: nothing is checked up front, so a VeRL whose internals moved gets a
    line on stderr per patch (_guarded) and an untouched run, not an exception in `import verl`."""
    install(check=False)


def end_step() -> None:
    """Close the open step marker (the RLDBG_TRACE switch does this before writing the trace; a
    program calling rldbg.trace.stop() itself calls this first to keep its last step)."""
    from rldbg.integrations.verl.steps import STEPS

    STEPS.close()
