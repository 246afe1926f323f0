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
import re
from json.encoder import c_make_encoder, encode_basestring
from operator import itemgetter

import orjson

from rldbg.store.schema import raw_args
from rldbg.trace.events import INSTANT, SLICE

dumps = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
# The C encoder built once (JSONEncoder.encode builds one per call): the same output as dumps.
_enc = c_make_encoder(None, str, encode_basestring, None, ":", ",", False, False, True)
_ojdumps = orjson.dumps
_R3 = [f"{i:03d}" for i in range(1000)]   # the ns digits of a µs time
_DRIVER = '{"ph":"X","pid":1,"tid":1,"cat":"driver_call","name":'
_second = itemgetter(1)   # a rank's slice end, in ((role, rank), end)


def args_json(args: dict) -> str:
    """An event's args as the bytes dumps writes: by orjson (about 5x faster) where it writes the
    same, by the stdlib's C encoder where it may not: NaN and Infinity (orjson: null), floats below
    1e-4 (no exponent), non-string keys, ints beyond 64 bits, lone surrogates (orjson refuses them).
    The guards also catch some args orjson writes alike (a None, "e-" in a string): slower, same."""
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


# A layout key among an args text's keys (a nested key or a quoted string that looks like one
# matches too: those take the slower dict path, which is always right).
_SLICE_KEYS = re.compile(r'"(?:role|rank|step|method|node|ip)":')
_INSTANT_KEYS = re.compile(r'"(?:role|rank|step)":')


class Formatter:
    """Chrome JSON text for the store's events by string templates: per kind (rldbg.store.schema:
    one process, ph, cat, name, role, rank and method) everything but the times, step and own args
    is built once; per event those are formatted and its stored args text joined to the layout's.
    Byte for byte what json.dumps of the event's dict writes; args carrying a layout key take the
    dict path, so that a slice's own args win and an instant's lose."""

    def __init__(self, idx, kinds: dict, offsets: dict):
        """`kinds`: id -> (proc, ph, cat, name, role, rank, method); `offsets`: proc -> ns to add."""
        self.idx = idx
        # Where each rank's process runs, shown on its call slices.
        self.nodes = {rr: (p.get("node_id", "")[:8], p.get("node_ip", "")) for rr, p in
                      ((rr, idx.procs.get(k, {})) for rr, k in idx.rank_proc.items())}
        self.kinds, self.offsets = kinds, offsets
        self.looks: dict = {}   # kind id -> its template (_look)
        self.names: dict = {}   # a driver call's method or served role, or a step -> its JSON

    def _look(self, kind: int) -> tuple:
        """(ph, ns to add to ts, text up to the ts digits, layout args before the step, after it,
        layout args as a dict, the bind id's slot or None, kind fields) of a kind."""
        proc, ph, cat, name, role, rank, method = fields = self.kinds[kind]
        base = self.offsets.get(proc, 0) - self.idx.origin
        pre, head, tail, after, slot = "", "", "", {}, None
        if ph == "C":
            pre = f'{{"ph":"C","pid":{self.idx.roles[role]},"name":{dumps(f"rank {rank} {name}")},"ts":"'
        elif ph in (SLICE, INSTANT):
            pid, tid = self.idx.roles[role], rank + 1
            s = ',"s":"t"' if ph == INSTANT else ""
            pre = f'{{"ph":"{ph}"{s},"pid":{pid},"tid":{tid},"cat":{dumps(cat)},"name":{dumps(name)},"ts":"'
            head = args_json({"role": role, "rank": rank})[1:-1]
            if ph == SLICE:
                if method is not None:
                    after["method"] = method
                if cat == "call" and (role, rank) in self.nodes:
                    after["node"], after["ip"] = self.nodes[(role, rank)]
                if cat == "call":
                    slot = self.idx.slots.get((role, rank))
            tail = "," + args_json(after)[1:-1] if after else ""
        look = self.looks[kind] = (ph, base, pre, head, tail, after, slot, fields)
        return look

    def lines(self, rows) -> list:
        """The JSON texts of the store's event rows (kind, ts, dur, step, flow, args text), in
        order (a driver call expands into several)."""
        looks, look_of, step_json, r3 = self.looks, self._look, self._name_json, _R3
        slice_keys, instant_keys = _SLICE_KEYS.search, _INSTANT_KEYS.search
        nslots = len(self.idx.slots)
        out = []
        app = out.append
        for kind, ts, dur, step, flow, text in rows:
            t = looks.get(kind) or look_of(kind)
            ph = t[0]
            q, r = divmod(ts + t[1], 1000)
            if ph == "C":
                app(f'{t[2]}{q}.{r3[r]}","args":{"null" if text is None else text}}}')
            elif ph == "X":
                sj = "" if step is None else f',"step":{step}' if type(step) is int else ',"step":' + step_json(step)
                if text is None:
                    aj = f"{{{t[3]}{sj}{t[4]}}}"
                elif text[0] == "{" and not slice_keys(text):
                    aj = f"{text[:-1]},{t[3]}{sj}{t[4]}}}"
                else:   # its args in their order and values, then the layout's keys they lack
                    a = dict(_as_dict(raw_args(text)))
                    a.setdefault("role", t[7][4])
                    a.setdefault("rank", t[7][5])
                    if step is not None:
                        a.setdefault("step", step)
                    for key, value in t[5].items():   # the kind's method, node and ip
                        a.setdefault(key, value)
                    aj = args_json(a)
                dq, dr = divmod(dur, 1000)
                slot = t[6]
                fid = flow * nslots + slot + 1 if slot is not None and type(flow) is int and flow >= 0 else None
                if fid is not None and fid < 1 << 63:
                    app(f'{t[2]}{q}.{r3[r]}","dur":"{dq}.{r3[dr]}","args":{aj},'
                        f'"bind_id":{fid},"flow_in":true,"flow_out":true}}')
                else:
                    app(f'{t[2]}{q}.{r3[r]}","dur":"{dq}.{r3[dr]}","args":{aj}}}')
            elif ph == "i":
                sj = "null" if step is None else str(step) if type(step) is int else step_json(step)
                if text is None:
                    aj = f'{{{t[3]},"step":{sj}}}'
                elif text[0] == "{" and not instant_keys(text):
                    aj = f'{text[:-1]},{t[3]},"step":{sj}}}'
                else:
                    _, role, rank, _ = t[7][3:]
                    aj = args_json(dict(_as_dict(raw_args(text)), role=role, rank=rank, step=step))
                app(f'{t[2]}{q}.{r3[r]}","args":{aj}}}')
            elif ph == "D":
                _, _, cat, name, role, rank, method = t[7]
                raw = (ph, cat, name, ts, dur, role, rank, step, method, flow, raw_args(text))
                self._driver_call(raw, t[1] + self.idx.origin, app)
            # any other phase: not written
        return out

    def _driver_call(self, raw, off: int, put) -> None:
        """One driver call (its spill tuple; `off` puts it on the collector's clock) as the JSON
        texts of its slices, each handed to `put` (call, dispatch > send → rank i, wait > recv ←
        rank i, flow ids joining each send and recv to that rank's slice): from text pieces, the
        bytes json.dumps writes for each slice's dict."""
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
        start = us(ts - o)
        put(f'{D}{name(method)},"ts":"{start}","dur":"{us(dur)}","args":{head},{more[1:]}}}')
        put(f'{D}"dispatch","ts":"{start}","dur":"{us(t_disp - ts)}","args":{base}}}')
        shards = args.get("shards") or []
        roles_of = {r: ro for (ro, r) in ends}
        n = max(world, len(roles_of), 1)
        step_ns = (t_disp - ts) // n
        sdur = f'","dur":"{us(step_ns)}","args":{head},"rank":'
        for i in range(n):
            q, r = divmod(ts + i * step_ns - o, 1000)
            line = (f'{D}"send → rank {i}","ts":"{q}.{r3[r]}{sdur}{i},"shard":'
                    f'{j(shards[i]) if i < len(shards) else "null"}}}')
            fid = idx.bind_id(flow, roles_of[i], i) if i in roles_of else None
            put(f'{line},"bind_id":{fid},"flow_out":true}}' if fid is not None else line + "}")
        put(f'{D}"wait","ts":"{us(t_disp - o)}","dur":"{us(end - t_disp)}","args":{base}}}')
        for (ro, r), t in sorted(ends.items(), key=_second):
            q, rr = divmod(min(max(t, t_disp), end) - o, 1000)
            line = (f'{D}"recv ← rank {r}","ts":"{q}.{r3[rr]}","dur":"0.000",'
                    f'"args":{head},"rank":{r},"role_served":{name(ro)}}}')   # r: an int (spill._check)
            fid = idx.bind_id(flow, ro, r)
            put(f'{line},"bind_id":{fid},"flow_in":true}}' if fid is not None else line + "}")

    def _name_json(self, v) -> str:
        """A method's, role's or step's JSON (args_json's text), once per distinct string (only
        strings: 1, 1.0 and True are one dict key but three texts)."""
        if type(v) is not str:
            return args_json(v)
        got = self.names.get(v)
        if got is None:
            got = self.names[v] = args_json(v)
        return got


def _as_dict(args) -> dict:
    """A slice's or instant's args as the dict the layout's keys join: args that are not one (a
    list, a string, an ext value, from a producer of its own) kept whole under "value"."""
    return args if type(args) is dict else {"value": args}
