"""Finding runs without Ray: the per-run hub file, the run's own dashboard, and the hubs in it.

RLDBG_HOME (default ~/.rldbg)/hub-<job_id>-<driver pid>.json holds {run, url, token, job_id, pid,
host, dashboard, session}; it is written 0600 (directory 0700) because the token is the only thing
guarding the hub's API. Job ids are not unique on a machine (every fresh embedded cluster's first
job is 01000000), so a run is named `<job_id>-<driver pid>` and hubs are matched to files by URL.
The dashboard lists hub actors (class ControlHub, repr "rldbg-hub <url> job=<job_id>") but never
the token.

Which dashboard a CLI command talks to: resolve_dashboard.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import socket
from pathlib import Path

from rldbg import switches

REPR_PREFIX = "rldbg-hub "
CLASS_NAME = "ControlHub"
RAY_SESSION_LATEST = "/tmp/ray/session_latest"
ADDRESS_HELP = ("Ray dashboard URL (default: the run's own cluster: $RAY_DASHBOARD_ADDRESS, a live run's hub file, "
                "the newest Ray session, else http://127.0.0.1:8265)")


class RunChoiceError(ValueError):
    """More than one run matches and nothing says which: the message lists them (one line)."""


def hub_dir() -> Path:
    return Path(os.environ.get(switches.HOME) or Path(os.environ.get("HOME", "~")).expanduser() / ".rldbg")


def run_id(job_id: str, pid: int | None = None) -> str:
    return f"{job_id}-{pid if pid is not None else os.getpid()}"


def job_of(run_or_job: str) -> str:
    """The Ray job id in a run id (run_id's first part), or the job id given."""
    return run_or_job.split("-")[0]


def hub_file(job_id: str, pid: int | None = None) -> Path:
    return hub_dir() / f"hub-{run_id(job_id, pid)}.json"


def write_hub_file(info: dict) -> Path:
    info = dict(info)
    info.setdefault("pid", os.getpid())
    info.setdefault("host", socket.gethostname())
    info["run"] = run_id(info["job_id"], info["pid"])
    path = hub_file(info["job_id"], info["pid"])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.chmod(tmp, 0o600)   # O_CREAT's mode does not apply to a file that already existed
    os.replace(tmp, path)
    return path


def alive(info: dict) -> bool:
    """False only when the driver is known dead: same host and no such pid."""
    if info.get("host") not in (None, socket.gethostname()) or not info.get("pid"):
        return True
    try:
        os.kill(int(info["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError):
        return True
    return True


def read_hub_files() -> list[dict]:
    """Hub records of live drivers, oldest first."""
    out = []
    for p in hub_dir().glob("hub-*.json"):
        try:
            info = json.loads(p.read_text())
            mtime = p.stat().st_mtime
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict) or "job_id" not in info:
            continue
        info.setdefault("run", run_id(info["job_id"], info.get("pid", 0)))
        info["file"], info["mtime"] = str(p), mtime
        if alive(info):
            out.append(info)
    return sorted(out, key=lambda i: i["mtime"])


def select_runs(runs: list[dict], job: str | None) -> list[dict]:
    """`job` is a run id (01000000-4242) or a job id (01000000; ambiguous when runs share it)."""
    if job is None:
        return runs
    return [r for r in runs if r.get("run") == job] or [r for r in runs if r.get("job_id") == job]


def describe(runs: list[dict]) -> str:
    return "; ".join(f"{r.get('run')} (" + (f"dashboard {r['dashboard']}, " if r.get("dashboard") else "")
                     + f"hub {r.get('url')})" for r in runs)


def ray_session_dashboard(session_dir: str = RAY_SESSION_LATEST) -> str | None:
    """The dashboard of the newest Ray session on this machine, from its dashboard log."""
    with (contextlib.suppress(OSError),
          open(os.path.join(session_dir, "logs", "dashboard.log"), encoding="utf-8", errors="replace") as f):
        for line in f:
            if m := re.search(r"Dashboard head http address: (\S+)", line):
                return "http://" + m.group(1)
    return None


def own_dashboard() -> str | None:
    """The dashboard of the Ray cluster this process is connected to, or None."""
    try:
        import ray
        url = ray._private.worker.get_dashboard_url()
    except Exception:  # noqa: BLE001 - not connected, or a Ray without a dashboard
        return None
    return (url if url.startswith("http") else f"http://{url}") if url else None


def resolve_dashboard(address=None, job: str | None = None, choose="--job RUN or --address URL") -> tuple[str, str]:
    """(dashboard URL, where it came from, so commands can say which cluster they look at):
    --address / RAY_DASHBOARD_ADDRESS / an http RAY_ADDRESS, else the dashboard in the hub file of
    a live run on this machine (the one `job` names, or the only one), else the newest Ray
    session's, else http://127.0.0.1:8265. RunChoiceError, saying `choose`, when live runs use
    different dashboards and nothing picks one."""
    from rldbg.dashboard import DEFAULT_ADDRESS, env_address, resolve_address
    if address:
        return resolve_address(address), "--address"
    if env_address():
        return resolve_address(), f"${env_address()[1]}"
    runs = [r for r in select_runs(read_hub_files(), job) if r.get("dashboard")]
    dashboards = sorted({r["dashboard"] for r in runs})
    if len(dashboards) == 1:
        which = f"hub file of run {runs[-1]['run']}" if len(runs) == 1 else f"hub files of {len(runs)} runs"
        return resolve_address(dashboards[0]), which
    if len(dashboards) > 1:
        raise RunChoiceError(f"{len(runs)} runs on this machine use different Ray clusters: {describe(runs)}; "
                             f"pick one with {choose}")
    if found := ray_session_dashboard():
        return resolve_address(found), f"the newest Ray session ({os.path.realpath(RAY_SESSION_LATEST)})"
    return DEFAULT_ADDRESS, "the default address"


def hub_repr(url: str, job_id: str) -> str:
    """The hub actor's repr (what the dashboard lists); parse_hub_repr reads it back."""
    return f"{REPR_PREFIX}{url} job={job_id}"


def parse_hub_repr(text: str) -> dict | None:
    """'rldbg-hub http://127.0.0.1:5001 job=01000000' -> {url, job_id}; None if not a hub."""
    parts = text[len(REPR_PREFIX):].split() if text and text.startswith(REPR_PREFIX) else []
    if not parts:
        return None
    return {"url": parts[0], "job_id": next((p[4:] for p in parts[1:] if p.startswith("job=")), None)}


def discover(dashboard_address: str | None = None, timeout: float = 10.0) -> list[dict]:
    """Live hubs of one cluster: [{url, job_id, run, token|None, pid (the hub's)}], via its dashboard; the
    token comes from the hub file with the same URL when this machine has it. Raises
    DashboardError (one line) if the dashboard is down or has not answered within `timeout` s."""
    from rldbg.dashboard import Dashboard

    files = read_hub_files()
    hubs = []
    for a in Dashboard(dashboard_address, timeout=timeout).actors(detail=True, filters=[("state", "=", "ALIVE")]):
        found = parse_hub_repr(a.get("repr_name") or "")
        if found is None and a.get("class_name") != CLASS_NAME:
            continue
        if found is None:
            # A hub whose repr the dashboard does not show (yet): its file is only trusted when
            # no other run shares its job id.
            same = [f for f in files if f.get("job_id") == a.get("job_id")]
            f = same[0] if len(same) == 1 else {}
            found = {"url": f.get("url"), "job_id": a.get("job_id")}
        else:
            f = next((f for f in files if f.get("url") == found["url"]), {})
        hubs.append({**found, "token": f.get("token"), "run": f.get("run") or found["job_id"], "pid": a.get("pid")})
    return hubs


def cli_dashboard(address: str | None, prog: str):
    """The Dashboard a CLI command should talk to: the run's own cluster first (resolve_dashboard),
    saying on stderr which one when it was not given explicitly. Raises DashboardError (one line)."""
    import sys

    from rldbg.dashboard import Dashboard, DashboardError
    try:
        url, origin = resolve_dashboard(address, choose="--address URL")   # these commands take no --job
    except RunChoiceError as e:
        raise DashboardError(str(e)) from None
    if origin != "--address":
        print(f"{prog}: Ray cluster at {url} (from {origin})", file=sys.stderr)
    return Dashboard(url)
