"""Modal screens of `rldbg top`: ? (every key of every view in one place) and a one-line prompt."""
from __future__ import annotations

from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

HELP = """[b]rldbg top[/b] — live view of an RL run on Ray

[b]anywhere[/b]   1-7 switch view   ? help   q quit   e export trace   r refresh now
           ctrl+p command palette   tab/shift+tab move focus   mouse: click tabs, rows, wheel scrolls
[b]1 Roles[/b]    ↑/↓ j/k PgUp/PgDn Home/End move   s cycle sort (role, state, cpu, gpu, method), or click
           a column header   / filter   esc clear filter   t stacks of the selected worker   T of its role
[b]2 Timeline[/b] ←/h back   →/l forward   + zoom in   - zoom out (steps shown)   f follow live
[b]3 Memory[/b]   sparkline per rank; transitions: O frees  R loads  W both (as declared)
[b]4 Stepper[/b]  a arm   s/space step one pause point   m run to a method   n run to the next step
           c continue (disarm). Ranks that got identical shards share one row ("0-126 (127)").
           While this TUI is open it heartbeats; if it dies the run resumes after the hub's gate timeout.
[b]5 Breaks[/b]   b add a breakpoint spec (role.method@rank=N,step=M)   x remove the selected spec
[b]6 Stacks[/b]   r re-fetch   (choose a worker in Roles with t / T)
[b]7 Events[/b]   breakpoint hits, errors, dropped-event counts

esc or ? closes this screen."""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "Close")]

    def compose(self):
        with VerticalScroll(id="help"):
            yield Static(HELP)


class Prompt(ModalScreen[str | None]):
    """A one-line prompt; dismisses with the text, or None on Esc."""
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, placeholder: str = "", value: str = ""):
        super().__init__()
        self.question, self.placeholder, self.value = question, placeholder, value

    def compose(self):
        with Vertical(id="prompt"):
            yield Label(self.question)
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
