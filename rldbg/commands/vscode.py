"""`rldbg vscode`: launch.json attach entries for the workers paused at a breakpoint now, or with
--attach-role ROLE for every listening worker of a role (debug mode), plus a compound
"rldbg: ROLE (all listening ranks)" that attaches to all of them at once.

Entries are named "rldbg: ROLE rank R"; a rerun replaces them (stale ports go away) and keeps every
other configuration. Comments in launch.json (JSONC) are read but not written back.
"""
from __future__ import annotations

import json
import re
import sysconfig
from pathlib import Path

from rldbg.commands import fail
from rldbg.control.discovery import ADDRESS_HELP, cli_dashboard
from rldbg.debug.registry import listening_workers
from rldbg.debug.specs import parse_ranks
from rldbg.debug.paused_workers import list_paused

_GENERATED = re.compile(r"^rldbg: .+ (rank \d+|pid \d+)$")


def add_arguments(parser) -> None:
    parser.add_argument("--address", help=ADDRESS_HELP)
    parser.add_argument("--output", default=".vscode/launch.json", help="launch.json to create or update (default .vscode/launch.json)")
    parser.add_argument("--attach-role", metavar="ROLE", help="entries for every listening worker of ROLE (debug mode)")
    parser.add_argument("--ranks", help="with --attach-role: only these ranks (1, 0,1, 0-3)")
    parser.add_argument("--ray-address", help="GCS HOST:PORT for --attach-role (default: RAY_ADDRESS, else the local cluster)")


# A JSON string (kept as it is), or a // or /* */ comment (dropped).
_STRING_OR_COMMENT = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?(?:\*/|$)', re.S)


def strip_jsonc(text: str) -> str:
    """Drop // and /* */ comments outside strings and trailing commas."""
    text = _STRING_OR_COMMENT.sub(lambda m: m.group(1) or "", text)
    return re.sub(r",(\s*[}\]])", r"\1", text)


def attach_entry(name: str, host: str, port: int, cwd: str | None, purelib: str | None = None) -> dict:
    """One debugpy attach entry. pathMappings: the workspace is the worker's cwd, and the local
    site-packages the worker's (libraries, Ray) when it said where they are."""
    maps = [{"localRoot": "${workspaceFolder}", "remoteRoot": cwd}] if cwd else []
    if purelib:
        maps.append({"localRoot": sysconfig.get_paths()["purelib"], "remoteRoot": purelib})
    entry = {"name": name, "type": "debugpy", "request": "attach", "connect": {"host": host, "port": int(port)},
             "justMyCode": False}
    return {**entry, "pathMappings": maps} if maps else entry


def compound_name(role: str, ranks) -> str:
    which = "all listening ranks" if ranks is None else "ranks " + ",".join(str(r) for r in sorted(ranks))
    return f"rldbg: {role} ({which})"


def update_launch(path: Path, entries: list[dict], compound: dict | None = None, role: str | None = None) -> dict:
    """Merge entries into the launch.json at path (created if missing). With role,
    only that role's generated entries and compounds are replaced (the others stay)."""
    data = {"version": "0.2.0", "configurations": []}
    if path.exists():
        if (text := path.read_text()).strip():
            try:
                data = json.loads(strip_jsonc(text))
            except ValueError as e:
                raise ValueError(f"{path} is not valid JSON ({e}); fix or move it, then rerun") from None
        if not isinstance(data, dict) or not isinstance(data.get("configurations", []), list):
            raise ValueError(f"{path} has no 'configurations' list; fix or move it, then rerun")
    def generated(c) -> bool:
        name = str(c.get("name", "")) if isinstance(c, dict) else ""
        return name.startswith(f"rldbg: {role} ") if role is not None else bool(_GENERATED.match(name))

    data["configurations"] = [c for c in data.get("configurations", []) if not generated(c)] + entries
    if compound is not None or "compounds" in data:
        if not isinstance(data.get("compounds", []), list):
            raise ValueError(f"{path} has a 'compounds' that is not a list; fix or move it, then rerun")
        data["compounds"] = [c for c in data.get("compounds", []) if not generated(c)] + ([compound] if compound else [])
    data.setdefault("version", "0.2.0")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def _listening_entries(role: str, ranks, ray_address, dashboard) -> tuple[list, dict, list[str]]:
    """(entries, their compound, a line per worker) for every listening worker of `role`."""
    workers = listening_workers(ray_address, role=role, ranks=ranks, dashboard=dashboard)
    if not workers:
        which = "" if ranks is None else f" at ranks {sorted(ranks)}"
        raise ValueError(f"no listening {role} workers{which}; start the run with debug mode on "
                         f"(RLDBG_LISTEN_ROLES={role} or debug.listen_roles=[{role}])")
    entries = [attach_entry(f"rldbg: {role} rank {w.rank}", w.host, w.port, w.cwd, w.purelib) for w in workers]
    compound = {"name": compound_name(role, ranks), "configurations": [e["name"] for e in entries], "stopAll": False}
    return entries, compound, [f"rldbg: {role} rank {w.rank} -> {w.address} (pid {w.pid})" for w in workers]


def run(args) -> int:
    if args.ranks and not args.attach_role:
        return fail("rldbg vscode: --ranks needs --attach-role ROLE", 2)
    path = Path(args.output)
    try:
        if args.attach_role:
            ranks = parse_ranks(args.ranks, "--ranks")
            entries, compound, shown = _listening_entries(args.attach_role, ranks, args.ray_address, args.address)
            how = f"run '{compound['name']}' to attach to all of them"
        else:
            paused = list_paused(cli_dashboard(args.address, "rldbg vscode"))
            if not paused:
                return fail("rldbg vscode: no paused workers; nothing written", 1)
            entries = [attach_entry(f"rldbg: {p.label}", p.host, p.port, p.cwd) for p in paused]
            compound, how = None, "pick the entry under Run and Debug"
            shown = [f"rldbg: {p.label} -> {p.address}" for p in paused]
        update_launch(path, entries, compound, role=args.attach_role)
    except (ValueError, OSError) as e:
        return fail(f"rldbg vscode: {e}", 1)
    print("\n".join(shown))
    print(f"wrote {path}; in VS Code {how} (debugpy has no authentication: keep these ports on loopback)")
    return 0
