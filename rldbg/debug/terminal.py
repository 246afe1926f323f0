"""The terminal debugger behind `rldbg attach`: pdb-like commands over a DAP client.

The core is a Session fed one command line at a time and writing through an
`out` callable, so tests drive it with a list of commands and no TTY.
"""
from __future__ import annotations

import linecache
import re

from rldbg.debug.dap import DAPClient, DAPError
from rldbg.debug.lines import resolve as resolve_line

HELP = """commands:
  bt, where          stack of the stopped thread (> marks the current frame)
  up, down           move to the caller / callee frame
  l, locals          local variables of the current frame
  p EXPR             evaluate EXPR in the current frame
  ! STMT             run a statement in the current frame (e.g. !batch_size = 4)
  list               a few more source lines around the current line
  n, next            step over
  s, step            step into
  finish, out        step out of the current function
  c, continue        resume; wait for the next stop (Ctrl-C detaches)
  b FILE:LINE[:COND] add a breakpoint (COND e.g. RLDBG_RANK == 1); b alone lists them
  clear              remove every breakpoint this session set
  detach             disconnect; the worker resumes
  q, quit            same as detach (the worker is never killed)
  help               this text"""


BREAK_FORM = "FILE:LINE[:CONDITION] (e.g. reference_trainer/workers/hybrid.py:172:RLDBG_RANK == 1)"


def parse_break(text: str) -> tuple[str, int, str | None]:
    """"path.py:12" -> ("path.py", 12, None); "path.py:12:x > 3" -> (..., "x > 3")."""
    m = re.match(r"^(?P<file>.+?):(?P<line>\d+)(?::(?P<cond>.*))?$", text.strip())
    if not m or int(m.group("line")) < 1:
        raise ValueError(f"bad breakpoint {text!r}: expected {BREAK_FORM}")
    return m.group("file"), int(m.group("line")), (m.group("cond") or "").strip() or None


class Session:
    def __init__(self, client: DAPClient, out=print, context: int = 2, stop_timeout: float = 30.0,
                 continue_timeout: float | None = None):
        self.client, self.out, self.context, self.stop_timeout = client, out, context, stop_timeout
        # None: after `c`, wait for the next stop forever (the CLI); tests bound it.
        self.continue_timeout = continue_timeout
        self.frames: list[dict] = []
        self.index = 0
        self.active = False
        self.last_stop: dict = {}
        self.breakpoints: dict[str, list[dict]] = {}  # path -> [{line, condition}], as sent

    def start(self, already_attached: bool = False) -> None:
        if not already_attached:
            self.client.attach()
        self.active = True
        self._after_resume(self.stop_timeout)

    def run(self, commands) -> None:
        """Execute command lines until one ends the session (or they run out)."""
        for line in commands:
            if not self.active:
                break
            self.out(f"(rldbg) {line}")
            self.execute(line)

    def end(self) -> None:
        if self.active:
            self.client.disconnect()
            self.active = False

    def add_breakpoint(self, path: str, line: int, condition: str | None = None, source: str | None = None) -> dict:
        """Add one breakpoint (DAP replaces a file's set, so the whole set is resent); returns debugpy's answer for it
        ({verified, line, ...}). A line that cannot stop (a `def`, decorator, docstring, blank or comment line) moves to
        the line meant, read from `source` (the local copy of `path`, default `path` itself), and says so;
        BreakLineError (a ValueError) for a line outside any function that runs nothing."""
        moved = resolve_line(source or path, line, shown=source or path)
        if moved.note:
            self.out(moved.note)
            line = moved.line
        items = [b for b in self.breakpoints.get(path, []) if b["line"] != line]
        items.append({"line": int(line), **({"condition": condition} if condition else {})})
        answer = self.client.set_breakpoints(path, items)
        self.breakpoints[path] = items
        return next((a for a in answer if a.get("line") == line), answer[-1] if answer else {})

    @property
    def frame(self) -> dict | None:
        return self.frames[self.index] if self.frames else None

    def _after_resume(self, timeout: float | None) -> None:
        try:
            self.last_stop = self.client.wait_stopped(timeout if timeout is not None else 10 ** 9)
        except DAPError as e:
            if self.client.closed:
                self.out("the worker's debugger closed the connection (the process ended?)")
            else:
                self.out(f"no stop ({e}); detaching, the worker keeps running")
                self.client.disconnect()
            self.active = False
            return
        self.frames, self.index = self.client.stack_trace(), 0
        reason = self.last_stop.get("reason", "stopped")
        text = self.last_stop.get("text") or self.last_stop.get("description")
        self.out(f"stopped: {reason}" + (f" ({text})" if text and text != reason else ""))
        self.show_location()

    def show_location(self, context: int | None = None) -> None:
        f = self.frame
        if f is None:
            self.out("no frames")
            return
        path = f.get("source", {}).get("path") or "<unknown>"
        line = f.get("line") or 0
        self.out(f"> {path}:{line} in {f.get('name')}")
        n = self.context if context is None else context
        shown = False
        for no in range(max(1, line - n), line + n + 1):
            if text := linecache.getline(path, no):
                shown = True
                self.out(f"{'->' if no == line else '  '} {no:5d}  {text.rstrip()}")
        if not shown:
            self.out("   (source not available on this machine)")

    def _bt(self) -> None:
        for i, f in enumerate(self.frames):
            mark = ">" if i == self.index else " "
            path = f.get("source", {}).get("path") or "<unknown>"
            self.out(f"{mark} #{i:<2d} {f.get('name')}  {path}:{f.get('line')}")

    def _locals(self) -> None:
        scopes = self.client.scopes(self.frame["id"])
        local = next((s for s in scopes if s.get("name", "").lower().startswith("local")), scopes[0] if scopes else None)
        if local is None:
            self.out("no locals")
            return
        for v in self.client.variables(local["variablesReference"]):
            # debugpy groups dunders and functions under pseudo-variables.
            if v["name"] in ("special variables", "function variables", "class variables"):
                continue
            self.out(f"  {v['name']} = {v.get('value')}" + (f"  ({v['type']})" if v.get("type") else ""))

    def execute(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        cmd, _, arg = line.partition(" ")
        arg = arg.strip()
        if cmd.startswith("!"):
            cmd, arg = "!", line[1:].strip()
        try:
            self._execute(cmd, arg)
        except (ValueError, DAPError) as e:  # ValueError: a bad `b` argument
            self.out(f"*** {e}")
            if isinstance(e, DAPError) and self.client.closed:
                self.active = False

    def _execute(self, cmd: str, arg: str) -> None:
        resume = {"n": "next", "next": "next", "s": "stepIn", "step": "stepIn", "finish": "stepOut",
                  "out": "stepOut", "c": "continue", "continue": "continue", "cont": "continue"}
        if cmd in ("help", "h", "?"):
            self.out(HELP)
        elif cmd in ("bt", "where", "w"):
            self._bt()
        elif cmd in ("up", "u", "down", "d"):
            new = self.index + (1 if cmd in ("up", "u") else -1)
            if not 0 <= new < len(self.frames):
                self.out("*** already at the " + ("outermost" if new > self.index else "innermost") + " frame")
                return
            self.index = new
            self.show_location()
        elif cmd in ("l", "locals"):
            self._locals()
        elif cmd == "list":
            self.show_location(context=5)
        elif cmd in ("p", "print", "!"):
            if not arg:
                self.out(f"*** usage: {cmd} EXPR")
                return
            result = self.client.evaluate(arg, self.frame["id"] if self.frame else None, context="repl")
            if cmd != "!" or result.get("result"):
                self.out(result.get("result", ""))
        elif cmd in resume:
            self.client.resume(resume[cmd])
            if resume[cmd] == "continue":
                self.out("continuing; waiting for the next stop (Ctrl-C detaches)")
            self._after_resume(self.continue_timeout if resume[cmd] == "continue" else self.stop_timeout)
        elif cmd in ("b", "break"):
            if arg:
                self.add_breakpoint(*parse_break(arg))
            for path, items in self.breakpoints.items():
                for it in items:
                    cond = f" if {it['condition']}" if it.get("condition") else ""
                    self.out(f"  {path}:{it['line']}{cond}")
        elif cmd == "clear":
            for path in list(self.breakpoints):
                self.client.set_breakpoints(path, [])
            self.breakpoints.clear()
            self.out("breakpoints cleared")
        elif cmd in ("detach", "q", "quit", "exit"):
            self.end()
            self.out("detached; the worker resumes")
        else:
            self.out(f"*** unknown command {cmd!r}; type help")
