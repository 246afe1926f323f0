"""Stepper: the driver's step gate. a arms, s/space runs one pause point on, m runs to a
method, n to the next training step, c continues (disarms). Shows the parked call's
per-rank shards and, after collect, the merged result. Ranks that received the same shard
layout share one block ("ranks 0-126"), so a 128-rank call reads at a glance and the rank
that got a different (padded, uneven) shard stands out."""
from __future__ import annotations

from textual.binding import Binding

from rldbg.trace.window import ranges, steps_text
from rldbg.tui.model import fmt_bytes
from rldbg.tui.screens import Prompt
from rldbg.tui.widgets.lanes import LaneScroller
from rldbg.tui.widgets.strips import Line

SHARD_COLUMNS = ("ranks", "rows", "key", "shape", "dtype", "bytes")
RIGHT = {"rows", "bytes"}


def gate_line(gate: dict) -> Line:
    if not gate:
        return Line("gate: unknown (no run)", "dim")
    t = Line("gate: ")
    if not gate.get("armed"):
        t.add("off", "bold green").add(" (running freely)")
        if gate.get("disarm_reason"):
            t.add(f"; disarmed: {gate['disarm_reason']}", "dim")
        return t
    t.add("ARMED", "bold yellow")
    t.add(f"  mode {gate.get('mode')}" + (f" -> {gate['target']}" if gate.get("target") else ""))
    t.add("  PARKED" if gate.get("waiting") else "  running to the next pause point",
          "bold magenta" if gate.get("waiting") else "")
    t.add(f"  (resumes by itself {gate.get('timeout_s', 30):g} s after this TUI goes quiet)", "dim")
    return t


def group_shards(shards: list) -> list:
    """[(ranks, shard or None)] with ranks that got identical shards together, in rank order."""
    groups: dict = {}
    for rank, sh in enumerate(shards):
        sig = None if sh is None else (sh.get("rows"), tuple(
            (k.get("key"), tuple(k.get("shape") or ()), k.get("dtype"), k.get("nbytes")) for k in sh.get("keys") or ()))
        groups.setdefault(sig, ([], sh))[0].append(rank)
    return sorted(groups.values(), key=lambda g: g[0][0])


def shard_rows(shards: list) -> list:
    rows = []
    for ranks, sh in group_shards(shards):
        label = steps_text(ranges(ranks)) + (f" ({len(ranks)})" if len(ranks) > 2 else "")
        if sh is None:
            rows.append((label, "-", "(nothing sent)", "", "", ""))
            continue
        for i, k in enumerate(sh.get("keys") or [{}]):
            rows.append((label if i == 0 else "", str(sh.get("rows")) if i == 0 else "", str(k.get("key", "")),
                         "x".join(map(str, k.get("shape") or [])), str(k.get("dtype", "")), fmt_bytes(k.get("nbytes"))))
    return rows


def table_lines(columns, rows, indent: int = 2) -> list:
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]

    def cell(text, i, col):
        return text.rjust(widths[i]) if col in RIGHT else text.ljust(widths[i])
    head = Line(" " * indent + "  ".join(cell(c, i, c) for i, c in enumerate(columns)), "bold")
    return [head] + [Line(" " * indent + "  ".join(cell(v, i, c) for i, (v, c) in enumerate(zip(r, columns))))
                     for r in rows]


def call_lines(call: dict) -> list:
    head = Line(f"{call.get('phase', '?').replace('_', ' ')}: {call.get('group')}.{call.get('method')}  "
                f"mode {call.get('mode')}  world {call.get('world')}  step {call.get('step')}  call #{call.get('id')}",
                "bold")
    shards = call.get("shards")
    if not shards:
        return [head, Line("no per-rank shards (after collect, or a call without a batch)", "dim")]
    return [head] + table_lines(SHARD_COLUMNS, shard_rows(shards))


def result_lines(res: dict | None) -> list:
    if not res:
        return [Line("no result collected yet", "dim")]
    pairs = [("call", f"{res.get('group')}.{res.get('method')} step {res.get('step')} (#{res.get('id')})"),
             ("rows", str(res.get("rows")))]
    if res.get("keys"):
        pairs.append(("keys", ", ".join(str(k.get("key", k)) if isinstance(k, dict) else str(k)
                                        for k in res["keys"])[:200]))
    pairs += [(k, f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in sorted((res.get("metrics") or {}).items())]
    w = max(len(k) for k, _ in pairs)
    return [Line("last merged result", "bold underline")] + [Line(f"  {k:<{w}}  ", "bold").add(v) for k, v in pairs]


class StepperView(LaneScroller):
    """Lines, scrolled like the lane views (↑/↓ PgUp/PgDn, wheel) when a call has many keys."""
    BINDINGS = [Binding("a", "gate('arm')", "Arm"), Binding("s,space", "gate('step')", "Step"),
                Binding("m", "run_to_method", "Run to method"), Binding("n", "gate('run_to_step')", "Next step"),
                Binding("c", "gate('continue')", "Continue")]

    def __init__(self, **kw):
        super().__init__(**kw)
        self._body: list = []
        self._sig = None

    def show(self, view) -> None:
        self.view = view
        gate = view.gate
        sig = repr((gate, view.state.get("step"), view.state.get("calls_done")))
        if sig == self._sig:
            return   # nothing the stepper shows has changed: no repaint
        self._sig = sig
        body = [gate_line(gate), Line(f"driver: step {view.state.get('step')}  calls done {view.state.get('calls_done')}"),
                Line()]
        if pending := gate.get("pending"):
            body += [Line("pending call" if gate.get("waiting") else "newest pause point", "bold underline"),
                     *call_lines(pending), Line()]
        self._body = body + result_lines(gate.get("last_result"))
        self.redraw()

    # One "lane" per line, so LaneScroller's scrolling works unchanged.
    def lane_keys(self, view) -> list:
        return list(range(len(self._body)))

    def lines(self, view, i, width: int) -> list:
        return [self._body[i]]

    def position(self, shown: int, total: int) -> Line:
        if shown >= total:
            return Line()
        return Line(f"lines {self.first + 1}-{self.first + shown} of {total}  (↑/↓ PgUp/PgDn, wheel)", "dim")

    def footer(self, view, width: int) -> list:
        return [Line("a arm  s/space step  m run to method  n next step  c continue", "dim")]

    def action_gate(self, action: str) -> None:
        self.app.gate(action)

    def action_run_to_method(self) -> None:
        def done(method: str | None) -> None:
            if method:
                self.app.gate("run_to_method", method=method)
        self.app.push_screen(Prompt("run to method (e.g. update_actor):", "method"), done)
