"""Driver-side step gate: the two pause points of every worker-group call, before_dispatch (after
the batch is split, before it goes to ranks) and after_collect (after the results are merged).

With no hub (rldbg.control.start() not called) each is one global read. With a hub but the gate
disarmed each is a counter bump and an attribute store (< 1 µs): a background thread polls the
hub ~4x/s, reports progress and refreshes the `armed` flag and the live breakpoint specs. Only when
armed does a pause point call the hub, blocking in `hub.wait_turn` with bounded calls. It never
wedges the run: a dead hub, or one that has not answered for gate_timeout_s, resumes the driver
(and the hub itself disarms when the TUI stops heartbeating).
"""
from __future__ import annotations

import sys
import threading
import time

_gate: "DriverGate | None" = None


class DriverGate:
    def __init__(self, hub, gate_timeout_s: float = 30.0, poll_s: float = 0.25):
        self.hub, self.timeout_s, self.poll_s = hub, float(gate_timeout_s), float(poll_s)
        self.armed, self.hub_alive = False, True
        self.released: str | None = None   # why the driver stopped honouring the gate (it is stopping)
        self.step = None
        self.calls_seen = self.calls_done = self.pauses = 0
        self._point = None      # (phase, call, payload) of the newest pause point, raw
        self._result = None     # (call, result_summary), raw
        self.specs: tuple[int, list[str]] = (0, [])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sync_loop, name="rldbg-gate-sync", daemon=True)
        self._thread.start()

    # ---- hot path ----------------------------------------------------------------------
    def before_dispatch(self, call, shards=None) -> bool:
        self.calls_seen += 1
        self._point = ("before_dispatch", call, shards)
        return self.armed and self._pause()

    def after_collect(self, call, result_summary=None) -> bool:
        self.calls_done += 1
        self._point = ("after_collect", call, None)
        self._result = (call, result_summary)
        return self.armed and self._pause()

    # ---- slow path ---------------------------------------------------------------------
    def _report(self) -> dict:
        return {"step": self.step, "calls_done": self.calls_done,
                "last_point": _call_dict(*self._point) if self._point else None,
                "last_result": _result_dict(*self._result) if self._result else None,
                "stats": {"calls_seen": self.calls_seen, "calls_done": self.calls_done, "pauses": self.pauses}}

    def _apply(self, reply: dict) -> None:
        self.armed = bool(reply.get("armed")) and not self.released
        if (v := reply.get("specs_version", 0)) != self.specs[0]:
            self.specs = (v, list(reply.get("specs") or []))

    def _pause(self) -> bool:
        """Park at the newest pause point until the hub lets the driver go, or is gone; True."""
        import ray

        self.pauses += 1
        report = self._report()
        call = report["last_point"]
        quiet_since = time.monotonic()
        while self.hub_alive:
            if self.released:
                self._give_up(self.released)
                break
            try:
                reply = ray.get(self.hub.wait_turn.remote(call, report, 1.0), timeout=self.poll_s + 5.0)
            except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
                if time.monotonic() - quiet_since > self.timeout_s:
                    self._give_up(f"hub silent for {self.timeout_s:g} s")
                continue
            except Exception as e:   # RayActorError and friends: the hub is gone
                self._give_up(f"hub gone ({type(e).__name__})")
                break
            quiet_since = time.monotonic()
            self._apply(reply)
            if reply.get("go"):
                break
            report = None   # sent once; the next asks only re-park
        return True

    def refresh(self, timeout_s: float = 10.0) -> None:
        """Learn armed + specs from the hub now (a gate installed mid-run must not let its first
        call through just because the background poll has not run yet)."""
        import ray

        self._apply(ray.get(self.hub.sync.remote(self._report()), timeout=timeout_s))

    def _give_up(self, why: str) -> None:
        self.armed = self.hub_alive = False
        print(f"rldbg: step gate released, running freely ({why})", file=sys.stderr, flush=True)

    def _sync_loop(self) -> None:
        import ray

        while not self._stop.wait(self.poll_s) and self.hub_alive:
            try:
                self._apply(ray.get(self.hub.sync.remote(self._report()), timeout=self.poll_s + 5.0))
            except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
                continue
            except Exception as e:
                if not self._stop.is_set():
                    self._give_up(f"hub gone ({type(e).__name__})")
                return

    def close(self) -> None:
        self._stop.set()
        self.armed = self.hub_alive = False
        self._thread.join(timeout=self.poll_s + 6.0)


def _call_dict(phase: str, call, shards) -> dict:
    """A pause point as the hub and the TUI see it; `call` is an rldbg.instrument.Call."""
    tag = call.tag
    return {"id": tag.flow_id, "group": tag.group, "method": tag.method, "mode": call.mode, "world": call.world,
            "step": tag.step, "phase": phase, "shards": list(shards) if shards is not None else None}


def _result_dict(call, summary) -> dict:
    s = summary if isinstance(summary, dict) else {}
    return {"id": call.tag.flow_id, "group": call.tag.group, "method": call.tag.method, "step": call.tag.step,
            "rows": s.get("rows"), "keys": s.get("keys") or [], "metrics": s.get("metrics") or {}}


# ---- module-level hooks the seam calls ------------------------------------------------
def before_dispatch(call, shards=None) -> bool:
    """Pause point 1. call: an rldbg.instrument.Call; shards: per-rank summaries {"rows", "keys": [...]}
    or None. True if it paused."""
    g = _gate
    return g.before_dispatch(call, shards) if g is not None else False


def after_collect(call, result_summary=None) -> bool:
    """Pause point 2. result_summary: {"rows", "keys", "metrics"} or None. True if it paused."""
    g = _gate
    return g.after_collect(call, result_summary) if g is not None else False


def set_step(n) -> None:
    g = _gate
    if g is not None:
        g.step = n


def current_specs() -> tuple[int, list[str]]:
    """(version, spec texts) as last seen from the hub; (0, []) without a hub."""
    g = _gate
    return g.specs if g is not None else (0, [])


def release(why: str) -> None:
    """The driver is stopping (a signal): a parked pause returns within about a second and the gate
    stays open. Safe to call from a signal handler (it only sets a field)."""
    g = _gate
    if g is not None:
        g.released, g.armed = why, False


def install(gate: DriverGate | None) -> None:
    global _gate
    old, _gate = _gate, gate
    if old is not None and old is not gate:
        old.close()


def active() -> DriverGate | None:
    return _gate
