"""Events: recent instants (breakpoint hits, user instants), failed calls and dropped-event counts, newest first."""
from __future__ import annotations

import time

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

KIND_STYLE = {"error": "bold red", "breakpoint": "bold magenta"}


def render_events(view) -> Text:
    out = Text()
    trace = ((view.state.get("stats") or {}).get("trace") or {})
    out.append(f"events read {view.events}" + (f" ({view.behind} still to read)" if view.behind else "") +
               f"   trace dropped {trace.get('dropped', 0)}\n", "bold")
    hits = (view.state.get("breakpoints") or {}).get("hits") or []
    for h in hits[-10:]:
        out.append(f"hit  {h.get('role')} rank {h.get('rank')} {h.get('method') or ''} step {h.get('step')} "
                   f"{h.get('file')}:{h.get('line')} ({h.get('reason')})\n", "magenta")
    if not view.notes and not hits:
        out.append("no breakpoint hits, errors or instants yet\n", "dim")
    for ts, kind, text in reversed(view.notes):
        stamp = time.strftime("%H:%M:%S", time.gmtime(ts / 1e9)) if ts else "--:--:--"
        out.append(f"{stamp}  ", "dim").append(f"{kind:<11} ", KIND_STYLE.get(kind, "cyan")).append(text + "\n")
    return out


class EventsView(VerticalScroll):
    can_focus = True

    def compose(self):
        yield Static(id="events-body")

    def show(self, view) -> None:
        self.query_one("#events-body", Static).update(render_events(view))
