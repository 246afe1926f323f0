"""Ray 2.60 token authentication, for processes that talk to an existing cluster.

A cluster that `ray.init()` creates turns token auth on and writes ~/.ray/auth_token. A second
process (a CLI in another terminal) is refused ("InvalidAuthToken ... RAY_AUTH_MODE is currently
'disabled'") unless it runs with RAY_AUTH_MODE=token, which prepare_client() sets when a token is
at hand. The dashboard's HTTP API takes the same token as a Bearer header (token()).
"""
from __future__ import annotations

import os
from pathlib import Path


def token() -> str | None:
    """The token this machine's clusters accept: $RAY_AUTH_TOKEN, else $RAY_AUTH_TOKEN_PATH or
    ~/.ray/auth_token; None when there is none."""
    if value := os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return value
    home = Path(os.environ.get("HOME", "~"))
    path = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip() or home / ".ray" / "auth_token"
    try:
        return Path(path).expanduser().read_text().strip() or None
    except OSError:
        return None


def prepare_client() -> None:
    """Call before the process's first Ray client (GcsClient, ray.init(address=...))."""
    if "RAY_AUTH_MODE" not in os.environ and token():
        os.environ["RAY_AUTH_MODE"] = "token"
