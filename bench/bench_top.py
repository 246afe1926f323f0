"""`rldbg top` at scale: 256 synthetic workers (dashboard-like actor rows: 128 colocated
actor+reward ranks and 128 critic ranks, i.e. 384 role x rank rows) and ~1M hub events shaped
like the reference trainer's, from an in-process FakeSource, driven headless with run_test.

Prints, measured in this one run:
  start-up   constructing the app to the first frame showing the roles table (goal <= 1.5 s)
  frame      wall time from handing the UI one refresh to the frame being painted, per view
             (the UI thread's whole share of a refresh; goal <= 50 ms)
  poll       poll-thread time to read + fold one poll (off the UI thread; for context)

    python bench/bench_top.py [--workers 256] [--events 1000000] [--frames 20]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from rldbg.tui.app import TopApp
from rldbg.tui.fake import FakeSource
from rldbg.tui.view import Model


async def measure(workers: int, events: int, frames: int) -> dict:
    t0 = time.perf_counter()
    src = FakeSource(workers=workers, events=events)
    app = TopApp(src, refresh=3600)   # we trigger every refresh ourselves
    out = {}
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one("#roles-table")
        while table.row_count == 0:
            await pilot.pause(0.005)
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
            times, handler = [], []
            for i in range(frames):
                # A realistic refresh: states change on some rows each time (so cells really update).
                for r in view.rows[i % 7::7]:
                    r.state = "running" if r.state == "idle" else "idle"
                t1 = time.perf_counter()
                app.show_view(view)
                await pilot.pause()   # until the messages it caused are handled and the frame is painted
                times.append(time.perf_counter() - t1)
                handler.append(app.frames[-1])
            out[f"frame_{tab}_ms"] = (statistics.median(times) * 1e3, max(times) * 1e3,
                                      statistics.median(handler) * 1e3)
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=256)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--frames", type=int, default=20)
    a = p.parse_args()
    r = asyncio.run(measure(a.workers, a.events, a.frames))
    print(f"rldbg top bench: {a.workers} workers ({r['rows']} role x rank rows), {a.events:,} events in the hub "
          f"({r['events_read']:,} read: the newest window)")
    print(f"  start-up to first roles frame  {r['startup_s']:.2f} s   (goal <= 1.5 s); "
          f"whole backlog read after {r['caught_up_s']:.2f} s")
    for k, (med, worst, ours) in ((k, v) for k, v in r.items() if k.startswith("frame_")):
        print(f"  refresh frame {k[6:-3]:<9} median {med:6.1f} ms  worst {worst:6.1f} ms  "
              f"(of which our view code {ours:5.1f} ms, the rest Textual's paint)   (goal <= 50 ms)")
    print(f"  poll thread: 200k-event catch-up {r['catchup_poll_s']:.2f} s, steady poll {r['steady_poll_ms']:.1f} ms "
          "(off the UI thread)")


if __name__ == "__main__":
    main()
