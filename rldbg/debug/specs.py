"""Breakpoint specs: pause a role's method on chosen ranks/steps without editing code.

    actor.update_actor@rank=1,step=3     rank 1 of role "actor", step 3
    actor.*@rank=0                       every registered method of actor rank 0
    critic.compute_values@rank=0-3       ranks 0..3 (also rank=0|1 or rank=0,1)
    rollout.generate@when=step % 10 == 0 a Python condition over role, rank, step, method

`when=` must come last (it may contain commas). Specs come from a trainer config
(list), the CLI, or RLDBG_BREAKPOINTS (`;`-separated); a hub can edit a SpecSet live.
"""
from __future__ import annotations

import fnmatch
import os
import re
import threading
from dataclasses import dataclass

from rldbg.switches import BREAKPOINTS as ENV_VAR

FORM = "ROLE.METHOD[@rank=R[,R...]][,step=S][,when=EXPR]  (e.g. actor.update_actor@rank=1,step=3)"

_NAME = re.compile(r"^[A-Za-z_*?\[\]][\w*?\[\]+\-]*$")
_FILE_LINE = re.compile(r"^[^@]*\.pyw?:\d+(:.*)?$")


class SpecError(ValueError):
    """A spec that does not parse; the message is one line for the user."""


@dataclass(frozen=True)
class Spec:
    role: str
    method: str = "*"
    ranks: frozenset | None = None  # None: every rank
    steps: frozenset | None = None  # None: every step
    when: str | None = None

    @property
    def text(self) -> str:
        parts = [f"{key}=" + "|".join(str(n) for n in sorted(nums))
                 for key, nums in (("rank", self.ranks), ("step", self.steps)) if nums is not None]
        if self.when:
            parts.append("when=" + self.when)
        return f"{self.role}.{self.method}" + ("@" + ",".join(parts) if parts else "")

    def __str__(self) -> str:
        return self.text


def _bad(text: str, why: str, known_roles=None, known_methods=None) -> SpecError:
    msg = f"bad breakpoint spec {text!r}: {why}; expected {FORM}"
    if known_roles:
        msg += "; known roles: " + ", ".join(sorted(known_roles))
    if known_methods:
        msg += "; known methods: " + ", ".join(sorted(known_methods))
    return SpecError(msg)


def numbers(text: str) -> frozenset:
    """"1", "0,1", "0|1", "0-3" -> those numbers; ValueError(the first part that is not one)."""
    out: set[int] = set()
    for part in re.split(r"[|,]", text):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or int(m[2] or m[1]) < int(m[1]):
            raise ValueError(part.strip())
        out.update(range(int(m[1]), int(m[2] or m[1]) + 1))
    return frozenset(out)


def parse_ranks(text: str | None, what: str = "ranks") -> frozenset | None:
    """"1", "0,1", "0|1", "0-3" -> a set of ranks; None, "" or "*" -> None (every rank)."""
    if text is None or str(text).strip() in ("", "*"):
        return None
    try:
        return numbers(str(text))
    except ValueError as e:
        raise ValueError(f"bad {what} {text!r}: {str(e)!r} is not a rank; accepted: 1, 0,1, 0|1, 0-3 or *") from None


def parse(text: str, known_roles=None, known_methods=None) -> Spec:
    """One spec string -> Spec. known_roles / known_methods (optional) are checked
    and listed in the error, so a typo names the right choices."""
    known = {"known_roles": known_roles, "known_methods": known_methods}
    if not isinstance(text, str) or not text.strip():
        raise _bad(str(text), "empty spec", **known)
    raw = text.strip()
    if _FILE_LINE.match(raw):
        # A spec pauses as a method starts; a line in a file is a debugger's breakpoint.
        raise SpecError(f"bad breakpoint spec {raw!r}: FILE:LINE is not a spec; a breakpoint on a line is "
                        "set from a debugger in debug mode (debug.listen_roles=[ROLE] or RLDBG_LISTEN_ROLES=ROLE, "
                        f"then rldbg attach --role ROLE --break {raw}, or VS Code); specs are {FORM}")
    target, _, filters = raw.partition("@")
    role, _, method = target.strip().partition(".")
    role, method = role.strip(), (method.strip() or "*")
    if not role or not _NAME.match(role) or not _NAME.match(method):
        raise _bad(raw, f"{target.strip()!r} is not ROLE.METHOD", **known)
    if known_roles and not any(role_matches(role, r) for r in known_roles):
        raise _bad(raw, f"unknown role {role!r}", **known)
    if known_methods and not any(fnmatch.fnmatchcase(m, method) for m in known_methods):
        raise _bad(raw, f"unknown method {method!r}", **known)

    ranks = steps = when = None
    if "@" in raw:
        if when_at := re.search(r"(?:^|,)\s*when\s*=", filters):
            when = filters[when_at.end():].strip()
            filters = filters[: when_at.start()]
            if not when:
                raise _bad(raw, "when= needs a Python expression", **known)
            try:
                compile(when, "<rldbg breakpoint when>", "eval")
            except SyntaxError as e:
                raise _bad(raw, f"when={when!r} is not a Python expression ({e.msg})", **known) from None
        # A bare number after rank=1 continues the list: rank=1,2,step=3.
        key, values = None, {"rank": [], "step": []}
        for item in [p.strip() for p in filters.split(",")]:
            if not item:
                if filters.strip():
                    raise _bad(raw, "empty filter between commas", **known)
                continue
            name, eq, value = item.partition("=")
            if eq:
                key = name.strip()
                if key not in values:
                    raise _bad(raw, f"unknown filter {key!r} (accepted: rank, step, when)", **known)
                values[key].append(value.strip())
            elif key is not None and re.fullmatch(r"[\d|\-\s]+", item):
                values[key].append(item)
            else:
                raise _bad(raw, f"{item!r} is not NAME=VALUE", **known)
        found = {}
        for what, value in values.items():
            try:
                found[what] = numbers(",".join(value)) if value else None
            except ValueError:
                raise _bad(raw, f"{what}={','.join(value)!r} is not a non-negative number, list (0|1) or range (0-3)",
                           **known) from None
        ranks, steps = found["rank"], found["step"]
        if ranks is None and steps is None and when is None:
            raise _bad(raw, "'@' must be followed by rank=, step= or when=", **known)
    return Spec(role, method, ranks, steps, when)


def parse_many(items, known_roles=None, known_methods=None) -> list[Spec]:
    """A list of strings (trainer config), or one `;`-separated string (env/CLI)."""
    if items is None:
        return []
    if isinstance(items, str):
        items = items.split(";")
    return [parse(s, known_roles, known_methods) for s in items if str(s).strip()]


def from_env(environ=None) -> list[Spec]:
    return parse_many((environ if environ is not None else os.environ).get(ENV_VAR, ""))


def role_matches(pattern: str, role: str) -> bool:
    """Whether a worker running as `role` holds a role `pattern` names (a glob; "*": any). A colocated
    worker runs as "actor_rollout_ref+critic": a pattern for any one of its roles matches it."""
    return any(fnmatch.fnmatchcase(r, pattern) for r in {role, *role.split("+")})


def matches(spec: Spec, role: str, rank: int, step: int | None, method: str | None) -> bool:
    if not (role_matches(spec.role, role or "") and fnmatch.fnmatchcase(method or "", spec.method)
            and (spec.ranks is None or rank in spec.ranks) and (spec.steps is None or step in spec.steps)):
        return False
    if spec.when:
        names = {"role": role, "rank": rank, "step": step, "method": method}
        try:
            return bool(eval(spec.when, {"__builtins__": __builtins__}, names))  # noqa: S307 - user's own condition
        except Exception:
            # A condition that cannot be evaluated (step is None, ...) does not pause.
            return False
    return True


class SpecSet:
    """A live, thread-safe set of specs. The control hub adds/removes; the seam asks match() at every worker call.
    `version` bumps on each change so a pusher can tell whether workers hold the latest."""

    def __init__(self, specs=()):
        self._lock = threading.Lock()
        self._specs: dict[str, Spec] = {}
        self.version = 0
        for s in specs:
            self.add(s)

    def add(self, spec) -> Spec:
        spec = spec if isinstance(spec, Spec) else parse(spec)
        with self._lock:
            self._specs[spec.text] = spec
            self.version += 1
        return spec

    def remove(self, spec) -> bool:
        key = spec.text if isinstance(spec, Spec) else parse(spec).text
        with self._lock:
            found = self._specs.pop(key, None) is not None
            self.version += found
        return found

    def clear(self) -> None:
        with self._lock:
            self._specs.clear()
            self.version += 1

    def list(self) -> list[Spec]:
        with self._lock:
            return list(self._specs.values())

    def texts(self) -> list[str]:
        return [s.text for s in self.list()]

    def __len__(self) -> int:
        return len(self._specs)

    def match(self, role: str, rank: int, step: int | None, method: str | None) -> Spec | None:
        return next((spec for spec in self.list() if matches(spec, role, rank, step, method)), None)

    @classmethod
    def from_env(cls, environ=None) -> "SpecSet":
        return cls(from_env(environ))
