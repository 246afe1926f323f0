"""Nodes and one clock in the trace: every rank names its node, IP and pid (trace metadata,
`rldbg report`), and a worker whose wall clock is off is put back on the collector's clock.

The skew is injected honestly: the skewed actor replaces time.time_ns in its own process (and
the reference rldbg.api bound to it at import) before it starts tracing, so everything that
process records AND its clock round trips see the wrong clock, as on a machine whose clock is off.
Nothing in rldbg knows about it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import pytest  # noqa: E402
import ray  # noqa: E402

import rldbg  # noqa: E402
from rldbg import instrument as ri  # noqa: E402
from rldbg.trace.export import export_spill  # noqa: E402
from rldbg.store.chrome_import import ts_ns  # noqa: E402
from trace_of import load_events  # noqa: E402
from trace_processor import stats_errors  # noqa: E402

SKEW_NS = 250_000_000   # rank 1's clock runs 250 ms ahead: far more than a call lasts
CALLS = 6
MS = 1_000_000


@ray.remote(num_cpus=0)
class Skewable:
    def __init__(self, role, rank, world, skew_ns=0, roles=None):
        if skew_ns:   # this process's wall clock is off by skew_ns, wherever rldbg reads it
            import rldbg.api
            import rldbg.instrument
            real = time.time_ns
            time.time_ns = lambda: real() + skew_ns
            # The hot paths (spans, worker calls) bound time.time_ns at import.
            rldbg.api._now = time.time_ns
            rldbg.instrument._now = time.time_ns
        self.role, self.rank = role, rank
        ri.set_worker_identity(role, rank, world, roles=roles)

    def where(self):
        return os.getpid(), ray.get_runtime_context().get_node_id()

    def work(self, tag, role=None):
        with ri.worker_call(role or self.role, self.rank, "work", tag):
            with rldbg.span("inner"):
                time.sleep(0.02)
        return self.rank


@pytest.fixture(scope="module")
def run(ray_cluster, tmp_path_factory):
    d = tmp_path_factory.mktemp("clock")
    path = str(d / "trace.json")
    ws = [Skewable.remote("actor", 0, 2, roles=("actor", "ref")), Skewable.remote("actor", 1, 2, skew_ns=SKEW_NS)]
    where = ray.get([w.where.remote() for w in ws])
    with rldbg.trace.tracing(path, memory_hz=0, flush_interval=0.1) as spill:
        for n in range(CALLS):
            with ri.step(n):
                c = ri.call_begin("actor", "work", "all", 2, n)
                refs = [w.work.remote(c.tag) for w in ws]
                ri.call_dispatched(c)
                ri.call_collected(c, ray.get(refs))
                c = ri.call_begin("ref", "work", "all", 1, n)   # rank 0 serves "ref" too (colocated)
                refs = [ws[0].work.remote(c.tag, "ref")]
                ri.call_dispatched(c)
                ri.call_collected(c, ray.get(refs))
    raw = str(d / "raw.json")
    export_spill(spill, raw, align_clocks=False)
    for w in ws:
        ray.kill(w)
    return {"path": path, "raw": raw, "where": where, "node": ray.get_runtime_context().get_node_id()}


def _report(path, *flags):
    r = subprocess.run([sys.executable, "-m", "rldbg", "report", *flags, path], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _nesting(path):
    """For each rank: how far (ns) its work slices stick out of the driver's call span, worst case."""
    evs = load_events(path)
    driver = {e["args"]["flow"]: (ts_ns(e["ts"]), ts_ns(e["ts"]) + ts_ns(e["dur"])) for e in evs
              if e.get("cat") == "driver_call" and e.get("name") == "work" and "mode" in e["args"]}
    out = {}
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") == "call":
            lo, hi = driver[e["args"]["flow"]]
            a, b = ts_ns(e["ts"]), ts_ns(e["ts"]) + ts_ns(e["dur"])
            out[e["args"]["rank"]] = max(out.get(e["args"]["rank"], 0), lo - a, b - hi)
    return out


def test_ranks_name_their_node_ip_and_pid(run):
    r = json.loads(_report(run["path"], "--json"))
    (p0, n0), (p1, n1) = run["where"]
    got = {(x["role"], x["rank"]): x for x in r["ranks"]}
    assert set(got) == {("driver", 0), ("actor", 0), ("actor", 1), ("ref", 0)}, r["ranks"]
    assert got[("actor", 0)]["pid"] == p0 and got[("actor", 0)]["node"] == n0
    assert got[("ref", 0)]["pid"] == p0 and got[("ref", 0)]["node"] == n0   # one process, once per role
    assert got[("actor", 1)]["pid"] == p1 and got[("actor", 1)]["node"] == n1
    assert got[("driver", 0)]["pid"] == os.getpid() and got[("driver", 0)]["node"] == run["node"]
    assert {x["ip"] for x in r["ranks"]} == {"127.0.0.1"}
    text = _report(run["path"])
    assert f"actor            rank 1   node {n1[:8]}  127.0.0.1" in text, text
    # the call slices carry the node too
    calls = [e for e in load_events(run["path"]) if e.get("cat") == "call"]
    assert {(e["args"]["role"], e["args"]["rank"], e["args"]["node"], e["args"]["ip"]) for e in calls} == \
        {("actor", 0, n0[:8], "127.0.0.1"), ("ref", 0, n0[:8], "127.0.0.1"), ("actor", 1, n1[:8], "127.0.0.1")}


def test_skewed_worker_is_aligned_within_a_millisecond(run):
    r = json.loads(_report(run["path"], "--json"))
    clock = r["clock"]
    assert clock["aligned"] is True
    (_, _), (p1, _) = run["where"]
    est = next(v for k, v in clock["processes"].items() if k.endswith(f":{p1}"))
    # NTP's bound: the true offset (-SKEW_NS: this machine has one real clock) is within ± rtt/2
    assert abs(est["offset_ns"] + SKEW_NS) <= est["uncertainty_ns"], est
    assert 0 < clock["max_uncertainty_ns"] == max(v["uncertainty_ns"] for v in clock["processes"].values())
    aligned, raw = _nesting(run["path"]), _nesting(run["raw"])
    assert aligned[0] <= MS and aligned[1] <= MS, aligned      # nested in the driver's call, within 1 ms
    assert raw[0] <= MS and raw[1] > SKEW_NS // 2, raw         # without the correction rank 1 is 250 ms off
    assert "clocks aligned to the collector's within" in _report(run["path"])
    assert stats_errors(run["path"]) == []   # one shift per process: its spans stay nested for Perfetto
