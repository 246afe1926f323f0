"""Roles: one row per role x rank with live state; s cycles the sort, / filters, t shows stacks."""
from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Input

from rldbg.tui.model import SORTS, sort_filter

COLUMNS = ("actor", "role", "rank", "state", "method", "step", "pid", "node", "cpu mem", "gpu mem")
STATE_STYLE = {"running": "green", "idle": "dim", "waiting (gate)": "yellow", "paused at breakpoint": "bold magenta",
               "dead": "red strike"}


class RolesView(Vertical):
    BINDINGS = [Binding("s", "sort", "Sort"), Binding("slash", "filter", "Filter"),
                Binding("escape", "clear_filter", "Clear filter", show=False),
                Binding("t", "stacks", "Stacks of row"), Binding("T", "stacks_role", "Stacks of role")]

    def __init__(self, **kw):
        super().__init__(**kw)
        self.sort, self.filter_text, self.view, self._keys = "role", "", None, []

    def compose(self):
        table = DataTable(id="roles-table", cursor_type="row", zebra_stripes=True)
        table.add_columns(*COLUMNS)
        yield table
        yield Input(placeholder="filter rows (Enter to apply, Esc to clear)", id="roles-filter", classes="hidden")

    def show(self, view) -> None:
        self.view = view
        rows = sort_filter(view.rows, self.sort, self.filter_text)
        table = self.query_one(DataTable)
        keys = [r.key for r in rows]
        if keys != self._keys:
            # The row set or order changed: rebuild (keeps the cursor on the same row index).
            cursor = table.cursor_row
            table.clear()
            for r in rows:
                table.add_row(*self._cells(r), key=r.key)
            self._keys = keys
            if rows:
                table.move_cursor(row=min(cursor, len(rows) - 1))
            return
        # Same rows: touch only changed cells, which is what keeps a 256-worker refresh cheap.
        for r in rows:
            for col, value in zip(table.columns, self._cells(r)):
                if table.get_cell(r.key, col) != value:
                    table.update_cell(r.key, col, value)

    @staticmethod
    def _cells(r) -> list:
        cells = list(r.cells())
        cells[3] = Text(cells[3], style=STATE_STYLE.get(r.state, ""))
        return cells

    def selected(self):
        table = self.query_one(DataTable)
        if not self._keys or self.view is None:
            return None
        key = self._keys[min(table.cursor_row, len(self._keys) - 1)]
        return next((r for r in self.view.rows if r.key == key), None)

    def action_sort(self) -> None:
        names = list(SORTS)
        self.sort = names[(names.index(self.sort) + 1) % len(names)]
        self.notify(f"sorted by {self.sort}", timeout=2)
        if self.view:
            self.show(self.view)

    def action_filter(self) -> None:
        box = self.query_one(Input)
        box.remove_class("hidden")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip()
        event.input.add_class("hidden")
        self.query_one(DataTable).focus()
        if self.view:
            self.show(self.view)

    def action_clear_filter(self) -> None:
        box = self.query_one(Input)
        box.value, self.filter_text = "", ""
        box.add_class("hidden")
        self.query_one(DataTable).focus()
        if self.view:
            self.show(self.view)

    def action_stacks(self, whole_role: bool = False) -> None:
        row = self.selected()
        if row is not None:
            self.app.show_stacks(row.role, None if whole_role else row.rank)

    def action_stacks_role(self) -> None:
        self.action_stacks(whole_role=True)
