"""Stacks of many workers, identical ones grouped, so a hung rank stands out.

fetch() asks the dashboard's /worker/traceback first (it reaches other nodes) and falls back to
a local `py-spy dump` when the dashboard refuses (403 without RAY_DASHBOARD_ENABLE_PROFILING=1;
500 "Failed to get agent address" on clusters made by ray.init(), or for a node whose agent the
head does not know: that node's workers only) and the pid is on this node.
group() keys each worker by its main thread's frames (names, files, lines; native addresses
stripped), which is where a Ray actor runs its methods.

explain() says what a group of ranks does when a call does not finish, one line per role, from
each main thread's state (classify(): collective, wait, between, running): "critic: rank 1 waits
in all_reduce (critic.py:60); rank 0 is not in the collective: Event.wait in update_critic
(critic.py:54)". The ranks inside a collective wait for the ones that are not: look at those.
"""
from __future__ import annotations

import re
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from rldbg.dashboard import DashboardError
from rldbg.profilers import pyspy

_ADDR = re.compile(r"0x[0-9a-fA-F]+")
_STDLIB = sysconfig.get_paths()["stdlib"]
SHOWN_FRAMES = 10


@dataclass
class Result:
    target: object
    threads: list | None = None
    source: str = ""          # "dashboard" or "py-spy"
    error: str | None = None


@dataclass
class Group:
    results: list = field(default_factory=list)
    frames: list = field(default_factory=list)
    where: object = None
    active: bool = False
    thread: object = None     # the first member's main thread, for classify()


def fetch(targets, dash, native: bool = False, via: str = "auto") -> list[Result]:
    """One Result per target, in order. via: auto | dashboard | local."""
    if via not in ("auto", "dashboard", "local"):
        raise ValueError(f"bad --via {via!r}: expected auto, dashboard or local")
    # A refusal learned once, not re-asked for every worker: the dashboard's profiling routes (all
    # workers), or a node whose agent the head does not know (that node's: another node's may answer).
    broken = {}

    def one(t) -> Result:
        why_dash = broken.get("all") or broken.get(t.node_id or t.ip)
        if via != "local" and why_dash is None:
            try:
                text = dash.traceback(t.pid, ip=t.ip or None, node_id=t.node_id or None, native=native)
                if threads := pyspy.parse_dump_text(text):
                    return Result(t, threads, "dashboard")
                why_dash = f"the dashboard's traceback had no threads: {text.strip()[:200]!r}"
            except DashboardError as e:
                why_dash = str(e)
                if "refuses profiling" in why_dash:
                    broken["all"] = why_dash
                elif "agent address" in why_dash.lower():
                    broken[t.node_id or t.ip] = why_dash
        if via == "dashboard":
            return Result(t, error=why_dash)
        if not t.local:
            return Result(t, error=f"pid {t.pid} runs on {t.ip or t.node_id[:8]}, not this machine, and " + (
                f"the dashboard could not dump it ({why_dash})" if why_dash else "--via local reads this machine only"))
        try:
            return Result(t, pyspy.dump(t.pid, native=native), "py-spy")
        except pyspy.PySpyError as e:
            return Result(t, error=str(e))

    head = [one(targets[0])] if via != "local" and targets else []   # does the dashboard work?
    with ThreadPoolExecutor(max_workers=8) as pool:
        return head + list(pool.map(one, targets[len(head):]))


def main_thread(threads):
    return next((t for t in threads if t.name == "MainThread"), threads[0] if threads else None)


def is_library(frame, full: str = "") -> bool:
    """Frames of the Python stdlib, which say *how* a thread waits, not *where* in user code."""
    if full:
        return full.startswith(_STDLIB) and "-packages" not in full
    top = frame.file.split("/")[0].removesuffix(".py")
    return top in sys.stdlib_module_names or frame.file.startswith("<")


def where(thread):
    """The innermost frame outside the stdlib (torch's all_reduce, the user's wait_for_peer)."""
    fulls = thread.full_files or [""] * len(thread.frames)
    for f, full in zip(thread.frames, fulls):
        if f.line and not is_library(f, full):
            return f
    return thread.frames[0] if thread.frames else None


# torch.distributed's Python entry points live in these files (short py-spy paths end with them).
_C10D_FILES = ("distributed/distributed_c10d.py", "distributed/c10d_logger.py")
# Innermost stdlib frames that mean "blocked until something happens elsewhere".
_WAIT_NAMES = {"wait", "Event.wait", "Condition.wait", "Queue.get", "get", "sleep", "select", "poll",
               "acquire", "join", "Thread.join", "recv", "recv_into", "accept", "_wait_for_tstate_lock",
               "wait_for", "Barrier.wait", "Semaphore.acquire"}


def classify(thread) -> tuple[str, str, object]:
    """(kind, what, frame) of a main thread: ("collective", "all_reduce", caller) inside
    torch.distributed, ("wait", "Event.wait", caller) blocked in a stdlib wait, ("between", "", None)
    a Ray actor between calls, ("paused", "breakpoint", frame) at an rldbg breakpoint, ("running",
    name, frame) otherwise. The frame is the innermost one of
    the user's code around it. (py-spy's idle/active only says who holds the GIL.)"""
    frames = thread.frames
    fulls = thread.full_files or [""] * len(frames)
    if not frames:
        return "running", "", None
    if frames[0].name == "Worker.main_loop":
        return "between", "", None
    if paused := [i for i, f in enumerate(frames) if f.file.endswith("rldbg/debug/breakpoints.py")]:
        # debugpy waits inside rldbg's pause: the frame that asked for it is the first outside rldbg.
        return "paused", "breakpoint", next((f for f in frames[paused[-1] + 1:] if "rldbg/" not in f.file), None)
    if c10d := [i for i, f in enumerate(frames) if f.file.endswith(_C10D_FILES[0])]:
        # The outermost distributed_c10d frame is the API the user called; its caller is user code
        # (skipping torch's logging wrapper around it).
        api = c10d[-1]
        caller = next((f for f in frames[api + 1:] if not f.file.endswith(_C10D_FILES)), None)
        return "collective", frames[api].name.split(".")[-1], caller
    lib = 0
    while lib < len(frames) and is_library(frames[lib], fulls[lib]):
        lib += 1
    if lib and any(f.name in _WAIT_NAMES for f in frames[:lib]):
        # Condition.wait inside Event.wait: name the outermost stdlib call, the one the user made.
        return "wait", frames[lib - 1].name, frames[lib] if lib < len(frames) else None
    return "running", frames[0].name, where(thread)


def group(results) -> tuple[list[Group], list[Result]]:
    """-> (groups, failures); groups ordered odd-one-out first (fewest members), then by label."""
    groups, failed = {}, []
    for r in results:
        t = main_thread(r.threads or [])
        if t is None:
            failed.append(r if r.error else Result(r.target, error="no Python threads found"))
            continue
        frames = [pyspy.Frame(_ADDR.sub("0x?", f.name), _ADDR.sub("0x?", f.file), f.line) for f in t.frames]
        g = groups.setdefault(tuple(frames), Group(frames=frames, where=where(t), thread=t))
        g.results.append(r)
        g.active = g.active or t.active
    return sorted(groups.values(), key=lambda g: (len(g.results), g.results[0].target.label)), failed


def members(g: Group) -> str:
    """'actor rank 0, 2; critic rank 1'; a process of colocated roles by all of them, whichever was
    asked for ('actor+reward rank 0' for --role reward): its one main thread may run any role's call."""
    by_role: dict = {}
    for r in g.results:
        t = r.target
        by_role.setdefault(t.roles, []).append(str(t.rank) if t.rank is not None else f"pid {t.pid}")
    return "; ".join(f"{role} rank {', '.join(v)}" for role, v in by_role.items())


def headline(g: Group) -> str:
    n = len(g.results)
    who = members(g) if n == 1 else f"{n} ranks ({members(g)})"
    kind, what, _ = classify(g.thread) if g.thread is not None else ("running", "", None)
    if kind == "between":   # a Ray actor between calls
        return f"{who} idle between calls (Ray's {g.where})"
    state = {"collective": f"waiting in {what}", "wait": f"waiting: {what}"}.get(kind, "running")
    return f"{who} in {g.where} [{state}]"


def format_text(groups, failed, shown: int = SHOWN_FRAMES) -> str:
    lines = []
    for g in groups:
        lines.append(headline(g))
        lines += [f"    {f}" for f in g.frames[:shown]]
        if len(g.frames) > shown:
            lines.append(f"    ... {len(g.frames) - shown} outer frames")
    lines += [f"{r.target.label}: no stack: {r.error}" for r in failed]
    return "\n".join(lines)


def to_json(groups, failed) -> dict:
    return {"groups": [{"headline": headline(g), "count": len(g.results), "active": g.active,
                        "where": str(g.where) if g.where else None,
                        "workers": [{"label": r.target.label, "role": r.target.role, "rank": r.target.rank,
                                     "pid": r.target.pid, "ip": r.target.ip, "source": r.source}
                                    for r in g.results],
                        "frames": [{"name": f.name, "file": f.file, "line": f.line} for f in g.frames]}
                       for g in groups],
            "errors": [{"label": r.target.label, "pid": r.target.pid, "error": r.error} for r in failed]}


@dataclass
class RankState:
    label: str          # "critic rank 1"
    rank: int | None
    kind: str           # collective | wait | between | paused | running
    what: str           # "all_reduce", "Event.wait"
    where: str          # "update_critic (critic.py:54)": the innermost frame of user code


def _ranks(ss) -> str:
    rs = [str(s.rank) if s.rank is not None else s.label for s in ss]
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(rs)


def _states(results) -> dict:
    by_role: dict = {}   # role -> the state of each of its ranks' main thread
    for r in results:
        t = main_thread(r.threads or [])
        if t is not None:
            kind, what, frame = classify(t)
            state = RankState(r.target.label, r.target.rank, kind, what, str(frame) if frame else "?")
            by_role.setdefault(r.target.role, []).append(state)
    return by_role


def explain(results, again=None, looks: int = 4) -> list[str]:
    """One line per role whose ranks are not all doing the same kind of thing (or all stuck in a
    collective); nothing for roles that look healthy. One look cannot tell a hang from a moment of
    a healthy step (a rank in its all_reduce, or a call's last milliseconds, while the other is
    not): with `again` (fresh results of the same targets) a role's line stays only where every
    further look, up to `looks` in all, finds its ranks as they were: each one that waits (in a
    collective, a wait, a breakpoint) at the same place, each one that runs still running (a rank
    looping through a hang moves from line to line). A rank a later look could not read is not
    held against the line."""
    by_role = _states(results)
    lines = {role: line for role, ss in by_role.items() if (line := _line(role, ss))}
    for _ in range(looks - 1 if again is not None else 0):
        if not lines:
            break
        later = _states(again())
        lines = {role: line for role, line in lines.items() if _still(by_role[role], later.get(role, []))}
    return [lines[role] for role in sorted(lines)]


def _still(before: list, after: list) -> bool:
    def held(s):
        return (s.kind, s.what, s.where) if s.kind in ("collective", "wait", "paused") else (s.kind,)
    now = {s.label: held(s) for s in after}
    return all(now.get(s.label, held(s)) == held(s) for s in before)


def _line(role: str, ss: list) -> str | None:
    coll = [s for s in ss if s.kind == "collective"]
    rest = [s for s in ss if s.kind != "collective"]
    if coll and rest:
        names = sorted({s.what for s in coll})
        head = f"{role}: {_ranks(coll)} wait{'s' if len(coll) == 1 else ''} in {'/'.join(names)}"
        odd = "; ".join(f"{_ranks([s])} is not in the collective: " + _doing(s) for s in rest)
        return f"{head} at {coll[0].where}; {odd}"
    if coll and len({s.what for s in coll}) > 1:
        return (f"{role}: ranks are in different collectives ("
                + "; ".join(f"{_ranks([s])} {s.what} at {s.where}" for s in coll) + "): a mismatched collective order")
    if coll:
        return (f"{role}: every rank waits in {coll[0].what} ({coll[0].where}): a peer outside "
                "this group, or a collective the other side never calls")
    busy = [s for s in ss if s.kind != "between"]
    done = [s for s in ss if s.kind == "between"]
    if busy and done:
        doing = "; ".join(_doing(s) for s in busy)
        return f"{role}: {_ranks(busy)} still in a call ({doing}); {_ranks(done)} finished"
    return None


def _doing(s: RankState) -> str:
    if s.kind == "paused":
        return f"paused at a breakpoint at {s.where}: `rldbg attach` reaches it"
    if s.kind == "wait":
        return f"{s.what} in {s.where}"
    return "idle between calls" if s.kind == "between" else f"running in {s.where}"
