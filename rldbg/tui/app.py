"""`rldbg top`: the Textual app. Two worker threads do all I/O (poll + heartbeat); user actions run in short-lived
worker threads too. The UI thread only renders the latest View into the visible tab (hidden tabs render when shown)."""
from __future__ import annotations

import contextlib
import gc
import threading
import time

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.widgets import Footer, TabbedContent, TabPane

from rldbg.tui.data import DataSource, Snapshot
from rldbg.tui.screens import HelpScreen
from rldbg.tui.model import Model, View
from rldbg.tui.widgets.breakpoints import BreakpointsView
from rldbg.tui.widgets.events import EventsView
from rldbg.tui.widgets.memory import MemoryView
from rldbg.tui.widgets.roles import RolesView
from rldbg.tui.widgets.stacks import StacksView
from rldbg.tui.widgets.status import StatusBar
from rldbg.tui.widgets.stepper import StepperView
from rldbg.tui.widgets.timeline import TimelineView

TABS = [("roles", "Roles", RolesView), ("timeline", "Timeline", TimelineView), ("memory", "Memory", MemoryView),
        ("stepper", "Stepper", StepperView), ("breakpoints", "Breakpoints", BreakpointsView),
        ("stacks", "Stacks", StacksView), ("events", "Events", EventsView)]


class TopApp(App):
    CSS_PATH = "rldbg.tcss"
    TITLE = "rldbg top"
    BINDINGS = [Binding("q", "quit", "Quit"), Binding("question_mark", "help", "Help"),
                Binding("e", "export", "Export"), Binding("r", "refresh", "Refresh", show=False)] + [
        Binding(str(i + 1), f"tab('{tid}')", title, show=False) for i, (tid, title, _c) in enumerate(TABS)]

    def __init__(self, source: DataSource, refresh: float = 1.0, heartbeat_s: float = 1.0, freeze_gc: bool = False):
        super().__init__()
        self.source, self.refresh_s, self.heartbeat_s = source, float(refresh), float(heartbeat_s)
        self.freeze_gc, self._caught_up = freeze_gc, False
        self.model = Model(getattr(source, "address", ""))
        self.view = View(address=getattr(source, "address", ""), message="connecting ...")
        self._wake, self._stop, self._drawn = threading.Event(), threading.Event(), threading.Event()
        self.frames: list = []     # (seconds to render one View) for the benchmark
        self.polls = 0

    def compose(self):
        yield StatusBar(id="status")
        with TabbedContent(id="tabs"):
            for tid, title, cls in TABS:
                with TabPane(title, id=tid):
                    yield cls(id=f"{tid}-view")
        yield Footer()

    def on_mount(self) -> None:
        self._freeze()
        self.query_one(StatusBar).show(self.view)
        self._poll_loop()
        self._beat_loop()
        self._focus_tab("roles")

    def _freeze(self) -> None:
        """The ~60k objects of start-up, and the event store once the backlog is read, live as long
        as the app: frozen, a full collection does not stall a frame 40-60 ms scanning them (the
        collection first frees the garbage). Only in `rldbg top`'s own process: it is process-wide."""
        if self.freeze_gc:
            gc.collect()
            gc.freeze()

    def on_unmount(self) -> None:
        if self.freeze_gc:
            gc.unfreeze()
        self._stop.set()
        self._wake.set()

    @work(thread=True, exclusive=True, group="poll")
    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                snap = self.source.poll()
            except Exception as e:   # a source bug or an odd answer: show it, keep polling
                snap = Snapshot("disconnected", f"disconnected, retrying: {type(e).__name__}: {e}"[:300])
            try:
                view = self.model.update(snap)
            except Exception as e:
                view = View(**{**self.model.last.__dict__, "message": f"could not read the run's data: {e}"[:200]})
            behind = snap.behind
            # Let the page of raw events go now, not when the next poll replaces it: after a
            # catch-up it is ~150k dicts, and every full GC pass would scan them (a 150 ms hitch).
            snap = None
            self.polls += 1
            self._drawn.clear()
            if not self._call(self.show_view, view):
                return
            self._drawn.wait(5.0)   # never queue frames faster than the UI paints them
            if not behind:   # catching up on a backlog: read the next pages right away
                self._wake.wait(self.refresh_s)
            self._wake.clear()

    @work(thread=True, exclusive=True, group="beat")
    def _beat_loop(self) -> None:
        # Separate from polling so a slow dashboard never lets an armed gate time out.
        while not self._stop.wait(self.heartbeat_s):
            with contextlib.suppress(Exception):   # the poll loop reports the connection state
                self.source.heartbeat()

    def _call(self, fn, *args, **kw) -> bool:
        """Run fn on the UI thread. call_later posts a message: thread-safe, and it never blocks
        the poster: a poll thread can't hang on a closing app (call_from_thread waits forever)."""
        return not self._stop.is_set() and self.call_later(fn, *args, **kw)

    @work(thread=True, group="action")
    def _act(self, what: str, fn, *args, **kw) -> None:
        try:
            out = fn(*args, **kw)
        except Exception as e:
            self._call(self.notify, f"{what}: {e}", severity="error", timeout=8)
            return
        if what == "export":
            self._call(self.notify, f"trace exported to {out.get('path')} ({out.get('events')} events)", timeout=10)
        elif what.startswith("stacks"):
            self._call(self.query_one(StacksView).set_text, what, out)
        self._wake.set()   # show the effect now, not at the next refresh

    def show_view(self, view: View) -> None:
        t0 = time.perf_counter()
        self.view = view
        try:
            self.query_one(StatusBar).show(view)
            self.query_one(f"#{self.query_one(TabbedContent).active}-view").show(view)
        except Exception as e:   # odd data must never take the app down: say so and keep going
            self.notify(f"could not draw this view: {type(e).__name__}: {e}"[:300], severity="error")
        finally:
            self.frames.append(time.perf_counter() - t0)
            self._drawn.set()
        if not self._caught_up and view.status == "connected" and not view.behind:
            self._caught_up = True
            self.call_after_refresh(self._freeze)   # after this frame is on screen

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self._focus_tab(event.pane.id)
        self.query_one(f"#{event.pane.id}-view").show(self.view)

    def _focus_tab(self, tid: str) -> None:
        view = self.query_one(f"#{tid}-view")
        primary = view.query(".primary")
        target = primary.first() if primary else view.query("DataTable").first() if view.query("DataTable") else view
        target.focus()   # each view owns its keys: they work once it (or its table) has focus

    def action_tab(self, tid: str) -> None:
        self.query_one(TabbedContent).active = tid

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_refresh(self) -> None:
        self._wake.set()

    def action_export(self) -> None:
        self.notify("exporting the trace ...", timeout=3)
        self._act("export", lambda: self.source.hub_client().export())

    def gate(self, action: str, **kw) -> None:
        self._act(f"gate {action}", lambda: self.source.hub_client().gate(action, **kw))

    def breakpoint(self, op: str, spec: str) -> None:
        def call():
            hub = self.source.hub_client()
            return (hub.add_breakpoint if op == "add" else hub.remove_breakpoint)(spec)
        self._act(f"breakpoint {op} {spec!r}", call)

    def show_stacks(self, role: str, rank: int | None) -> None:
        stacks = self.query_one(StacksView)
        stacks.target = (role, rank)
        title = f"stacks of {role}" + (f" rank {rank}" if rank is not None else " (all ranks)")
        stacks.set_text(title, "fetching with py-spy ...")
        self.action_tab("stacks")
        self._act(title, self.source.stacks, role, rank)

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        for tid, title, _c in TABS:
            yield SystemCommand(f"Show {title}", f"switch to the {title} view", lambda t=tid: self.action_tab(t))
        for action, text in (("arm", "Arm the step gate"), ("step", "Step one pause point"),
                             ("run_to_step", "Run to the next training step"), ("continue", "Continue (disarm)")):
            yield SystemCommand(f"Gate: {text}", f"POST /api/gate {action}", lambda a=action: self.gate(a))
        yield SystemCommand("Export trace", "POST /api/export and show the written path", self.action_export)
