"""The Ray actor that hosts one rank of a resource pool. It holds one Worker per role
(colocation) and exposes each role's registered methods as `<role>__<method>`, generated
per method so that Ray task names and stack traces read well."""
from __future__ import annotations

import os
import traceback

from rldbg import instrument

from reference_trainer.single_controller import transport
from reference_trainer.single_controller.decorator import registered_methods
from reference_trainer.single_controller.worker import RankInfo, init_process_group, rendezvous_listener


def remote_name(role: str, method: str) -> str:
    return f"{role}__{method}"


class RemoteCallError(RuntimeError):
    """A registered method raised on a rank; carries who, where and the remote traceback."""

    def __init__(self, role: str, rank: int, method: str, step, exc_type: str, message: str, tb: str):
        self.role, self.rank, self.method, self.step = role, rank, method, step
        self.exc_type, self.message, self.remote_traceback = exc_type, message, tb
        where = f"{role} rank {rank} failed in {method}" + (f" at step {step}" if step is not None else "")
        first = message.strip().splitlines()[0] if message.strip() else ""
        # One line (python -m reference_trainer prints it last): a message of several lines, its first.
        more = " (more in the traceback)" if first != message.strip() else ""
        self.headline = f"{where}: {exc_type}: {first}{more}"
        super().__init__(f"{where}: {exc_type}: {message}\n--- remote traceback ---\n{tb}")

    def __reduce__(self):
        return (RemoteCallError, (self.role, self.rank, self.method, self.step, self.exc_type,
                                  self.message, self.remote_traceback))


class RankDied(RuntimeError):
    """A rank's process died during a call: who, where, when and why, in one line."""

    def __init__(self, role: str, rank: int, method: str, step, node: str, cause: str):
        self.role, self.rank, self.method, self.step, self.node, self.cause = role, rank, method, step, node, cause
        when = f" at step {step}" if step is not None else ""
        super().__init__(f"{role} rank {rank} on node {node} died in {method}{when}: {cause}")

    def __reduce__(self):
        return (RankDied, (self.role, self.rank, self.method, self.step, self.node, self.cause))


class HostBase:
    def __init__(self, roles: dict, rank: int, world_size: int, pool: str, device: str,
                 master_addr: str | None, master_port: int | None, threads: int):
        import torch

        if threads > 0:
            torch.set_num_threads(threads)
        self._listener = None
        if master_addr is None and world_size > 1:  # rank 0 serves the rendezvous on its node's cluster address
            self._listener = rendezvous_listener(_node_ip())
            master_addr, master_port = self._listener.getsockname()[:2]
        elif master_addr is None:
            master_addr, master_port = _node_ip(), 0
        self._info = RankInfo(rank, world_size, master_addr, master_port, device, pool)
        self._role_specs = roles
        self._workers: dict = {}
        # rldbg owns the label's format ("actor+reward[rank 1/2]") and publishes the identity
        # for its CLI; the repr only makes the Ray dashboard show the same label.
        self._label = instrument.set_worker_identity(next(iter(roles)), rank, world_size, roles=tuple(roles)).label

    def __repr__(self) -> str:
        # The dashboard shows this as the actor's repr_name: role(s) and rank at a glance. Ray also
        # asks when __init__ failed, before the label exists.
        return getattr(self, "_label", type(self).__name__)

    def master_address(self):
        return self._info.master_addr, self._info.master_port

    def pid(self) -> int:
        return os.getpid()

    def place(self) -> dict:
        """Where this rank runs: asked once at start, so a dead rank can still be placed."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "ip": _node_ip(), "pid": os.getpid()}

    def setup(self, pg_timeout_s: float) -> None:
        """Join the process group, then build each role's worker (which may use it)."""
        if self._info.world_size > 1:
            init_process_group(self._info, pg_timeout_s, self._listener)
        for role, (cls, config) in self._role_specs.items():
            self._workers[role] = cls(config, self._info)


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


def _make_caller(role: str, method: str):
    def caller(self, *args, _call=None, _wire=None, **kwargs):
        worker = self._workers[role]
        if _wire is not None:   # (own positional args, return slots): a batch cut in parts, see transport
            args, kwargs = transport.decode_call(args, _wire[0], kwargs)
        with instrument.worker_call(role, self._info.rank, method, _call) as seam:
            instrument.method_entry(role, self._info.rank, method, _call)
            try:
                with instrument.post_mortem_guard():
                    out = getattr(worker, method)(*args, **kwargs)
            except Exception as exc:  # name the rank and call; keep the remote traceback
                step = getattr(_call, "step", None)
                saved = seam.raised(exc, args, kwargs)   # inputs and error on disk (post-mortem off)
                message = str(exc) + (f" [inputs and error saved to {saved}]" if saved else "")
                raise RemoteCallError(role, self._info.rank, method, step, type(exc).__name__,
                                      message, traceback.format_exc()) from None
            out = seam.returned(out, args, kwargs)   # the non-finite sentinel: may raise NonFinite
        return out if _wire is None else transport.encode_result(out, _wire[1])

    return named(caller, remote_name(role, method))


def named(fn, name: str):
    """Rename a generated function, code object included, so stack traces, py-spy and
    debuggers show the method it serves instead of a generic closure name."""
    fn.__name__ = fn.__qualname__ = name
    fn.__code__ = fn.__code__.replace(co_name=name, co_qualname=name)
    return fn


def make_host_class(roles: dict):
    """A HostBase subclass with one generated caller per (role, registered method)."""
    attrs = {}
    for role, (cls, _config) in roles.items():
        for method in registered_methods(cls):
            attrs[remote_name(role, method)] = _make_caller(role, method)
    name = "Host_" + "_".join(roles)
    return type(name, (HostBase,), attrs)
