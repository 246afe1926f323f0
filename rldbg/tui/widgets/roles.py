"""Roles: one row per role x rank with live state; s cycles the sort, / filters, t shows stacks."""
from __future__ import annotations

from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input

from rldbg.tui.model import SORTS, sort_filter
from rldbg.tui.widgets.table import LineTable

COLUMNS = ("actor", "role", "rank", "state", "method", "step", "pid", "node", "cpu mem", "gpu mem")
STATE_STYLE = {"running": "green", "idle": "dim", "waiting (gate)": "yellow", "paused at breakpoint": "bold magenta",
               "dead": "red strike"}
SORT_COLUMN = {"role": "role", "state": "state", "cpu": "cpu mem", "gpu": "gpu mem", "method": "method"}


class RolesView(Vertical):
    BINDINGS = [Binding("s", "sort", "Sort"), Binding("slash", "filter", "Filter"),
                Binding("escape", "clear_filter", "Clear filter", show=False),
                Binding("t", "stacks", "Stacks of row"), Binding("T", "stacks(True)", "Stacks of role")]

    def __init__(self, **kw):
        super().__init__(**kw)
        self.sort, self.filter_text, self.view = "role", "", None

    def compose(self):
        yield LineTable(COLUMNS, max_width={"actor": 36, "method": 28, "node": 16}, id="roles-table", classes="primary")
        yield Input(placeholder="filter rows (Enter to apply, Esc to clear)", id="roles-filter", classes="hidden")

    def show(self, view) -> None:
        self.view = view
        rows = sort_filter(view.rows, self.sort, self.filter_text)
        table = self.query_one(LineTable)
        table.sorted_by = SORT_COLUMN.get(self.sort)
        table.set_rows([r.key for r in rows], [self._cells(r) for r in rows])

    @staticmethod
    def _cells(r) -> list:
        cells = [("" if c is None else str(c), "") for c in r.cells()]
        cells[3] = (cells[3][0], STATE_STYLE.get(r.state, ""))
        return cells

    def selected(self):
        table = self.query_one(LineTable)
        if not table.keys or self.view is None:
            return None
        key = table.keys[min(table.cursor_row, len(table.keys) - 1)]
        return next((r for r in self.view.rows if r.key == key), None)

    def on_line_table_header_clicked(self, event: LineTable.HeaderClicked) -> None:
        by_column = {v: k for k, v in SORT_COLUMN.items()}
        if event.column in by_column:
            self._sort_by(by_column[event.column])

    def action_sort(self) -> None:
        names = list(SORTS)
        self._sort_by(names[(names.index(self.sort) + 1) % len(names)])

    def _sort_by(self, sort: str) -> None:
        self.sort = sort
        self.notify(f"sorted by {sort}", timeout=2)
        if self.view:
            self.show(self.view)

    def action_filter(self) -> None:
        box = self.query_one(Input)
        box.remove_class("hidden")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._filter(event.value.strip())

    def action_clear_filter(self) -> None:
        self.query_one(Input).value = ""
        self._filter("")

    def _filter(self, text: str) -> None:
        self.filter_text = text
        self.query_one(Input).add_class("hidden")
        self.query_one(LineTable).focus()
        if self.view:
            self.show(self.view)

    def action_stacks(self, whole_role: bool = False) -> None:
        if (row := self.selected()) is not None:
            self.app.show_stacks(row.role, None if whole_role else row.rank)
