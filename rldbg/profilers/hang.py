"""What a group of ranks is doing when a call does not finish, in one line per role.

Each rank's main thread is put in one of four states from its stack:
  collective  inside torch.distributed (all_reduce, broadcast, barrier, ...): waiting for peers
  wait        blocked in a wait of the standard library (Event.wait, queue get, sleep, select, ...)
  between     a Ray actor between calls (nothing of the user's running)
  running     anything else (computing, or in native code)
and a role whose ranks disagree is explained: "critic: rank 1 waits in all_reduce (critic.py:60);
rank 0 is not in the collective: Event.wait in update_critic (critic.py:54)". The ranks inside a
collective wait for the ones that are not; those are the ones to look at.
"""
from __future__ import annotations

from dataclasses import dataclass

from rldbg.profilers import stacks


@dataclass
class RankState:
    label: str          # "critic rank 1"
    rank: int | None
    kind: str           # collective | wait | between | running
    what: str           # "all_reduce", "Event.wait"
    where: str          # "update_critic (critic.py:54)": the innermost frame of user code


def _ranks(ss) -> str:
    rs = [str(s.rank) if s.rank is not None else s.label for s in ss]
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(rs)


def explain(results) -> list[str]:
    """One line per role whose ranks are not all doing the same kind of thing (or all stuck in a
    collective); nothing for roles that look healthy."""
    by_role: dict = {}   # role -> the state of each of its ranks' main thread
    for r in results:
        t = stacks.main_thread(r.threads or [])
        if t is not None:
            kind, what, frame = stacks.classify(t)
            state = RankState(r.target.label, r.target.rank, kind, what, str(frame) if frame else "?")
            by_role.setdefault(r.target.role, []).append(state)
    lines = []
    for role, ss in sorted(by_role.items()):
        coll = [s for s in ss if s.kind == "collective"]
        rest = [s for s in ss if s.kind != "collective"]
        if coll and rest:
            names = sorted({s.what for s in coll})
            head = f"{role}: {_ranks(coll)} wait{'s' if len(coll) == 1 else ''} in {'/'.join(names)}"
            odd = "; ".join(f"{_ranks([s])} is not in the collective: " + _doing(s) for s in rest)
            lines.append(f"{head} at {coll[0].where}; {odd}")
        elif coll and len({s.what for s in coll}) > 1:
            lines.append(f"{role}: ranks are in different collectives ("
                         + "; ".join(f"{_ranks([s])} {s.what} at {s.where}" for s in coll)
                         + "): a mismatched collective order")
        elif coll:
            lines.append(f"{role}: every rank waits in {coll[0].what} ({coll[0].where}): a peer outside "
                         "this group, or a collective the other side never calls")
        else:
            busy = [s for s in ss if s.kind != "between"]
            done = [s for s in ss if s.kind == "between"]
            if busy and done:
                lines.append(f"{role}: {_ranks(busy)} still in a call ("
                             + "; ".join(_doing(s) for s in busy) + f"); {_ranks(done)} finished")
    return lines


def _doing(s: RankState) -> str:
    if s.kind == "wait":
        return f"{s.what} in {s.where}"
    if s.kind == "between":
        return "idle between calls"
    return f"running in {s.where}"
