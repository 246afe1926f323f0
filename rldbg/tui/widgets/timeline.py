"""Timeline: a text Gantt of the last N steps, one lane per role x rank (calls on top, the
hybrid-engine transitions under them) and the driver's calls. ←/→ pan, +/- zoom, f follows."""
from __future__ import annotations

import bisect
import zlib
from itertools import groupby

from textual.binding import Binding

from rldbg.tui.widgets.lanes import LaneScroller
from rldbg.tui.widgets.strips import Line

PALETTE = ["cyan", "green", "magenta", "yellow", "blue", "bright_red", "bright_green", "bright_cyan",
           "bright_magenta", "orange3", "purple", "turquoise2"]
LABEL = 22


def colour(name: str) -> str:
    # By method, so the driver's "<group>.<method>" and the ranks' "<method>" share a colour.
    base = (name or "?").rsplit(".", 1)[-1]
    return PALETTE[zlib.crc32(base.encode()) % len(PALETTE)]


def window(view, steps: int, pan: float):
    """(start_ns, end_ns) covering the last `steps` steps, shifted back by `pan` windows."""
    end = view.last_ts
    if known := sorted(s for s in view.steps if isinstance(s, int)):
        start = view.steps[known[max(0, len(known) - steps)]][0]
    else:
        starts = [ss[-min(len(ss), 50)][0] for ss in view.slices.values() if ss]
        if not starts:
            return None
        start = min(starts)
    shift = int(max(end - start, 1) * pan)
    return start - shift, end - shift


def lane_cells(slices: list, t0: int, t1: int, cols: int):
    """Calls and transitions of one lane painted into two rows of `cols` cells."""
    rows = ([None] * cols, [None] * cols)
    per = (t1 - t0) / cols
    # Slices arrive in end order; anything ending before the window is skipped by bisect.
    first = bisect.bisect_left(slices, t0, key=lambda s: s[0] + s[1])
    for ts, dur, name, cat, _step, status in slices[first:]:
        if ts > t1:
            continue
        cells = rows[1 if cat == "transition" else 0]
        mark = "!error" if status is not None and str(status).startswith("error") else name
        for c in range(max(int((ts - t0) / per), 0), min(int((ts + dur - t0) / per) + 1, cols)):
            cells[c] = mark
    return rows


def bar(cells: list, small: bool = False, out: Line | None = None) -> Line:
    """One segment per run of a name: its method written in it where it fits (not in small bars)."""
    out = out if out is not None else Line()
    for name, group in groupby(cells):
        run = len(list(group))
        if name is None:
            out.add(" " * run)
            continue
        label = name.removeprefix("!").rsplit(".", 1)[-1]
        fill = (label[:run] if run >= 4 and not small else "").ljust(run, "▄" if small else "█")
        style = colour(name) if small else f"black on {colour(name)}"
        out.add(fill, "bold white on red" if name == "!error" else style)
    return out


class TimelineView(LaneScroller):
    BINDINGS = [Binding("left,h", "pan(0.25)", "Back"), Binding("right,l", "pan(-0.25)", "Forward"),
                Binding("plus,equals_sign", "zoom(-1)", "Zoom in"), Binding("minus", "zoom(1)", "Zoom out"),
                Binding("f", "pan(-1000000)", "Follow live")]
    EMPTY = "no call or transition events yet (is tracing on? trace.enabled=true or rldbg.trace.start)"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.steps, self.pan, self._win = 3, 0.0, None

    def lane_keys(self, view) -> list:
        self._win = window(view, self.steps, self.pan)
        return list(view.slices) if self._win else []

    def header(self, view, width: int) -> list:
        t0, t1 = self._win
        cols = width - LABEL
        line = [" "] * cols
        for step, (start, _end) in view.steps.items():
            if isinstance(step, int) and t0 <= start <= t1:
                c = min(int((start - t0) / ((t1 - t0) / cols)), cols - 1)
                for i, ch in enumerate(f"|step {step}"[: cols - c]):
                    line[c + i] = ch
        pan = f", panned back {self.pan:g} windows (f follows)" if self.pan else " (live)"
        return [Line(" " * LABEL + "".join(line), "dim"),
                Line(f"{'':<{LABEL}}last {self.steps} step(s), {(t1 - t0) / 1e9:.2f} s{pan}", "dim")]

    def lines(self, view, key, width: int) -> list:
        t0, t1 = self._win
        calls, trans = lane_cells(view.slices[key], t0, t1, width - LABEL)
        out = [bar(calls, out=Line(f"{str(key[0])[:LABEL - 6]:<{LABEL - 6}} r{key[1]!s:<3} ", "bold"))]
        if any(trans):
            out.append(bar(trans, small=True, out=Line(" " * LABEL)))
        return out

    def footer(self, view, width: int) -> list:
        legend = Line()
        for n in view.methods:
            legend.add("■ ", colour(n)).add(n + "  ")
        legend.add("(▄ transitions)", "dim")
        return [legend]

    def action_pan(self, by: float) -> None:
        self.pan = max(0.0, self.pan + by)
        self.redraw()

    def action_zoom(self, by: int) -> None:
        self.steps = min(50, max(1, self.steps + by))
        self.redraw()
