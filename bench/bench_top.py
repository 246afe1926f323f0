"""`rldbg top` at scale: 256 synthetic workers (dashboard-like actor rows: 128 colocated
actor+reward ranks and 128 critic ranks, i.e. 384 role x rank rows) and ~1M hub events shaped
like the reference trainer's, from an in-process FakeSource, driven headless with run_test.

Prints, measured in this one run:
  start-up   a fresh interpreter's imports plus constructing the app to the first painted
             frame of the roles table (goal <= 1.5 s)
  frame      wall time from handing the UI one refresh to the frame being painted, per view,
             and the UI thread's CPU time over the same interval (goal <= 50 ms)
  poll       poll-thread time to read + fold one poll (off the UI thread; for context)

    python bench/bench_top.py [--workers 256] [--events 1000000] [--frames 20]
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rldbg.tui.app import TopApp
from rldbg.tui.model import Model

# The synthetic source the TUI's snapshot tests use: 256 workers and 1M events, deterministic.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_source import FakeSource  # noqa: E402


async def paint(app, view) -> None:
    """Hand the UI one View and return once it is on screen. Rather than wait for the screen's
    ~60 Hz update timer, run the timer's work (layout if needed, then paint) right away, let the
    messages that work posted (resize, show) be handled, and run it once more for any repaint
    they asked for. So the time measured is the work of one refresh, not scheduling slack.
    (Pilot.pause() would add its idle detection's 20 ms sleeps; its _wait_for_screen posts a
    message to every widget, which a real refresh never does.)"""
    app.show_view(view)
    app.screen._on_timer_update()
    for _ in range(3):
        await asyncio.sleep(0)
    app.screen._on_timer_update()


_gc_started = [0.0]
gc_ms: list = []


def _gc_timer(phase, info) -> None:
    if phase == "start":
        _gc_started[0] = time.perf_counter()
    else:
        gc_ms.append((time.perf_counter() - _gc_started[0]) * 1e3)


async def measure(workers: int, events: int, frames: int, verbose: bool = False) -> dict:
    t0 = time.perf_counter()
    src = FakeSource(workers=workers, events=events)
    app = TopApp(src, refresh=3600, freeze_gc=True)   # as `rldbg top` runs it; we trigger every refresh
    out = {}
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one("#roles-table")
        while table.row_count == 0:
            await pilot.pause(0.005)
        app.screen._on_timer_update()   # painted, not just handed over
        out["startup_s"] = time.perf_counter() - t0
        out["rows"] = table.row_count
        while app.view.behind or app.view.events == 0:   # steady state: the backlog is read
            await pilot.pause(0.05)
        out["caught_up_s"] = time.perf_counter() - t0
        out["events_read"] = app.view.events
        view = app.view
        for tab in ("roles", "timeline", "memory", "stepper", "events"):
            await pilot.press(str(["roles", "timeline", "memory", "stepper", "breakpoints", "stacks", "events"].index(tab) + 1))
            await pilot.pause(0.05)
            times, cpu, handler = [], [], []
            gc_ms.clear()
            for i in range(frames):
                # A realistic refresh: states change on some rows each time (so cells really update).
                for r in view.rows[i % 7::7]:
                    r.state = "running" if r.state == "idle" else "idle"
                view.state = {**view.state, "calls_done": (view.state.get("calls_done") or 0) + 1}
                t1, c1 = time.perf_counter(), time.thread_time()
                await paint(app, view)
                times.append(time.perf_counter() - t1)
                cpu.append(time.thread_time() - c1)
                handler.append(app.frames[-1])
                await pilot.pause(0.02)   # let the screen's own timer find nothing left to do
            print(tab, [round(t * 1e3) for t in times], "gc ms", round(sum(gc_ms), 1)) if verbose else None
            out[f"frame_{tab}_ms"] = (statistics.median(times) * 1e3, max(times) * 1e3,
                                      statistics.median(cpu) * 1e3, statistics.median(handler) * 1e3)
    # The poll thread's share, for context: fold one 200k-event catch-up and one steady poll.
    src2, model = FakeSource(workers=workers, events=events), Model()
    t1 = time.perf_counter()
    while model.update(src2.poll()).behind:
        pass
    out["catchup_poll_s"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    model.update(src2.poll())
    out["steady_poll_ms"] = (time.perf_counter() - t1) * 1e3
    return out


def import_seconds() -> float:
    """A fresh interpreter importing what `rldbg top` imports: the part of start-up that
    happens before the app exists (median of 3)."""
    code = "import rldbg.tui.app, rldbg.commands.top"
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=256)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--frames", type=int, default=20)
    p.add_argument("--verbose", action="store_true", help="print every frame's time and the GC time per view")
    a = p.parse_args()
    gc.callbacks.append(_gc_timer)
    r = asyncio.run(measure(a.workers, a.events, a.frames, a.verbose))
    imports = import_seconds()
    print(f"rldbg top bench: {a.workers} workers ({r['rows']} role x rank rows), {a.events:,} events in the hub "
          f"({r['events_read']:,} read: the newest window)")
    print(f"  start-up to first roles frame  {imports + r['startup_s']:.2f} s   (goal <= 1.5 s): interpreter and "
          f"imports {imports:.2f} s + app to first frame {r['startup_s']:.2f} s; "
          f"whole backlog read {r['caught_up_s']:.2f} s after the app started")
    for k, (med, worst, cpu, ours) in ((k, v) for k, v in r.items() if k.startswith("frame_")):
        print(f"  refresh frame {k[6:-3]:<9} median {med:6.1f} ms  worst {worst:6.1f} ms  UI-thread CPU {cpu:6.1f} ms  "
              f"(our show() {ours:5.1f} ms, the rest Textual's layout and paint)   (goal <= 50 ms)")
    print(f"  poll thread: 200k-event catch-up {r['catchup_poll_s']:.2f} s, steady poll {r['steady_poll_ms']:.1f} ms "
          "(off the UI thread)")


if __name__ == "__main__":
    main()
