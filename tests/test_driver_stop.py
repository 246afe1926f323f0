"""The driver under outside events, run as users run it (`python -m reference_trainer`, its own
embedded cluster, real signals): SIGTERM stops cleanly (trace exported, hub file removed, no process
left, one line, rc 143); nothing of ours listens beyond loopback; a SIGKILLed rank is named in one
line with its node, method, step and cause."""
from __future__ import annotations

import contextlib
import gzip
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from polling import until

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

SMALL = ["sft.steps=0", "trainer.progress=false", "model.preset=llama-tiny", "data.prompts_per_step=4",
         "data.group_size=4", "actor.mini_batch_size=16", "actor.micro_batch_size=8", "trainer.total_steps=2000"]


def _start(tmp_path, *extra):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    env["RLDBG_HOME"] = str(tmp_path / "home")
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "reference_trainer", "--preset", "demo", *SMALL,
                             f"trainer.run_dir={run}", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    metrics = run / "metrics.jsonl"
    try:
        until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2, what="two steps", limit=240)
    except AssertionError:
        proc.kill()
        raise AssertionError(proc.communicate(timeout=30)[1][-3000:]) from None
    return proc, run


def _tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        tree = _tree(proc.pid)
    except psutil.Error:   # the driver is gone; its session may not be
        tree = []
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)   # _start and the second run begin sessions of their own
    proc.communicate()


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:   # exited since the tree was read
        return []


def _listening(procs) -> list[tuple[str, int, str]]:
    pids = {p.pid: p for p in procs}
    out = []
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            try:
                name = pids[c.pid].name()
            except psutil.Error:
                name = "?"
            out.append((c.laddr.ip, c.laddr.port, name))
    return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def _gone(procs) -> bool:
    return not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_sigterm_exports_the_trace_and_leaves_nothing_running(tmp_path):
    proc, run = _start(tmp_path)
    try:
        tree = _tree(proc.pid)
        listening = _listening(tree)
        assert listening, "expected Ray's and the hub's listeners"
        beyond = [x for x in listening if not _loopback(x[0])]
        assert beyond == [], f"listening beyond loopback: {beyond}"
        assert list((tmp_path / "home").glob("hub-*.json")), "the run's hub file"

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    last = err.strip().splitlines()[-1]
    m = re.fullmatch(r"stopped by SIGTERM at step (\d+); trace at (\S+)", last)
    assert m, err[-3000:]
    trace = Path(m.group(2))
    assert trace == run / "trace.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any(e.get("cat") == "step" for e in events)
    assert not list((tmp_path / "home").glob("hub-*.json")), "hub file left behind"
    until(lambda: _gone(tree), what="every process of the run to exit", limit=60)


def test_a_second_sigterm_exits_at_once_and_leaves_nothing_running(tmp_path):
    """The user insists: no export, but the embedded cluster goes with the driver, its agents too
    (Ray's fate sharing takes the raylet and GCS down, not what the raylet started)."""
    proc, run = _start(tmp_path)
    try:
        tree = _tree(proc.pid)
        assert any("agent" in " ".join(_cmdline(p)) for p in tree[1:]), "expected the cluster's agents"
        # Python runs a handler between bytecodes: two signals that arrive while the driver sits in one
        # of Ray's waits (0.5 s slices) are seen as one. Another every 0.5 s until it exits, then.
        deadline = time.monotonic() + 60
        while True:
            proc.send_signal(signal.SIGTERM)
            try:
                out, err = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                assert time.monotonic() < deadline, "the driver did not exit on repeated SIGTERMs"
    finally:
        if proc.poll() is None:   # a failure above: nothing of the run may outlive the test
            _kill_tree(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("SIGTERM again: exiting now, without cleanup ("), err[-3000:]
    # where the run's events are: the spill, or the trace when the export got there first
    assert f"`rldbg export {run}/trace.spill`" in last or f"the trace is written: {run}/trace.json.gz" in last, last
    try:
        until(lambda: _gone(tree), what="every process of the run to exit", limit=20)
    finally:
        for p in tree:   # what a failure leaves must not outlive the test
            with contextlib.suppress(psutil.Error):
                p.kill()


def test_a_sigterm_while_ray_starts_is_a_stop_in_one_line(tmp_path):
    """Ray's own handler runs while ray.init starts the embedded cluster: it exited 15, silently."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    env["RLDBG_HOME"] = str(tmp_path / "home")
    proc = subprocess.Popen([sys.executable, "-m", "reference_trainer", "--preset", "demo", *SMALL,
                             f"trainer.run_dir={tmp_path / 'run'}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        until(lambda: any("gcs_server" in " ".join(_cmdline(p)) for p in _tree(proc.pid)[1:]),
              what="the embedded cluster starting", limit=120, interval=0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        _kill_tree(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("stopped by SIGTERM before the first step"), err[-3000:]


def test_a_second_run_into_a_live_runs_folder_is_refused_before_ray_starts(tmp_path):
    """Untraced and flight-recorder runs have no spill to refuse a second run; the folder itself does."""
    proc, run = _start(tmp_path, "trace.enabled=false")
    second = None
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
        env["RLDBG_HOME"] = str(tmp_path / "home2")
        # Were it not refused, it would train 10 steps in a cluster of its own, killed below whatever happens.
        second = subprocess.Popen([sys.executable, "-m", "reference_trainer", "--preset", "demo", *SMALL,
                                   "trainer.total_steps=10", "trace.window=5", f"trainer.run_dir={run}"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                  start_new_session=True)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 2, err[-3000:]
        assert err == (f"config error: config key 'trainer.run_dir' is '{run}', where a live run "
                       f"(pid {proc.pid}) writes; give this run another trainer.run_dir\n")
        assert len((run / "metrics.jsonl").read_text().splitlines()) >= 2, "the live run's metrics untouched"
    finally:
        for p in (proc, second):   # each driver and its embedded cluster, agents included
            if p is not None:
                _kill_tree(p)


def test_a_killed_rank_is_named_in_one_line(tmp_path):
    proc, run = _start(tmp_path)
    try:
        # The actor+reward rank-1 host: Ray's actor table knows its pid; its repr names the rank.
        from rldbg.dashboard import Dashboard
        dash = Dashboard(_dashboard_of(proc.pid))
        actors = until(lambda: [a for a in dash.actors(detail=True) if "rank 1" in str(a.get("repr_name"))
                                and a.get("state") == "ALIVE" and a.get("pid")], what="rank 1's actor", limit=30)
        os.kill(int(actors[0]["pid"]), signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(r"error: (actor|reward) rank 1 on node 127\.0\.0\.1 \([0-9a-f]{8}\) died in \w+ at step \d+: "
                        r"its process vanished without exiting \(SIGKILL, .*", last), err[-3000:]
    assert (run / "trace.json.gz").exists()


def _dashboard_of(pid: int) -> str:
    """The embedded cluster's dashboard URL: the raylet under `pid` is told it with --webui."""
    for p in psutil.Process(pid).children(recursive=True):
        try:
            words = " ".join(p.cmdline()).split()
        except psutil.Error:
            continue
        for w in words:
            if w.startswith("--webui="):
                return "http://" + w.split("=", 1)[1]
    pytest.fail("no raylet with --webui under the driver")


def test_death_causes_read_from_rays_messages():
    from ray.exceptions import RayActorError
    from rldbg.debug import death

    def err(detail):
        return RayActorError(None, "The actor died unexpectedly before finishing this task.\n\tpid: 42\n\tip: 10.1.2.3\n"
                             f"The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
                             f"Worker exit detail: {detail}")
    kill9 = err("Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: "
                "(1) the process was killed by the OOM killer due to high memory usage, (2) ray stop --force")
    assert death.cause(kill9).startswith("its process vanished without exiting (SIGKILL")
    assert death.cause(err("Worker exits unexpectedly. Worker exits with an exit code 1. The process receives a "
                           "SIGTERM.")) == "killed by SIGTERM"
    assert death.cause(err("Worker exits with an exit code 3.")) == "its process exited with code 3"
    assert "memory monitor" in death.cause(err("Task was killed due to the node running low on memory."))
    assert death.where(kill9) == {"ip": "10.1.2.3", "pid": 42}
