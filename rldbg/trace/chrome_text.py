"""The Chrome JSON text of rldbg's events: the trace layout Perfetto reads, event by event.

Layout (Perfetto pitfalls in /work/shared/FACTS.md): one process per role with small int pids
and process_name metadata (the driver is pid 1), one thread per rank (tid = rank + 1, named
"rank N"; in the driver's process one per controller: "driver", then "controller pid N");
counters are per-process tracks named "rank N <counter> <series>". Timestamps are integer ns
relative to the origin, written as exact 3-decimal µs. Each driver call becomes
call > dispatch > send→rank i, call > wait > recv←rank i, and the flow for rank i runs
send → the rank's slice → recv with flow v2 (one bind_id per call and rank, flow_in+flow_out on
the rank slice). A slice's args are its own then the layout's role/rank/step/method it lacks
(its own win); an instant's are its own with the layout's role/rank/step (the layout's win); args
that are not a dict are kept whole under "value".

Everything here reads the store's tracks (rldbg.store.tracks.Tracks: tracks, origin, clock
offsets, rank slice ends, bind ids) and writes text; the exporter owns the read of the store
and the file around the events.
"""
from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring
from operator import itemgetter

import orjson

from rldbg.trace.events import INSTANT, SLICE

dumps = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
# The C encoder built once (JSONEncoder.encode builds one per call): the same output as dumps.
_enc = c_make_encoder(None, str, encode_basestring, None, ":", ",", False, False, True)
_ojdumps = orjson.dumps


def args_json(args: dict) -> str:
    """An event's args as JSON: the bytes dumps writes, made by orjson (about 5x faster here)
    wherever orjson writes the same bytes, by the stdlib's C encoder where it may not: NaN and
    Infinity (orjson writes null), floats below 1e-4 (orjson writes them without an exponent),
    keys that are not strings, ints beyond 64 bits and lone surrogates (orjson refuses those).
    The guards also send some args orjson would have written the same way (a None, a string
    holding "e-") to the stdlib: slower, never different."""
    try:
        s = _ojdumps(args, default=str).decode()   # looked into as str: `in` on bytes costs 8x here
    except TypeError:
        return "".join(_enc(args, 0))
    if "null" in s or "e-" in s or ".0000" in s:
        return "".join(_enc(args, 0))
    return s


def us(ns: int) -> str:
    """ns as the exact 3-decimal µs string the layout writes."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}"


_SLICE_KEYS = frozenset(("role", "rank", "step", "method", "node", "ip"))
_INSTANT_KEYS = frozenset(("role", "rank", "step"))
_CACHE_MAX = 200_000   # distinct templates kept; beyond it the cache starts over


class Formatter:
    """Chrome JSON text for a batch of events, by string templates: for each distinct
    (ph, cat, name, role, rank, step, method) of a slice or instant, and each counter track, the
    JSON of everything but the times and the event's own args is built once and cached; per
    event only the times, and args when it has any, are formatted. The output is byte for byte
    what json.dumps of the event's dict writes (same keys, same order); an event whose args
    carry a key the exporter also sets takes the dict path, so its args win as before."""

    def __init__(self, idx):
        self.idx = idx
        self.origin = idx.origin
        # Where each rank's process runs, shown on its call slices.
        self.nodes = {rr: (p.get("node_id", "")[:8], p.get("node_ip", "")) for rr, p in
                      ((rr, idx.procs.get(k, {})) for rr, k in idx.rank_proc.items())}
        self.cache: dict = {}   # key -> (prefix up to the ts digits, args JSON, args without braces, defaults)
        # A slice's or instant's text up to its ts, by (ph, cat, name, role, rank): shared by the
        # templates of its steps and methods (a run has thousands of steps: each call and
        # transition of a step is a template of its own, its prefix is not).
        self.prefixes: dict = {}
        self.counters: dict = {}   # (name, role, rank) -> a counter's text up to its ts
        self.names: dict = {}      # a driver call's method or served role -> its JSON

    def _template(self, key) -> tuple:
        a = self._layout_args(key)
        pre = self.prefixes.get(key[:5]) or self._prefix(key[:5])
        full = args_json(a)
        if len(self.cache) > _CACHE_MAX:
            self.cache.clear()
        t = self.cache[key] = (pre, full, full[1:-1], a)
        return t

    def _layout_args(self, key) -> dict:
        """The args the layout gives a slice or instant of template key `key`; an event's own
        args come first and win over these for a slice, lose to them for an instant (batch)."""
        ph, cat, name, role, rank, stp, method = key
        if ph == SLICE:
            a = {"role": role, "rank": rank}
            if stp is not None:
                a["step"] = stp
            if method is not None:
                a["method"] = method
            if cat == "call" and (role, rank) in self.nodes:
                a["node"], a["ip"] = self.nodes[(role, rank)]
            return a
        return {"role": role, "rank": rank, "step": stp}   # INSTANT

    def _prefix(self, pk) -> str:
        """A slice's or instant's text up to its ts, for (ph, cat, name, role, rank)."""
        ph, cat, name, role, rank = pk
        pid, tid = self.idx.roles[role], rank + 1
        if ph == SLICE:
            pre = f'{{"ph":"X","pid":{pid},"tid":{tid},"cat":{dumps(cat)},"name":{dumps(name)},"ts":"'
        else:
            pre = f'{{"ph":"i","s":"t","pid":{pid},"tid":{tid},"cat":{dumps(cat)},"name":{dumps(name)},"ts":"'
        if len(self.prefixes) > _CACHE_MAX:
            self.prefixes.clear()
        self.prefixes[pk] = pre
        return pre

    def _counter(self, key) -> str:
        """A counter's text up to its ts: its line depends on its track alone (pid and the
        "rank N <name>" name), not on the step, method or category it was sampled in."""
        name, role, rank = key
        pre = f'{{"ph":"C","pid":{self.idx.roles[role]},"name":{dumps(f"rank {rank} {name}")},"ts":"'
        if len(self.counters) > _CACHE_MAX:
            self.counters.clear()
        self.counters[key] = pre
        return pre

    def batch(self, evs, off: int) -> list:
        """The JSON texts of a batch's events (a driver call expands into several), in order."""
        base = off - self.idx.origin
        cache, template, ajson, bind_id = self.cache, self._template, args_json, self.idx.bind_id
        counters, counter = self.counters, self._counter
        out, r3 = [], _R3
        app = out.append
        for ev in evs:
            ph, cat, name, ts, dur, role, rank, stp, method, flow, args = ev
            if ph == "C":
                key = (name, role, rank)
                pre = counters.get(key)
                if pre is None:
                    pre = counter(key)
                q, r = divmod(ts + base, 1000)
                app(f'{pre}{q}.{r3[r]}","args":{ajson(args)}}}')
                continue
            if ph == "D":
                self._driver_call(ev, off, app)
                continue
            key = (ph, cat, name, role, rank, stp, method)
            t = cache.get(key)
            if t is None:
                if ph not in _TEMPLATED:
                    continue   # an unknown phase: not written, as before
                t = template(key)
            q, r = divmod(ts + base, 1000)
            r = r3[r]
            if ph == "X":
                if not args:
                    aj = t[1]
                elif type(args) is dict and _SLICE_KEYS.isdisjoint(args):
                    aj = ajson(args)[:-1] + "," + t[2] + "}"
                else:   # its args in their order and values, then the defaults they lack (setdefault, at C speed)
                    args = _as_dict(args)
                    a = dict(args)
                    a.update(t[3])
                    a.update(args)
                    aj = ajson(a)
                dq, dr = divmod(dur, 1000)
                dr = r3[dr]
                fid = bind_id(flow, role, rank) if flow is not None and cat == "call" else None
                if fid is not None:
                    app(f'{t[0]}{q}.{r}","dur":"{dq}.{dr}","args":{aj},'
                        f'"bind_id":{fid},"flow_in":true,"flow_out":true}}')
                else:
                    app(f'{t[0]}{q}.{r}","dur":"{dq}.{dr}","args":{aj}}}')
            else:
                if not args:
                    aj = t[1]
                elif type(args) is dict and _INSTANT_KEYS.isdisjoint(args):
                    aj = ajson(args)[:-1] + "," + t[2] + "}"
                else:
                    aj = ajson(dict(_as_dict(args), role=role, rank=rank, step=stp))
                app(f'{t[0]}{q}.{r}","args":{aj}}}')
        return out

    def _driver_call(self, raw, off: int, put) -> None:
        """One driver call (its spill tuple; `off` puts it on the collector's clock) as the JSON
        texts of its slices, each handed to `put`: the call, dispatch > send → rank i, wait >
        recv ← rank i, with the flow ids joining each send and recv to that rank's slice of the
        call. Built from text pieces (the args every slice of the call shares are written once,
        a name's JSON once per name): the bytes json.dumps writes for each slice's dict
        {ph, pid, tid, cat, name, ts, dur, args[, bind_id, flow_out|flow_in]}. A run has a few
        driver calls per step, seven slices or more each: with a call to us() per time and names
        encoded every time they were a third of the formatting time of a run-shaped spill
        (bench/run_shaped.py), 29 µs a call here; times written inline, 21 µs."""
        _, _, _, ts, dur, _, track, stp, method, flow, args = raw
        idx, r3, j, name = self.idx, _R3, args_json, self._name_json
        # A controller beside the first (rldbg.store.tracks.Tracks.controllers) has a track of its
        # own in the driver's process (the store's rank), and says which on the call's slice.
        D = _DRIVER if not track else _DRIVER.replace('"tid":1,', f'"tid":{int(track) + 1},')
        ts += off
        o = idx.origin
        end, world = ts + dur, int(args.get("world") or 0)
        td = args.get("t_dispatched")
        t_disp = min(max(int(td) + off if td else end, ts), end)
        ends = idx.rank_ends.get(flow, {})
        # The args all of the call's slices share: {"role": "driver", "group", "method", "step", "flow"}.
        base = j({"role": "driver", "group": args.get("group"), "method": method, "step": stp, "flow": flow})
        head = base[:-1]
        more = {"mode": args.get("mode"), "world": world, "status": args.get("status"),
                "error": args.get("error"), "result": args.get("result")}
        if track:
            more["rank"] = track
        more = j(more)
        q, r = divmod(ts - o, 1000)
        start = f"{q}.{r3[r]}"
        q, r = divmod(dur, 1000)
        put(f'{D}{name(method)},"ts":"{start}","dur":"{q}.{r3[r]}","args":{head},{more[1:]}}}')
        q, r = divmod(t_disp - ts, 1000)
        put(f'{D}"dispatch","ts":"{start}","dur":"{q}.{r3[r]}","args":{base}}}')
        shards = args.get("shards") or []
        roles_of = {r: ro for (ro, r) in ends}
        n = max(world, len(roles_of), 1)
        step_ns = (t_disp - ts) // n
        q, r = divmod(step_ns, 1000)
        sdur = f'","dur":"{q}.{r3[r]}","args":{head},"rank":'
        for i in range(n):
            q, r = divmod(ts + i * step_ns - o, 1000)
            line = (f'{D}"send → rank {i}","ts":"{q}.{r3[r]}{sdur}{i},"shard":'
                    f'{j(shards[i]) if i < len(shards) else "null"}}}')
            fid = idx.bind_id(flow, roles_of[i], i) if i in roles_of else None
            put(f'{line},"bind_id":{fid},"flow_out":true}}' if fid is not None else line + "}")
        q, r = divmod(t_disp - o, 1000)
        q2, r2 = divmod(end - t_disp, 1000)
        put(f'{D}"wait","ts":"{q}.{r3[r]}","dur":"{q2}.{r3[r2]}","args":{base}}}')
        for (ro, r), t in sorted(ends.items(), key=_second):
            q, rr = divmod(min(max(t, t_disp), end) - o, 1000)
            line = (f'{D}"recv ← rank {r}","ts":"{q}.{r3[rr]}","dur":"0.000",'
                    f'"args":{head},"rank":{r},"role_served":{name(ro)}}}')   # r: an int (spill._check)
            fid = idx.bind_id(flow, ro, r)
            put(f'{line},"bind_id":{fid},"flow_in":true}}' if fid is not None else line + "}")

    def _name_json(self, v) -> str:
        """A method's or role's JSON (args_json's text), once per distinct string (only strings:
        1, 1.0 and True are one dict key but three texts)."""
        if type(v) is not str:
            return args_json(v)
        got = self.names.get(v)
        if got is None:
            got = args_json(v)
            if len(self.names) > _CACHE_MAX:
                self.names.clear()
            self.names[v] = got
        return got


def _as_dict(args) -> dict:
    """A slice's or instant's args as the dict the layout's keys join: args that are not one (a
    list, a string, an ext value, from a producer of its own) kept whole under "value"."""
    return args if type(args) is dict else {"value": args}


_TEMPLATED = frozenset((SLICE, INSTANT))   # counters have their own (Formatter._counter)
_R3 = [f"{i:03d}" for i in range(1000)]   # the ns digits of a µs time


_DRIVER = '{"ph":"X","pid":1,"tid":1,"cat":"driver_call","name":'
_second = itemgetter(1)   # a rank's slice end, in ((role, rank), end)
