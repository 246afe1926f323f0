"""The environment a trainer starts its worker processes with: every RLDBG_* switch a worker reads
(names in rldbg.switches), validated on the driver so a bad spec fails before any worker starts.

    env = rldbg.worker_env(breakpoints=["actor.update_actor@rank=1"], post_mortem=True,
                           listen_roles=["actor"], listen_ranks=[1],
                           profile={"dir": "runs/x/profile", "roles": ["critic"], "steps": [2]})
    MyWorker.options(runtime_env={"env_vars": env}).remote(...)
"""
from __future__ import annotations

import os

from rldbg.switches import (BREAKPOINTS, CUDA_MEMORY_SNAPSHOT, FAILURES_DIR, LISTEN_RANKS, LISTEN_ROLES,
                            ON_NONFINITE, POST_MORTEM, PROFILE, WORKER_SWITCHES)


def _joined(values) -> str:
    return values if isinstance(values, str) else ",".join(map(str, values))


def worker_env(*, breakpoints=(), post_mortem: bool = False, listen_roles=(), listen_ranks=(),
               profile: dict | None = None, cuda_memory_snapshot: str | None = None,
               on_nonfinite: str | None = None, failures_dir: str | None = None, inherit: bool = True, environ=None) -> dict:
    """The environment variables (name -> value) a trainer gives its worker processes.

    breakpoints: spec texts ("role.method@rank=1,step=3"); post_mortem: pause a worker at the
    frame that raised; listen_roles / listen_ranks: debug mode (debugpy listeners; roles may be
    "*"); profile: {"dir", "roles", "ranks", "steps", "methods", "run"} for torch.profiler;
    cuda_memory_snapshot: a directory for CUDA memory snapshots around transitions.
    on_nonfinite: stop | warn | off (rldbg.sentinel); failures_dir: where failing calls are saved.
    inherit: also pass on the switches set in `environ` (default os.environ) that were not given.
    Raises ValueError naming the bad value and the accepted form."""
    env: dict = {}
    if breakpoints:
        from rldbg.debug.specs import parse_many

        items = [s for s in (breakpoints.split(";") if isinstance(breakpoints, str) else breakpoints) if s.strip()]
        parse_many(items)                      # SpecError (a ValueError) on a bad spec
        env[BREAKPOINTS] = ";".join(items)
    if type(post_mortem) is not bool:   # "no" would be truthy
        raise ValueError(f"bad post_mortem {post_mortem!r}: accepted True, False")
    if post_mortem:
        env[POST_MORTEM] = "1"
    if listen_roles:
        env[LISTEN_ROLES] = _joined(listen_roles)
    if listen_ranks:
        env[LISTEN_RANKS] = _joined(listen_ranks)
    if profile:
        from rldbg.profilers.spec import to_env

        known = {"dir", "roles", "ranks", "steps", "methods", "run"}
        if "dir" not in profile or set(profile) - known:
            raise ValueError(f"bad profile {profile!r}: a dict with 'dir' and any of {sorted(known - {'dir'})}")
        env[PROFILE] = to_env(**profile)
    if cuda_memory_snapshot:
        env[CUDA_MEMORY_SNAPSHOT] = str(cuda_memory_snapshot)
    if on_nonfinite is not None:
        if on_nonfinite not in ("stop", "warn", "off"):
            raise ValueError(f"bad on_nonfinite {on_nonfinite!r}: accepted stop, warn, off")
        env[ON_NONFINITE] = on_nonfinite
    if failures_dir:
        env[FAILURES_DIR] = str(failures_dir)
    if inherit:
        source = os.environ if environ is None else environ
        env.update({key: source[key] for key in WORKER_SWITCHES if key in source and key not in env})
    from rldbg.debug.listen import check_env

    check_env(env)   # a bad rank list fails here, on the driver
    return env


def runtime_env(**kwargs) -> dict:
    """{"env_vars": worker_env(**kwargs)}: a Ray runtime_env carrying rldbg's switches."""
    return {"env_vars": worker_env(**kwargs)}
