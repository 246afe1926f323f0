"""Why a Ray actor died, in a few words, from the RayActorError Ray raises to its callers.

Ray's message is a paragraph (class, actor id, pid, ip, exit type, exit detail and generic advice
that always mentions the OOM killer); users need the cause Ray actually observed. What Ray can tell:
a SIGTERM, an exit code, its own memory monitor's kill, a lost node, an exception in __init__, or
that the process vanished without exiting (SIGKILL, the kernel OOM killer and a segfault look the
same to it: the connection just ends).
"""
from __future__ import annotations

import re

_DETAIL = re.compile(r"Worker exit detail:\s*(.+?)(?:\n|$)")
_SIGNAL = re.compile(r"receives? a (SIG[A-Z]+)")
_EXIT_CODE = re.compile(r"exit code (\d+)")
_IP = re.compile(r"\bip:\s*([0-9a-fA-F.:]+)")
_PID = re.compile(r"\bpid:\s*(\d+)")


def cause(err: BaseException) -> str:
    """One short phrase naming what Ray observed."""
    msg = str(getattr(err, "error_msg", "") or err)
    low = msg.lower()
    if "low on memory" in low or "outofmemoryerror" in low or "memory monitor" in low:
        return "killed by Ray's memory monitor (the node ran out of memory)"
    if getattr(err, "preempted", False) or re.search(r"node .*(died|dead|was terminated|is dead)", low):
        return "its node was lost"
    if getattr(err, "actor_init_failed", False):
        return "its constructor raised"
    if m := _SIGNAL.search(msg):
        return f"killed by {m.group(1)}"
    if "connection error" in low and "end of file" in low:
        return ("its process vanished without exiting (SIGKILL, the kernel OOM killer or a crash; "
                "Ray cannot tell which)")
    if "ray.kill" in low or "intended" in low:
        return "killed on purpose (ray.kill or the job ending)"
    if m := _EXIT_CODE.search(msg):
        return f"its process exited with code {m.group(1)}"
    if m := _DETAIL.search(msg):
        return m.group(1).strip().rstrip(".")
    return "its process died (Ray gave no cause)"


def where(err: BaseException) -> dict:
    """{'ip', 'pid'} Ray put in the error, where present."""
    msg = str(getattr(err, "error_msg", "") or err)
    out = {}
    if m := _IP.search(msg):
        out["ip"] = m.group(1)
    if m := _PID.search(msg):
        out["pid"] = int(m.group(1))
    return out
