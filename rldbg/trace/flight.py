"""The flight recorder's dumps, on the collector's side (`trace.window=N`).

Every process keeps its last N steps in memory (rldbg.trace.window.Ring) and ships nothing while
all is well. A trigger (a non-finite output or a dead rank seen by a process, a hung call, a stop
signal or an unhandled exception in the driver, `rldbg dump`, rldbg.trace.dump()) opens a dump:
each live process hears of it in the answer to its next heartbeat and ships its window into the
dump's own spill; once all have answered, or SETTLE_S after the trigger, a thread exports it to
RUN/flight-<step>-<reason>.json.gz. The trigger is an instant ("rldbg flight trigger") on the
track of the rank it names. A trigger within RATE_S of the last dump for the same reason is
counted into that dump (a NaN every step makes one file); another reason makes its own file.
"""
from __future__ import annotations

import os
import re
import shutil
import threading
import time

from rldbg.trace.events import TRIGGER, instant_event
from rldbg.trace.spill import SpillWriter

RATE_S = 30.0
SETTLE_S = 5.0
LIVE_S = 10.0     # a process heard from within this long is expected to answer a dump
REASONS = ("nonfinite", "hang", "rank_died", "exception", "SIGTERM", "SIGINT", "manual")


class Dump:
    def __init__(self, did: int, reason: str, step, detail: dict, path: str, spill: str):
        self.id, self.reason, self.step, self.detail = did, reason, step, detail
        self.path, self.spill = path, spill
        self.t0, self.t0_ns = time.monotonic(), time.time_ns()
        self.asked: set = set()       # processes told
        self.answered: set = set()    # processes whose window arrived
        self.writer: SpillWriter | None = None
        self.state = "collecting"     # collecting -> writing -> written | failed
        self.error = ""
        self.events = 0
        self.coalesced = 0            # later triggers counted into this dump
        self.seconds = None           # trigger to file written

    def status(self) -> dict:
        return {"id": self.id, "reason": self.reason, "step": self.step, "path": self.path, "state": self.state,
                "error": self.error, "events": self.events, "processes": len(self.answered),
                "coalesced": self.coalesced, "seconds": self.seconds, "spill": self.spill}


class Dumps:
    """The collector's dumps. Every method is called under the collector's lock."""

    def __init__(self, run_dir: str, meta: dict):
        self.run_dir, self.meta = run_dir, meta
        self.all: list[Dump] = []
        self.open: Dump | None = None
        self.newest_step = None
        self.threads: list = []

    def request(self, reason: str, step=None, detail: dict | None = None, live: list | None = None) -> dict:
        """Open a dump (or count the trigger into the one within RATE_S); returns its status."""
        detail = dict(detail or {})
        step = step if step is not None else self.newest_step
        last = next((d for d in reversed(self.all) if d.reason == reason), None)
        if last is not None and time.monotonic() - last.t0 < RATE_S:
            last.coalesced += 1
            return dict(last.status(), rate_limited=True)
        slug = re.sub(r"[^A-Za-z0-9_]+", "_", str(reason)).strip("_")[:40] or "trigger"
        name = f"flight-{step if step is not None else 'x'}-{slug}"
        path = os.path.join(self.run_dir, name + ".json.gz")
        n = 1
        while os.path.exists(path) or any(d.path == path for d in self.all):
            n += 1
            path = os.path.join(self.run_dir, f"{name}-{n}.json.gz")
        d = Dump(len(self.all) + 1, reason, step, detail, path, path[:-len(".json.gz")] + ".spill")
        d.asked = set(live or ())
        d.writer = SpillWriter(d.spill, dict(self.meta, flight={"reason": reason, "step": step}))
        role, rank = detail.get("role") or "driver", int(detail.get("rank") or 0)
        args = {"reason": reason, "step": step, **{k: v for k, v in detail.items() if k not in ("role", "rank")}}
        d.writer.write({"pid": "rldbg", "host": "collector", "dropped": 0,
                        "events": [instant_event("rldbg", TRIGGER, d.t0_ns, role, rank, step, detail.get("method"),
                                                 args)]})
        self.all.append(d)
        self.open = d
        return d.status()

    def wanted(self, key: str) -> dict | None:
        """What to tell process `key` in the answer to its batch: the open dump it has not answered."""
        if (d := self.open) is None or key in d.answered:
            return None
        d.asked.add(key)
        return {"dump": d.id, "reason": d.reason, "step": d.step}

    def take(self, key: str, meta: dict, payload: bytes, n: int) -> None:
        """A process's window for dump meta["dump"]."""
        d = next((x for x in self.all if x.id == meta.get("dump")), None)
        if d is None or d.state != "collecting":
            return
        if n:
            d.writer.write_raw({k: v for k, v in meta.items() if k not in ("n", "dump", "dump_done")}, payload)
            d.events += n
        if meta.get("dump_done"):
            d.answered.add(key)

    def tick(self, live: set) -> None:
        """Close the open dump once every live process answered, or SETTLE_S after its trigger."""
        if (d := self.open) is None:
            return
        waiting = (d.asked & live) - d.answered
        if waiting and time.monotonic() - d.t0 < SETTLE_S:
            return
        self.open = None
        d.writer.close()
        d.state = "writing"
        t = threading.Thread(target=self._write, args=(d,), name="rldbg-flight-dump", daemon=True)
        self.threads.append(t)
        t.start()

    def _write(self, d: Dump) -> None:
        try:
            from rldbg.trace.export import export_spill
            export_spill(d.spill, d.path)
            shutil.rmtree(d.spill, ignore_errors=True)
            d.state = "written"
        except Exception as e:   # noqa: BLE001 - a dump must never take the run with it
            d.state, d.error = "failed", f"{type(e).__name__}: {e}"
        d.seconds = round(time.monotonic() - d.t0, 3)

    def status(self, did: int | None = None) -> dict | None:
        d = self.all[-1] if did is None and self.all else next((x for x in self.all if x.id == did), None)
        return None if d is None else d.status()

    def wait(self, timeout: float) -> None:
        """Until every dump is written (stop() waits before the run ends)."""
        deadline = time.monotonic() + timeout
        for t in list(self.threads):
            t.join(max(0.0, deadline - time.monotonic()))
