"""Which (role, rank, step, method) calls to profile, from RLDBG_PROFILE.

    RLDBG_PROFILE="roles=actor,critic;ranks=0;steps=2,3;dir=/path;run=demo"

The driver turns its profile.* config into this string with to_env() (which validates, so a
typo fails on the driver at start-up, not inside a rank) and hands it to the workers through
their environment. Empty roles/ranks/steps/methods mean "all"; dir is required.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from os import getenv as _env

from rldbg.debug.specs import numbers
from rldbg.switches import PROFILE as ENV

KEYS = ("roles", "ranks", "steps", "methods", "dir", "run")
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
_RUN = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]*$")   # a directory name: no '/', no leading '.'


class ProfileSpecError(ValueError):
    """One line naming the bad value and what is accepted."""


@dataclass(frozen=True)
class ProfileSpec:
    dir: str
    run: str = "rldbg"
    roles: frozenset = frozenset()
    ranks: frozenset = frozenset()
    steps: frozenset = frozenset()
    methods: frozenset = frozenset()

    def selects(self, role: str, rank: int, method: str, step) -> bool:
        # A call outside any step is profiled only when every step is.
        return ((not self.steps or step in self.steps)
                and (not self.roles or role in self.roles)
                and (not self.ranks or rank in self.ranks)
                and (not self.methods or method in self.methods))

    def to_env(self) -> str:
        return ";".join([f"dir={self.dir}", f"run={self.run}"] + [
            f"{key}=" + ",".join(str(v) for v in sorted(values))
            for key in ("roles", "ranks", "steps", "methods") if (values := getattr(self, key))])


def _ints(key: str, text: str) -> frozenset:
    try:
        return numbers(text) if text.strip() else frozenset()
    except ValueError as e:
        raise ProfileSpecError(f"{ENV}: bad {key} value {str(e)!r}: expected non-negative {key[:-1]} numbers or "
                               f"ranges first-last with first <= last, e.g. {key}=0,2-3") from None


def _names(key: str, text: str) -> frozenset:
    out = frozenset(filter(None, (s.strip() for s in text.split(","))))
    for name in out:
        if not _NAME.match(name):
            raise ProfileSpecError(f"{ENV}: bad {key} value {name!r}: expected names of letters, "
                                   f"digits, '_' or '-', comma-separated")
    return out


def parse(text: str) -> ProfileSpec:
    """'roles=actor;ranks=0;steps=2,3;dir=/p' -> ProfileSpec; ProfileSpecError on anything else."""
    fields: dict = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq:
            raise ProfileSpecError(f"{ENV}: bad item {part!r}: expected key=value with key one of {', '.join(KEYS)}")
        if key not in KEYS:
            raise ProfileSpecError(f"{ENV}: unknown key {key!r} in {part!r}: accepted keys are {', '.join(KEYS)}")
        if key in fields:
            raise ProfileSpecError(f"{ENV}: key {key!r} given twice")
        fields[key] = value.strip()
    if not fields.get("dir"):
        raise ProfileSpecError(f"{ENV}: dir= is required (the TensorBoard log directory), got {text!r}")
    run = fields.get("run") or "rldbg"
    if not _RUN.match(run):
        raise ProfileSpecError(f"{ENV}: bad run name {run!r}: expected a directory name of letters, "
                               "digits, '_', '-' or '.', not starting with '.'")
    return ProfileSpec(dir=fields["dir"], run=run, roles=_names("roles", fields.get("roles", "")),
                       ranks=_ints("ranks", fields.get("ranks", "")), steps=_ints("steps", fields.get("steps", "")),
                       methods=_names("methods", fields.get("methods", "")))


def to_env(dir: str, roles=(), ranks=(), steps=(), methods=(), run: str = "rldbg") -> str:
    """Build and validate the RLDBG_PROFILE value from config values (lists or comma strings)."""
    def joined(v):
        return v if isinstance(v, str) else ",".join(str(x) for x in v)

    text = ";".join(f"{k}={joined(v)}" for k, v in
                    (("dir", dir), ("run", run), ("roles", roles), ("ranks", ranks),
                     ("steps", steps), ("methods", methods)) if joined(v))
    return parse(text).to_env()


def from_env() -> ProfileSpec | None:
    """The spec in RLDBG_PROFILE; None when unset."""
    return _parsed(_env(ENV))


@functools.lru_cache(maxsize=8)   # once per distinct value: read on every worker call
def _parsed(text: str | None) -> ProfileSpec | None:
    return parse(text) if text and text.strip() else None
