"""Which recorded events a process ships: all of them, only chosen steps (step windows,
`trace.steps=[100-110,500]`), or the last N steps held in memory until a trigger asks for them
(the flight recorder, `trace.window=N`). Applied by the flusher thread, never on the recording path.

An event without a step (a memory sample, a ledger report between calls) belongs to the step of
the event recorded before it in this process. The newest memory, ledger and GPU sample of each
series before a window is shipped at the window's start, so its memory tracks start at the right level.
"""
from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import deque

from rldbg.context import identity
from rldbg.trace.events import ARGS, CAT, COUNTER, INSTANT, METHOD, NAME, PH, RANK, ROLE, STEP, TS, instant_event
from rldbg.trace.spill import decode_events, join_packed, pack_event


def is_state(ev) -> bool:   # memory, ledger and GPU samples: each holds until the next of its series
    return ev[PH] == COUNTER and ev[CAT] in ("memory", "ledger", "gpu") and bool(ev[ARGS])


def parse_steps(spec) -> tuple:
    """"100-110,500" or [100-110, 500] or ["100-110", 500] -> ((100, 110), (500, 500)); ValueError
    naming the bad part and what is accepted."""
    out, items = [], spec if isinstance(spec, (list, tuple)) else [] if spec is None else [spec]
    # a list's item may itself be "100-110,500" (a config's `steps: 100-110,500` made a list)
    for text in (part.strip() for i in items for part in str(i).strip("[] ").split(",")):
        if not text:
            continue
        lo, sep, hi = text.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"trace steps: {text!r} is not a step or a range; accepted: N or A-B, comma-separated "
                             f"(e.g. 100-110,500)") from None
        if a < 0 or b < a:
            raise ValueError(f"trace steps: {text!r} is not a step or a range of steps A-B with 0 <= A <= B")
        out.append((a, b))
    return tuple(sorted(out))


def ranges(numbers) -> list:
    """[0, 1, 2, 5] -> [[0, 2], [5, 5]]."""
    out = []
    for n in sorted(set(numbers)):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def steps_text(ranges) -> str:
    """((3, 5), (9, 9)) -> "3-5,9"."""
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


class _Steps:
    """Gives each event its step (its own, else the one before it in this process) and keeps the
    newest state event of each memory/ledger/GPU series (StepFilter and Ring both need it)."""

    def __init__(self):
        self.step = None
        self.state: dict = {}   # (cat, name, role, rank, series) -> event

    def step_of(self, ev) -> int | None:
        s = ev[STEP]
        if s is not None:
            self.step = s
        return self.step

    def remember(self, ev, state: dict | None = None) -> None:
        state = self.state if state is None else state
        if is_state(ev):
            for series, v in ev[ARGS].items():
                state[(ev[CAT], ev[NAME], ev[ROLE], ev[RANK], series)] = (ev, v)

    def state_events(self, ts: int, state: dict | None = None) -> list:
        """The kept state as counter events at `ts`, one per (track, series), merged by track."""
        by_track: dict = {}
        for (cat, name, role, rank, series), (ev, v) in (self.state if state is None else state).items():
            by_track.setdefault((cat, name, role, rank), (ev, {}))[1][series] = v
        return [(COUNTER, cat, name, ts, 0, role, rank, ev[STEP], None, None, values)
                for (cat, name, role, rank), (ev, values) in by_track.items()]


class StepFilter:
    """Step windows: ship the events of the chosen steps only, each window opened by the state of
    the memory and ledger series at its start."""

    def __init__(self, ranges):
        self.ranges = tuple(ranges)
        self.steps = _Steps()
        self.inside = False

    def wanted(self, step) -> bool:
        return step is not None and any(a <= step <= b for a, b in self.ranges)

    def select(self, packed: list) -> list:   # a drained batch (spill.pack_event each) -> its chosen part
        out = []
        for ev, p in zip(decode_events(join_packed(packed), tuples=True), packed):
            keep = self.wanted(self.steps.step_of(ev))
            if keep and not self.inside:
                out += map(pack_event, self.steps.state_events(ev[TS]))
            self.inside = keep
            if keep:
                out.append(p)
            else:
                self.steps.remember(ev)
        return out


# However fast the steps, a ring keeps its last seconds too: a process hears of a dump one heartbeat
# round (flush_interval) or more after the trigger and may have trained many short steps meanwhile.
MARGIN_NS = 5_000_000_000


class Ring:
    """The flight recorder: this process's last steps in memory, bounded, shipped only when a dump
    takes a window of `n` of them (which stays for a later dump). It keeps 2n steps and at least
    the last MARGIN_NS: processes hear of a dump up to a heartbeat apart, and each must still hold
    the n steps that end at the dump's step. A process with no calls of its own (the driver while
    VeRL's TaskRunner drives the loop) files its step-less events under the job's newest step, as
    the collector's answers say (`job_step`)."""

    def __init__(self, n: int, capacity: int):
        self.n, self.capacity = int(n), int(capacity)
        self.events: deque = deque()   # (step, ts, a state event?, the event packed: spill.pack_event)
        self.steps = _Steps()
        self.newest: int | None = None
        self.job_step: int | None = None   # the job's newest step, as the collector last said

    def add(self, packed: list) -> tuple:
        """Events packed as the recorder buffers them (spill.pack_event) join the ring; returns them decoded."""
        events = decode_events(join_packed(packed), tuples=True)
        for ev, p in zip(events, packed):
            s = self.steps.step_of(ev)
            if s is None:
                s = self.job_step
            if s is not None and (self.newest is None or s > self.newest):
                self.newest = s
            self.events.append((s, ev[TS], is_state(ev), p))
        self._prune()
        return events

    def _prune(self) -> None:
        ring, remember = self.events, self.steps.remember
        oldest = None if self.newest is None else self.newest - 2 * self.n + 1
        since = ring[-1][1] - MARGIN_NS if ring else 0
        while ring and (len(ring) > self.capacity or (oldest is not None and ring[0][1] < since
                                                      and (ring[0][0] is None or ring[0][0] < oldest))):
            if (gone := ring.popleft())[2]:   # a state event: the newest of its series is kept
                remember(decode_events(gone[3], tuples=True))

    def window(self, upto: int | None = None) -> list:
        """The n steps ending at step `upto` (the newest here when None), opened by the state of the
        memory and ledger series at their start. A process not yet at `upto` ships what it has of
        those same steps, not older ones: every process's part of a dump covers the same steps."""
        upto = self.newest if upto is None else upto
        lo = None if upto is None else upto - self.n + 1
        state, inside = dict(self.steps.state), []
        for s, _, holds, p in self.events:
            if lo is not None and (s < lo if s is not None else lo > 1):
                # an event before any step (s None) is older than a window that starts after step 1
                if holds:
                    self.steps.remember(decode_events(p, tuples=True), state)
            elif s is None or upto is None or s <= upto:
                inside.append(decode_events(p, tuples=True))
        if not inside:
            return self.steps.state_events(0, state) if state else []
        return self.steps.state_events(inside[0][TS], state) + inside


STACK = "rldbg stack"   # a thread's Python stack, in a hang's dump

# Instants that open a flight-recorder dump when a process finds them in what it recorded:
# rldbg.sentinel's alarm ("nonfinite") and a worker group's report of a dead rank.
TRIGGERS = {"nonfinite": "nonfinite", "rank_died": "rank_died"}


def trigger_in(events: list) -> dict | None:
    """The first trigger among `events`: {reason, step, role, rank, method, ...its args}, or None."""
    for ev in events:
        if ev[PH] == INSTANT and ev[NAME] in TRIGGERS:
            args = {k: v for k, v in (ev[ARGS] or {}).items() if isinstance(v, (str, int, float, bool)) or v is None}
            return {**args, "reason": TRIGGERS[ev[NAME]], "step": args.get("step", ev[STEP]),
                    "role": args.get("role", ev[ROLE]), "rank": args.get("rank", ev[RANK]),
                    "method": args.get("method", ev[METHOD])}
    return None


def stack_events(step) -> list:
    """An instant per thread of this process with its Python stack right now (a hang's dump: taken
    by the flusher thread, so a main thread stuck in a call or a collective is seen where it is)."""
    who, now = identity(), time.time_ns()
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    out = []
    for tid, frame in sys._current_frames().items():
        name = names.get(tid, str(tid))
        if name.startswith("rldbg-") and tid != main:
            continue   # rldbg's own threads: not what the user asks about
        text = "".join(traceback.format_stack(frame))
        out.append(instant_event("rldbg", STACK, now, who.roles[0], who.rank, step, None,
                                 {"thread": "main" if tid == main else name, "stack": text}))
    return out
