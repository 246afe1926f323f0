"""Where a job's trace collector listens, published in the Ray cluster's KV store.

rldbg.trace.start() puts {"address", "token", "origin_ns", "trace_path", "spill_dir", "driver_pid",
"host"} under collector_name(job_id); stop() removes it. Every process of the job, the hub and
`rldbg export --address` read it to connect. Whoever can read the KV store can already run code
on the cluster: the token keeps out other jobs' stray processes, not the cluster's own users.
"""
from __future__ import annotations

import contextlib
import json

NAMESPACE = "rldbg"
NAME_PREFIX = "rldbg-collector-"


def collector_name(job_id: str) -> str:
    return f"{NAME_PREFIX}{job_id}"


def publish(job_id: str, entry: dict) -> None:
    from ray.experimental import internal_kv
    internal_kv._internal_kv_put(collector_name(job_id), json.dumps(entry), overwrite=True, namespace=NAMESPACE)


def withdraw(job_id: str) -> None:
    from ray.experimental import internal_kv
    with contextlib.suppress(Exception):   # Ray already shut down: nothing left to find it anyway
        internal_kv._internal_kv_del(collector_name(job_id), namespace=NAMESPACE)


def find(job_id: str) -> dict | None:
    """This job's entry, or None when it is not traced (any process connected to Ray)."""
    from ray.experimental import internal_kv
    return _entry(internal_kv._internal_kv_get(collector_name(job_id), namespace=NAMESPACE))


def find_all() -> dict:
    """{collector name: entry} of each traced job on the cluster not dead (a killed driver leaves its entry)."""
    from ray._private.state import jobs
    from ray.experimental import internal_kv
    out, dead = {}, {j["JobID"] for j in jobs() if j.get("IsDead")}
    for key in internal_kv._internal_kv_list(NAME_PREFIX, namespace=NAMESPACE) or ():
        name = key.decode() if isinstance(key, bytes) else key
        if name[len(NAME_PREFIX):] not in dead and (entry := _entry(internal_kv._internal_kv_get(
                name, namespace=NAMESPACE))) is not None:
            out[name] = entry
    return out


def _entry(raw) -> dict | None:
    with contextlib.suppress(ValueError):
        entry = json.loads(raw) if raw else None
        return entry if isinstance(entry, dict) and entry.get("address") and entry.get("token") else None
    return None


def connect(entry: dict, **kw):
    """A wire.Connection to the collector an entry names (wire.WireError when it cannot)."""
    from rldbg.trace.wire import Connection
    return Connection(entry["address"], entry["token"], **kw)
