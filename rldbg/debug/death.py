"""Why a Ray actor died, in a few words, from the RayActorError Ray raises to its callers.

Ray's message is a paragraph whose generic advice always mentions the OOM killer; users need the
cause Ray observed: a SIGTERM, an exit code, its memory monitor's kill, a lost node, an exception in
__init__, or a process that vanished (SIGKILL, the kernel OOM killer and a segfault look alike).

A call to an actor whose process or node just went away often fails first with "unavailable" (no
cause yet): settle() waits for Ray's verdict. A surviving rank's collective can fail before Ray
reports its peer's death at all (gloo: "Connection closed by peer"): reading such an echo belongs
to the dispatch layer that runs the collective, which then asks actor_death() about each peer.
"""
from __future__ import annotations

import re
from typing import NamedTuple

_DETAIL = re.compile(r"Worker exit detail:\s*(.+?)(?:\n|$)")
_SIGNAL = re.compile(r"receives? a (SIG[A-Z]+)")
_EXIT_CODE = re.compile(r"exit code (\d+)")
_IP = re.compile(r"\bip:\s*([0-9a-fA-F.:]+)")
_PID = re.compile(r"\bpid:\s*(\d+)")


def cause(err: BaseException) -> str:
    """One short phrase naming what Ray observed."""
    err = settle(err)
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
    if "is unavailable" in low:
        return (f"Ray could not reach it ({_unreachable(msg)}) and had not declared it dead "
                "(a node or network partition, or a process that stopped answering)")
    if m := _EXIT_CODE.search(msg):
        return f"its process exited with code {m.group(1)}"
    if m := _DETAIL.search(msg):
        return m.group(1).strip().rstrip(".")
    return "its process died (Ray gave no cause)"


SETTLE_S = 60.0


def settle(err: BaseException, timeout: float | None = None, poll: float = 0.25) -> BaseException:
    """Ray's verdict on an actor it could only call unavailable (ActorUnavailableError, no cause):
    Ray declares it dead, with the cause it observed, only later (a lost node: once the GCS's health
    checks give up, seconds). The ActorDiedError Ray settles on within `timeout` s (default
    SETTLE_S), else `err` itself; only that error type is waited on, with Ray connected."""
    import time

    try:
        import ray
        from ray._private import state
    except ImportError:
        return err
    actor_id = getattr(err, "actor_id", None)
    if (not isinstance(err, ray.exceptions.ActorUnavailableError) or not actor_id or not ray.is_initialized()
            or getattr(err, "_rldbg_unsettled", False)):   # waited for once already: do not wait again
        return err
    deadline = time.monotonic() + (SETTLE_S if timeout is None else timeout)
    while time.monotonic() < deadline:
        try:
            info = state.actors(actor_id=actor_id) or {}
        except Exception:  # noqa: BLE001 - the GCS unreachable too: keep what we have
            return err
        if info.get("State") == "DEAD":
            death = info.get("DeathCause")
            if death is not None and death.HasField("actor_died_error_context"):
                return ray.exceptions.ActorDiedError(death.actor_died_error_context)
            return ray.exceptions.ActorDiedError()
        time.sleep(poll)
    err._rldbg_unsettled = True
    return err


def _unreachable(msg: str) -> str:
    m = re.search(r"(connection refused|deadline exceeded|failed to connect[^;:.]*|unavailable)", msg, re.IGNORECASE)
    return m.group(1).lower() if m else "no answer"


def where(err: BaseException) -> dict:
    """{'ip', 'pid'} Ray put in the error, where present."""
    msg = str(getattr(err, "error_msg", "") or err)
    out = {}
    if m := _IP.search(msg):
        out["ip"] = m.group(1)
    if m := _PID.search(msg):
        out["pid"] = int(m.group(1))
    return out


class ActorDeath(NamedTuple):
    """Why Ray says an actor died: `cause` in a few words, the `ip` and `pid` Ray named (None where
    its message gives none), and `error`, Ray's settled RayActorError."""
    cause: str
    ip: str | None
    pid: int | None
    error: BaseException


def actor_death(err: BaseException, timeout: float | None = None) -> ActorDeath:
    """Ray's verdict on the actor behind `err` (a RayActorError a call raised): waits up to `timeout`
    s (default SETTLE_S) when Ray could only call it unavailable so far (settle)."""
    settled = settle(err, timeout)
    seen = {**where(err), **where(settled)}
    return ActorDeath(cause(settled), seen.get("ip"), seen.get("pid"), settled)
