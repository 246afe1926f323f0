"""A view of many lanes (one per role x rank) that builds only the lanes on screen: with 256+
workers, building every lane each refresh is what would make a frame slow. Subclasses give
lane_keys(view) and lines(view, key, width) -> [Line]; this class scrolls by lanes."""
from __future__ import annotations

from rldbg.tui.widgets.strips import Line, LineView


class LaneScroller(LineView):
    EMPTY = "no data yet"   # shown while there is no lane

    def __init__(self, **kw):
        super().__init__(**kw)
        self.first = 0

    def header(self, view, width: int) -> list:
        return []

    footer = header   # none by default either

    def lane_keys(self, view) -> list:
        raise NotImplementedError

    def lines(self, view, key, width: int) -> list:
        raise NotImplementedError

    def build(self, width: int, height: int) -> list:
        view = self.view
        keys = self.lane_keys(view) if view is not None else []
        if not keys:
            return [Line(self.EMPTY, "dim")]
        self.first = max(0, min(self.first, len(keys) - 1))
        head, foot = self.header(view, width), self.footer(view, width)
        room = height - len(head) - len(foot) - 1
        body, shown = [], 0
        for key in keys[self.first:]:
            lane = self.lines(view, key, width)
            if len(body) + len(lane) > room and body:
                break
            body += lane
            shown += 1
        return head + body + [Line()] * max(0, room - len(body)) + [self.position(shown, len(keys))] + foot

    def position(self, shown: int, total: int) -> Line:
        return Line(f"lanes {self.first + 1}-{self.first + shown} of {total}  (↑/↓ PgUp/PgDn, wheel)", "dim")

    def action_move(self, by: int) -> None:
        self.first = max(0, self.first + by)
        self.redraw()

    def page_size(self) -> int:
        return 10

    def wheel(self, by: int) -> None:
        self.action_move(by)
