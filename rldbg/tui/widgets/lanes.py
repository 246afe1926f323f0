"""A view of many lanes (one per role x rank) that builds only the lanes on screen: with 256+
workers, building every lane each refresh is what would make a frame slow. Subclasses give
lane_keys(view) and lines(view, key, width) -> [Line]; this class does scrolling (keys, wheel)."""
from __future__ import annotations

from textual.binding import Binding

from rldbg.tui.widgets.strips import Line, LineView


class LaneScroller(LineView, can_focus=True):
    BINDINGS = [Binding("down,j", "scroll_lanes(1)", "Down", show=False),
                Binding("up,k", "scroll_lanes(-1)", "Up", show=False),
                Binding("pagedown", "scroll_lanes(10)", "Page down", show=False),
                Binding("pageup", "scroll_lanes(-10)", "Page up", show=False),
                Binding("home", "scroll_lanes(-100000)", "Top", show=False),
                Binding("end", "scroll_lanes(100000)", "Bottom", show=False)]

    def __init__(self, **kw):
        super().__init__(**kw)
        self.first = 0

    def header(self, view, width: int) -> list:
        return []

    def footer(self, view, width: int) -> list:
        return []

    def lane_keys(self, view) -> list:
        raise NotImplementedError

    def lines(self, view, key, width: int) -> list:
        raise NotImplementedError

    def empty(self) -> Line:
        return Line("no data yet", "dim")

    def build(self, width: int, height: int) -> list:
        view = self.view
        if view is None:
            return [self.empty()]
        keys = self.lane_keys(view)
        if not keys:
            return [self.empty()]
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

    def action_scroll_lanes(self, by: int) -> None:
        self.first = max(0, self.first + by)
        self.redraw()

    def on_mouse_scroll_down(self, event) -> None:
        self.action_scroll_lanes(3)
        event.stop()

    def on_mouse_scroll_up(self, event) -> None:
        self.action_scroll_lanes(-3)
        event.stop()
