"""The store's counter series (its `series` table, rldbg.store.schema): each rank's memory and ledger series and each
GPU's, as (times, values) columns in time order, taken apart from the counter samples once, when the store is written,
so that every report reads thirteen rows where it would sort a million samples.

A row is one series: `target` ('memory', 'ledger' or 'gpu'), (a, b) the (role, rank) or the (node id, "gpu0") it belongs
to, its name, and its times and values as JSON arrays (`exact`: written by the stdlib, which keeps an int beyond 64 bits
that orjson would read back as a float). A GPU that sent only samples that are not numbers has a row with no name, as it
has a (empty) place in the report. The samples that are not numbers are counted in the run's "odd_samples".
"""
from __future__ import annotations

import json
import re
import sys

import orjson

from rldbg.store import schema
from rldbg.store.schema import raw_args
from rldbg.trace.report_trace import finite_number

_GPU_COUNTER = re.compile(r"^(gpu\d+) memory$")
_FLOAT_MAX = sys.float_info.max   # finite_number()'s bound, checked over all samples at once
CATS = ("memory", "ledger", "gpu")   # the counters' categories kept as series (ph "C")
_KINDS = f"SELECT id, proc, cat, name, role, rank FROM kinds WHERE ph = 'C' AND cat IN {CATS}"
_NODES = "SELECT t.role, t.rank, p.node_id FROM tracks t JOIN processes p ON p.id = t.proc WHERE p.node_id IS NOT NULL"


class Samples:
    """The series' samples as the events go into the store (rldbg.store.ingest.EventWriter), each
    value taken apart at once into four flat columns: (kind, time, series name, value). Kept so,
    not as the events' args, a million samples hold 80 MB, not 250."""

    def __init__(self):
        self.kinds, self.times, self.names, self.values = [], [], [], []

    def add(self, kinds, times, args, are_text: bool) -> None:
        """A batch's samples: their kind ids, times and args (JSON text with are_text)."""
        if are_text:
            args = list(map(raw_args, args))
        if set(map(type, args)) == {dict} and set(map(len, args)) == {1}:   # one value each: rldbg's on a CPU
            names, values = zip(*map(next, map(iter, map(dict.items, args))))
        else:
            parts = [(k, tm, n, v) for k, tm, a in zip(kinds, times, args)
                     for n, v in (a.items() if type(a) is dict else () if a is None else (("value", a),))]
            kinds, times, names, values = zip(*parts) if parts else ((),) * 4
        self.kinds += kinds
        self.times += times
        self.names += names
        self.values += values


def write(conn, samples: Samples) -> None:
    """The series of the samples gathered, on the kinds and processes written, into the series table."""
    rows, odd = _columns(conn, samples)
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


def _text(xs: list) -> tuple[str, bool]:
    try:
        return orjson.dumps(xs).decode(), False
    except orjson.JSONEncodeError:   # an int beyond 64 bits (a trace from elsewhere)
        return json.dumps(xs), True


def _columns(conn, samples: Samples) -> tuple[list, int]:
    """(the series rows, how many sample values were not numbers). The samples are sorted by
    series and time (arrival order among equal times) in numpy, a million at C speed."""
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
    ks, times, names, values = samples.kinds, samples.times, samples.names, samples.values
    if not kinds or not ks:
        return rows, 0
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
    # Every value an int within a float's range (bytes, nearly always): none to check one by one.
    plain = set(map(type, values)) <= {int} and -_FLOAT_MAX <= min(values) and max(values) <= _FLOAT_MAX
    names, odd, values = list(ids), 0, np.array(values, object)
    for idx in np.split(order, np.flatnonzero(np.diff(code[order])) + 1) if len(order) else ():
        target, series = groups[code[idx[0]] // len(ids)], names[code[idx[0]] % len(ids)]
        ts, vs = times[idx].tolist(), values[idx].tolist()
        if not plain:
            ts, vs, n = _numbers(ts, vs)
            odd += n
        if target[0] == "gpu" or vs:
            (ts, exact_t), (vs, exact_v) = _text(ts), _text(vs)
            rows.append((*target, series, ts, vs, exact_t or exact_v))
    return rows, odd


def _numbers(times: list, values: list) -> tuple:
    """(times, values, how many left out) of the samples whose value is a finite number."""
    keep = [k for k, v in enumerate(values) if finite_number(v)]
    return [times[k] for k in keep], [values[k] for k in keep], len(values) - len(keep)
