"""Memory: per rank, memory over time as a sparkline with the transitions under it
(by what each transition declares: O frees, R loads, W both), the byte ledger by category,
and the leak rule's flags (rldbg.memory.leaks; pinned at the bottom)."""
from __future__ import annotations

from itertools import groupby

from rldbg.tui.model import fmt_bytes
from rldbg.tui.widgets.lanes import LaneScroller
from rldbg.tui.widgets.strips import Line

BLOCKS = "▁▂▃▄▅▆▇█"
MARK_STYLE = {"O": "green", "R": "yellow", "W": "cyan"}
LABEL = 18
MAX_FLAGS = 6
LEVEL_STYLE = {ch: "red" if ch in "▇█" else "yellow" if ch in "▄▅▆" else "" for ch in BLOCKS + " "}  # btop-style


def sparkline(points: list, marks: list, cols: int, indent: int = 0) -> tuple[Line, Line]:
    """Bucket samples over their time span into `cols` columns (max per bucket), and place each
    transition's letter in the column where it ended, so the two lines line up."""
    if not points:
        return Line(" " * indent).add("(no samples)", "dim"), Line()
    t0, t1 = points[0][0], max(points[-1][0], points[0][0] + 1)
    scale, top = cols / (t1 - t0), cols - 1
    cells: list = [None] * cols
    lo = hi = points[0][1]
    # Plain comparisons, no min()/max() calls: this loop runs per sample for every lane on screen.
    for ts, v in points:
        c = int((ts - t0) * scale)
        if c > top:
            c = top
        cur = cells[c]
        if cur is None or v > cur:
            cells[c] = v
        if v < lo:
            lo = v
        elif v > hi:
            hi = v
    step = (hi - lo) / 7 if hi > lo else 0
    chars, last = [], None
    for v in cells:
        if v is not None:
            last = v
        chars.append(" " if last is None else BLOCKS[int((last - lo) / step) if step else 0])
    under = [" "] * cols
    for ts, letter, _name in marks:
        if t0 <= ts <= t1:
            # Transitions cluster (a mode switch is several in a few ms): nudge right rather than hide one.
            c = c0 = min(int((ts - t0) * scale), top)
            while c < top and under[c] != " " and c - c0 < 3:
                c += 1
            under[c] = letter
    return _runs(chars, LEVEL_STYLE, indent), _runs(under, MARK_STYLE, indent, "dim")


def _runs(chars: list, styles: dict, indent: int = 0, default: str = "") -> Line:
    """One styled segment per run of equal style, not per cell (rendering cost is per segment)."""
    out = Line(" " * indent)
    for spec, run in groupby(chars, key=lambda ch: styles.get(ch, default)):
        out.add("".join(run), spec)
    return out


class MemoryView(LaneScroller):
    EMPTY = "no memory samples yet (they come with tracing: trace.enabled=true or rldbg.trace.start)"

    def lane_keys(self, view) -> list:
        return [i for i, m in enumerate(view.memory) if m[2]]

    def header(self, view, width: int) -> list:
        return [Line("memory over time per rank   transitions: O frees  R loads  W both", "bold")]

    def lines(self, view, i, width: int) -> list:
        role, rank, points, marks, ledger = view.memory[i]
        values = [v for _, v in points]
        head = Line(f"{str(role)[:10]:<10} r{rank!s:<4}  ", "bold")
        head.add(f"now {fmt_bytes(values[-1])}  peak {fmt_bytes(max(values))}  min {fmt_bytes(min(values))}", "dim")
        if ledger:
            head.add("   ledger " + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in sorted(ledger.items())))
        line, mline = sparkline(points, marks, width - LABEL, indent=LABEL)
        recent = ", ".join(name for _ts, _l, name in marks[-5:])
        return [head, line, mline, Line(" " * LABEL + (f"last: {recent}" if recent else ""), "dim")]

    def footer(self, view, width: int) -> list:
        if not view.flags:
            return [Line("leaks: nothing flagged (no rank keeps >= 20 MiB more per cycle after its freeing "
                         "transitions)", "green")]
        out = [Line(f"not given back: {len(view.flags)} flag(s)", "bold red")]
        out += [Line(f"  ⚠ {f}", "red") for f in view.flags[:MAX_FLAGS]]
        if len(view.flags) > MAX_FLAGS:
            out.append(Line(f"  ... {len(view.flags) - MAX_FLAGS} more", "dim"))
        return out
