"""WorkerGroup: the driver's handle on one role across the ranks of a resource pool.
Each registered method of the role's Worker class becomes a method of the group, so the
driver writes `actor.update_actor(batch)`; the method's dispatch mode splits the call,
the ranks run it, and the mode's collect merges what comes back."""
from __future__ import annotations

import time

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import rldbg
from rldbg import instrument

from reference_trainer.single_controller import transport
from reference_trainer.single_controller.decorator import Registration, registered_methods
from reference_trainer.single_controller.dispatch import result_summary, shard_summary
from reference_trainer.single_controller.host import RankDied, RemoteCallError, make_host_class, named, remote_name
from reference_trainer.single_controller.resource_pool import ResourcePool
from reference_trainer import stop


class WorkerGroup:
    def __init__(self, role: str, worker_cls, hosts: list, pool: ResourcePool, places: list | None = None):
        self.role, self.worker_cls, self.hosts, self.pool = role, worker_cls, hosts, pool
        self.places = places or [{} for _ in hosts]   # per rank: node_id, ip, pid
        self.methods = registered_methods(worker_cls)
        self._handles: dict = {}
        for name, reg in self.methods.items():
            setattr(self, name, self._bind(name, reg))

    def __repr__(self) -> str:
        return f"WorkerGroup({self.role!r}, ranks={self.world_size}, pool={self.pool.name!r})"

    @property
    def world_size(self) -> int:
        return len(self.hosts)

    def _bind(self, method: str, reg: Registration):
        def call(*args, **kwargs):
            return self._call(method, reg, args, kwargs)

        call.__doc__ = getattr(self.worker_cls, method).__doc__
        return named(call, method)

    def _remote(self, rank: int, method: str, slots: int):
        """The rank's actor method for `method`, returning `slots` values (cached: .options() is not free)."""
        key = (rank, method, slots)
        handle = self._handles.get(key)
        if handle is None:
            handle = getattr(self.hosts[rank], remote_name(self.role, method))
            if slots > 1:
                handle = handle.options(num_returns=slots)
            self._handles[key] = handle
        return handle

    def _call(self, method: str, reg: Registration, args: tuple, kwargs: dict):
        call = instrument.call_begin(self.role, method, reg.mode.name, self.world_size, rldbg.current().step)
        try:
            per_rank, state = reg.mode.dispatch(self.world_size, args, kwargs)
        except Exception as exc:
            instrument.call_failed(call, exc)
            raise type(exc)(f"{self.role}.{method}: {exc}") from None
        shards = [shard_summary(*item) if item else None for item in per_rank]
        instrument.call_ready(call, shards)  # the step gate may hold the call here
        refs, ranks, cut = [], [], {}
        for rank, item in enumerate(per_rank):
            if item is None:
                continue
            rank_args, rank_kwargs = item
            # Big batches travel in parts small enough for Ray to send inside its task messages.
            args_w, kwargs_w, parts, slots = transport.encode_call(rank_args, rank_kwargs, cut)
            if parts:
                out = self._remote(rank, method, slots).remote(*args_w, *parts, _call=call.tag,
                                                               _wire=(len(args_w), slots), **kwargs_w)
            else:
                out = [self._remote(rank, method, 1).remote(*rank_args, _call=call.tag, **rank_kwargs)]
            refs.append(out)
            ranks.append(rank)
        instrument.call_dispatched(call, shards)
        future = CallFuture(self, method, reg, call, state, refs, ranks)
        return future.get() if reg.blocking else future


_WAIT_SLICE_S = 0.5   # also how long a stop signal waits for a safe point


class CallFuture:
    """A non-blocking call's pending result; get() waits, collects and raises rank errors."""

    def __init__(self, group: WorkerGroup, method: str, reg: Registration, call, state, refs, ranks):
        self.group, self.method, self.reg, self.call = group, method, reg, call
        # refs: per rank, its return slots (one, or a head and parts: see transport). A rank's
        # slots are all ready when its task ends, so waiting watches the first of each.
        self._state, self._slots, self._ranks = state, refs, ranks
        self._refs = [r[0] for r in refs]
        self._done = False
        self._result = None

    def _rank_died(self, ref, err) -> RankDied:
        """RankDied for the rank whose result `ref` is, recorded in the trace where that rank is."""
        rank = self._ranks[self._refs.index(ref)]
        place = self.group.places[rank] if rank < len(self.group.places) else {}
        dead = rldbg.actor_death(err)
        died = RankDied(self.group.role, rank, self.method, self.call.tag.step, _describe_node(place, dead),
                        dead.cause)
        instrument.call_failed(self.call, err)
        rldbg.instant("rank_died", role=died.role, rank=rank, method=died.method, step=died.step,
                      node=died.node, cause=died.cause)
        return died

    def get(self, timeout: float | None = None):
        if self._done:
            return self._result
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        pending = list(self._refs)
        got = {}
        try:
            while pending:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                slice_s = _WAIT_SLICE_S if left is None else min(left, _WAIT_SLICE_S)
                done, pending = ray.wait(pending, num_returns=1, timeout=slice_s)
                stop.check()   # SIGTERM/SIGINT: a safe point even while a rank hangs
                if done:
                    try:   # raise the first failure now; peers may be stuck in a collective
                        got[done[0]] = ray.get(done[0])
                    except ray.exceptions.RayActorError as err:
                        raise self._rank_died(done[0], err) from None
                elif deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"{self.group.role}.{self.method}: not done after {timeout} s")
                else:  # a slow call may be a rank paused at a breakpoint: say so
                    ranks = [r for r, ref in zip(self._ranks, self._refs) if ref in pending]
                    instrument.call_waiting(self.call, ranks, time.monotonic() - start)
            rest = ray.get([r for slots in self._slots for r in slots[1:]])
            outputs, at = [], 0
            for head, slots in zip(self._refs, self._slots):
                outputs.append(transport.decode_result([got[head], *rest[at:at + len(slots) - 1]]))
                at += len(slots) - 1
        except ray.exceptions.RayTaskError as err:
            instrument.call_failed(self.call, err)
            cause = getattr(err, "cause", None)
            if isinstance(cause, rldbg.NonFinite):
                raise rldbg.NonFinite(*cause.__reduce__()[1]) from None
            if isinstance(cause, RemoteCallError):
                raise RemoteCallError(cause.role, cause.rank, cause.method, cause.step, cause.exc_type,
                                      cause.message, cause.remote_traceback) from None
            raise
        except ray.exceptions.RayActorError as err:
            instrument.call_failed(self.call, err)
            raise RuntimeError(
                f"{self.group.role}.{self.method}: a rank's process died ({rldbg.actor_death(err).cause}); "
                f"see the Ray logs of that actor"
            ) from err
        except RankDied:
            raise
        except BaseException as err:
            instrument.call_failed(self.call, err)
            raise
        self._result = self.reg.mode.collect(outputs, self._state)
        if not self.reg.mode.merges_only:
            try:   # what a computing merge made of finite rank outputs (the ranks checked their own)
                rldbg.check_nonfinite(self.group.role, self.method, self.call.tag.step, self._result)
            except rldbg.NonFinite as err:
                instrument.call_failed(self.call, err)
                raise
        self._done = True
        instrument.call_collected(self.call, result_summary(self._result))
        return self._result


def _describe_node(place: dict, dead) -> str:
    ip = place.get("ip") or dead.ip or "?"
    node = place.get("node_id")
    return f"{ip} ({node[:8]})" if node else ip


def spawn_role_groups(pool: ResourcePool, roles: dict, run_name: str, threads_per_rank: int = 0,
                      pg_timeout_s: float = 600.0, runtime_env: dict | None = None) -> dict[str, WorkerGroup]:
    """Start one host actor per rank of `pool` holding every role in `roles`
    ({role: (WorkerClass, config)}) and return one WorkerGroup per role."""
    host_cls = ray.remote(make_host_class(roles))
    pg = pool.placement_group()
    label = "+".join(roles)

    def create(rank: int, addr, port):
        return host_cls.options(
            name=f"{run_name}:{label}:rank{rank}",
            num_cpus=pool.cpus_per_rank,
            num_gpus=pool.gpus_per_rank,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank),
            runtime_env=runtime_env,
        ).remote(roles, rank, pool.n_ranks, pool.name, pool.device, addr, port, threads_per_rank)

    first = create(0, None, None)
    addr, port = ray.get(first.master_address.remote())
    hosts = [first] + [create(r, addr, port) for r in range(1, pool.n_ranks)]
    try:
        ray.get([h.setup.remote(pg_timeout_s) for h in hosts])
    except ray.exceptions.RayTaskError as err:
        for h in hosts:
            ray.kill(h)
        raise RuntimeError(f"starting {label} on pool {pool.name!r} failed: {err.cause!r}") from None
    places = ray.get([h.place.remote() for h in hosts])
    return {role: WorkerGroup(role, cls, hosts, pool, places) for role, (cls, _cfg) in roles.items()}


def shutdown_groups(groups) -> None:
    """Kill the groups' actors and give their placement groups back."""
    seen, pools = set(), {}
    for group in groups:
        pools[id(group.pool)] = group.pool
        for h in group.hosts:
            if id(h) not in seen:
                seen.add(id(h))
                ray.kill(h)
    for pool in pools.values():
        pool.release()
