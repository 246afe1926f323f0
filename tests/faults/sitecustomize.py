"""Faults the tests inject into a whole job from outside the product, the way a user's bug would
be there: put this folder on PYTHONPATH and name a fault in TEST_FAULT (comma-separated), and the
ranks it strikes in TEST_FAULT_RANKS (comma-separated; every rank when unset). Every
Python process of the job (the driver, each Ray worker) imports sitecustomize at start-up; the
fault is applied when the module it changes is imported, so nothing here imports torch early.

Faults:
  sleep_keeps_weights   the rollout engine's sleep keeps a reference to its weights' storage until
                        it wakes, so the sleep frees nothing (rldbg report: "memory not returned")
  train_mode_leaks      each to_train_mode keeps a new 32 MiB tensor on the compute device, which no
                        ledger category accounts for (rldbg report: "leak suspicions", unaccounted)
  update_hangs          update_actor at step TEST_FAULT_STEP (default 3) sleeps TEST_FAULT_HANG_S
                        seconds (default 30): a hang, as the driver sees one
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

FAULTS = {f.strip() for f in os.environ.get("TEST_FAULT", "").split(",") if f.strip()}
RANKS = {int(r) for r in os.environ.get("TEST_FAULT_RANKS", "").split(",") if r.strip()}


def _strikes() -> bool:
    """Whether this process's rank is one the fault strikes (rldbg's identity of the worker)."""
    if not RANKS:
        return True
    from rldbg.context import identity

    return identity().rank in RANKS


def _sleep_keeps_weights(mod) -> None:
    sleep_, wake_up_ = mod.HFEngine.sleep, mod.HFEngine.wake_up

    def sleep(self, level):
        if _strikes():   # held until the engine wakes: asleep, the weights' memory is never free
            self._kept_by_fault = [t.data for t in self._params]
        return sleep_(self, level)

    def wake_up(self, *args, **kwargs):
        self._kept_by_fault = None
        return wake_up_(self, *args, **kwargs)

    mod.HFEngine.sleep, mod.HFEngine.wake_up = sleep, wake_up


def _train_mode_leaks(mod) -> None:
    import torch

    cls = mod.ActorRolloutRefWorker
    original = cls.to_train_mode
    # A registered method: its @register mark must be on the function the host looks up.
    def to_train_mode(self):
        out = original(self)
        if _strikes():
            kept = self.__dict__.setdefault("_leaked_by_fault", [])
            kept.append(torch.ones(32 << 20, dtype=torch.uint8, device=self.device))
        return out

    to_train_mode.__dict__.update(original.__dict__)
    cls.to_train_mode = to_train_mode


def _update_hangs(mod) -> None:
    import time

    cls = mod.ActorRolloutRefWorker
    original = cls.update_actor

    def update_actor(self, batch):
        from rldbg.context import current

        if _strikes() and current().step == int(os.environ.get("TEST_FAULT_STEP", "3")):
            time.sleep(float(os.environ.get("TEST_FAULT_HANG_S", "30")))   # the hang: this rank stops here
        return original(self, batch)

    update_actor.__dict__.update(original.__dict__)
    cls.update_actor = update_actor


PATCHES = {"sleep_keeps_weights": ("reference_trainer.engines.hf", _sleep_keeps_weights),
           "train_mode_leaks": ("reference_trainer.workers.hybrid", _train_mode_leaks),
           "update_hangs": ("reference_trainer.workers.hybrid", _update_hangs)}


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the modules a fault changes through the other finders, and patches them once loaded."""

    def __init__(self, patches: dict):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        self.inner, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        for fn in self.patches[module.__name__]:
            fn(module)


unknown = FAULTS - set(PATCHES)
if unknown:
    raise SystemExit(f"TEST_FAULT names {sorted(unknown)}; known: {', '.join(sorted(PATCHES))}")
if FAULTS:
    by_module: dict = {}
    for f in sorted(FAULTS):
        modname, fn = PATCHES[f]
        by_module.setdefault(modname, []).append(fn)
    sys.meta_path.insert(0, _AfterImport(by_module))
