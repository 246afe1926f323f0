"""The store's counter series (its `series` table, rldbg.store.schema): each rank's memory and
ledger series and each GPU's, as (times, values) columns in time order, taken apart from the
counter samples once, when the store is written, so that every report reads thirteen rows where it
would sort a million samples.

A row is one series: `target` ('memory', 'ledger' or 'gpu'), (a, b) the (role, rank) or the
(node id, "gpu0") it belongs to, its name, and its times and values as JSON arrays (`exact`: written
by the stdlib, which keeps an int beyond 64 bits that orjson would read back as a float). A GPU
that sent only samples that are not numbers has a row with no name, as it has a (empty) place in
the report. The samples that are not numbers are counted in the run's "odd_samples".
"""
from __future__ import annotations

import json
import re

import orjson

from rldbg.store import schema
from rldbg.store.schema import raw_args
from rldbg.trace.report_trace import finite_number

_GPU_COUNTER = re.compile(r"^(gpu\d+) memory$")
_FLOAT_MAX = 1.7976931348623157e308
_KINDS = "SELECT id, proc, cat, name, role, rank FROM kinds WHERE ph = 'C' AND cat IN ('memory', 'ledger', 'gpu')"
# All their samples in arrival order as three JSON arrays (kinds, times, args) made by SQLite in
# one pass: no GROUP BY, whose sort of a million rows cost more than grouping them in numpy.
_SAMPLES = f"""SELECT '[' || group_concat(kind) || ']', '[' || group_concat(ts) || ']',
'[' || group_concat(coalesce(args, 'null')) || ']' FROM events WHERE kind IN (SELECT id FROM ({_KINDS}))"""
_NODES = "SELECT t.role, t.rank, p.node_id FROM tracks t JOIN processes p ON p.id = t.proc WHERE p.node_id IS NOT NULL"


def write(conn) -> None:
    """The series of the events and processes written so far into the series table."""
    rows, odd = _columns(conn)
    conn.executemany("INSERT INTO series VALUES (?,?,?,?,?,?,?)", rows)
    schema.put(conn, "odd_samples", (schema.get(conn, "odd_samples") or 0) + odd)


def read(conn, t) -> None:
    """The series into the Trace `t` (rldbg.trace.report_trace): t.mem, t.ledger and t.gpus."""
    for target, a, b, name, times, values, exact in conn.execute("SELECT * FROM series ORDER BY rowid"):
        if target == "gpu":
            gpu = t.gpus.setdefault((a, b), {})
        if name is None:
            continue
        load = json.loads if exact else orjson.loads
        columns = (load(times), load(values))
        if target == "gpu":
            gpu[name] = columns
        else:
            (t.mem if target == "memory" else t.ledger)[(a, b, name)] = columns


def _text(xs: list) -> tuple[str | bytes, bool]:
    try:
        return orjson.dumps(xs), False
    except orjson.JSONEncodeError:   # an int beyond 64 bits (a trace from elsewhere)
        return json.dumps(xs), True


def _columns(conn) -> tuple[list, int]:
    """(the series rows, how many sample values were not numbers). Each sample's values are taken
    apart into (series, time, value) and sorted by series and time (arrival order among equal
    times) in numpy, a million at C speed."""
    import numpy as np
    nodes = {(role, rank): str(node or "") for role, rank, node in conn.execute(_NODES)}
    shift = dict(conn.execute("SELECT id, shift FROM processes"))
    groups, index, kinds, rows = [], {}, {}, []   # groups: [target]; index: target -> its place
    top = 0
    for kind, proc, cat, name, role, rank in conn.execute(_KINDS):
        top = max(top, kind)
        if cat == "gpu":
            g = _GPU_COUNTER.match(name) if type(name) is str else None
            if g is None:
                continue
            target = ("gpu", nodes.get((role, rank), ""), g.group(1))
        elif role is None or type(rank) is not int:
            continue   # a process never named: its samples belong to no role
        else:
            target = (cat, role, rank)
        if target not in index:
            index[target] = len(groups)
            groups.append(target)
            if cat == "gpu":
                rows.append((*target, None, None, None, False))
        kinds[kind] = (index[target], shift[proc] or 0)
    kinds_text, ts_text, args_text = conn.execute(_SAMPLES).fetchone()
    if not kinds or kinds_text is None:
        return rows, 0
    ks, times, samples = orjson.loads(kinds_text), orjson.loads(ts_text), raw_args(args_text)
    if set(map(type, samples)) == {dict} and set(map(len, samples)) == {1}:   # one value each: rldbg's on a CPU
        names, values = zip(*map(dict.popitem, samples))
    else:
        parts = [(k, tm, n, v) for k, tm, a in zip(ks, times, samples)
                 for n, v in (a.items() if type(a) is dict else () if a is None else (("value", a),))]
        ks, times, names, values = zip(*parts) if parts else ((),) * 4
    # Times as Python ints where a sum might leave 64 bits (a trace from elsewhere): numpy would wrap.
    big = max(map(abs, times), default=0) >= 1 << 62 or any(abs(s) >= 1 << 62 for _, s in kinds.values())
    group, sh = np.full(top + 1, -1, np.int64), np.zeros(top + 1, object if big else np.int64)
    for kind, (g, s) in kinds.items():
        group[kind], sh[kind] = g, s
    ids = {n: i for i, n in enumerate(dict.fromkeys(names))}
    k = np.array(ks, np.int64)
    code = group[k] * len(ids) + np.fromiter(map(ids.__getitem__, names), np.int64, len(names))
    times = np.array(times, object if big else np.int64) + sh[k]
    order = np.lexsort((times, code))   # stable
    order = order[group[k[order]] >= 0]
    names, odd = list(ids), 0
    for idx in np.split(order, np.flatnonzero(np.diff(code[order])) + 1) if len(order) else ():
        target, series = groups[code[idx[0]] // len(ids)], names[code[idx[0]] % len(ids)]
        ts, vs, n = _numbers(times[idx].tolist(), [values[j] for j in idx.tolist()])
        odd += n
        if target[0] == "gpu" or vs:
            (ts, exact_t), (vs, exact_v) = _text(ts), _text(vs)
            rows.append((*target, series, ts, vs, exact_t or exact_v))
    return rows, odd


def _numbers(times: list, values: list) -> tuple:
    """(times, values, how many left out) of the samples whose value is a finite number: all of
    them, checked at C speed, where every value is an int within a float's range (bytes)."""
    if set(map(type, values)) <= {int} and (not values or -_FLOAT_MAX <= min(values) and max(values) <= _FLOAT_MAX):
        return times, values, 0
    keep = [k for k, v in enumerate(values) if finite_number(v)]
    return [times[k] for k in keep], [values[k] for k in keep], len(values) - len(keep)
