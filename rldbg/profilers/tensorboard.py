"""Start TensorBoard on loopback over a torch.profiler log directory and wait until it answers.

TensorBoard's own server is what users know; we only pick the host (127.0.0.1: the profiler
plugin has no authentication), check the directory first, and wait for the plugin's API so the
printed URL works when it is printed."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from rldbg.extras import MissingExtra, check
from rldbg.profilers.merge import find_traces

PLUGIN_API = "/data/plugin/pytorch_profiler"


class TensorBoardError(RuntimeError):
    """One line for the user."""


def free_port(host: str = "127.0.0.1", port: int = 0) -> int:
    """`port` if nothing holds it (0: any free one): on a held port another server answers our probe."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # a port in TIME_WAIT is free
        try:
            s.bind((host, port))
        except OSError:
            raise TensorBoardError(f"port {port} on {host} is in use: pass --port 0 for a free one") from None
        return s.getsockname()[1]


def check_logdir(logdir: str) -> tuple[list[str], list[str]]:
    """(torch traces, scalar event files) under logdir; raises when there is nothing to show."""
    if not os.path.isdir(logdir):
        what = "is a file, not a directory" if os.path.exists(logdir) else "does not exist"
        raise TensorBoardError(f"{logdir!r} {what}; pass --logdir DIR (a run's tb/ directory, default <run_dir>/tb)")
    traces = find_traces(logdir)
    # TensorBoard event files: the trainer's metrics run, <run_dir>/tb/metrics
    scalars = sorted(os.path.join(d, f) for d, _, files in os.walk(logdir) for f in files if ".tfevents." in f)
    if not traces and not scalars:
        raise TensorBoardError(f"nothing to show under {logdir!r}: no *.pt.trace.json (profile some calls: "
                               "profile.roles/ranks/steps, or RLDBG_PROFILE=...) and no metrics "
                               "(trainer.logger=[console,jsonl,tensorboard])")
    return traces, scalars


def start(logdir: str, port: int = 0, host: str = "127.0.0.1") -> tuple[subprocess.Popen, str]:
    """Start `tensorboard` as a child process; returns (process, base URL). port 0 picks a free one."""
    if not 0 <= port < 65536:
        raise TensorBoardError(f"bad port {port}: expected 1-65535, or 0 for a free port")
    try:
        check(("tensorboard", "torch_tb_profiler"), "TensorBoard with its profiler view", "tensorboard")
    except MissingExtra as e:
        raise TensorBoardError(str(e)) from None
    port = free_port(host, port)
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", os.path.abspath(logdir),
           "--host", host, "--port", str(port)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), f"http://{host}:{port}"


def get_json(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_ready(proc: subprocess.Popen, base: str, timeout: float = 60.0) -> None:
    """Until the profiler plugin answers /runs; raises with TensorBoard's stderr if it exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (proc.stderr.read() if proc.stderr else "").strip().splitlines()[-3:]
            raise TensorBoardError(f"tensorboard exited with {proc.returncode}: {' | '.join(tail)}")
        try:
            get_json(base + PLUGIN_API + "/runs", timeout=2.0)
            return
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(0.5)
    raise TensorBoardError(f"tensorboard did not answer at {base} within {timeout:.0f} s")
