"""rldbg for VeRL, with no change to VeRL's code or the program's.

    RLDBG_VERL=1 [RLDBG_TRACE=out.json.gz] python my_verl_program.py
    rldbg.integrations.verl.install()                # the same, from Python

How it loads: rldbg registers a `verl.plugins` entry point (rldbg_verl_plugin); VeRL loads those
while `import verl` runs, so every process importing VeRL (driver, TaskRunner actor, workers,
before their worker modules load) installs the integration when RLDBG_VERL=1. The driver also
hands RLDBG_VERL=1 to the workers it creates through VeRL's worker_env, so `install()` in a driver
is enough for its worker groups.

What install() hooks, each when its VeRL module loads (see pins.py for the internals relied on):
  driver   WorkerGroup._bind_worker_method: one rldbg driver call per group method (dispatch, wait,
           collect, flows to ranks), role from the colocated key / name_prefix / class; step
           markers from RayPPOTrainer.global_steps, else from call order (steps.py)
  workers  every @register method of every Worker class: the rank's span with memory, breakpoint
           specs (RLDBG_BREAKPOINTS=role.method@rank=1), post-mortem (RLDBG_POST_MORTEM=1), the
           non-finite sentinel on its output (a DataProto's tensors; warn unless
           RLDBG_ON_NONFINITE=stop); the actor's repr becomes "role[rank r/w]"; a custom dispatch
           mode's merged result is checked by the controller
  engines  FSDP/Megatron offload/load helpers as transition spans (transitions.py)
  rollout  the hybrid worker's rollout resume/release and the async rollout servers'
           wake_up/sleep/release_kv_cache/resume_kv_cache as transition spans (rollout.py)
  Ray      with RLDBG_TRACE=PATH, tracing starts at ray.init and the trace is written at
           ray.shutdown or exit (switch.py)
"""
from __future__ import annotations

import sys

from rldbg.integrations.verl._imports import when_imported

_installed: list = []


def install(check: bool = True) -> None:
    """Hook VeRL in this process (idempotent). With `check`, VeRL's single controller is imported
    now and pins.VerlVersionError raised if it lacks an internal this relies on."""
    if _installed:
        return
    from rldbg.integrations.verl import driver, pins, rollout, steps, switch, transitions, worker

    switch.check_switch()
    _nonfinite_default()
    if check:
        import importlib

        for name in dict.fromkeys(m for m, _, _ in pins.PINNED):
            pins.check_module(importlib.import_module(name))
    _installed.append(True)

    def worker_module(mod):
        from verl.single_controller.base.decorator import MAGIC_ATTR

        from rldbg.integrations.verl import pins

        pins.check_module(mod)
        worker.patch_worker_module(mod, MAGIC_ATTR)

    for name, fn in [("verl.single_controller.base.worker", worker_module),
                     ("verl.single_controller.base.worker_group", driver.patch_worker_group_module),
                     ("verl.single_controller.ray.base", driver.patch_ray_module),
                     ("verl.trainer.ppo.ray_trainer", steps.patch_trainer_module),
                     ("verl.utils.fsdp_utils", transitions.patch_fsdp),
                     ("verl.utils.megatron_utils", transitions.patch_megatron),
                     ("verl.workers.rollout.base", rollout.patch_rollout_base),
                     *[(name, rollout.patch_server) for name in rollout.SERVERS]]:
        when_imported(name, _guarded(fn))
    switch.install_trace_switch()


def _nonfinite_default() -> None:
    """On VeRL the non-finite sentinel warns unless RLDBG_ON_NONFINITE says otherwise: every NaN/Inf
    output is an alarm in the trace (and a flight-recorder trigger) and a line on stderr, but the
    run is the program's to stop (RLDBG_ON_NONFINITE=stop stops it at the call, as the reference
    trainer does by default)."""
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


def installed() -> bool:
    return bool(_installed)


def install_from_env() -> None:
    """The entry point's path: like install(), but a VeRL whose internals moved gets one line on
    stderr and an untouched run instead of an exception inside `import verl`."""
    from rldbg.integrations.verl.pins import VerlVersionError

    try:
        install(check=False)
    except VerlVersionError as e:
        print(f"rldbg: {e}; continuing without rldbg", file=sys.stderr)


def end_step() -> None:
    """Close the open step marker (the RLDBG_TRACE switch does this before writing the trace; a
    program calling rldbg.trace.stop() itself calls this first to keep its last step)."""
    from rldbg.integrations.verl.steps import STEPS

    STEPS.close()
