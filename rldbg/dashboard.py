"""A small REST client for the Ray dashboard (stdlib urllib only), for any process, with or
without Ray imported. Every request carries the cluster's token when there is one (ray_auth)."""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request

from rldbg import ray_auth

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
_ADDRESS_HINT = "pass --address or set RAY_DASHBOARD_ADDRESS"


class DashboardError(RuntimeError):
    """One-line, user-facing failure talking to the dashboard."""


def env_address() -> tuple[str, str] | None:
    """(address, variable) from RAY_DASHBOARD_ADDRESS, else from RAY_ADDRESS when it is an http URL
    (RAY_ADDRESS is often a GCS host:port, which is not the dashboard); None when neither says."""
    for var in ("RAY_DASHBOARD_ADDRESS", "RAY_ADDRESS"):
        value = os.environ.get(var, "").strip()
        if value and (var == "RAY_DASHBOARD_ADDRESS" or value.startswith(("http://", "https://"))):
            return value, var
    return None


def resolve_address(address: str | None = None) -> str:
    """Explicit argument, else env_address(), else DEFAULT_ADDRESS."""
    if not address and (found := env_address()):
        address = found[0]
    return _normalise(address) if address else DEFAULT_ADDRESS


def _normalise(address: str) -> str:
    given = address.strip()   # the scheme before the trailing slashes go: "http://" is no host called "http"
    if "://" in given and not given.startswith(("http://", "https://")):   # ray://, a GCS or client address
        raise DashboardError(f"bad dashboard address {given!r}: expected http://HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    address = (given if given.startswith(("http://", "https://")) else "http://" + given).rstrip("/")
    parsed = urllib.parse.urlparse(address)
    if not parsed.hostname:
        raise DashboardError(f"bad dashboard address {given!r}: expected http://HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    try:
        parsed.port
    except ValueError:
        raise DashboardError(f"bad dashboard address {given!r}: the port must be a number, "
                             f"e.g. {DEFAULT_ADDRESS}") from None
    return address


def _filters_query(filters) -> list[tuple[str, str]]:
    """(key, predicate, value) triples; the state API accepts only '=' and '!='
    and silently ignores a key without a predicate, so reject anything else."""
    out = []
    for f in filters or ():
        if len(f) != 3 or f[1] not in ("=", "!="):
            raise ValueError(f"bad filter {f!r}: expected (key, '=' or '!=', value)")
        key, pred, value = f
        out += [("filter_keys", key), ("filter_predicates", pred), ("filter_values", str(value))]
    return out


def request_json(url: str, token: str | None, timeout: float, method: str = "GET", body: dict | None = None,
                 raw: bool = False):
    """One HTTP request carrying `token` as a Bearer header (and `body` as JSON); the answer parsed
    as JSON (its text with raw). Raises urllib's HTTPError / URLError / OSError, or ValueError when
    the answer is not JSON: each client words those for its own server."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer = resp.read()
    except http.client.HTTPException as e:   # not HTTP at all (a GCS port): as an answer that is not JSON
        raise ValueError(f"not an HTTP answer ({type(e).__name__})") from None
    return answer.decode("utf-8", "replace") if raw else json.loads(answer)


class Dashboard:
    """client = Dashboard(); client.paused_workers() -> [worker dict, ...]"""

    def __init__(self, address: str | None = None, token: str | None = None, timeout: float = 10.0):
        self.address = resolve_address(address)
        self.token = token if token is not None else ray_auth.token()
        self.timeout = timeout

    def get(self, path: str, params=None, *, raw: bool = False):
        url = self.address + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            return request_json(url, self.token, self.timeout, raw=raw)
        except urllib.error.HTTPError as e:
            raise DashboardError(self._http_message(e, path)) from None
        except (urllib.error.URLError, OSError) as e:
            raise DashboardError(f"cannot reach the Ray dashboard at {self.address} ({getattr(e, 'reason', e)}); "
                                 f"{_ADDRESS_HINT}") from None
        except ValueError:
            raise DashboardError(f"{self.address}{path} did not answer JSON; is {self.address} a Ray dashboard? "
                                 f"{_ADDRESS_HINT}") from None

    def _http_message(self, e: urllib.error.HTTPError, path: str) -> str:
        detail = ""
        with contextlib.suppress(Exception):
            detail = e.read().decode("utf-8", "replace").strip().splitlines()[0][:200]
        # No token: 401. A wrong token: 403 "Invalid authentication token".
        if e.code == 401 or (e.code == 403 and "authentication token" in detail.lower()):
            source = "the token sent was rejected" if self.token else "no token found"
            return (f"the Ray dashboard at {self.address} requires a token ({source}); set "
                    "RAY_AUTH_TOKEN or check ~/.ray/auth_token on this machine")
        if e.code == 403 and path.startswith(("/worker/", "/memory_profile")):
            return (f"the Ray dashboard at {self.address} refuses profiling routes; start the head with "
                    "RAY_DASHBOARD_ENABLE_PROFILING=1 (e.g. RAY_DASHBOARD_ENABLE_PROFILING=1 ray start --head ...)")
        if "py-spy is not installed" in detail:
            return (f"the Ray dashboard at {self.address} could not run py-spy for {path}: the dashboard agent of "
                    "the worker's node finds no py-spy on its PATH; install it (pip install py-spy) on every node, "
                    "in the environment whose PATH `ray start` runs with")
        return f"the Ray dashboard at {self.address} answered {e.code} for {path}: {detail or e.reason}"

    def _state(self, resource: str, detail: bool, filters, limit: int) -> list[dict]:
        params = [("limit", str(limit))] + _filters_query(filters) + ([("detail", "1")] if detail else [])
        body = self.get(f"/api/v0/{resource}", params)
        if not body.get("result", True):
            raise DashboardError(f"/api/v0/{resource}: {body.get('msg', 'failed')}")
        return body.get("data", {}).get("result", {}).get("result", [])

    # --- state API -------------------------------------------------------
    def workers(self, detail: bool = True, filters=None, limit: int = 10000) -> list[dict]:
        return self._state("workers", detail, filters, limit)

    def paused_workers(self) -> list[dict]:
        """Workers blocked in a debugger breakpoint, waiting for a client. Only num_paused_threads says "paused"
        (debugger_port stays set afterwards), and both fields appear only with detail=1."""
        return self.workers(detail=True, filters=[("num_paused_threads", "!=", 0), ("is_alive", "=", True)])

    def tasks(self, detail: bool = False, filters=None, limit: int = 10000) -> list[dict]:
        return self._state("tasks", detail, filters, limit)

    def actors(self, detail: bool = False, filters=None, limit: int = 10000) -> list[dict]:
        return self._state("actors", detail, filters, limit)

    def nodes(self, filters=None, limit: int = 10000) -> list[dict]:
        return self._state("nodes", False, filters, limit)

    def nodes_summary(self) -> list[dict]:
        """Host memory/CPU and gpus[] per node (the dashboard caches it ~2 s)."""
        return self.get("/nodes", [("view", "summary")]).get("data", {}).get("summary", [])

    def traceback(self, pid: int, ip: str | None = None, node_id: str | None = None, native: bool = False) -> str:
        """py-spy dump of one worker, as text (needs RAY_DASHBOARD_ENABLE_PROFILING=1 on the head)."""
        return self.get("/worker/traceback", _worker_params(pid, ip, node_id, native), raw=True)

    def cpu_profile(self, pid: int, ip: str | None, node_id: str | None, seconds: float, native: bool = False) -> str:
        """py-spy recording of one worker for `seconds`, in collapsed-stack text (profiling routes on)."""
        params = _worker_params(pid, ip, node_id, native) + [("duration", str(max(1, round(seconds)))),
                                                             ("format", "raw")]
        return self.get("/worker/cpu_profile", params, raw=True)


def _worker_params(pid: int, ip: str | None, node_id: str | None, native: bool) -> list[tuple[str, str]]:
    if not ip and not node_id:
        raise ValueError("a worker is located by ip= or node_id=")
    # The node id first: it names one raylet's agent, where an IP may be shared by several nodes
    # (containers on one host, a test cluster on loopback) and the dashboard then picks any of them.
    where = ("node_id", node_id) if node_id else ("ip", ip)
    return [("pid", str(int(pid))), where] + ([("native", "1")] if native else [])
