"""The poll thread's product: Model folds each Snapshot in and hands the UI a View (plain lists
and dicts, copied out of the store) so the UI thread never reads state the poll thread mutates."""
from __future__ import annotations

from dataclasses import dataclass, field

from rldbg.tui.data import Snapshot
from rldbg.tui.model import EventStore, role_rows


@dataclass
class View:
    status: str = "waiting"
    message: str = "waiting for a run"
    job_id: str | None = None
    hub_url: str | None = None
    address: str = ""
    state: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)
    slices: dict = field(default_factory=dict)   # (role, rank) -> [(ts, dur, name, cat, step, status)]
    steps: dict = field(default_factory=dict)
    last_ts: int = 0
    memory: list = field(default_factory=list)   # [(role, rank, [(ts, v)], [(ts, letter, name)], ledger)]
    flags: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    paused: list = field(default_factory=list)
    events: int = 0
    behind: int = 0
    methods: list = field(default_factory=list)   # call names seen, sorted

    @property
    def gate(self) -> dict:
        return self.state.get("gate") or {}


class Model:
    def __init__(self, address: str = ""):
        self.address = address
        self.store = EventStore()
        self.job_id = None
        self.last = View(address=address)

    def update(self, snap: Snapshot) -> View:
        if snap.job_id and snap.job_id != self.job_id:
            self.store, self.job_id = EventStore(), snap.job_id   # a new run: nothing carries over
        if snap.status != "connected":
            # Keep the last picture (greyed by the status bar) rather than blanking every view.
            v = self.last
            self.last = View(**{**v.__dict__, "status": snap.status, "message": snap.message,
                                "rows": self._rows(snap.actors, None, {}, [], snap.identities) if snap.actors
                                else v.rows})
            return self.last
        self.store.add(snap.events)
        st = self.store
        paused = _merge_paused((snap.state.get("breakpoints") or {}).get("paused") or [], snap.paused)
        stats = (snap.state.get("stats") or {}).get("trace") or {}
        if stats.get("dropped"):
            st.flags["dropped"] = f"{stats['dropped']} trace events dropped by full per-process buffers"
        self.last = View(
            "connected", snap.message, snap.job_id, snap.hub_url, self.address, snap.state,
            self._rows(snap.actors, snap.state, snap.gpu_by_pid, paused, snap.identities),
            # Tuples, not lists: a tuple of plain tuples drops out of the GC's tracking after one
            # pass, so these ~600 slices x 384 lanes never lengthen a full collection (a UI hitch).
            {k: tuple(v) for k, v in sorted(st.slices.items(), key=_slice_key)},
            {k: tuple(v) for k, v in st.steps.items()}, st.last_ts,
            [(role, rank, tuple(ln.mem), tuple(ln.marks), dict(ln.ledger))
             for (role, rank), ln in sorted(st.lanes.items(), key=_lane_key) if ln.mem or ln.ledger],
            list(st.flags.values()), list(st.notes), paused, st.count, snap.behind, sorted(st.methods))
        return self.last

    def _rows(self, actors, state, gpu, paused, identities):
        return role_rows(actors, self.store, state, gpu, {p.get("pid") for p in paused}, identities)


def _lane_key(item):
    (role, rank), _ = item
    return (str(role), rank if isinstance(rank, int) else -1)


def _slice_key(item):
    (role, rank), _ = item
    return (role != "driver", str(role), rank if isinstance(rank, int) else -1)


def _merge_paused(hub_paused: list, dash_paused: list) -> list:
    """The hub knows rldbg breakpoints (file, line, spec); the dashboard knows every debugpy pause."""
    out = {p.get("pid"): dict(p) for p in dash_paused}
    for p in hub_paused:
        out[p.get("pid")] = {**out.get(p.get("pid"), {}), **p}
    return sorted(out.values(), key=lambda p: (str(p.get("role")), p.get("rank") or 0))
