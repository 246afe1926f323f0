"""The VeRL internals the integration relies on, checked against the installed VeRL (no Ray)."""
from __future__ import annotations

import importlib
import inspect
import types

import pytest

import verl_support  # noqa: F401  (skips without verl)

from rldbg.integrations.verl import pins


@pytest.mark.parametrize("module, path, params", pins.PINNED, ids=[p[1] for p in pins.PINNED])
def test_pinned_internal_exists(module, path, params):
    pins.check(importlib.import_module(module), path, params)


def test_a_moved_internal_is_named_in_one_message():
    fake = types.ModuleType("verl.single_controller.base.worker_group")
    fake.WorkerGroup = type("WorkerGroup", (), {"_bind_worker_method": lambda self, cls: None})
    with pytest.raises(pins.VerlVersionError) as e:
        pins.check_module(fake)
    msg = str(e.value)
    assert "WorkerGroup._bind_worker_method takes ('self', 'cls')" in msg and "verl==0.9.*" in msg
    del fake.WorkerGroup
    with pytest.raises(pins.VerlVersionError, match="WorkerGroup._bind_worker_method is gone"):
        pins.check_module(fake)


def test_install_wraps_what_verl_binds_at_import():
    import rldbg.integrations.verl as rv

    rv.install()
    from verl.utils.fsdp_utils import offload_fsdp_optimizer   # bound by name, as VeRL's engines do
    from verl_workers import ActorWorker

    assert getattr(offload_fsdp_optimizer, "__rldbg_verl__", False)
    # Ray reads a method's signature after inspect.unwrap: it must admit the tag keyword.
    sig = inspect.signature(inspect.unwrap(ActorWorker.update_actor))
    assert list(sig.parameters)[:2] == ["self", "data"] and "_rldbg_call" in sig.parameters
    from verl.single_controller.base.decorator import MAGIC_ATTR

    assert getattr(ActorWorker.update_actor, MAGIC_ATTR)["dispatch_mode"].name == "DP_COMPUTE_PROTO"
