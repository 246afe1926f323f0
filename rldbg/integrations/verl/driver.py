"""Driver side: each method VeRL binds on a worker group becomes one rldbg driver call.

VeRL binds a group's methods in WorkerGroup._bind_worker_method(user_defined_cls, func_generator),
the one place that knows which class (and so which colocated role) a method comes from. We hand
it a func_generator of our own: VeRL's dispatch/execute/collect functions run unchanged inside
call_begin → call_ready (after dispatch) → call_dispatched (after submit) → call_collected.
"""
from __future__ import annotations

import concurrent.futures
import threading

from rldbg import instrument, sentinel
from rldbg.integrations.verl import pins
from rldbg.integrations.verl.steps import STEPS
from rldbg.integrations.verl.hooks import MARK, patches
from rldbg.integrations.verl.worker import TAG
from rldbg.switches import VERL, VERL_ROLE
from rldbg.trace import runtime as _rt

ROLES_ATTR = "_rldbg_colocated"   # on a colocated WorkerDict class: {prefixed method: (role, method)}
GROUP_ROLE = "_rldbg_role"        # on a worker group: the role its calls are named after


class _Calls(threading.local):
    def __init__(self):
        self.stack: list = []   # this thread's driver calls in progress, innermost last


_calls = _Calls()
_pending: list = []


def raw_class(cls):
    return getattr(cls, "__ray_actor_class__", cls)


def group_role(ray_cls_with_init, name_prefix, explicit: bool) -> str:
    """A group's role(s): the colocated role keys joined by '+', else the name_prefix the program
    gave, else the worker class's name (VeRL makes up a random prefix when none is given)."""
    cls = raw_class(getattr(ray_cls_with_init, "cls", None))
    keys = list(getattr(cls, "raw_cls_dict", None) or {}) or \
        list(dict.fromkeys(r for r, _ in (getattr(cls, ROLES_ATTR, None) or {}).values()))
    if keys:
        return "+".join(keys)
    if explicit and name_prefix:
        return str(name_prefix).rstrip("_:") or str(name_prefix)
    return getattr(cls, "__name__", "worker")


def _call_names(wg, udc, method_name: str) -> tuple[str, str]:
    colocated = getattr(udc, ROLES_ATTR, None)
    if colocated and method_name in colocated:
        return colocated[method_name]
    role = getattr(wg, "sub_cls_name", "") or wg.__dict__.get(GROUP_ROLE) or raw_class(udc).__name__
    return role, method_name


def brief(obj) -> dict | None:
    """Rows and keys (shape, dtype, bytes) of a DataProto's tensors, else rldbg's own summary."""
    batch = getattr(obj, "batch", None)
    if batch is None or not hasattr(batch, "items"):
        return instrument.summarize(obj)
    return dict(instrument.summarize({k: v for k, v in batch.items() if hasattr(v, "element_size")}), rows=len(obj))


def _shards(args, kwargs, world: int) -> list | None:
    values = list(args) + [v for k, v in kwargs.items() if k != TAG]
    if not values or not all(isinstance(v, (list, tuple)) and len(v) == world for v in values):
        return None
    out = []
    for i in range(world):
        rows, keys = 0, []
        for v in values:
            b = brief(v[i])
            if b and "rows" in b:
                rows = max(rows, b["rows"] or 0)
                keys += b.get("keys", [])
        out.append({"rows": rows, "keys": keys})
    return out


def make_generator(udc, func_generator, magic: str):
    def generator(wg, method_name, dispatch_fn, collect_fn, execute_fn, blocking):
        bound = getattr(udc, method_name, None)
        # Only methods wrapped on the worker side accept the tag keyword.
        taggable = getattr(bound, MARK, False) or method_name in (getattr(udc, ROLES_ATTR, None) or {})
        dispatch_mode = (getattr(bound, magic, None) or {}).get("dispatch_mode")
        mode = getattr(dispatch_mode, "name", None) or \
            ("custom" if isinstance(dispatch_mode, dict) else str(dispatch_mode))

        def dispatch(group, *args, **kwargs):
            out = dispatch_fn(group, *args, **kwargs)
            if st := _calls.stack:
                call = st[-1]
                # The shard table the stepper shows while parked before this dispatch; execute()
                # records the same table in the trace.
                if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
                    call.shards = _shards(out[0], out[1], len(wg._workers))
                instrument.call_ready(call, call.shards)
            return out

        def execute(name, *args, **kwargs):
            st = _calls.stack
            call = st[-1] if st else None
            world = len(wg._workers)
            shards = None
            if call is not None:
                shards = call.shards if call.shards is not None else _shards(args, kwargs, world)
                if taggable:
                    # VeRL's execute_all hands element i of every list argument to rank i when all
                    # of them are lists of world size; the tag must follow the same rule.
                    split = all(isinstance(a, list) and len(a) == world for a in args) and \
                        all(isinstance(v, list) and len(v) == world for v in kwargs.values())
                    kwargs[TAG] = [call.tag] * world if split else call.tag
            out = execute_fn(name, *args, **kwargs)
            if call is not None:
                instrument.call_dispatched(call, shards)
            return out

        inner = func_generator(wg, method_name, dispatch_fn=dispatch, collect_fn=collect_fn,
                               execute_fn=execute, blocking=blocking)

        def caller(*args, **kwargs):
            if not _rt.STATE.on:
                _rt.lookup()   # a TaskRunner actor finds the job's collector (cheap after the first look)
            _drain()
            role, method = _call_names(wg, udc, method_name)
            call = instrument.call_begin(role, method, mode, len(wg._workers), STEPS.on_call(role, method))
            st = _calls.stack
            st.append(call)
            try:
                out = inner(*args, **kwargs)
            except BaseException as exc:
                instrument.call_failed(call, exc)
                raise
            finally:
                st.pop()
            if blocking:
                if mode == "custom" and out is not None:
                    # A collect of the program's own may compute new values from finite rank outputs;
                    # VeRL's built-in modes only concatenate or pick what the ranks checked themselves.
                    try:
                        sentinel.check_merged(role, method, call.tag.step, out)
                    except sentinel.NonFinite as exc:
                        instrument.call_failed(call, exc)
                        raise
                instrument.call_collected(call, brief(out) if out is not None else None)
            else:
                _close_when_ready(call, out)
            return out

        caller.__name__ = caller.__qualname__ = method_name
        caller.__code__ = caller.__code__.replace(co_name=method_name, co_qualname=method_name)
        caller.__doc__ = getattr(bound, "__doc__", None)
        return caller

    return generator


class _Pending:
    """A blocking=False call. Closed by whichever comes first: the next driver call (in the
    driver's thread, so a program that waits for the futures before its next call gets calls that
    do not overlap), or a thread of its own once the last result is ready (never Ray's callback
    thread: closing may pause at the step gate)."""

    def __init__(self, call, refs):
        self.call, self.refs, self.closed = call, refs, False
        self.lock = threading.Lock()
        self.finished = threading.Event()   # the call's end is recorded
        threading.Thread(target=self._close_when_ready, args=([r.future() for r in refs],),
                         name="rldbg-verl-futures", daemon=True).start()

    def _close_when_ready(self, futures) -> None:
        concurrent.futures.wait(futures)
        self.close()

    def close(self) -> None:
        import ray

        with self.lock:
            if self.closed:
                return
            self.closed = True
        try:
            ray.get(self.refs, timeout=0)
        except Exception as exc:
            instrument.call_failed(self.call, exc)
        else:
            instrument.call_collected(self.call, None)
        finally:
            self.finished.set()


def _close_when_ready(call, out) -> None:
    import ray

    futures = getattr(out, "futures", None)      # VeRL's DataProtoFuture
    items = futures if isinstance(futures, list) else out if isinstance(out, (list, tuple)) else [out]
    if refs := [r for r in items if isinstance(r, ray.ObjectRef)]:
        _pending.append(_Pending(call, refs))
    else:
        instrument.call_collected(call, None)


def _drain() -> None:
    """Close the non-blocking calls whose results are all ready (called before each driver call)."""
    for entry in list(_pending):
        if not entry.closed:
            import ray
            ready, _ = ray.wait(entry.refs, num_returns=len(entry.refs), timeout=0, fetch_local=False)
            if len(ready) < len(entry.refs):
                continue
            entry.close()   # returns at once if the background closer won the race
        # Let whichever closer took it record the end before this next call begins, or the two
        # calls overlap on the driver's track (Perfetto drops one of them).
        entry.finished.wait(timeout=2.0)
        _pending.remove(entry)


def patch_worker_group_module(mod) -> None:
    from verl.single_controller.base.decorator import MAGIC_ATTR

    pins.check_module(mod)
    bind = mod.WorkerGroup._bind_worker_method

    @patches(mod.WorkerGroup, "_bind_worker_method")
    def _bind_worker_method(self, user_defined_cls, func_generator):
        return bind(self, user_defined_cls, make_generator(user_defined_cls, func_generator, MAGIC_ATTR))


def patch_ray_module(mod) -> None:
    """RayWorkerGroup names its role and hands it (and the switch) to its workers through VeRL's
    own worker_env; the deprecated colocated WorkerDict records which role each method serves."""
    pins.check_module(mod)
    init, bind_parent = mod.RayWorkerGroup.__init__, mod._bind_workers_method_to_parent

    @patches(mod.RayWorkerGroup, "__init__")
    def __init__(self, resource_pool=None, ray_cls_with_init=None, *args, **kwargs):
        explicit = kwargs.get("name_prefix") is not None and kwargs.get("worker_names") is None \
            and kwargs.get("worker_handles") is None
        role = group_role(ray_cls_with_init, kwargs.get("name_prefix"), explicit)
        self.__dict__[GROUP_ROLE] = role
        if resource_pool is not None and ray_cls_with_init is not None:
            env = dict(kwargs.get("worker_env") or {})
            env.setdefault(VERL_ROLE, role)
            env.setdefault(VERL, "1")
            kwargs["worker_env"] = env
        init(self, resource_pool, ray_cls_with_init, *args, **kwargs)

    @patches(mod, "_bind_workers_method_to_parent")
    def _bind_workers_method_to_parent(cls, key, user_defined_cls):
        before = set(vars(cls))
        bind_parent(cls, key, user_defined_cls)
        roles = dict(cls.__dict__.get(ROLES_ATTR) or {})
        for name in set(vars(cls)) - before:
            method = name[len(key) + 1:] if name.startswith(key + "_") else name
            if getattr(getattr(user_defined_cls, method, None), MARK, False):
                roles[name] = (key, method)
        setattr(cls, ROLES_ATTR, roles)
