"""Finding hubs without Ray: the per-run hub file and the Ray dashboard.

~/.rldbg/hub-<job_id>.json holds {url, token, job_id, pid}; it is written 0600 (directory 0700)
because the token is the only thing guarding the hub's API. The dashboard lists hub actors
(class ControlHub, repr "rldbg-hub <url> job=<job_id>") but never the token.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

REPR_PREFIX = "rldbg-hub "
CLASS_NAME = "ControlHub"


def hub_dir() -> Path:
    return Path(os.environ.get("RLDBG_HOME") or Path(os.environ.get("HOME", "~")).expanduser() / ".rldbg")


def hub_file(job_id: str) -> Path:
    return hub_dir() / f"hub-{job_id}.json"


def write_hub_file(info: dict) -> Path:
    path = hub_file(info["job_id"])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.chmod(tmp, 0o600)   # O_CREAT's mode does not apply to a file that already existed
    os.replace(tmp, path)
    return path


def remove_hub_file(job_id: str) -> None:
    try:
        hub_file(job_id).unlink()
    except FileNotFoundError:
        pass


def read_hub_files() -> list[dict]:
    out = []
    for p in sorted(hub_dir().glob("hub-*.json")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out


def hub_repr(url: str, job_id: str) -> str:
    """The hub actor's repr (what the dashboard lists); parse_hub_repr reads it back."""
    return f"{REPR_PREFIX}{url} job={job_id}"


def parse_hub_repr(text: str) -> dict | None:
    """'rldbg-hub http://127.0.0.1:5001 job=01000000' -> {url, job_id}; None if not a hub."""
    if not text or not text.startswith(REPR_PREFIX):
        return None
    parts = text[len(REPR_PREFIX):].split()
    url = parts[0] if parts else None
    job = next((p[4:] for p in parts[1:] if p.startswith("job=")), None)
    return {"url": url, "job_id": job} if url else None


def discover(dashboard_address: str | None = None) -> list[dict]:
    """Live hubs: [{url, job_id, token|None, pid?}], via the dashboard; the token comes from the
    hub file when this machine has it. Raises DashboardError (one line) if the dashboard is down."""
    from rldbg.dashboard import Dashboard

    files = {f.get("job_id"): f for f in read_hub_files()}
    hubs = []
    for a in Dashboard(dashboard_address).actors(detail=True, filters=[("state", "=", "ALIVE")]):
        found = parse_hub_repr(a.get("repr_name") or "")
        if found is None and a.get("class_name") != CLASS_NAME:
            continue
        found = found or {"url": None, "job_id": a.get("job_id")}
        f = files.get(found["job_id"]) or {}
        hubs.append({"url": found["url"] or f.get("url"), "job_id": found["job_id"], "token": f.get("token"),
                     "pid": a.get("pid"), "actor_id": a.get("actor_id")})
    return hubs
