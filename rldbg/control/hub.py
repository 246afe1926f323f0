"""The control hub: one Ray actor per job holding the step gate, live breakpoint specs,
breakpoint hits and the driver's progress, and serving them over HTTP to `rldbg top`.

Named f"rldbg-hub-{job_id}" in namespace "rldbg"; its repr (discovery.hub_repr) lets a process
without Ray find it through the dashboard alone. The HTTP API (http_api.py) listens on 127.0.0.1
by default and needs the per-run bearer token.

Gate (pause points are BEFORE each dispatch and AFTER each collect of a worker-group call):
    off            disarmed; the driver does not even ask the hub (it polls the flag ~4x/s)
    step           armed; stop at every pause point
    run_to_method  armed; pass until before_dispatch of a call whose method == target, then `step`
    run_to_step    armed; pass until before_dispatch of a call whose step > target, then `step`
An armed gate with no heartbeat/gate action for timeout_s disarms itself: a killed TUI never
wedges a run.
"""
from __future__ import annotations

import collections
import re
import threading
import time

from rldbg.debug.specs import SpecSet

NAMESPACE = "rldbg"
NAME_PREFIX = "rldbg-hub-"


def hub_name(job_id: str) -> str:
    return f"{NAME_PREFIX}{job_id}"


def find_hub():
    """This job's hub actor, looked up from a process of the job; None when it has none (yet)."""
    try:
        import ray
        if not ray.is_initialized():
            return None
        return ray.get_actor(hub_name(ray.get_runtime_context().get_job_id()), namespace=NAMESPACE)
    except Exception:  # noqa: BLE001 - no hub, or Ray going away
        return None


class ControlHub:
    def __init__(self, job_id: str, token: str, host: str = "127.0.0.1", port: int = 0, gate_timeout_s: float = 30.0):
        from rldbg.control.http_api import serve

        self.job_id, self.timeout_s = job_id, float(gate_timeout_s)
        self.cond = threading.Condition()
        self.armed, self.mode, self.target, self.disarm_reason = False, "off", None, None
        self.pending, self.pending_key = None, None     # the parked pause point, if any
        self.last_point = None                           # the newest pause point the driver reported
        self.released: collections.deque = collections.deque(maxlen=64)   # keys let through
        self.last_result = None
        self.step, self.calls_done, self.driver = None, 0, {}
        self.last_beat, self.clients = 0.0, {}
        self.specs = SpecSet()
        self.hits, self.paused = collections.deque(maxlen=100), {}
        self._collector, self.started = None, time.time()
        self._collector_lock = threading.Lock()   # the HTTP server's threads share one connection
        self.server, self.url = serve(self, host, port, token)

    def __repr__(self) -> str:
        from rldbg.control.discovery import hub_repr

        return hub_repr(self.url, self.job_id)

    def info(self) -> dict:
        return {"url": self.url, "job_id": self.job_id, "gate_timeout_s": self.timeout_s}

    # ---- driver side (Ray calls) ------------------------------------------------------
    def sync(self, report: dict) -> dict:
        """The driver's ~4 Hz poll: it reports progress, learns armed + specs."""
        with self.cond:
            self._take_report(report)
            self._expire()
            return self._gate_reply()

    def wait_turn(self, call: dict, report: dict | None = None, timeout: float = 1.0) -> dict:
        """Park the driver at pause point `call` for at most `timeout` s. {"go": True} lets it
        run; {"go": False}: ask again (bounded Ray calls keep a dead driver from pinning us)."""
        key = (call.get("id"), call.get("phase"))
        deadline = time.monotonic() + timeout
        with self.cond:
            self._take_report(report or {})
            self.last_point = call
            if key in self.released:
                return dict(self._gate_reply(), go=True)
            if self.pending_key != key:
                if not self._stops_at(call):
                    return dict(self._gate_reply(), go=True)
                self.pending, self.pending_key, self.mode, self.target = call, key, "step", None
                self.cond.notify_all()
            while self.pending_key == key:
                if self._expire():
                    break
                if (left := deadline - time.monotonic()) <= 0:
                    return dict(self._gate_reply(), go=False)
                self.cond.wait(min(left, 0.25))
            return dict(self._gate_reply(), go=True)

    def _take_report(self, report: dict) -> None:
        if not report:
            return
        self.driver = report
        self.step = report.get("step", self.step)
        self.calls_done = max(self.calls_done, int(report.get("calls_done") or 0))
        if report.get("last_point") is not None and self.pending is None:
            self.last_point = report["last_point"]
        if report.get("last_result") is not None:
            self.last_result = report["last_result"]

    def _stops_at(self, call: dict) -> bool:
        if not self.armed:
            return False
        if self.mode == "run_to_method":
            return call.get("phase") == "before_dispatch" and call.get("method") == self.target
        if self.mode == "run_to_step":
            s = call.get("step")
            return call.get("phase") == "before_dispatch" and s is not None and s > int(self.target)
        return self.mode == "step"

    def _expire(self) -> bool:
        """Disarm when the TUI went quiet for timeout_s; True if the gate is now open."""
        if self.armed and time.time() - self.last_beat > self.timeout_s:
            self._disarm(f"no heartbeat for {self.timeout_s:g} s")
        return not self.armed

    def _disarm(self, reason: str) -> None:
        self._release()
        self.armed, self.mode, self.target, self.disarm_reason = False, "off", None, reason
        self.cond.notify_all()

    def _gate_reply(self) -> dict:
        return {"armed": self.armed, "specs_version": self.specs.version, "specs": self.specs.texts()}

    # ---- TUI side (HTTP handlers call these) -------------------------------------------
    def heartbeat(self, client: str = "?") -> dict:
        with self.cond:
            self.last_beat = time.time()
            self.clients[str(client)[:64]] = self.last_beat
        return {"ok": True, "timeout_s": self.timeout_s}

    def gate(self, action: str, method: str | None = None, step: int | None = None) -> dict:
        with self.cond:
            self.last_beat = time.time()   # a gate action proves the client is alive
            if action in ("arm", "step"):
                self.armed, self.mode, self.target = True, "step", None
            elif action in ("disarm", "continue"):
                self._disarm(f"{action} requested")
            elif action == "run_to_method":
                if not method or not isinstance(method, str):
                    raise ValueError(f"run_to_method needs a method name, got method={method!r}")
                self.armed, self.mode, self.target = True, "run_to_method", method
            elif action == "run_to_step":
                parked = (self.pending or {}).get("step")
                base = step if step is not None else parked if parked is not None else self.step
                if base is None:
                    raise ValueError("run_to_step: the trainer has reported no step yet; pass \"step\": N")
                self.armed, self.mode, self.target = True, "run_to_step", str(int(base))
            else:
                raise ValueError(f"unknown gate action {action!r}; expected arm, disarm, step, "
                                 "run_to_method, run_to_step or continue")
            if action not in ("arm", "disarm", "continue"):
                self._release()   # step and run_to_*: the parked call goes on
            if action not in ("disarm", "continue"):
                self.disarm_reason = None
            return self.gate_state()

    def _release(self) -> None:
        if self.pending_key is not None:
            self.released.append(self.pending_key)
            self.pending, self.pending_key = None, None
            self.cond.notify_all()

    def gate_state(self) -> dict:
        with self.cond:
            self._expire()
            waiting = self.pending is not None
            return {"armed": self.armed, "mode": self.mode, "target": self.target, "waiting": waiting,
                    "pending": self.pending if waiting else self.last_point,
                    "last_result": self.last_result, "timeout_s": self.timeout_s, "disarm_reason": self.disarm_reason,
                    "heartbeat_age_s": (time.time() - self.last_beat) if self.last_beat else None}

    def breakpoints(self, add: str | None = None, remove: str | None = None) -> list[str]:
        """Add or remove one spec (SpecError, one line, for a bad one); returns the specs now."""
        if add is not None:
            self.specs.add(add)
        if remove is not None:
            self.specs.remove(remove)
        return self.specs.texts()

    # ---- breakpoint hits reported by workers (control.notify) --------------------------
    def breakpoint_hit(self, entry: dict) -> None:
        with self.cond:
            self.hits.append(entry)
            self.paused[(entry.get("pid"), entry.get("thread"))] = entry

    def breakpoint_resumed(self, pid, thread) -> None:
        with self.cond:
            self.paused.pop((pid, thread), None)

    # ---- trace store --------------------------------------------------------------------
    def _ask_collector(self, method: str, *args, timeout: float = 10.0):
        """`method` of this job's trace collector (in the driver, trace/server.py), or None when
        tracing is off (looked up again each time: tracing may start after the hub)."""
        from rldbg.trace import address
        with self._collector_lock:
            try:
                if self._collector is None:
                    entry = address.find(self.job_id)
                    self._collector = address.connect(entry, timeout=10.0) if entry else None
                if self._collector is None:
                    return None
                self._collector.settimeout(timeout)
                return self._collector.call(method, *args)
            except ConnectionError:
                if self._collector is not None:
                    self._collector.close()
                self._collector = None   # tracing stopped; a later start() publishes a new one
                return None

    def events(self, cursor: int, limit: int) -> dict:
        from rldbg.trace.events import to_dict
        if (got := self._ask_collector("events_since", cursor, limit)) is None:
            return {"cursor": cursor, "events": [], "trace_enabled": False}
        nxt, evs = got
        return {"cursor": nxt, "trace_enabled": True, "events": [to_dict(ev) for ev in evs]}

    def state(self) -> dict:
        cfg = self._ask_collector("config", timeout=5.0)
        cstats = self._ask_collector("stats", timeout=5.0) if cfg is not None else None
        with self.cond:
            return {"job_id": self.job_id, "step": self.step,
                    "trace": {"enabled": cfg is not None, "path": (cfg or {}).get("trace_path")},
                    "gate": self.gate_state(), "calls_done": self.calls_done,
                    "breakpoints": {"specs": self.specs.texts(),
                                    "paused": list(self.paused.values()), "hits": list(self.hits)[-20:]},
                    "stats": {"trace": cstats, "driver": self.driver.get("stats", {}),
                              "hub": {"uptime_s": time.time() - self.started, "url": self.url,
                                      "clients": dict(self.clients)}}}

    def export(self, path: str | None = None) -> dict:
        from rldbg.trace.export import export_spill
        cfg = self._ask_collector("config")
        stats = self._ask_collector("stats")
        if cfg is None or stats is None:
            raise LookupError("tracing is off in this run: nothing to export (start it with rldbg.trace.start)")
        if stats.get("spill_dir") is None:   # the flight recorder keeps its window in the processes
            raise LookupError(f"this run keeps only its last {cfg.get('window')} steps (trace.window) and writes "
                              "nothing until a trigger: `rldbg dump` writes that window now")
        if not path:
            base = re.sub(r"\.json(\.gz)?$", "", cfg.get("trace_path") or "rldbg-trace.json.gz")
            path = f"{base}.snapshot-{time.strftime('%Y%m%d-%H%M%S')}.json.gz"
        out = export_spill(stats["spill_dir"], path)   # reads the live spill; the run goes on
        return {"path": out.get("path", path), "events": out.get("events")}

    def shutdown(self) -> None:
        self.server.shutdown()
        with self.cond:
            self._disarm("hub stopped")
