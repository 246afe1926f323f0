"""py-spy, run locally or read back from the Ray dashboard, as one stack model.

    threads = dump(pid)                      # `py-spy dump --json`, this machine only
    threads = parse_dump_text(text)          # the text the dashboard's /worker/traceback returns
    record(pid, seconds, "x.collapsed")      # `py-spy record --format raw` (collapsed stacks)

Frames are innermost first, as py-spy prints them. Failures become PySpyError with one line a
user can act on; "ptrace not permitted" in particular names the usual fixes.
"""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field

from rldbg import tools

PTRACE_HINT = ("ptrace not permitted: run as root, or `sudo sysctl kernel.yama.ptrace_scope=0`, "
               "or in a container add --cap-add SYS_PTRACE")


class PySpyError(RuntimeError):
    """One line for the user."""


@dataclass(frozen=True)
class Frame:
    name: str
    file: str    # short form: 'threading.py', 'ray/_private/worker.py', or the path of user code
    line: int | None

    def __str__(self) -> str:
        return f"{self.name} ({self.file}:{self.line})" if self.line else f"{self.name} ({self.file})"


@dataclass
class Thread:
    name: str
    tid: int
    active: bool
    frames: list = field(default_factory=list)   # innermost first
    full_files: list = field(default_factory=list)   # full paths when known (local dumps)


def _binary() -> str:
    if (exe := tools.find("py-spy")) is None:
        raise PySpyError("py-spy is not installed on this machine (pip install py-spy)")
    return exe


def _fail(pid: int, proc: subprocess.CompletedProcess) -> PySpyError:
    text = (proc.stderr or proc.stdout or "").strip()
    low = text.lower()
    if "permission denied" in low or "operation not permitted" in low or "ptrace" in low:
        return PySpyError(f"py-spy cannot read pid {pid}: {PTRACE_HINT}")
    if "no such process" in low or "failed to find process" in low:
        return PySpyError(f"pid {pid} is gone (the worker exited)")
    last = text.splitlines()[-1] if text else f"exit status {proc.returncode}"
    return PySpyError(f"py-spy failed on pid {pid}: {last[:300]}")


def dump(pid: int, native: bool = False, timeout: float = 30.0) -> list[Thread]:
    cmd = [_binary(), "dump", "--json", "--pid", str(int(pid))] + (["--native"] if native else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PySpyError(f"py-spy dump of pid {pid} took over {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise _fail(pid, proc)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise PySpyError(f"py-spy dump of pid {pid} did not print JSON: {proc.stdout[:200]!r}") from None
    threads = []
    for t in data:
        frames = [Frame(f.get("name") or "?", f.get("short_filename") or f.get("filename") or "?",
                        f.get("line") or None) for f in t.get("frames", [])]
        threads.append(Thread(t.get("thread_name") or "", int(t.get("os_thread_id") or t.get("thread_id") or 0),
                              bool(t.get("active")), frames,
                              [f.get("filename") or "" for f in t.get("frames", [])]))
    return threads


_THREAD = re.compile(r'^Thread (?P<tid>0x[0-9a-fA-F]+|\d+) \((?P<state>[^)]*)\)(?::\s*"(?P<name>.*)")?')
_FRAME = re.compile(r"(?P<name>.+?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)")


def parse_frame(text: str) -> Frame | None:
    """"name (file:line)", as py-spy prints a frame in a dump and in collapsed stacks."""
    m = _FRAME.fullmatch(text.strip())
    return Frame(m.group("name"), m.group("file"), int(m.group("line")) if m.group("line") else None) if m else None


def parse_dump_text(text: str) -> list[Thread]:
    """`py-spy dump` text (as the dashboard returns it) -> threads."""
    threads: list[Thread] = []
    for line in text.splitlines():
        if m := _THREAD.match(line):
            tid = m.group("tid")
            threads.append(Thread(m.group("name") or "", int(tid, 16) if tid.startswith("0x") else int(tid),
                                  "active" in m.group("state"), []))
            continue
        f = parse_frame(line) if line[:1].isspace() else None
        if f and threads:
            threads[-1].frames.append(f)
    return threads


def record(pid: int, seconds: float, out_path: str, rate: int = 100, idle: bool = False, native: bool = False) -> str:
    """Sample pid for `seconds` into collapsed-stack text ("a;b;c count" per line)."""
    if seconds <= 0:
        raise PySpyError(f"bad duration {seconds}: expected a positive number of seconds")
    cmd = [_binary(), "record", "--pid", str(int(pid)), "--duration", str(max(1, round(seconds))),
           "--rate", str(int(rate)), "--format", "raw", "--output", out_path]
    cmd += (["--idle"] if idle else []) + (["--native"] if native else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        raise PySpyError(f"py-spy record of pid {pid} did not finish") from None
    if proc.returncode != 0:
        raise _fail(pid, proc)
    return out_path
