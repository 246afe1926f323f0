"""Breakpoints: workers paused in a debugger (with the address to attach to), and the live method-breakpoint specs: b
adds one (the hub checks it; a bad spec shows the hub's 400 message), x removes the selected one."""
from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from rldbg.tui.screens import Prompt


def paused_text(paused: list) -> Text:
    if not paused:
        return Text("no worker is paused at a breakpoint\n", "dim")
    t = Text(f"{len(paused)} paused worker(s)\n", "bold magenta")
    for p in paused:
        addr = p.get("address") or (f"{p.get('host')}:{p.get('port')}" if p.get("port") else "?")
        where = f"{p.get('file')}:{p.get('line')}" if p.get("file") else (p.get("task") or "")
        t.append(f"  {p.get('role')} rank {p.get('rank')}", "bold")
        t.append(f"  {p.get('method') or '-'}  step {p.get('step', '-')}  pid {p.get('pid')}  {where}\n")
        t.append(f"      attach: rldbg attach {addr}", "cyan")
        t.append("   (or VS Code: Ray Distributed Debugger)\n", "dim")
    return t


class BreakpointsView(Vertical):
    BINDINGS = [Binding("b", "add", "Add spec"), Binding("x,delete", "remove", "Remove spec")]

    def __init__(self, **kw):
        super().__init__(**kw)
        self._specs: list = []

    def compose(self):
        yield Static(id="paused-body")
        yield Static(Text("live breakpoint specs (b add, x remove)", "bold"))
        table = DataTable(id="specs-table", cursor_type="row")
        table.add_columns("spec")
        yield table

    def show(self, view) -> None:
        self.query_one("#paused-body", Static).update(paused_text(view.paused))
        specs = list((view.state.get("breakpoints") or {}).get("specs") or [])
        if specs != self._specs:
            table = self.query_one(DataTable)
            table.clear()
            for s in specs:
                table.add_row(s, key=s)
            self._specs = specs

    def action_add(self) -> None:
        def done(spec: str | None) -> None:
            if spec:
                self.app.breakpoint("add", spec)
        self.app.push_screen(Prompt("breakpoint spec, e.g. actor.update_actor@rank=1,step=2:",
                                    "role.method@rank=N"), done)

    def action_remove(self) -> None:
        table = self.query_one(DataTable)
        if self._specs:
            self.app.breakpoint("remove", self._specs[min(table.cursor_row, len(self._specs) - 1)])
