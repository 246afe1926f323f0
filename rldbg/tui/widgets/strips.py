"""Lines painted straight into Textual strips. With 256 workers a view holds a few thousand styled runs; handing Textual
one Rich Text (or a DataTable cell per value) costs 100+ ms a frame in wrapping and per-cell rendering. Building
Segments ourselves and returning them from render_line keeps a frame to the lines on screen and nothing else."""
from __future__ import annotations

from functools import lru_cache

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.strip import Strip
from textual.widget import Widget


@lru_cache(maxsize=1024)
def style(spec: str) -> Style | None:
    return Style.parse(spec) if spec else None


class Line:
    """Styled runs of text, one terminal line."""
    __slots__ = ("segments", "width")

    def __init__(self, text: str = "", spec: str = ""):
        self.segments: list = []
        self.width = 0
        if text:
            self.add(text, spec)

    def add(self, text: str, spec: str = "") -> "Line":
        if text:
            self.segments.append(Segment(text, style(spec)))
            self.width += len(text) if text.isascii() else cell_len(text)
        return self

    @property
    def plain(self) -> str:
        return "".join(s.text for s in self.segments)

    def strip(self, width: int) -> Strip:
        return Strip(self.segments, self.width).crop_extend(0, width, None)


class LineView(Widget, can_focus=True):
    """A widget whose content is a list of Lines built once per refresh (or resize) for the region on screen. Subclasses
    implement build(width, height) -> [Line], and scrolling: action_move(by) for the keys, page_size() and wheel(by)."""
    BINDINGS = [Binding("down,j", "move(1)", "Down", show=False), Binding("up,k", "move(-1)", "Up", show=False),
                Binding("pagedown", "page(1)", "Page down", show=False),
                Binding("pageup", "page(-1)", "Page up", show=False),
                Binding("home", "move(-1000000)", "First", show=False),
                Binding("end", "move(1000000)", "Last", show=False)]

    def __init__(self, **kw):
        super().__init__(**kw)
        self.view = None
        self._strips: list | None = None
        self._built_for = None

    def show(self, view) -> None:
        self.view = view
        self.redraw()

    def redraw(self) -> None:
        self._strips = None
        self.refresh()

    def build(self, width: int, height: int) -> list:
        raise NotImplementedError

    def action_page(self, by: int) -> None:
        self.action_move(by * self.page_size())

    def on_mouse_scroll_down(self, event) -> None:
        self.wheel(3)
        event.stop()

    def on_mouse_scroll_up(self, event) -> None:
        self.wheel(-3)
        event.stop()

    def plain_text(self) -> str:
        """What the widget shows now, as text (tests, and a way to read a view without a terminal)."""
        return "\n".join(line.plain for line in self.build(max(self.size.width, 20), max(self.size.height, 3)))

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        if self._strips is None or self._built_for != (width, height):
            self._strips = [line.strip(width) for line in self.build(max(width, 20), max(height, 3))[:height]]
            self._built_for = (width, height)
        return self._strips[y] if y < len(self._strips) else Strip.blank(width)
