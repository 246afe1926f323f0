"""Transition truth: for every transition that declares what it frees or loads, what the ledger says moved, what the
caching allocator did (allocated, reserved), what the device shows (the whole GPU's used bytes: a rollout server in
another process returns its memory there too) or, on a CPU, the RSS — and a verdict a user can act on.

Read off the two memory samples at a transition's edges (rldbg.instrument.transition takes them at
its end and start, or just before its start: rldbg.memory.probes.opening), never off the 10 Hz
sampler, and off the ledger the trainer reports (inside the transition, or, in older traces, at the
end of the call: the next report after the transition is then what it left).

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

CAUSES = {
    "returned": "returned to the device",
    "cached": ("freed but kept in the allocator's cache: the blocks stay reserved for this process; "
               "torch.cuda.empty_cache() after the transition returns them to the GPU"),
    "held": ("not freed: the allocator still holds the bytes, so something still references the "
             "tensors (a copy, a closure, a cache, an optimizer state kept alive)"),
    "rss_kept": ("not returned to the OS: RSS did not drop, so the memory is still referenced, or kept "
                 "in the C heap (glibc returns freed heap pages only when trimmed: malloc_trim)"),
    "more": "loaded more than declared", "as_declared": "loaded as declared",
}


def _changes(series: tuple, t0s, t1s) -> list:
    """A (times, values) series' change over each transition [t0, t1]: the first sample at or after
    t1 less the last one at or before t0, each taken only within EDGE_NS of its edge; else None."""
    times, values = series
    out = []
    for t0, t1 in zip(t0s, t1s):
        i, j = bisect.bisect_right(times, t0), bisect.bisect_left(times, t1)
        found = i and t0 - times[i - 1] <= EDGE_NS and j < len(times) and times[j] - t1 <= EDGE_NS
        out.append(values[j] - values[i - 1] if found else None)
    return out


def _edges(series: tuple, moving: list, left: tuple | None) -> tuple[dict, tuple | None]:
    """A ledger category's (before, after) each transition (n, t0, t1, step) moving it, in time order:
    the last report at t0, and what it left: the last report inside it, else the first one after it
    (`left`, (ts, bytes): the report before a later transition until a report comes after it);
    (0, 0) where either is missing. -> ({n: (before, after)}, left)"""
    times, values = series
    out = {}
    for n, t0, t1, _ in moving:
        i, j = bisect.bisect_right(times, t0), bisect.bisect_right(times, t1)
        before = left[1] if left is not None and (not i or left[0] >= times[i - 1]) else values[i - 1] if i else None
        inside = j and times[j - 1] >= t0
        if not inside and j < len(times):   # no report inside it, one after: it leaves that one
            left = (t1, values[j])
        after = values[j - 1] if inside else values[j] if j < len(times) else None
        out[n] = (0, 0) if before is None or after is None else (before, after)
    return out, left


def _verdict(frees, gpu: bool, want, loaded, allocated, back) -> str | None:
    if frees and want >= MIN_JUDGED_BYTES:
        if back is None:
            return None
        if back >= RETURNED_SHARE * want:
            return "returned"
        if not gpu:
            return "rss_kept"
        if -(allocated or 0) < RETURNED_SHARE * want:
            return "held"
        # Freed, not returned: below a segment's size the blocks may share their segment with live
        # ones, which no empty_cache() can give back; that is the allocator's doing, not a finding.
        return "cached" if want >= SEGMENT_BYTES else None
    if loaded >= MIN_JUDGED_BYTES and back is not None:
        return "more" if -back > loaded + max(LOAD_MARGIN_BYTES, LOAD_MARGIN_SHARE * loaded) else "as_declared"
    return None


def cycles(t) -> dict:
    """(role, rank, transition) -> [cycle dicts] in time order, for every transition of the trace
    `t` (rldbg.trace.report_trace.Trace) that declares frees or loads."""
    return {key: [dict(zip(cs, row)) for row in zip(*cs.values())]
            for key, cs in _kinds(t.transitions, t.mem, t.ledger, {}).items()}


def _kinds(transitions: list, mem: dict, ledger: dict, left: dict) -> dict:
    """cycles() as columns, (role, rank, transition) -> {field: [a value per cycle]}, from slice
    records and the (role, rank, name) -> (times, values) of memory and ledger; `left` (_edges())
    by (role, rank, category), updated. Each record read once, then a kind of transition at a time,
    column by column: a long run has 10^5 transitions, dicts all over memory."""
    groups, moving, edges, parts = defaultdict(list), defaultdict(list), {}, defaultdict(list)
    got = sorted(map(itemgetter("ts", "end", "step", "role", "rank", "name", "args"), transitions), key=itemgetter(0))
    for n, (ts, end, step, role, rank, name, args) in enumerate(got):
        frees, loads = tuple(args.get(FREES) or ()), tuple(args.get(LOADS) or ())   # moves(), inlined
        if frees or loads:
            groups[(role, rank, name, frees, loads)].append((n, ts, end, step))
    # A category's edges depend on what the transitions moving it before left: those in time order.
    for (role, rank, _, frees, loads), g in groups.items():
        for cat in dict.fromkeys(frees + loads):
            moving[(role, rank, cat)] += g
    for key, g in moving.items():
        edges[key], left[key] = _edges(ledger.get(key) or ((), ()), sorted(g, key=itemgetter(0)), left.get(key))
    for (role, rank, name, frees, loads), g in groups.items():
        ns, t0, t1, steps = zip(*g)
        delta = {s: _changes(mem[(role, rank, s)], t0, t1) for s in SERIES if (role, rank, s) in mem}
        freed = loaded = [0] * len(ns)
        for cat in dict.fromkeys(frees + loads):
            at = list(map(edges[(role, rank, cat)].__getitem__, ns))
            if cat in frees:
                freed = [f + (b - a) if b > a else f for f, (b, a) in zip(freed, at)]
            if cat in loads:
                loaded = [x + (a - b) if a > b else x for x, (b, a) in zip(loaded, at)]
        gpu, declared = "cuda_allocated" in delta, {"frees": list(frees), "loads": list(loads)}
        allocated, reserved, device, rss = (delta.get(series) or [None] * len(ns) for series in SERIES)
        # The whole GPU's figure first: a transition may put another process to sleep (a rollout
        # server), whose memory comes back there and not in this process's own.
        back = rss if not gpu else [r if d is None else d for r, d in zip(reserved, device)]
        back = [None if b is None else -b for b in back]
        verdicts = [_verdict(frees, gpu, *row) for row in zip(freed, loaded, allocated, back)]
        # One declared dict for all of a kind's cycles: nothing changes it.
        cs = dict(zip(_FIELDS, (list(steps), [declared] * len(ns), freed, loaded, ["cuda" if gpu else "cpu"] * len(ns),
                                allocated, reserved, device, rss, back, verdicts)))
        # One name may move different things (a wake of the weights, then of the KV cache).
        moved = [f"-{c}" for c in declared["frees"]] + [f"+{c}" for c in declared["loads"]]
        parts[(role, rank, f"{name} [{' '.join(moved)}]")].append((ns, cs))
    out = {}
    for key, got in parts.items():   # in the order their transitions first came
        # Two kinds share a label only through odd category names ("a +b"): merged in time order.
        rows = sorted((n, *row) for ns, cs in got for n, row in zip(ns, zip(*cs.values()))) if got[1:] else ()
        out[key] = {f: [row[k + 1] for row in rows] for k, f in enumerate(_FIELDS)} if rows else got[0][1]
    return out


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


_MEDIANS = ("ledger_freed", "ledger_loaded", "allocated_delta", "reserved_delta", "device_delta", "rss_delta",
            "returned")
_FIELDS = ("step", "declared", "ledger_freed", "ledger_loaded", "device") + _MEDIANS[2:] + ("verdict",)   # a cycle's


def _columns(by_key: dict) -> dict:
    """(role, rank, transition) -> {field: [a value per cycle]}, from cycles() or _kinds() (those already)."""
    return {key: cs if type(cs) is dict else {f: [c[f] for c in cs] for f in _FIELDS} for key, cs in by_key.items()}


def table(by_key: dict) -> list[dict]:
    """One row per (role, rank, transition): medians over its cycles and the verdicts counted."""
    rows = []
    for (role, rank, name), cs in sorted(_columns(by_key).items()):
        verdicts = Counter(v for v in cs["verdict"] if v)
        main = verdicts.most_common(1)[0][0] if verdicts else None
        rows.append({"role": role, "rank": rank, "transition": name, "cycles": len(cs["step"]),
                     "device": cs["device"][0], "declared": cs["declared"][0], **{f: _median(cs[f]) for f in _MEDIANS},
                     "verdict": main, "verdicts": dict(verdicts), "cause": CAUSES.get(main) if main else None})
    return rows


def not_returned(by_key: dict, warmup: int = WARMUP_CYCLES, min_cycles: int = MIN_CYCLES) -> list[dict]:
    """The detector: a (rank, transition) whose every cycle after the first `warmup` is cached or held, over at least
    `min_cycles` cycles (a healthy offload returns its bytes every time, and a one-off miss is not a pattern). One dict
    per finding: bytes expected and returned (medians), the cycles judged, the verdict and its cause."""
    found = []
    for (role, rank, name), cs in sorted(_columns(by_key).items()):
        verdicts = cs["verdict"]
        judged = [k for k in range(len(verdicts))[warmup:] if verdicts[k] in ("returned", "cached", "held", "rss_kept")]
        if len(judged) < min_cycles or any(verdicts[k] == "returned" for k in judged):
            continue
        verdict = Counter(verdicts[k] for k in judged).most_common(1)[0][0]
        freed, back, allocated = ([cs[f][k] for k in judged] for f in ("ledger_freed", "returned", "allocated_delta"))
        found.append({"role": role, "rank": rank, "transition": name, "cycles": len(judged),
                      "frees": cs["declared"][judged[0]]["frees"], "expected_bytes": int(_median(freed)),
                      "returned_bytes": int(_median(back)), "allocator_freed_bytes": int(-(_median(allocated) or 0)),
                      "device": cs["device"][judged[0]], "verdict": verdict, "cause": CAUSES[verdict],
                      "step": cs["step"][judged[-1]]})
    return found


def analyse(t) -> dict:
    """{"transitions": the table, "not_returned": the detector's findings}."""
    kinds = _kinds(t.transitions, t.mem, t.ledger, {})
    return {"transitions": table(kinds), "not_returned": not_returned(kinds)}


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
        self.mem: dict = defaultdict(lambda: ([], []))      # (None, None, series): the one rank's, as in a Trace
        self.ledger: dict = defaultdict(lambda: ([], []))   # (None, None, category)
        self.left: dict = {}                                 # what transitions left (_edges())
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
                self._push(self.mem[(None, None, name)], ts, v)
        self.newest = max(self.newest, ts)

    def ledger_report(self, ts: int, values: dict) -> None:
        for cat, v in values.items():
            if isinstance(v, (int, float)):
                self._push(self.ledger[(None, None, cat)], ts, v)

    def transition(self, name: str, ts: int, dur: int, step, args: dict) -> None:
        if any(moves(args)):
            self.pending.append(dict(name=name, ts=ts, end=ts + dur, step=step, role=None, rank=None, args=args))

    def judge(self) -> bool:
        """Judge the transitions whose end sample is in; True when any was."""
        if not (ready := [s for s in self.pending if s["end"] <= self.newest]):
            return False
        self.pending = [s for s in self.pending if s["end"] > self.newest]
        for (_, _, label), cs in _kinds(ready, self.mem, self.ledger, self.left).items():
            kept = self.by_key.get(label, []) + [dict(zip(cs, row)) for row in zip(*cs.values())]
            self.by_key[label] = kept[-self.CYCLES:]
        return True

    def findings(self, role, rank) -> list[dict]:
        """not_returned() over this rank's recent cycles."""
        return not_returned({(role, rank, k): v for k, v in self.by_key.items()})
