"""`rldbg report` on traces recorded through the real path: Ray actors calling the seam."""
from __future__ import annotations

import gzip
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
from rldbg.store import TraceFileError  # noqa: E402
from rldbg.trace.report import analyse  # noqa: E402
from trace_processor import query  # noqa: E402

CYCLES = 8   # 2 warm-up cycles + enough for the leak rule's median (rldbg.memory.leaks)
MB = 1 << 20


@ray.remote(num_cpus=0)
class Trainer:
    """Rank `slow_rank` trains 10x longer; rank `leaky_rank`'s offload keeps its buffer alive
    (in its optimizer ledger, or, with keep_ledger=False, where no ledger category sees it)."""

    def __init__(self, role, rank, world, slow_rank=None, leaky_rank=None, keep_ledger=True):
        import torch  # noqa: F401  (CUDA probe looks at an imported torch only)
        self.role, self.rank = role, rank
        self.slow, self.leaky = rank == slow_rank, rank == leaky_rank
        self.kept, self.buf = [], None
        self.keep_ledger = keep_ledger
        ri.set_worker_identity(role, rank, world)

    def update(self, tag):
        import torch
        with ri.worker_call(self.role, self.rank, "update", tag):
            with ri.transition("reload_optimizer", loads=("optimizer",)):
                self.buf = torch.ones(40 * MB // 4)   # > glibc's mmap threshold: freeing returns it
                if self.keep_ledger:
                    ri.ledger("optimizer", self.buf.nbytes)
            time.sleep(0.3 if self.slow else 0.03)   # 10x: a loaded machine keeps it > 1.5x
            with ri.transition("offload_optimizer", frees=("optimizer",)):
                if self.leaky:
                    self.kept.append(self.buf)
                self.buf = None
                if self.keep_ledger:
                    ri.ledger("optimizer", sum(t.nbytes for t in self.kept))
        return self.rank


def _run(path, role, world, **kw):
    ws = [Trainer.remote(role, r, world, **kw) for r in range(world)]
    ray.get([w.__ray_ready__.remote() for w in ws])
    with rldbg.trace.tracing(path, memory_hz=0):
        for n in range(CYCLES):
            with ri.step(n):
                c = ri.call_begin(role, "update", "all", world, n)
                refs = [w.update.remote(c.tag) for w in ws]
                ri.call_dispatched(c, None)
                ri.call_collected(c, {"ranks": ray.get(refs)})
                time.sleep(0.02)   # controller work between calls
    for w in ws:
        ray.kill(w)
    return path


@pytest.fixture(scope="module")
def straggler_trace(ray_cluster, tmp_path_factory):
    return _run(str(tmp_path_factory.mktemp("rep") / "straggler.json.gz"), "actor", 3, slow_rank=2)


@pytest.fixture(scope="module")
def leak_trace(ray_cluster, tmp_path_factory):
    return _run(str(tmp_path_factory.mktemp("rep") / "leak.json"), "critic", 2, leaky_rank=1)


def test_straggler_is_named(straggler_trace):
    r = analyse(straggler_trace)
    assert [(s["role"], s["rank"], s["method"]) for s in r["stragglers"]] == [("actor", 2, "update")]
    assert r["time"]["steps"] == CYCLES and 0 < r["time"]["roles"]["actor"]["share"] <= 1
    assert r["controller"]["between_calls_s"] > 0
    assert not r["leaks"]


def test_leak_after_offload_is_named(leak_trace):
    r = analyse(leak_trace)
    # Only the leaky rank, in the ledger category that grows; its healthy peer (rank 0) is not named.
    assert [(k["role"], k["rank"], k["transition"], k["category"]) for k in r["leaks"]] == [
        ("critic", 1, "offload_optimizer", "optimizer")]
    assert 38 * MB <= r["leaks"][0]["bytes_per_cycle"] <= 42 * MB   # one 40 MiB buffer kept per cycle
    peaks = {(p["role"], p["phase"]) for p in r["memory_peaks"]}
    assert {("critic", "update"), ("critic", "reload_optimizer"), ("critic", "offload_optimizer")} <= peaks


def test_leak_without_ledger_is_unaccounted(ray_cluster, tmp_path):
    path = _run(str(tmp_path / "unledgered.json.gz"), "critic", 2, leaky_rank=0, keep_ledger=False)
    r = analyse(path)
    assert [(k["role"], k["rank"], k["category"]) for k in r["leaks"]] == [("critic", 0, "unaccounted")]
    assert r["leaks"][0]["bytes_per_cycle"] >= 30 * MB
    out = subprocess.run([sys.executable, "-m", "rldbg.cli", "report", path], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if "per cycle" in ln]
    assert len(lines) == 1 and "critic rank 0" in lines[0] and "no ledger category" in lines[0]


def test_cli_text_and_json(straggler_trace):
    out = subprocess.run([sys.executable, "-m", "rldbg.cli", "report", straggler_trace],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "STRAGGLER actor rank 2" in out.stdout
    js = subprocess.run([sys.executable, "-m", "rldbg.cli", "report", straggler_trace, "--json"],
                        capture_output=True, text=True)
    assert json.loads(js.stdout)["stragglers"][0]["rank"] == 2


def test_truncated_trace_still_reads(leak_trace, tmp_path):
    text = open(leak_trace).read()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: int(len(text) * 0.8)])
    r = analyse(str(cut))
    assert r["memory_peaks"]
    # Perfetto's trace processor loads the same cut file.
    assert query(str(cut), "select count(*) as n from slice")[0]["n"] > 0
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(gzip.compress(text.encode())[:-200])
    assert analyse(str(gz))["memory_peaks"]



def test_html_report_lists_the_alarms_the_text_report_lists(leak_trace, tmp_path):
    """The HTML's non-finite table is the analysis's (sentinel.alarms): a user's own instant whose
    name merely contains "nonfinite" is no alarm there either."""
    from rldbg import sentinel
    from rldbg.trace.html_report import render_html
    events = json.load(open(leak_trace))
    alarm = {"role": "critic", "rank": 1, "method": "update_critic", "step": 3, "key": "values", "count": 2}
    events.append({"ph": "i", "s": "t", "pid": 2, "tid": 2, "cat": "rldbg", "name": sentinel.EVENT,
                   "ts": "500.000", "args": alarm})
    events.append({"ph": "i", "s": "t", "pid": 2, "tid": 1, "cat": "user", "name": "nonfinite_probe",
                   "ts": "400.000", "args": {"role": "critic", "rank": 0, "method": "probe_method"}})
    path = tmp_path / "alarm.json"
    path.write_text(json.dumps(events))
    assert [(a["rank"], a["method"]) for a in analyse(str(path))["nonfinite"]] == [(1, "update_critic")]
    page = render_html(str(path))
    assert "update_critic" in page and "values" in page
    assert "probe_method" not in page

def test_bad_files_give_one_line_errors(tmp_path):
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]))
    with pytest.raises(TraceFileError, match="no rldbg events"):
        analyse(str(foreign))
    (tmp_path / "text.json").write_text("hello")
    for path, msg in [(tmp_path / "missing.json", "not found"), (tmp_path / "text.json", "not a Chrome JSON")]:
        out = subprocess.run([sys.executable, "-m", "rldbg.cli", "report", str(path)], capture_output=True, text=True)
        assert out.returncode == 2 and msg in out.stderr and len(out.stderr.strip().splitlines()) == 1


def _calls(durs_by_call):
    """Exported call slices: one flow per call, {rank: duration in us}."""
    events, ts = [], 0
    for flow, durs in enumerate(durs_by_call, 1):
        for rank, dur in durs.items():
            events.append({"ph": "X", "cat": "call", "name": "m", "ts": ts, "dur": dur, "pid": 1, "tid": rank + 1,
                           "args": {"role": "actor", "rank": rank, "method": "m", "flow": flow}})
        ts += 1_000_000
    return events


def test_stragglers_need_several_calls_and_a_real_excess():
    from rldbg.analysis.stragglers import stragglers
    from trace_of import trace_of as Trace
    one_off = _calls([{0: 100_000, 1: 180_000}])                    # one call, 1.8x: noise (an init_model)
    tiny = _calls([{0: 100, 1: 900}] * 10)                           # 9x slower but 0.8 ms: not worth a line
    real = _calls([{0: 30_000, 1: 30_000, 2: 120_000}] * 4)          # 4 calls, 4x and 90 ms slower
    assert stragglers(Trace(one_off))["stragglers"] == []
    assert stragglers(Trace(tiny))["stragglers"] == []
    assert [(s["rank"], s["calls"]) for s in stragglers(Trace(real))["stragglers"]] == [(2, 4)]


def test_a_call_paused_at_a_breakpoint_is_no_skew_and_its_stop_is_said(tmp_path):
    """Rank 1 stopped 30 s at a breakpoint in its third call: that call (both ranks') is left out of
    the skew, which would otherwise read ~1000x, the straggler rule's medians outvote it, and the
    report names the stop."""
    from rldbg.trace.report import analysis, render
    from trace_of import trace_of as Trace
    events = _calls([{0: 30_000, 1: 31_000}] * 2 + [{0: 30_000, 1: 30_030_000}] + [{0: 30_000, 1: 31_000}] * 2)
    stop = {"ph": "i", "s": "t", "cat": "user", "name": "breakpoint", "ts": 2_000_000 + 10_000, "pid": 1, "tid": 2,
            "args": {"role": "actor", "rank": 1, "step": 2, "method": "m", "file": "/src/actor.py", "line": 45,
                     "reason": "breakpoint"}}
    path = tmp_path / "paused.json"
    path.write_text(json.dumps(events + [stop]))
    page = tmp_path / "page.html"
    out = subprocess.run([sys.executable, "-m", "rldbg", "report", str(path), "--html", str(page)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Breakpoint stops" in page.read_text() and "/src/actor.py" in page.read_text()
    r = analysis(Trace(events + [stop]))
    assert r["skew"] == [{"role": "actor", "method": "m", "calls": 4, "mean_max_over_min": 1.03}]
    assert r["stragglers"] == [] and r["calls_paused"] == 1
    assert r["breakpoint_stops"] == [{"role": "actor", "rank": 1, "step": 2, "method": "m", "file": "/src/actor.py",
                                      "line": 45, "reason": "breakpoint"}]
    said = ("  not in the skew: 1 call(s) paused at 1 breakpoint stop(s), which the step times include: actor rank 1 "
            "step 2 at actor.py:45")
    assert said in render(r).splitlines() and said in out.stdout.splitlines()
    without = analysis(Trace(events))   # the same calls, no stop recorded: the pause is skew
    assert without["skew"][0]["mean_max_over_min"] > 100 and without["calls_paused"] == 0
