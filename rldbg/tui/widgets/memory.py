"""Memory: per rank, memory over time as a sparkline with the transitions under it
(O offload, R reload, W wake/weight sync, K KV-cache release), the byte ledger by category,
and flags for bytes an offload did not give back (pinned at the bottom)."""
from __future__ import annotations

from rich.text import Text

from rldbg.tui.model import fmt_bytes
from rldbg.tui.widgets.lanes import LaneScroller

BLOCKS = "▁▂▃▄▅▆▇█"
MARK_STYLE = {"O": "green", "R": "yellow", "W": "cyan", "K": "magenta"}
LABEL = 18
MAX_FLAGS = 6


def sparkline(points: list, marks: list, cols: int) -> tuple[Text, Text]:
    """Bucket samples over their time span into `cols` columns (max per bucket), and place each
    transition's letter in the column where it ended, so the two lines line up."""
    if not points:
        return Text("(no samples)", "dim"), Text("")
    t0, t1 = points[0][0], max(points[-1][0], points[0][0] + 1)
    per = (t1 - t0) / cols
    cells: list = [None] * cols
    for ts, v in points:
        c = min(int((ts - t0) / per), cols - 1)
        cells[c] = v if cells[c] is None else max(cells[c], v)
    lo, hi = min(v for _, v in points), max(v for _, v in points)
    chars, last = [], None
    for v in cells:
        last = last if v is None else v
        chars.append(" " if last is None else BLOCKS[0 if hi == lo else int((last - lo) / (hi - lo) * 7)])
    line = _runs(chars, lambda ch: "red" if ch in "▇█" else "yellow" if ch in "▄▅▆" else "")  # btop-style
    under = [" "] * cols
    for ts, letter, _name in marks:
        if t0 <= ts <= t1:
            # Transitions cluster (a mode switch is several in a few ms): nudge right rather than hide one.
            c0 = min(int((ts - t0) / per), cols - 1)
            c = c0
            while c < cols - 1 and under[c] != " " and c - c0 < 3:
                c += 1
            under[c] = letter
    return line, _runs(under, lambda ch: MARK_STYLE.get(ch, "dim"))


def _runs(chars: list, style_of) -> Text:
    """One styled span per run of equal style, not per cell (rendering cost is per span)."""
    out, start = Text(), 0
    for i in range(1, len(chars) + 1):
        if i == len(chars) or style_of(chars[i]) != style_of(chars[start]):
            out.append("".join(chars[start:i]), style_of(chars[start]))
            start = i
    return out


class MemoryView(LaneScroller):
    def empty(self) -> Text:
        return Text("no memory samples yet (they come with tracing: trace.enabled=true or rldbg.trace.start)", "dim")

    def lane_keys(self, view) -> list:
        return [i for i, m in enumerate(view.memory) if m[2]]

    def header(self, view, width: int) -> list:
        return [Text("memory over time per rank   O offload  R reload  W wake/weight sync  K KV release", "bold")]

    def lines(self, view, i, width: int) -> list:
        role, rank, points, marks, ledger = view.memory[i]
        values = [v for _, v in points]
        head = Text(f"{str(role)[:10]:<10} r{rank!s:<4}  ", "bold")
        head.append(f"now {fmt_bytes(values[-1])}  peak {fmt_bytes(max(values))}  min {fmt_bytes(min(values))}", "dim")
        if ledger:
            head.append("   ledger " + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in sorted(ledger.items())))
        line, mline = sparkline(points, marks, width - LABEL)
        recent = ", ".join(name for _ts, _l, name in marks[-5:])
        return [head, Text(" " * LABEL) + line, Text(" " * LABEL) + mline,
                Text(" " * LABEL + (f"last: {recent}" if recent else ""), "dim")]

    def footer(self, view, width: int) -> list:
        if not view.flags:
            return [Text("not given back: nothing flagged (every offload emptied its ledger categories)", "green")]
        out = [Text(f"not given back: {len(view.flags)} flag(s)", "bold red")]
        out += [Text(f"  ⚠ {f}", "red") for f in view.flags[:MAX_FLAGS]]
        if len(view.flags) > MAX_FLAGS:
            out.append(Text(f"  ... {len(view.flags) - MAX_FLAGS} more", "dim"))
        return out
