"""Transition truth: for every transition that declares what it frees or loads, what the ledger
says moved, what the caching allocator did (allocated, reserved), what the device shows (the
whole GPU's used bytes: a rollout server in another process returns its memory there too) or, on a
CPU, the RSS — and a verdict a user can act on.

Read off the two memory samples rldbg takes at a transition's edges (rldbg.instrument.transition
records them at the exact start and end times), never off the 10 Hz sampler, and off the ledger
the trainer reports (inside the transition, or, in older traces, at the end of the call: the next
report after the transition is then what it left).

Verdicts for a transition that frees (its ledger categories drop by E bytes):
  returned   the device (RSS on a CPU) dropped by at least RETURNED_SHARE of E
  cached     the allocator freed at least that share but kept the blocks reserved: nothing went
             back to the GPU until torch.cuda.empty_cache() (judged from SEGMENT_BYTES on: smaller
             frees may sit in segments shared with live blocks, which nothing can return)
  held       not even the allocator freed it: something still references the tensors
For one that loads E bytes: `more` when the device (or RSS) grew by more than E plus a margin
(LOAD_MARGIN_BYTES or LOAD_MARGIN_SHARE of E, the larger), else `as_declared`.
"""
from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from operator import itemgetter

from rldbg.trace.events import FREES, LOADS, moves

MiB = 1 << 20
RETURNED_SHARE = 0.5
MIN_JUDGED_BYTES = 1 * MiB        # below this the allocator's block rounding decides, not the trainer
# torch's caching allocator carves allocations of 1-10 MiB out of 20 MiB segments, and a segment
# goes back to the GPU only when every block in it is free.
SEGMENT_BYTES = 20 * MiB
LOAD_MARGIN_BYTES = 32 * MiB
LOAD_MARGIN_SHARE = 0.25
WARMUP_CYCLES = 1
MIN_CYCLES = 2
EDGE_NS = 1_000_000               # an edge sample further than this from the edge is not the edge's

SERIES = ("cuda_allocated", "cuda_reserved", "device_used", "rss")
_NONE = ((), ())

CAUSES = {
    "returned": "returned to the device",
    "cached": ("freed but kept in the allocator's cache: the blocks stay reserved for this process; "
               "torch.cuda.empty_cache() after the transition returns them to the GPU"),
    "held": ("not freed: the allocator still holds the bytes, so something still references the "
             "tensors (a copy, a closure, a cache, an optimizer state kept alive)"),
    "rss_kept": ("not returned to the OS: RSS did not drop, so the memory is still referenced, or kept "
                 "in the C heap (glibc returns freed heap pages only when trimmed: malloc_trim)"),
    "more": "loaded more than declared",
    "as_declared": "loaded as declared",
}


def _change(series: tuple, t0: int, t1: int):
    """A (times, values) series' change over a transition: the first sample at or after t1 less
    the last one at or before t0, each taken only within EDGE_NS of its edge; else None."""
    times, values = series
    i, j = bisect.bisect_right(times, t0), bisect.bisect_left(times, t1)
    if i and t0 - times[i - 1] <= EDGE_NS and j < len(times) and times[j] - t1 <= EDGE_NS:
        return values[j] - values[i - 1]
    return None


class _Ledger:
    """A rank's ledger as transitions see it: what was last reported at an edge, with what an
    earlier transition left standing in for a report that came only after it."""

    def __init__(self, series: dict):
        self.series = series          # category -> (times, bytes) sorted by time
        self.left: dict = {}          # category -> (ts, bytes) a transition left

    def edges(self, cat: str, t0: int, t1: int) -> tuple:
        """(before, after) a transition over [t0, t1]: what was last reported at t0, and what it
        left: the last report inside it, else the first one after it (None for none)."""
        times, values = self.series.get(cat, _NONE)
        i, j = bisect.bisect_right(times, t0), bisect.bisect_right(times, t1)
        left = self.left.get(cat)
        before = left[1] if left is not None and (not i or left[0] >= times[i - 1]) else values[i - 1] if i else None
        if j and times[j - 1] >= t0:
            return before, values[j - 1]
        if j < len(times):
            self.left[cat] = (t1, values[j])
            return before, values[j]
        return before, None


def _cycle(s: dict, mem_series: dict, ledger: _Ledger) -> dict | None:
    args = s["args"]
    frees, loads = tuple(args.get(FREES) or ()), tuple(args.get(LOADS) or ())   # moves(), inlined: 10^5 calls
    if not frees and not loads:
        return None
    t0, t1 = s["ts"], s["end"]
    delta = {name: _change(series, t0, t1) for name, series in mem_series.items()}
    freed = loaded = 0
    for cat in dict.fromkeys(frees + loads):
        b, a = ledger.edges(cat, t0, t1)
        if b is not None and a is not None:
            if cat in frees and b > a:
                freed += b - a
            if cat in loads and a > b:
                loaded += a - b
    gpu, d = "cuda_allocated" in delta, delta.get
    # The whole GPU's figure first: a transition may put another process to sleep (a rollout
    # server), whose memory comes back there and not in this process's own.
    back = d("rss") if not gpu else d("cuda_reserved") if d("device_used") is None else d("device_used")
    c = {"step": s["step"], "declared": {"frees": list(frees), "loads": list(loads)}, "ledger_freed": freed,
         "ledger_loaded": loaded, "device": "cuda" if gpu else "cpu", "allocated_delta": d("cuda_allocated"),
         "reserved_delta": d("cuda_reserved"), "device_delta": d("device_used"), "rss_delta": d("rss"),
         "returned": None if back is None else -back}
    c["verdict"] = _verdict(c, frees, gpu)
    return c


def _verdict(c: dict, frees: tuple, gpu: bool) -> str | None:
    if frees and c["ledger_freed"] >= MIN_JUDGED_BYTES:
        want, back = c["ledger_freed"], c["returned"]
        if back is None:
            return None
        if back >= RETURNED_SHARE * want:
            return "returned"
        if not gpu:
            return "rss_kept"
        if -(c["allocated_delta"] or 0) < RETURNED_SHARE * want:
            return "held"
        # Freed, not returned: below a segment's size the blocks may share their segment with live
        # ones, which no empty_cache() can give back; that is the allocator's doing, not a finding.
        return "cached" if want >= SEGMENT_BYTES else None
    if c["ledger_loaded"] >= MIN_JUDGED_BYTES and c["returned"] is not None:
        grew, want = -c["returned"], c["ledger_loaded"]
        return "more" if grew > want + max(LOAD_MARGIN_BYTES, LOAD_MARGIN_SHARE * want) else "as_declared"
    return None


def cycles(t) -> dict:
    """(role, rank, transition) -> [cycle dicts] in time order, for every transition of the trace
    `t` (rldbg.trace.report_trace.Trace) that declares frees or loads."""
    mem_by_rank, ledgers, labels = defaultdict(dict), defaultdict(lambda: _Ledger({})), {}
    for (role, rank, series), columns in t.mem.items():
        if series in SERIES:   # the series a cycle reads, and only those
            mem_by_rank[(role, rank)][series] = columns
    for (role, rank, cat), columns in t.ledger.items():
        ledgers[(role, rank)].series[cat] = columns
    out = defaultdict(list)
    for s in sorted(t.transitions, key=itemgetter("ts")):
        key = (s["role"], s["rank"])
        c = _cycle(s, mem_by_rank.get(key, {}), ledgers[key])
        if c is not None:
            # One name may move different things (a wake of the weights, then of the KV cache).
            d = c["declared"]
            k = (s["name"], tuple(d["frees"]), tuple(d["loads"]))
            label = labels.get(k) or labels.setdefault(k, _label(s["name"], d))
            out[(s["role"], s["rank"], label)].append(c)
    return dict(out)


def _label(name: str, declared: dict) -> str:
    moved = [f"-{c}" for c in declared["frees"]] + [f"+{c}" for c in declared["loads"]]
    return f"{name} [{' '.join(moved)}]"


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


_MEDIANS = ("ledger_freed", "ledger_loaded", "allocated_delta", "reserved_delta", "device_delta", "rss_delta",
            "returned")


def table(by_key: dict) -> list[dict]:
    """One row per (role, rank, transition): medians over its cycles and the verdicts counted."""
    rows = []
    for (role, rank, name), cs in sorted(by_key.items()):
        verdicts = Counter(c["verdict"] for c in cs if c["verdict"])
        main = verdicts.most_common(1)[0][0] if verdicts else None
        rows.append({"role": role, "rank": rank, "transition": name, "cycles": len(cs),
                     "device": cs[0]["device"], "declared": cs[0]["declared"],
                     **dict(zip(_MEDIANS, map(_median, zip(*map(itemgetter(*_MEDIANS), cs))))),
                     "verdict": main, "verdicts": dict(verdicts), "cause": CAUSES.get(main) if main else None})
    return rows


def not_returned(by_key: dict, warmup: int = WARMUP_CYCLES, min_cycles: int = MIN_CYCLES) -> list[dict]:
    """The detector: a (rank, transition) whose every cycle after the first `warmup` is cached or
    held, over at least `min_cycles` cycles (a healthy offload returns its bytes every time, and a
    one-off miss is not a pattern). One dict per finding: bytes expected and returned (medians),
    the cycles judged, the verdict and its cause."""
    found = []
    for (role, rank, name), cs in sorted(by_key.items()):
        judged = [c for c in cs[warmup:] if c["verdict"] in ("returned", "cached", "held", "rss_kept")]
        if len(judged) < min_cycles or any(c["verdict"] == "returned" for c in judged):
            continue
        verdict = Counter(c["verdict"] for c in judged).most_common(1)[0][0]
        found.append({"role": role, "rank": rank, "transition": name, "cycles": len(judged),
                      "frees": judged[0]["declared"]["frees"],
                      "expected_bytes": int(_median([c["ledger_freed"] for c in judged])),
                      "returned_bytes": int(_median([c["returned"] for c in judged])),
                      "allocator_freed_bytes": int(-(_median([c["allocated_delta"] for c in judged]) or 0)),
                      "device": judged[0]["device"], "verdict": verdict, "cause": CAUSES[verdict],
                      "step": judged[-1]["step"]})
    return found


def analyse(t) -> dict:
    """{"transitions": the table, "not_returned": the detector's findings}."""
    by_key = cycles(t)
    return {"transitions": table(by_key), "not_returned": not_returned(by_key)}


def fmt_mib(b) -> str:
    """A signed MiB figure for the tables; "0.0" for what rounds to nothing, "-" for no reading."""
    if b is None:
        return "-"
    return "0.0" if abs(b) < MiB / 20 else f"{b / MiB:+.1f}"


def describe(f: dict) -> str:
    """One line for a finding, the same wherever it is shown."""
    where = "the GPU" if f["device"] == "cuda" else "the OS"
    return (f"{f['role']} rank {f['rank']}: {f['transition'].split(' [')[0]} frees {f['expected_bytes'] / MiB:.1f} MiB "
            f"({', '.join(f['frees'])}) but returns {max(f['returned_bytes'], 0) / MiB:.1f} MiB to {where}, "
            f"every cycle ({f['cycles']} after warm-up): {f['cause']}")


def render(rows: list[dict], findings: list[dict]) -> list[str]:
    """The report's text section."""
    if not rows:
        return ["memory by transition: no transition declares frees/loads"]
    gpu = any(r["device"] == "cuda" for r in rows)
    width = max(24, *(len(r["transition"]) for r in rows))
    lines = ["memory by transition (MiB, median over cycles; "
             + ("allocator allocated/reserved, the whole GPU's used):" if gpu else "RSS on CPU):"),
             f"  {'role':<8} {'rank':>4} {'transition [ledger categories]':<{width}} {'n':>4} {'ledger':>8} "
             + (f"{'alloc':>8} {'reserv':>8} {'device':>8}" if gpu else f"{'rss':>8}") + "  verdict"]
    for r in rows:
        led = -r["ledger_freed"] if r["declared"]["frees"] else r["ledger_loaded"]
        mem = (f"{fmt_mib(r['allocated_delta']):>8} {fmt_mib(r['reserved_delta']):>8} {fmt_mib(r['device_delta']):>8}"
               if r["device"] == "cuda" else f"{fmt_mib(r['rss_delta']):>8}")
        verdict = r["verdict"] or "-"
        if r["verdicts"] and len(r["verdicts"]) > 1:
            verdict += " (" + ", ".join(f"{k} {n}" for k, n in sorted(r["verdicts"].items())) + ")"
        lines.append(f"  {r['role']:<8} {r['rank']:>4} {r['transition']:<{width}} {r['cycles']:>4} {fmt_mib(led):>8} "
                     f"{mem}  {verdict}")
    lines += ["", "memory not returned:" if findings else "memory not returned: none"]
    lines += [f"  {describe(f)}" for f in findings]
    return lines


class Live:
    """The same verdicts for one rank, live (`rldbg top`): fed its memory samples, ledger reports
    and transitions as they arrive, bounded. A transition is judged once a memory sample at or
    after its end is in (the sample its end took follows the transition's own event)."""

    KEEP = 4096          # samples kept per series; a cycle needs only those around its edges
    CYCLES = 32          # cycles kept per transition

    def __init__(self):
        self.mem: dict = defaultdict(lambda: ([], []))
        self.ledger = _Ledger(defaultdict(lambda: ([], [])))
        self.pending: list = []
        self.by_key: dict = {}
        self.newest = 0

    @staticmethod
    def _push(series: tuple, ts: int, v) -> None:
        times, values = series
        i = bisect.bisect_right(times, ts)
        times.insert(i, ts)
        values.insert(i, v)
        if len(times) > 2 * Live.KEEP:
            del times[:-Live.KEEP], values[:-Live.KEEP]

    def memory(self, ts: int, sample: dict) -> None:
        for name in SERIES:
            v = sample.get(name)
            if isinstance(v, (int, float)):
                self._push(self.mem[name], ts, v)
        self.newest = max(self.newest, ts)

    def ledger_report(self, ts: int, values: dict) -> None:
        for cat, v in values.items():
            if isinstance(v, (int, float)):
                self._push(self.ledger.series[cat], ts, v)

    def transition(self, name: str, ts: int, dur: int, step, args: dict) -> None:
        if any(moves(args)):
            self.pending.append({"name": name, "ts": ts, "end": ts + dur, "step": step, "args": args})

    def judge(self) -> bool:
        """Judge the transitions whose end sample is in; True when any was."""
        ready = [s for s in self.pending if s["end"] <= self.newest]
        if not ready:
            return False
        self.pending = [s for s in self.pending if s["end"] > self.newest]
        for s in sorted(ready, key=lambda s: s["ts"]):
            c = _cycle(s, self.mem, self.ledger)
            if c is not None:
                q = self.by_key.setdefault(_label(s["name"], c["declared"]), [])
                q.append(c)
                del q[:-self.CYCLES]
        return True

    def findings(self, role, rank) -> list[dict]:
        """not_returned() over this rank's recent cycles."""
        return not_returned({(role, rank, k): v for k, v in self.by_key.items()})
