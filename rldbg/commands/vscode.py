"""`rldbg vscode`: launch.json attach entries for the workers paused right now.

Entries are named "rldbg: ROLE rank R"; a rerun replaces them (stale ports
go away) and keeps every other configuration. launch.json may hold comments
(JSONC); they are read fine but not written back.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from rldbg.dashboard import Dashboard, DashboardError
from rldbg.debug.workers import PausedWorker, list_paused

HELP = "write VS Code launch.json entries for paused or listening workers"
_GENERATED = re.compile(r"^rldbg: .+ (rank \d+|pid \d+)$")


def add_arguments(parser) -> None:
    parser.add_argument("--address", help="Ray dashboard URL (default: $RAY_DASHBOARD_ADDRESS or http://127.0.0.1:8265)")
    parser.add_argument("--output", default=".vscode/launch.json", help="launch.json to create or update (default .vscode/launch.json)")


def strip_jsonc(text: str) -> str:
    """Drop // and /* */ comments outside strings and trailing commas."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        else:
            out.append(c)
        i += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def entry_for(p: PausedWorker) -> dict:
    entry = {
        "name": f"rldbg: {p.label}",
        "type": "debugpy",
        "request": "attach",
        "connect": {"host": p.host, "port": int(p.port)},
        "justMyCode": False,
    }
    if p.cwd:
        entry["pathMappings"] = [{"localRoot": "${workspaceFolder}", "remoteRoot": p.cwd}]
    return entry


def update_launch(path: Path, entries: list[dict]) -> dict:
    """Merge entries into the launch.json at path (created if missing)."""
    data = {"version": "0.2.0", "configurations": []}
    if path.exists():
        text = path.read_text()
        if text.strip():
            try:
                data = json.loads(strip_jsonc(text))
            except ValueError as e:
                raise ValueError(f"{path} is not valid JSON ({e}); fix or move it, then rerun") from None
        if not isinstance(data, dict) or not isinstance(data.get("configurations", []), list):
            raise ValueError(f"{path} has no 'configurations' list; fix or move it, then rerun")
    kept = [c for c in data.get("configurations", [])
            if not (isinstance(c, dict) and _GENERATED.match(str(c.get("name", ""))))]
    data["configurations"] = kept + entries
    data.setdefault("version", "0.2.0")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def run(args) -> int:
    try:
        paused = list_paused(Dashboard(args.address))
    except DashboardError as e:
        print(f"rldbg vscode: {e}", file=sys.stderr)
        return 1
    if not paused:
        print("rldbg vscode: no paused workers; nothing written", file=sys.stderr)
        return 1
    path = Path(args.output)
    try:
        update_launch(path, [entry_for(p) for p in paused])
    except (ValueError, OSError) as e:
        print(f"rldbg vscode: {e}", file=sys.stderr)
        return 1
    for p in paused:
        print(f"rldbg: {p.label} -> {p.address}")
    print(f"wrote {path}; in VS Code pick the entry under Run and Debug (debugpy has no authentication: "
          "keep these ports on loopback)")
    return 0
