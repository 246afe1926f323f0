"""The top line: run, hub, step, gate and connection, always visible."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


def status_text(view) -> Text:
    t = Text(" rldbg top ", "bold reverse")
    if view.status != "connected":
        style = "bold red" if view.status == "disconnected" else "bold yellow"
        return t.append(f"  {view.message or view.status}", style).append(f"   dashboard {view.address}", "dim")
    s, gate = view.state, view.gate
    g = ("PARKED" if gate.get("waiting") else "ARMED") if gate.get("armed") else "free"
    trace = ((s.get("stats") or {}).get("trace") or {})
    t.append(f"  job {view.job_id}  step {s.get('step')}  calls {s.get('calls_done')}  ")
    t.append(f"gate {g}", "bold yellow" if gate.get("armed") else "green")
    t.append(f"  trace {'on' if (s.get('trace') or {}).get('enabled') else 'off'}")
    if trace.get("dropped"):
        t.append(f" ({trace['dropped']} dropped)", "red")
    t.append(f"  hub {view.hub_url}", "dim")
    if view.message:
        t.append(f"  {view.message}", "yellow")
    return t


class StatusBar(Static):
    _last = None

    def show(self, view) -> None:
        text = status_text(view)
        if text.markup != self._last:
            # Fixed height (rldbg.tcss): a layout pass here would repaint every view each refresh.
            self.update(text, layout=False)
            self._last = text.markup
