"""Stepper: the driver's step gate. a arms, s/space runs one pause point on, m runs to a
method, n to the next training step, c continues (disarms). Shows the parked call's
per-rank shards and, after collect, the merged result."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from rldbg.tui.model import fmt_bytes


def gate_line(gate: dict) -> Text:
    if not gate:
        return Text("gate: unknown (no run)", "dim")
    t = Text("gate: ")
    if not gate.get("armed"):
        t.append("off", "bold green")
        t.append(" (running freely)")
        if gate.get("disarm_reason"):
            t.append(f"; disarmed: {gate['disarm_reason']}", "dim")
        return t
    t.append("ARMED", "bold yellow")
    t.append(f"  mode {gate.get('mode')}" + (f" -> {gate['target']}" if gate.get("target") else ""))
    t.append("  PARKED" if gate.get("waiting") else "  running to the next pause point",
             "bold magenta" if gate.get("waiting") else "")
    t.append(f"  (resumes by itself {gate.get('timeout_s', 30):g} s after this TUI goes quiet)", "dim")
    return t


def call_table(call: dict) -> Group:
    head = Text(f"{call.get('phase', '?').replace('_', ' ')}: {call.get('group')}.{call.get('method')}  "
                f"mode {call.get('mode')}  world {call.get('world')}  step {call.get('step')}  call #{call.get('id')}",
                "bold")
    shards = call.get("shards")
    if not shards:
        return Group(head, Text("no per-rank shards (after collect, or a call without a batch)", "dim"))
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("rank", "rows", "key", "shape", "dtype", "bytes"):
        table.add_column(col, justify="right" if col in ("rank", "rows", "bytes") else "left")
    for rank, sh in enumerate(shards):
        if sh is None:
            table.add_row(str(rank), "-", "(nothing sent)", "", "", "")
            continue
        keys = sh.get("keys") or [{}]
        for i, k in enumerate(keys):
            table.add_row(str(rank) if i == 0 else "", str(sh.get("rows")) if i == 0 else "", str(k.get("key", "")),
                          "x".join(map(str, k.get("shape") or [])), str(k.get("dtype", "")), fmt_bytes(k.get("nbytes")))
    return Group(head, table)


def result_block(res: dict | None):
    if not res:
        return Text("no result collected yet", "dim")
    t = Table(box=None, show_header=False, pad_edge=False)
    t.add_column("k", style="bold")
    t.add_column("v")
    t.add_row("call", f"{res.get('group')}.{res.get('method')} step {res.get('step')} (#{res.get('id')})")
    t.add_row("rows", str(res.get("rows")))
    if res.get("keys"):
        t.add_row("keys", ", ".join(str(k.get("key", k)) if isinstance(k, dict) else str(k) for k in res["keys"])[:200])
    for k, v in sorted((res.get("metrics") or {}).items()):
        t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    return Group(Text("last merged result", "bold underline"), t)


class StepperView(VerticalScroll):
    BINDINGS = [Binding("a", "gate('arm')", "Arm"), Binding("s,space", "gate('step')", "Step"),
                Binding("m", "run_to_method", "Run to method"), Binding("n", "gate('run_to_step')", "Next step"),
                Binding("c", "gate('continue')", "Continue")]
    can_focus = True

    def __init__(self, **kw):
        super().__init__(**kw)
        self.view = None

    def compose(self):
        yield Static(id="stepper-body")

    def show(self, view) -> None:
        self.view = view
        gate = view.gate
        parts = [gate_line(gate), Text(f"driver: step {view.state.get('step')}  calls done {view.state.get('calls_done')}\n")]
        pending = gate.get("pending")
        if pending:
            parts += [Text("pending call" if gate.get("waiting") else "newest pause point", "bold underline"),
                      call_table(pending), Text("")]
        parts.append(result_block(gate.get("last_result")))
        parts.append(Text("\na arm  s/space step  m run to method  n next step  c continue", "dim"))
        self.query_one("#stepper-body", Static).update(Group(*parts))

    def action_gate(self, action: str) -> None:
        self.app.gate(action)

    def action_run_to_method(self) -> None:
        from rldbg.tui.screens.prompt import Prompt

        def done(method: str | None) -> None:
            if method:
                self.app.gate("run_to_method", method=method)
        self.app.push_screen(Prompt("run to method (e.g. update_actor):", "method"), done)
