"""Where listening workers and workers' identities are found: Ray's internal KV, read from any process.

A worker in debug mode (listen.py) writes one JSON entry under namespace "rldbg", key
"rldbg:listen:<job_id>:<actor_id or worker_id>" (role(s), rank, world, debugpy host/port, pid,
node, cwd, site-packages); every actor's identity goes under "rldbg:worker:<job_id>:<actor_id>".
Readers talk to the GCS with ray._raylet.GcsClient: no ray.init, no job created, from another
terminal while the run goes on. Entries of dead actors (a killed actor cannot clean up) are
deleted on the next read, so a restarted run never shows stale ports.
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field

from rldbg.debug.specs import role_matches

NAMESPACE = "rldbg"
PREFIX = "rldbg:listen:"
WORKER_PREFIX = "rldbg:worker:"   # every worker's identity (rldbg.instrument.set_worker_identity)
ADDRESS_HINT = "pass --ray-address HOST:PORT (the GCS address `ray start` printed) or set RAY_ADDRESS"


class RegistryError(RuntimeError):
    """The cluster cannot be found or read; one line for the user."""


@dataclass
class ListeningWorker:
    """A listening worker as readers use it (its registry entry also names node, job and actor)."""

    role: str                # "actor" or, colocated, "actor+reward"
    rank: int
    world: int
    host: str
    port: int
    pid: int
    cwd: str | None = None
    purelib: str | None = None
    key: str = ""
    roles: list = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def label(self) -> str:
        return f"{self.role} rank {self.rank}"

    def has_role(self, role: str) -> bool:
        return role_matches(role, self.role)

    @classmethod
    def from_dict(cls, data: dict) -> "ListeningWorker":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def to_remote(self, path: str, local_root: str | None = None) -> str:
        """Translate a local source path to the worker's view: files under the local
        root (default: this process's cwd) move under the worker's cwd, files in the
        local site-packages under the worker's. On one machine this is the identity."""
        path = os.path.abspath(path)
        pairs = [(os.path.abspath(local_root or os.getcwd()), self.cwd)]
        import sysconfig
        pairs.append((sysconfig.get_paths()["purelib"], self.purelib))
        # Longest local root first: site-packages may sit under the project (a venv).
        for local, remote in sorted(pairs, key=lambda p: -len(p[0])):
            if remote and (path == local or path.startswith(local.rstrip(os.sep) + os.sep)):
                return os.path.join(remote, os.path.relpath(path, local)) if path != local else remote
        return path


# --- writing (worker side) -------------------------------------------------------------

def key_for(job_id: str, ident: str, prefix: str = PREFIX) -> str:
    return f"{prefix}{job_id}:{ident}"


def publish_identity(ident) -> None:
    """Inside a Ray actor: put its WorkerIdentity (rldbg.context) under
    rldbg:worker:<job_id>:<actor_id>, so the CLI names role and rank for any trainer's actors.
    Outside an actor, or without Ray, nothing. Never raises: it must not stop a worker."""
    with contextlib.suppress(Exception):
        import ray

        ctx = ray.get_runtime_context() if ray.is_initialized() else None
        actor_id = ctx.get_actor_id() if ctx else None
        if actor_id:
            put({**ident.to_dict(), "actor_id": actor_id, "pid": os.getpid(), "job_id": ctx.get_job_id(),
                 "key": key_for(ctx.get_job_id(), actor_id, WORKER_PREFIX)})


def put(entry: dict) -> None:
    """Called inside a Ray worker, whose internal KV is already connected."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(entry["key"], json.dumps(entry), overwrite=True, namespace=NAMESPACE)


# --- reading (any process) -------------------------------------------------------------

def _webui_to_gcs() -> dict[str, str]:
    """{dashboard host:port -> GCS address} from the local raylets' command lines.
    On a machine shared by several clusters this picks the one a dashboard URL names."""
    import psutil   # Ray's own way to find its local processes (ray._private.services)

    out = {}
    for proc in psutil.process_iter(["cmdline"]):
        # The raylet rewrites its argv into one space-separated string: split on both.
        words = " ".join(proc.info["cmdline"] or []).split()
        if not words or not words[0].endswith("/raylet"):
            continue
        flags = dict(w[2:].split("=", 1) for w in reversed(words) if w.startswith("--") and "=" in w)
        gcs = flags.get("gcs_address") or flags.get("gcs-address")
        if flags.get("webui") and gcs:
            out[flags["webui"]] = gcs
    return out


def resolve_gcs_address(address: str | None = None, dashboard: str | None = None) -> str | None:
    """GCS address to read from; None means "use this process's Ray connection".
    Order: explicit address, RAY_ADDRESS (unless an http URL), this process's Ray,
    the cluster whose dashboard is `dashboard` (local raylets), the only local cluster."""
    address = address or os.environ.get("RAY_ADDRESS", "")
    if address and address not in ("auto", "local") and not address.startswith(("http://", "https://")):
        return address
    try:
        import ray
        if ray.is_initialized():
            return None
    except ImportError:
        raise RegistryError("ray is not installed in this environment; install ray[default]") from None
    if dashboard:
        from urllib.parse import urlparse
        netloc = urlparse(dashboard if "://" in dashboard else "http://" + dashboard).netloc
        if found := _webui_to_gcs().get(netloc):
            return found
    from ray._private.services import find_bootstrap_address, find_gcs_addresses
    addrs = sorted(find_gcs_addresses())
    if len(addrs) == 1:
        return addrs[0]
    if (latest := find_bootstrap_address(None)) and latest in addrs:
        return latest
    if not addrs:
        raise RegistryError(f"no running Ray cluster found on this machine; {ADDRESS_HINT}")
    raise RegistryError(f"{len(addrs)} Ray clusters run here ({', '.join(addrs)}); {ADDRESS_HINT} "
                        "or --address DASHBOARD_URL")


def _live_entries(prefix: str, address: str | None, dashboard: str | None) -> dict[str, dict]:
    """{key: entry} under `prefix` in the internal KV, read through this process's Ray or a bare
    GcsClient; entries whose actor is no longer alive are deleted (a killed actor cannot clean up)."""
    from ray._raylet import GcsClient
    gcs_address = resolve_gcs_address(address, dashboard)
    if gcs_address is None:
        import ray
        gcs_address = ray.get_runtime_context().gcs_address
    try:
        client = GcsClient(address=gcs_address)
    except Exception as e:  # noqa: BLE001 - any failure is "cannot reach"
        raise RegistryError(f"cannot reach the Ray GCS at {gcs_address} ({e}); {ADDRESS_HINT}") from None
    namespace = NAMESPACE.encode()
    try:
        keys = client.internal_kv_keys(prefix.encode(), namespace=namespace, timeout=10)
        values = client.internal_kv_multi_get(keys, namespace=namespace, timeout=10) if keys else {}
    except Exception as e:  # noqa: BLE001
        raise RegistryError(f"cannot read the rldbg registry from the Ray GCS at {gcs_address} ({e})") from None
    entries = {}
    for k, v in values.items():
        with contextlib.suppress(ValueError):
            entries[k.decode()] = json.loads(v)
    alive = _alive_actors(client) if entries else set()
    for key in [k for k, data in entries.items() if data.get("actor_id") and data["actor_id"] not in alive]:
        del entries[key]
        with contextlib.suppress(Exception):   # cleanup is best effort
            client.internal_kv_del(key.encode(), False, namespace=namespace, timeout=5)
    return entries


def _alive_actors(client) -> set[str]:
    import asyncio

    async def fetch():
        return await client.async_get_all_actor_info(actor_state_name="ALIVE", timeout=10)
    # The GCS client hands back asyncio futures bound to the running loop; a private
    # loop keeps this callable from threads that already run one.
    loop = asyncio.new_event_loop()
    try:
        return {a.hex() for a in loop.run_until_complete(fetch())}
    finally:
        loop.close()


def listening_workers(address: str | None = None, role: str | None = None, ranks=None,
                      dashboard: str | None = None) -> list[ListeningWorker]:
    """Workers listening for a debugger right now, sorted by role and rank.
    address: GCS host:port (default: see resolve_gcs_address); role: keep workers
    holding this role ("*" or None: all); ranks: keep these ranks (None: all)."""
    found = [ListeningWorker.from_dict({**data, "key": key})
             for key, data in _live_entries(PREFIX, address, dashboard).items()]
    found = [w for w in found if (not role or w.has_role(role)) and (ranks is None or w.rank in ranks)]
    return sorted(found, key=lambda w: (w.role, w.rank, w.pid))


def worker_identities(address: str | None = None, dashboard: str | None = None) -> dict:
    """{actor_id: WorkerIdentity} of every live worker that called set_worker_identity.
    address/dashboard: as listening_workers. Raises RegistryError."""
    from rldbg.context import WorkerIdentity

    entries = _live_entries(WORKER_PREFIX, address, dashboard).values()
    return {data["actor_id"]: WorkerIdentity.from_dict(data) for data in entries if data.get("actor_id")}


def identities_or_empty(address: str | None = None, dashboard: str | None = None) -> dict:
    """worker_identities(), or {} when the cluster's registry cannot be read (the callers then
    fall back to actors' labels)."""
    try:
        return worker_identities(address, dashboard)
    except (RegistryError, ImportError):
        return {}


def identify(actor: dict, identities: dict):
    """The WorkerIdentity of a dashboard actor row: its published identity, else its repr when
    that is an rldbg label (rldbg.context.worker_label); None when neither says."""
    from rldbg.context import parse_label

    return identities.get(actor.get("actor_id")) or parse_label(actor.get("repr_name"))
