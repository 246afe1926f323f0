"""Shipping under load, measured: python bench/bench_trace_loss.py [--rate 60000] [--seconds 25] [--producers 2]

1. burst: one actor records 200,000 events at once into a 1M-event buffer; prints how many reach
   the spill, how many are counted lost (goal: all shipped, 0 lost) and how long shipping took.
2. sustained: --producers actors each record --rate events/s for --seconds (default 2 × 60k/s for
   25 s = 3M events); prints the driver's RSS while they run, where the collector lives, beside
   its RSS before they started (goal: bounded, not growing with the run), the events shipped and counted lost, and how long rldbg.trace.stop() takes
   without the export (goal ≤ 5 s) and the export after it.
Runs its own loopback Ray cluster (4 CPUs).
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray  # noqa: E402

import rldbg  # noqa: E402
from results import SAVE_HELP, save  # noqa: E402
from rldbg import instrument as ri  # noqa: E402
from rldbg.trace.spill import iter_batches  # noqa: E402


@ray.remote(num_cpus=0)
class Producer:
    def __init__(self, rank, world):
        ri.set_worker_identity("bench", rank, world)

    def burst(self, n):
        for i in range(n):
            rldbg.instant("e", i=i)
        return n

    def sustain(self, rate, seconds):
        """rate events/s in 10 ms slices; returns how many were recorded."""
        n, t0, chunk = 0, time.monotonic(), max(1, rate // 100)
        while time.monotonic() - t0 < seconds:
            for i in range(chunk):
                rldbg.instant("e", i=i)
            n += chunk
            ahead = n / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        return n


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))
    except (OSError, StopIteration):
        return 0


def _count(spill) -> int:
    return sum(1 for b in iter_batches(spill) for ev in b["events"] if ev[2] == "e")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=60_000)
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--save", action="store_true", help=SAVE_HELP)
    a = ap.parse_args()
    ray.init(address="local", num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    tmp = tempfile.mkdtemp(prefix="rldbg-bench-loss-")
    try:
        spill = rldbg.trace.start(os.path.join(tmp, "burst.json.gz"), memory_hz=0, buffer_events=1 << 20,
                                  flush_interval=1.0)
        p = Producer.remote(0, 1)
        t0 = time.monotonic()
        ray.get(p.burst.remote(200_000))
        rldbg.trace.stop(export=False)
        shipped, lost, t_burst = _count(spill), rldbg.trace.last_losses()["total"], time.monotonic() - t0
        print(f"burst: 200000 recorded, {shipped} shipped, {lost} counted lost, "
              f"{t_burst:.2f} s to record + ship + stop")
        ray.kill(p)

        path = os.path.join(tmp, "sustained.json.gz")
        spill = rldbg.trace.start(path, memory_hz=0, buffer_events=1 << 20, flush_interval=1.0)
        cpid = os.getpid()   # the collector lives in the driver (trace/server.py)
        base = _rss(cpid)
        ps = [Producer.remote(r, a.producers) for r in range(a.producers)]
        peak, samples, stop = [0], [], threading.Event()

        def watch():
            while not stop.wait(0.5):
                r = _rss(cpid)
                peak[0] = max(peak[0], r)
                samples.append(r)
        th = threading.Thread(target=watch, daemon=True)
        th.start()
        recorded = sum(ray.get([q.sustain.remote(a.rate, a.seconds) for q in ps]))
        stop.set()
        th.join()
        t0 = time.monotonic()
        rldbg.trace.stop(export=False)
        t_stop = time.monotonic() - t0
        lo = rldbg.trace.last_losses()
        from rldbg.trace.export import export_spill
        t0 = time.monotonic()
        export_spill(spill, path)
        t_export = time.monotonic() - t0
        half = samples[len(samples) // 2] if samples else 0
        print(f"sustained: {a.producers} x {a.rate}/s for {a.seconds:g} s = {recorded} recorded, "
              f"{_count(spill)} shipped, {lo['total']} counted lost {lo['by_cause'] or ''}")
        print(f"  the driver's RSS (the collector's home): {base / 2**20:.0f} MiB before the producers, "
              f"peak {peak[0] / 2**20:.0f} MiB, at mid-run {half / 2**20:.0f} MiB, "
              f"at the end {(samples[-1] if samples else 0) / 2**20:.0f} MiB")
        print(f"  stop(export=False): {t_stop:.2f} s (goal <= 5 s); export of the spill: {t_export:.1f} s")
        if a.save:
            mib = 2 ** 20
            save("bench_trace_loss", a, {
                "burst_recorded": 200_000, "burst_shipped": shipped, "burst_lost": lost, "burst_s": round(t_burst, 2),
                "sustained_recorded": recorded, "sustained_shipped": _count(spill), "sustained_lost": lo["total"],
                "driver_rss_mib_before": round(base / mib), "driver_rss_mib_mid": round(half / mib),
                "driver_rss_mib_peak": round(peak[0] / mib), "stop_s": round(t_stop, 2), "export_s": round(t_export, 1)},
                goal="all shipped; collector RSS bounded; stop <= 5 s")
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)   # two traces of a few hundred thousand events


if __name__ == "__main__":
    main()
