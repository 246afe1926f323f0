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
offsets, rank slice ends, bind ids) and writes text, a counter's by SQLite (COUNTER_LINE: most of a
run's events, never brought into Python); the exporter owns the read of the store and the file.
"""
from __future__ import annotations

import json
import re
from itertools import accumulate
from json.encoder import c_make_encoder, encode_basestring

import orjson

from rldbg.store.schema import raw_args
from rldbg.trace.events import INSTANT, SLICE

dumps = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
# The C encoder built once (JSONEncoder.encode builds one per call): the same output as dumps.
_enc = c_make_encoder(None, str, encode_basestring, None, ":", ",", False, False, True)
_R3 = [f"{i:03d}" for i in range(1000)]   # the ns digits of a µs time
_DRIVER = '{"ph":"X","pid":1,"tid":1,"cat":"driver_call","name":'
# A counter's line and the ",\n" after it, written by SQLite from its row in events (e) and its kind's
# in temp.counters (c: Formatter.counters): ts + the ns to add floor-divided by 1000 as divmod does,
# from the two parts of each (no sum leaves 64 bits; the +1000 keeps % from going negative).
COUNTER_LINE = ("""printf('%s%d.%03d","args":%s},\n', c.pre, """
                """e.ts / 1000 + c.q + (e.ts % 1000 + c.r + 1000) / 1000 - 1, (e.ts % 1000 + c.r + 1000) % 1000, """
                """coalesce(e.args, 'null'))""")


def args_json(args: dict) -> str:
    """An event's args as the bytes dumps writes: by orjson (about 5x faster) where it writes the
    same, by the stdlib's C encoder where it may not: NaN and Infinity (orjson: null), floats below
    1e-4 (no exponent), non-string keys, ints beyond 64 bits, lone surrogates (orjson refuses them).
    The guards also catch some args orjson writes alike (a None, "e-" in a string): slower, same."""
    try:
        s = orjson.dumps(args, default=str).decode()   # looked into as str: `in` on bytes costs 8x here
    except TypeError:
        return "".join(_enc(args, 0))
    if "null" in s or "e-" in s or ".0000" in s:
        return "".join(_enc(args, 0))
    return s


def bind_id(flow, slot: int, nslots: int) -> int | None:
    """The flow id joining a driver call's send/recv to the slice of the rank in track `slot`, computed so
    that any order of writing agrees; None (no arrow) for a flow not a small non-negative int."""
    fid = flow * nslots + slot + 1 if type(flow) is int and flow >= 0 else 1 << 63
    return fid if fid < 1 << 63 else None


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
    Byte for byte what json.dumps of the event's dict writes; a slice's own args win over the
    layout's (flat ones get the layout keys they lack appended), an instant's lose (the dict path)."""

    def __init__(self, idx, kinds: dict, offsets: dict):
        """`kinds`: id -> (proc, ph, cat, name, role, rank, method); `offsets`: proc -> ns to add."""
        self.idx = idx
        # Where each rank's process runs, shown on its call slices.
        self.nodes = {rr: (p.get("node_id", "")[:8], p.get("node_ip", "")) for rr, p in
                      ((rr, idx.procs.get(k, {})) for rr, k in idx.rank_proc.items())}
        self.kinds, self.offsets = kinds, offsets
        self.looks: dict = {}   # kind id -> its template (_look)
        self.names: dict = {}   # a driver call's method or served role, or a step -> its JSON
        self.more = 0   # lines written beyond one an event: a driver call's but one, less one an event not written

    def _look(self, kind: int) -> tuple:
        """(ph, ns to add to ts, text up to the ts digits, layout args before the step, after it,
        a slice's layout args but the step as a dict, the bind id's slot or None, kind fields) of a kind."""
        proc, ph, cat, name, role, rank, method = fields = self.kinds[kind]
        base = self.offsets.get(proc, 0) - self.idx.origin
        pre, head, tail, after, slot = "", "", "", {}, None
        if ph in (SLICE, INSTANT):
            pid, tid = self.idx.roles[role], rank + 1
            s = ',"s":"t"' if ph == INSTANT else ""
            pre = f'{{"ph":"{ph}"{s},"pid":{pid},"tid":{tid},"cat":{dumps(cat)},"name":{dumps(name)},"ts":"'
            head = args_json({"role": role, "rank": rank})[1:-1]
            if ph == SLICE:
                if method is not None:
                    after["method"] = method
                if cat == "call":
                    after.update(zip(("node", "ip"), self.nodes.get((role, rank), ())))
                    slot = self.idx.slots.get((role, rank))
            tail = "," + args_json(after)[1:-1] if after else ""
        lay = {"role": role, "rank": rank, **after}
        # Each layout key's text, a step's in its place: those a slice's args lack, after them, are the
        # dict path's text, where these texts are those the Formatter writes and leave args_json on orjson.
        sfx = [(f'"{k}":', "," + args_json({k: v})[1:-1]) for k, v in lay.items()]
        sfx = sfx[:2] + [('"step":', None)] + sfx[2:] if "".join(t for _, t in sfx) == f",{head}{tail}" and not (
            "null" in head + tail or "e-" in head + tail or ".0000" in head + tail) else None
        look = self.looks[kind] = (ph, base, pre, head, tail, lay, slot, fields, sfx)
        return look

    def counters(self) -> list:
        """(kind, its text up to the ts digits, *divmod(ns to add, 1000)) of each counter kind: the
        rest of a counter's line is SQLite's (COUNTER_LINE)."""
        return [(kind, f'{{"ph":"C","pid":{self.idx.roles[role]},"name":{dumps(f"rank {rank} {name}")},"ts":"',
                 *divmod(self.offsets.get(proc, 0) - self.idx.origin, 1000))
                for kind, (proc, ph, _, name, role, rank, _) in self.kinds.items() if ph == "C"]

    def lines(self, rows) -> list:
        """The JSON text of each of the store's event rows (kind, ts, dur, step, flow, args text) but counters, in
        order: its lines each followed by ",\n" (a driver call's several, an unknown phase's none)."""
        looks, look_of, step_json, r3 = self.looks, self._look, self._name_json, _R3
        slice_keys, instant_keys = _SLICE_KEYS.search, _INSTANT_KEYS.search
        nslots = len(self.idx.slots)
        out = []
        app = out.append
        for kind, ts, dur, step, flow, text in rows:
            ph, base, pre, head, tail, lay, slot, fields, sfx = looks.get(kind) or look_of(kind)
            q, r = divmod(ts + base, 1000)
            if ph == "X":
                sj = "" if step is None else f',"step":{step}' if type(step) is int else ',"step":' + step_json(step)
                if text is None:
                    aj = f"{{{head}{sj}{tail}}}"
                elif text[0] == "{" and not slice_keys(text):
                    aj = f"{text[:-1]},{head}{sj}{tail}}}"
                elif (text[0] == "{" and sfx and (step is None or type(step) is int) and text.find("{", 1) < 0
                      and "e+" not in text):   # no map nested: each key found is its own (args_json's text)
                    aj = text[:-1] + "".join([sj if t is None else t for k, t in sfx if k not in text]) + "}"
                else:   # its args in their order and values, then the layout's keys they lack
                    a = raw_args(text) if text[0] == "{" else {"value": raw_args(text)}   # not a map: kept whole
                    aj = args_json({**a, **lay, **a} if step is None else
                                   {**a, "role": fields[4], "rank": fields[5], "step": step, **lay, **a})
                dq, dr = divmod(dur, 1000)
                if slot is not None and (fid := bind_id(flow, slot, nslots)) is not None:
                    app(f'{pre}{q}.{r3[r]}","dur":"{dq}.{r3[dr]}","args":{aj},'
                        f'"bind_id":{fid},"flow_in":true,"flow_out":true}},\n')
                else:
                    app(f'{pre}{q}.{r3[r]}","dur":"{dq}.{r3[dr]}","args":{aj}}},\n')
            elif ph == "i":
                sj = "null" if step is None else str(step) if type(step) is int else step_json(step)
                if text is None:
                    aj = f'{{{head},"step":{sj}}}'
                elif text[0] == "{" and not instant_keys(text):
                    aj = f'{text[:-1]},{head},"step":{sj}}}'
                else:
                    a = raw_args(text) if text[0] == "{" else {"value": raw_args(text)}
                    aj = args_json({**a, "role": fields[4], "rank": fields[5], "step": step})
                app(f'{pre}{q}.{r3[r]}","args":{aj}}},\n')
            elif ph == "D":
                app(self._driver_call(ts + base + self.idx.origin, dur, fields[5], step, fields[6], flow,
                                      raw_args(text), base + self.idx.origin))
            else:   # any other phase: not written
                self.more -= 1
                app("")
        return out

    def _driver_call(self, ts: int, dur: int, track, stp, method, flow, args: dict, off: int) -> str:
        """One driver call (ts on the collector's clock, `off` added to its process's times) as the JSON texts of its
        slices, each followed by ",\n" (call, dispatch > send → rank i, wait > recv ← rank i, flow ids joining each send
        and recv to that rank's slice): from text pieces, the bytes json.dumps writes for each slice's dict."""
        idx, r3, name, get, slots = self.idx, _R3, self._name_json, args.get, self.idx.slots
        # A controller beside the first (rldbg.store.tracks.Tracks.controllers) has a track of its
        # own in the driver's process (the store's rank), and says which on the call's slice.
        D = _DRIVER if not track else _DRIVER.replace('"tid":1,', f'"tid":{int(track) + 1},')
        o = idx.origin
        end, world, td = ts + dur, int(get("world") or 0), get("t_dispatched")
        t_disp = min(max(int(td) + off if td else end, ts), end)
        ends = idx.rank_ends.get(flow, {})
        fids = {rr: f for rr in ends if rr in slots and (f := bind_id(flow, slots[rr], len(slots))) is not None}
        # The args all of the call's slices share, {"role": "driver", "group", "method", "step", "flow"},
        # and the call's own after them, as dumps writes the dicts: from each value's JSON.
        head = (f'{{"role":"driver","group":{name(get("group"))},"method":{name(method)},'
                f'"step":{name(stp)},"flow":{name(flow)}')
        more = (f'"mode":{name(get("mode"))},"world":{world},"status":{name(get("status"))},'
                f'"error":{name(get("error"))},"result":{name(get("result"))}')
        if track:
            more += f',"rank":{name(track)}'
        (q, r), (dq, dr), (pq, pr) = divmod(ts - o, 1000), divmod(dur, 1000), divmod(t_disp - ts, 1000)
        out = [f'{D}{name(method)},"ts":"{q}.{r3[r]}","dur":"{dq}.{r3[dr]}","args":{head},{more}}}}}',
               f'{D}"dispatch","ts":"{q}.{r3[r]}","dur":"{pq}.{r3[pr]}","args":{head}}}}}']
        shards = get("shards") or []
        roles_of = {r: ro for (ro, r) in ends}
        n = max(world, len(roles_of), 1)
        # The sends share the dispatch evenly, but none after its rank's slice starts: trace
        # processor joins v2 flows in time order, and a slice that starts before its send loses the flow.
        step_ns = (t_disp - ts) // n
        late = [min(ts + i * step_ns, ends[(roles_of[i], i)][0] - 1 if i in roles_of else t_disp) for i in range(n)]
        sends = [max(t, ts) for t in reversed(list(accumulate(reversed(late), min)))] + [t_disp]
        for i in range(n):
            q, r = divmod(sends[i] - o, 1000)
            line = (f'{D}"send → rank {i}","ts":"{q}.{r3[r]}","dur":"{us(sends[i + 1] - sends[i])}","args":{head},'
                    f'"rank":{i},"shard":{args_json(shards[i]) if i < len(shards) else "null"}}}')
            fid = fids.get((roles_of[i], i)) if i in roles_of else None
            out.append(f'{line},"bind_id":{fid},"flow_out":true}}' if fid is not None else line + "}")
        out.append(f'{D}"wait","ts":"{us(t_disp - o)}","dur":"{us(end - t_disp)}","args":{head}}}}}')
        for (ro, r), (_, t) in sorted(ends.items(), key=lambda e: e[1][1]):
            q, rr = divmod(min(max(t, t_disp), end) - o, 1000)
            line = (f'{D}"recv ← rank {r}","ts":"{q}.{r3[rr]}","dur":"0.000",'
                    f'"args":{head},"rank":{r},"role_served":{name(ro)}}}')   # r: an int (spill._check)
            fid = fids.get((ro, r))
            out.append(f'{line},"bind_id":{fid},"flow_in":true}}' if fid is not None else line + "}")
        self.more += len(out) - 1
        out.append("")
        return ",\n".join(out)

    def _name_json(self, v) -> str:
        """A value's JSON (args_json's text), a string's once per distinct string (only strings: 1,
        1.0 and True are one dict key but three texts)."""
        if type(v) is not str:
            return "null" if v is None else str(v) if type(v) is int else args_json(v)
        got = self.names.get(v)
        if got is None:
            got = self.names[v] = args_json(v)
        return got
