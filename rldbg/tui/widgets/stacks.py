"""Stacks: py-spy dumps of one worker or all workers of a role, grouped (rldbg.profilers.stacks).
Fetched in a worker thread by the app; r fetches the same target again."""
from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static


class StacksView(VerticalScroll):
    BINDINGS = [Binding("r", "refetch", "Re-fetch")]
    can_focus = True

    def __init__(self, **kw):
        super().__init__(**kw)
        self.target = None

    def compose(self):
        yield Static(Text("pick a worker in Roles and press t (one worker) or T (its whole role)", "dim"),
                     id="stacks-body")

    def show(self, view) -> None:
        pass   # stacks are fetched on request, not on every poll

    def set_text(self, title: str, text: str) -> None:
        self.query_one("#stacks-body", Static).update(Text(title + "\n\n", "bold").append(text))

    def action_refetch(self) -> None:
        if self.target:
            self.app.show_stacks(*self.target)
