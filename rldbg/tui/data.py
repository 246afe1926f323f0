"""Where `rldbg top` gets its data: a DataSource answers poll() with a Snapshot and carries the
user's actions (gate, breakpoints, export, stacks) to the run.

LiveSource talks to the Ray dashboard (actors, GPU memory, paused workers) and the run's hub
(state, events). It is only ever called from worker threads: every call may block on HTTP.
Other sources (the benchmark's and the snapshot tests' synthetic ones) implement the same methods.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

from rldbg.control.client import HubClient, HubError
from rldbg.control.discovery import job_of
from rldbg.dashboard import Dashboard, DashboardError
from rldbg.switches import TOKEN

EVENT_PAGE = 50_000          # the hub's per-request maximum
PAGES_PER_POLL = 4           # a poll reads at most this many pages; the rest comes next poll
INITIAL_WINDOW = 200_000     # joining a long run: start this many events back, not at event 0
FIRST_PAGE = 5_000           # the first read is small: the roles table must not wait for a backlog
SLOW_EVERY_S = 3.0           # GPU memory (cached 2 s by the dashboard) and paused workers


@dataclass
class Snapshot:
    status: str = "waiting"              # connected | waiting | disconnected
    message: str = ""
    job_id: str | None = None
    hub_url: str | None = None
    actors: list = field(default_factory=list)
    gpu_by_pid: dict = field(default_factory=dict)
    state: dict | None = None
    events: list = field(default_factory=list)
    paused: list = field(default_factory=list)
    behind: int = 0                      # events still to read (shown while catching up)
    identities: dict = field(default_factory=dict)   # actor_id -> WorkerIdentity (rldbg.debug.registry)


class DataSource:
    """Interface; every method may block and raise HubError / DashboardError (shown, not fatal)."""
    address = ""

    def poll(self) -> Snapshot: raise NotImplementedError
    def heartbeat(self) -> None: pass
    def stacks(self, role: str | None, rank: int | None) -> str: raise NotImplementedError

    def hub_client(self):
        """What the user's actions go to: gate, add_breakpoint, remove_breakpoint, export, as
        rldbg.control.client.HubClient has them."""
        raise NotImplementedError


class LiveSource(DataSource):
    def __init__(self, address: str | None = None, job: str | None = None, token: str | None = None,
                 timeout: float = 5.0):
        self.dash = Dashboard(address, timeout=timeout)    # raises DashboardError on a malformed address
        self.address = self.dash.address
        self.timeout = timeout   # per request: the TUI polls again soon; --once waits longer, once
        self.waited: dict[str, float] = {}   # what poll() waited for -> seconds, all polls together
        self.job, self.token = job, token or os.environ.get(TOKEN) or None
        self.hub: HubClient | None = None
        self.job_id: str | None = None
        self.cursor: int | None = None
        self._slow_at, self._gpu, self._paused = 0.0, {}, []
        self.catch_up = False    # --once: read every event up to now, not a few pages per poll
        self._idents, self._idents_at = {}, 0.0

    @contextlib.contextmanager
    def _timed(self, what: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.waited[what] = self.waited.get(what, 0.0) + time.monotonic() - start

    def poll(self) -> Snapshot:
        try:
            with self._timed(f"the Ray dashboard at {self.address}"):
                if self.hub is None and (found := self._find_hub()) is not None:
                    if found.status == "waiting":   # no hub (yet): the live workers the dashboard knows still show
                        job = job_of(self.job) if self.job else ""
                        found.actors = [a for a in self.dash.actors(detail=True, filters=[("state", "=", "ALIVE")])
                                        if not job or a.get("job_id") == job]
                        found.identities = self._identities(found.actors)
                    return found
                actors = [a for a in self.dash.actors(detail=True) if not self.job_id or a.get("job_id") == self.job_id]
                self._slow()
        except DashboardError as e:
            return Snapshot("disconnected", f"disconnected, retrying: {e}")
        snap = Snapshot("connected", "", self.job_id, self.hub.url, actors, self._gpu, paused=self._paused,
                        identities=self._identities(actors))
        try:
            with self._timed(f"the run's hub at {self.hub.url}"):
                snap.state = self.hub.state()
                self._read_events(snap)
        except HubError as e:
            self.hub = None       # rediscover: the run may have ended or a new one started
            if e.status == 401:
                return Snapshot("disconnected", str(e), self.job_id, actors=actors)
            return Snapshot("waiting", f"hub gone ({e}); waiting for a run", self.job_id, actors=actors)
        return snap

    def _find_hub(self):
        from rldbg.control.discovery import describe, discover, select_runs
        hubs = select_runs(discover(self.address, timeout=self.timeout), self.job)
        if not hubs:
            want = f"run {self.job}" if self.job else "a run"
            return Snapshot("waiting", f"waiting for {want}: no rldbg hub in the dashboard at {self.address} yet "
                                       "(a driver starts one with rldbg.control.start(); the reference trainer "
                                       "unless control.enabled=false); steps, calls and the stepper need it, the "
                                       "workers below are the dashboard's")
        if len(hubs) > 1:
            # Never watch (and step) the wrong run silently.
            return Snapshot("disconnected", f"{len(hubs)} runs in the dashboard at {self.address}: "
                                            f"{describe(hubs)}; pick one with --job RUN")
        h = hubs[0]
        if not (token := self.token or h.get("token")):
            return Snapshot("disconnected", f"found the hub of run {h['run']} at {h['url']} but no token: pass --token "
                                            f"or {TOKEN} (from ~/.rldbg/hub-<job>-<pid>.json on the driver's machine)")
        if h["job_id"] != self.job_id or h["url"] != getattr(self.hub, "url", None):
            self.cursor = None   # another run: its event stream starts over
        self.hub, self.job_id = HubClient(h["url"], token, timeout=self.timeout), h["job_id"]
        return None

    def _identities(self, actors: list) -> dict:
        """Workers' published identities; read again (at most every SLOW_EVERY_S) only when a live
        actor is not known yet."""
        unknown = any(a.get("state") == "ALIVE" and a.get("actor_id") not in self._idents for a in actors)
        if unknown and time.monotonic() - self._idents_at >= SLOW_EVERY_S:
            from rldbg.debug.registry import identities_or_empty

            self._idents_at = time.monotonic()
            self._idents = {**self._idents, **identities_or_empty(dashboard=self.address)}
        return self._idents

    def _slow(self) -> None:
        """GPU memory per pid and paused workers: a few seconds stale is fine, and each costs calls."""
        if time.monotonic() - self._slow_at < SLOW_EVERY_S:
            return
        self._slow_at = time.monotonic()
        gpu = {}
        with contextlib.suppress(DashboardError, TypeError, ValueError):
            for node in self.dash.nodes_summary():
                for g in node.get("gpus") or []:
                    procs = g.get("processesPids") or {}
                    items = procs.items() if isinstance(procs, dict) else ((p.get("pid"), p) for p in procs)
                    for pid, p in items:
                        if (mb := (p or {}).get("gpuMemoryUsage")) is not None:
                            gpu[int(pid)] = gpu.get(int(pid), 0) + int(mb) * 2**20
        self._gpu = gpu
        try:
            from rldbg.debug.paused_workers import list_paused
            self._paused = [p.to_dict() for p in list_paused(self.dash)] if self.dash.paused_workers() else []
        except DashboardError:
            self._paused = []

    def _read_events(self, snap: Snapshot) -> None:
        total = (((snap.state or {}).get("stats") or {}).get("trace") or {}).get("events") or 0
        first = self.cursor is None or self.cursor > total
        if first:
            self.cursor = max(0, total - INITIAL_WINDOW)
        page = EVENT_PAGE if self.catch_up or not first else FIRST_PAGE
        pages = 1 if first and not self.catch_up else PAGES_PER_POLL
        n = 0
        while self.catch_up or n < pages:   # a small first read: the first frame comes fast
            n += 1
            got = self.hub.events(self.cursor, page)
            evs = got.get("events") or []
            snap.events.extend(evs)
            self.cursor = int(got.get("cursor", self.cursor))
            if len(evs) < page:
                break
        snap.behind = max(0, total - self.cursor)

    def hub_client(self) -> HubClient:
        if self.hub is None:
            raise HubError("no run connected yet")
        return self.hub

    def heartbeat(self) -> None:
        if self.hub is not None:
            self.hub.heartbeat()

    def stacks(self, role: str | None, rank: int | None) -> str:
        from rldbg.profilers import stacks, targets
        if not (found := targets.find(self.dash, role, rank)):
            return f"no alive worker matches {targets.describe_filter(role, rank, None)}"
        groups, failed = stacks.group(stacks.fetch(found, self.dash))
        return stacks.format_text(groups, failed) or "no stacks"
