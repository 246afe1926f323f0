"""A read-only table that paints only the rows on screen. Textual's DataTable renders each cell
through Rich (about 0.2 ms a cell here) and re-renders every visible cell when any one changes;
with 384 role x rank rows that is most of a 50 ms frame budget several times over. Rows here are
plain strings with an optional style per cell, and a frame costs one Line per visible row."""
from __future__ import annotations

from textual.message import Message

from rldbg.tui.widgets.strips import Line, LineView

GAP = 2
ZEBRA = "on grey11"
CURSOR = "bold black on dark_cyan"
CURSOR_BLURRED = "on grey30"


class LineTable(LineView):
    class HeaderClicked(Message):
        def __init__(self, table: "LineTable", column: str):
            super().__init__()
            self.table, self.column = table, column

    def __init__(self, columns, max_width: dict | None = None, **kw):
        super().__init__(**kw)
        self.columns = list(columns)
        self.max_width = dict(max_width or {})
        self.rows: list = []          # [[(text, style spec), ...], ...]
        self.keys: list = []
        self.sorted_by: str | None = None
        self.cursor_row, self.top = 0, 0
        self._widths: list = []

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def get_row_at(self, i: int) -> list:
        return [text for text, _spec in self.rows[i]]

    def set_rows(self, keys: list, rows: list) -> None:
        """Replace the content; the cursor stays on the same key when it is still there."""
        old = self.keys[self.cursor_row] if self.keys and self.cursor_row < len(self.keys) else None
        self.keys, self.rows = list(keys), rows
        widths = [max([len(c)] + [len(row[i][0]) for row in rows]) for i, c in enumerate(self.columns)]
        self._widths = [min(w, self.max_width.get(c, w)) for c, w in zip(self.columns, widths)]
        if old is not None and old in keys:
            self.cursor_row = keys.index(old)
        self.cursor_row = max(0, min(self.cursor_row, len(rows) - 1))
        self.redraw()

    def build(self, width: int, height: int) -> list:
        widths = self._widths or [len(c) for c in self.columns]
        head = Line()
        for col, w in zip(self.columns, widths):
            label = col + (" ▼" if col == self.sorted_by else "")
            head.add(label[:w + GAP].ljust(w + GAP), "bold underline" if col == self.sorted_by else "bold")
        body_h = max(1, height - 1)
        self._keep_cursor_visible(body_h)
        out = [head]
        cursor = CURSOR if self.has_focus else CURSOR_BLURRED
        for i in range(self.top, min(self.top + body_h, len(self.rows))):
            # The row's background goes after each cell's own style so that it wins.
            bg = cursor if i == self.cursor_row else ZEBRA if i % 2 else ""
            line = Line()
            for (text, spec), w in zip(self.rows[i], widths):
                line.add((text if len(text) <= w else text[:w - 1] + "…").ljust(w + GAP), f"{spec} {bg}".strip())
            out.append(line.add(" " * max(0, width - line.width), bg))
        return out

    def _keep_cursor_visible(self, body_h: int) -> None:
        if self.cursor_row < self.top:
            self.top = self.cursor_row
        elif self.cursor_row >= self.top + body_h:
            self.top = self.cursor_row - body_h + 1
        self.top = max(0, min(self.top, max(0, len(self.rows) - body_h)))

    def move_cursor(self, row: int) -> None:
        self.cursor_row = max(0, min(row, len(self.rows) - 1))
        self.redraw()

    def action_move(self, by: int) -> None:
        self.move_cursor(self.cursor_row + by)

    def page_size(self) -> int:
        return max(1, self.size.height - 2)

    def on_click(self, event) -> None:
        if event.y >= 1:
            self.move_cursor(self.top + event.y - 1)
            return
        x = 0
        for col, w in zip(self.columns, self._widths or [len(c) for c in self.columns]):
            x += w + GAP
            if event.x < x:
                self.post_message(self.HeaderClicked(self, col))
                return

    def wheel(self, by: int) -> None:
        """Scroll the rows, taking the cursor along only where it would leave the screen."""
        self.top = max(0, min(self.top + by, len(self.rows) - 1))
        low, high = self.top, self.top + self.page_size()
        self.cursor_row = max(self.cursor_row, low) if by > 0 else min(self.cursor_row, high)
        self.redraw()

    def on_focus(self) -> None:   # the cursor's colour says whether the table has focus
        self.redraw()

    on_blur = on_focus
