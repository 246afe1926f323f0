"""HTTP client for the control hub (the TUI's and the tests'): HubClient(url, token) from
discovery.discover, then state(), events(), gate(action), add_breakpoint(spec), heartbeat(),
export(). Failures raise HubError with one line naming the URL and the cause.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.parse

from rldbg.dashboard import request_json


class HubError(RuntimeError):
    """One-line, user-facing failure talking to a hub. `status` is the HTTP code, if any."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class HubClient:
    def __init__(self, url: str, token: str | None, timeout: float = 10.0, client_id: str = "tui"):
        if not url or not url.startswith(("http://", "https://")):
            raise HubError(f"bad hub url {url!r}: expected http://HOST:PORT")
        self.url, self.token, self.timeout, self.client_id = url.rstrip("/"), token, timeout, client_id

    def _request(self, method: str, path: str, body: dict | None = None, params: dict | None = None):
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            return request_json(url, self.token, self.timeout, method, body)
        except urllib.error.HTTPError as e:
            try:
                detail = json.loads(e.read()).get("error", "")
            except Exception:
                detail = e.reason
            if e.code == 401:
                src = "no token given" if not self.token else "the token was rejected"
                raise HubError(f"the rldbg hub at {self.url} refused the request ({src}); pass the "
                               "token from ~/.rldbg/hub-<job>-<pid>.json on the driver's machine", 401) from None
            raise HubError(f"{detail or e.reason} (hub {self.url}, {method} {path} -> {e.code})", e.code) from None
        except (urllib.error.URLError, OSError) as e:
            raise HubError(f"cannot reach the rldbg hub at {self.url} ({getattr(e, 'reason', e)}); "
                           "has the run ended?") from None
        except ValueError:
            raise HubError(f"{self.url}{path} did not answer JSON; is {self.url} an rldbg hub?") from None

    def state(self) -> dict:
        return self._request("GET", "/api/state")

    def events(self, cursor: int = 0, limit: int = 10_000) -> dict:
        return self._request("GET", "/api/events", params={"cursor": int(cursor), "limit": int(limit)})

    def gate(self, action: str, **kw) -> dict:
        """action: arm | disarm | step | run_to_method (method=...) | run_to_step (step=optional) | continue."""
        return self._request("POST", "/api/gate", dict(kw, action=action))

    def add_breakpoint(self, spec: str) -> list[str]:
        return self._request("POST", "/api/breakpoints", {"add": spec})["specs"]

    def remove_breakpoint(self, spec: str) -> list[str]:
        return self._request("POST", "/api/breakpoints", {"remove": spec})["specs"]

    def heartbeat(self) -> dict:
        return self._request("POST", "/api/heartbeat", {"client": self.client_id})

    def export(self, path: str | None = None) -> dict:
        return self._request("POST", "/api/export", {"path": path} if path else {})
