"""What `rldbg top` shows, built from raw polls in the poll thread; widgets only render it.

EventStore folds the hub's event stream incrementally (each poll brings only new events) into bounded per-rank state:
the latest call, memory and ledger samples, recent slices for the timeline, transition markers, instants and leak flags.
Model joins it with the dashboard's actors into a View: plain lists and dicts, copied out of the store, so the UI thread
never reads state the poll thread mutates.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

from rldbg import sentinel
from rldbg.analysis import transitions as truth
from rldbg.debug.registry import identify
from rldbg.memory.leaks import MIN_CYCLES, WARMUP_CYCLES, describe, leak_suspicions, observe
from rldbg.trace.events import moves
from rldbg.tui.data import Snapshot

LANE_SLICES = 600        # timeline slices kept per lane; the view shows the last N steps of them
MEM_POINTS = 600         # memory samples kept per rank
MARKS = 200              # transition markers kept per rank
NOTES = 300              # instants / errors kept
CYCLES = 32              # freeing-transition cycles kept per rank and transition for the leak rule


def marker_of(args: dict | None) -> str:
    """One letter per transition for the memory view, from what it declares it moves:
    O frees memory, R loads it, W does both (a swap, e.g. a weight sync), · declares nothing."""
    frees, loads = moves(args)
    return "W" if frees and loads else "O" if frees else "R" if loads else "·"


def mem_value(args: dict) -> int | None:
    for k in ("device_used", "cuda_allocated", "rss"):
        if isinstance(args.get(k), (int, float)):
            return int(args[k])
    return None


@dataclass
class Lane:
    """Per (role, rank) state folded from events."""
    call_sample: int = 0                 # ts of the newest memory sample taken in a call
    last_end: int = 0                    # end of the newest call slice
    method: str | None = None
    step: int | None = None
    rss: int | None = None
    mem_ts: int = 0
    mem: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MEM_POINTS))
    marks: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MARKS))
    ledger: dict = field(default_factory=dict)
    # freeing transition -> its last CYCLES leaks.Cycle
    cycles: dict = field(default_factory=lambda: collections.defaultdict(lambda: collections.deque(maxlen=CYCLES)))
    flagged: dict = field(default_factory=dict)  # freeing transition -> its keys in EventStore.flags
    truth: truth.Live = field(default_factory=truth.Live)   # what transitions gave back (rldbg.analysis)


class EventStore:
    def __init__(self):
        self.lanes: dict = collections.defaultdict(Lane)
        # (role, rank) -> deque of (ts, dur, name, cat, step, status)
        self.slices: dict = collections.defaultdict(lambda: collections.deque(maxlen=LANE_SLICES))
        self.steps: dict = {}             # step -> [start_ns, end_ns | None]
        self.methods: set = set()         # every call's method name, for the timeline's legend
        self.notes: collections.deque = collections.deque(maxlen=NOTES)
        self.flags: dict = {}             # key -> one-line flag (dict keeps the newest per key)
        self.alarms: dict = {}            # (role, rank) -> args of its newest non-finite alarm (rldbg.sentinel)
        self.last_ts = 0
        self.count = 0

    def add(self, events: list[dict]) -> None:
        for e in events:
            try:
                self._one(e)
            except (TypeError, ValueError, KeyError, AttributeError):
                continue   # a malformed event never takes the view down
        self.count += len(events)
        for (role, rank), lane in list(self.lanes.items()):
            if lane.truth.pending and lane.truth.judge():
                for key in [k for k in self.flags if k[:3] == ("not_returned", role, rank)]:
                    del self.flags[key]
                for f in lane.truth.findings(role, rank):
                    self.flags[("not_returned", role, rank, f["transition"])] = truth.describe(f)

    def _one(self, e: dict) -> None:
        ph, cat, ts = e.get("ph"), e.get("cat"), int(e.get("ts_ns") or 0)
        dur = int(e.get("dur_ns") or 0)
        self.last_ts = max(self.last_ts, ts + dur)
        role, rank, args = e.get("role"), e.get("rank"), e.get("args") or {}
        if ph == "C":
            lane = self.lanes[(role, rank)]
            if cat == "memory":
                lane.truth.memory(ts, args)
                v = mem_value(args)
                if v is not None:
                    lane.mem.append((ts, v))
                    if ts >= lane.mem_ts:
                        lane.mem_ts, lane.rss = ts, int(args.get("rss", v))
                if e.get("method") and ts > lane.last_end:
                    lane.call_sample, lane.method, lane.step = ts, e.get("method"), e.get("step")
            elif cat == "ledger":
                lane.ledger.update({k: int(v) for k, v in args.items()})
                lane.truth.ledger_report(ts, args)
        elif ph == "X" and cat in ("call", "transition"):
            self._slice((role, rank), (ts, dur, e.get("name"), cat, e.get("step"), args.get("status")))
            lane = self.lanes[(role, rank)]
            if cat == "call":
                lane.last_end = max(lane.last_end, ts + dur)
                lane.method, lane.step = e.get("name"), e.get("step")
                if str(args.get("status", "")).startswith("error"):
                    self.notes.append((ts, "error", f"{role} rank {rank} {e.get('name')} failed ({args['status']})"))
            else:
                lane.marks.append((ts + dur, marker_of(args), e.get("name")))
                lane.truth.transition(e.get("name") or "", ts, dur, e.get("step"), args)
                self._check_leak(role, rank, lane, e.get("name") or "", args, e.get("step"), ts + dur)
        elif ph == "X" and cat == "step":
            self.steps.setdefault(e.get("step"), [ts, None])[1] = ts + dur
        elif ph == "i":
            if cat == "step":
                self.steps.setdefault(e.get("step"), [ts, None])
            elif e.get("name") == sentinel.EVENT:   # the rank's row says so too (role_rows)
                self.alarms[(args.get("role", role), args.get("rank", rank))] = args
                self.notes.append((ts, "non-finite", sentinel.describe(args)))
            else:
                who = f"{role} rank {rank}" if role not in (None, "driver") else (role or "driver")
                detail = " ".join(f"{k}={v}" for k, v in args.items() if k in ("file", "line", "reason", "method"))
                self.notes.append((ts, e.get("name") or "instant", f"{who} {detail}".strip()))
        elif ph == "D":
            self._slice(("driver", 0), (ts, dur, e.get("name"), "driver", e.get("step"), args.get("status")))
            if args.get("status") == "error":
                self.notes.append((ts, "error", f"driver call {e.get('name')} failed: {args.get('error', '?')}"))

    def _slice(self, lane: tuple, s: tuple) -> None:
        if s[3] != "transition" and s[2]:
            self.methods.add(s[2].rsplit(".", 1)[-1])
        self.slices[lane].append(s)

    def _check_leak(self, role, rank, lane: Lane, name: str, args: dict, step, end: int) -> None:
        """rldbg.memory.leaks' rule (the one `rldbg report` applies), live over this rank's last
        CYCLES runs of the transition; the rank's flags for it are replaced on every run."""
        frees, _ = moves(args)
        c = observe(role, rank, name, step, end, frees, args.get("mem_after"), lane.ledger)
        if c is None:
            return
        q = lane.cycles[name]
        q.append(c)
        if len(q) < WARMUP_CYCLES + MIN_CYCLES:
            return    # the rule gives no verdict yet: skip the work (ingest is on the poll path)
        for key in lane.flagged.pop(name, ()):
            self.flags.pop(key, None)
        if found := leak_suspicions(q):
            keys = lane.flagged[name] = [("leak", role, rank, name, s["category"]) for s in found]
            for key, s in zip(keys, found):
                self.flags[key] = describe(s)


def fmt_bytes(n) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


@dataclass
class RoleRow:
    key: str
    actor: str
    role: str
    rank: int | None
    state: str
    method: str
    step: str
    pid: int | None
    node: str
    cpu: int | None
    gpu: int | None

    def cells(self) -> tuple:
        return (self.actor, self.role, "-" if self.rank is None else str(self.rank), self.state, self.method,
                self.step, str(self.pid or "-"), self.node, fmt_bytes(self.cpu), fmt_bytes(self.gpu))


def role_rows(actors: list[dict], store: EventStore, state: dict | None, gpu_by_pid: dict,
              paused_pids: set, identities: dict | None = None) -> list[RoleRow]:
    """One row per role x rank of every worker actor: those that published an identity
    (rldbg.instrument.set_worker_identity; `identities`: actor_id -> WorkerIdentity) or whose repr
    is an rldbg label (rldbg.context.worker_label)."""
    gate = (state or {}).get("gate") or {}
    pending = gate.get("pending") or {}
    waiting_group = pending.get("group") if gate.get("waiting") else None
    in_flight = pending.get("group") if (pending.get("phase") == "before_dispatch" and not gate.get("waiting")) else None
    rows = []
    for a in actors:
        ident = identify(a, identities or {})
        if ident is None:
            continue
        roles, rank, names = ident.role, ident.rank, ident.roles
        pid = a.get("pid") or None
        dead = a.get("state") == "DEAD"
        lanes = [store.lanes[(r, rank)] for r in names if (r, rank) in store.lanes]
        newest_rss = max(lanes, key=lambda ln: ln.mem_ts).rss if lanes else None
        for role in names:
            lane = store.lanes.get((role, rank))
            method, step = (lane.method, lane.step) if lane else (None, None)
            if dead:
                st = "dead"
            elif pid in paused_pids:
                st = "paused at breakpoint"
            elif a.get("state") not in (None, "ALIVE"):
                st = str(a.get("state")).lower()
            elif waiting_group == role:
                st, method, step = "waiting (gate)", pending.get("method"), pending.get("step")
            elif lane is not None and lane.call_sample > lane.last_end:   # a sample newer than its last call
                st = "running"
            elif lane is None and in_flight == role:
                st, method, step = "running", pending.get("method"), pending.get("step")
            else:   # no hub, no event ever: Ray says it lives, nobody says what it does
                st = "idle" if state is not None or store.count else "alive"
            if (role, rank) in store.alarms:
                st += sentinel.state_suffix(store.alarms[(role, rank)])
            rows.append(RoleRow(f"{a.get('actor_id', '')}:{role}", roles + f"[{rank}]", role, rank, st,
                                method or "-", "-" if step is None else str(step), pid,
                                (a.get("node_id") or (a.get("address") or {}).get("node_id") or ident.node_id or "-")[:8],
                                None if dead else newest_rss, None if dead else gpu_by_pid.get(pid)))
    return rows


STATE_ORDER = {"paused at breakpoint": 0, "waiting (gate)": 1, "running": 2, "idle": 3, "dead": 9}
SORTS = {
    "role": lambda r: (r.role, r.rank if r.rank is not None else -1, r.state == "dead"),
    "state": lambda r: (STATE_ORDER.get(r.state, 5), r.role, r.rank or 0),
    "cpu": lambda r: (-(r.cpu or 0), r.role, r.rank or 0),
    "gpu": lambda r: (-(r.gpu or 0), r.role, r.rank or 0),
    "method": lambda r: (r.method, r.role, r.rank or 0),
}


def sort_filter(rows: list[RoleRow], sort: str, text: str) -> list[RoleRow]:
    """Live rows first under every sort: a long job leaves many dead actors (finished worker
    groups) that must not push the running ones off screen."""
    if text:
        t = text.lower()
        rows = [r for r in rows if any(t in str(c).lower() for c in r.cells())]
    key = SORTS.get(sort, SORTS["role"])
    return sorted(rows, key=lambda r: (r.state == "dead", key(r)))


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
            {k: tuple(v) for k, v in sorted(st.slices.items(), key=lambda it: (it[0][0] != "driver", *_lane_key(it)))},
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


def _merge_paused(hub_paused: list, dash_paused: list) -> list:
    """The hub knows rldbg breakpoints (file, line, spec); the dashboard knows every debugpy pause."""
    out = {p.get("pid"): dict(p) for p in dash_paused}
    for p in hub_paused:
        out[p.get("pid")] = {**out.get(p.get("pid"), {}), **p}
    return sorted(out.values(), key=lambda p: (str(p.get("role")), p.get("rank") or 0))
