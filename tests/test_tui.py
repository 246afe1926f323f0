"""`rldbg top` against a live run: the session's Ray cluster, a real control hub and the reference
trainer's worker groups (GRPO steps driven from a background thread, through the wired seam).
The app polls the real dashboard and hub (LiveSource); keys go through Textual's Pilot, and one
test drives the installed `rldbg top` binary in tmux."""
from __future__ import annotations

import asyncio
import io
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

import rldbg.control
import rldbg.trace
from rldbg.control import gate
from rldbg.control.client import HubClient
from rldbg.tui.app import TopApp
from rldbg.tui.data import LiveSource

from reference_trainer.trainer import train_step
from small_trainer import small_trainer

WAIT_S = 90          # liveness bound for waits, not a timing assertion


@pytest.fixture(scope="module")
def trainer(ray_cluster, tmp_path_factory):
    with small_trainer(tmp_path_factory.mktemp("tui")) as t:
        yield t


class Loop(threading.Thread):
    """The trainer's own train_step: the worker groups call the gate themselves."""

    def __init__(self, trainer, steps):
        super().__init__(daemon=True)
        self.trainer, self.steps, self.error = trainer, steps, None

    def run(self):
        cfg, groups, src = self.trainer
        try:
            for s in range(self.steps):
                train_step(s, src.batch(s), groups["actor"], groups.get("critic"), groups["reward"], cfg)
        except BaseException as e:
            self.error = e

    def finish(self, timeout=WAIT_S):
        self.join(timeout)
        assert not self.is_alive(), "the driver loop is still blocked"
        assert self.error is None, repr(self.error)


@pytest.fixture
def hub(ray_cluster):
    info = rldbg.control.start(gate_timeout_s=3.0)
    try:
        yield info
    finally:
        rldbg.control.stop()


def drive(dashboard, body, size=(150, 45)):
    """Run the app on the live cluster and `await body(app, pilot)`."""
    async def main():
        app = TopApp(LiveSource(dashboard), refresh=0.2)
        async with app.run_test(size=size) as pilot:
            # Keys act on the run only once the app has found its hub through the dashboard.
            await until(pilot, lambda: app.view.status == "connected", "the app to find the run's hub")
            await body(app, pilot)
    asyncio.run(main())


async def until(pilot, pred, what):
    deadline = time.monotonic() + WAIT_S
    while not pred():
        app = pilot.app
        assert time.monotonic() < deadline, (f"timed out waiting for {what}: {app.view.status} {app.view.message} "
                                             f"calls_done={app.view.state.get('calls_done')} gate={app.view.gate}")
        await pilot.pause(0.1)


def plain(app, selector) -> str:
    """The text a view shows now (a Static's content, or a lane view's rendered lanes)."""
    widget = app.query_one(selector)
    if hasattr(widget, "plain_text"):
        return widget.plain_text()
    if not hasattr(widget, "content"):
        return widget.render().plain
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(widget.content)
    return console.export_text()


def live_rows(app, roles=("actor", "reward")):
    return {(r.role, r.rank): r for r in app.view.rows if r.role in roles and r.state != "dead"}


def test_roles_view_shows_every_role_and_rank_with_live_state(ray_cluster, trainer, hub):
    loop = Loop(trainer, steps=1)

    async def body(app, pilot):
        await until(pilot, lambda: set(live_rows(app)) == {("actor", 0), ("actor", 1), ("reward", 0), ("reward", 1)},
                    "a row per role x rank")
        rows = live_rows(app)
        assert all(r.pid and r.state == "idle" for r in rows.values()), rows
        assert rows[("actor", 0)].pid == rows[("reward", 0)].pid   # colocated: one process, two roles
        assert app.query_one("#roles-table").row_count >= 4
        await pilot.press("4", "a")
        await until(pilot, lambda: gate.active().armed, "the driver to see the armed gate")
        loop.start()
        await until(pilot, lambda: app.view.gate.get("waiting"), "the driver to park")
        await pilot.press("1")
        await until(pilot, lambda: live_rows(app)[("actor", 0)].state == "waiting (gate)", "actor rows waiting")
        assert {r.method for k, r in live_rows(app).items() if k[0] == "actor"} == {"to_rollout_mode"}
        assert live_rows(app)[("reward", 1)].state == "idle"
        await pilot.press("4", "c")

    drive(ray_cluster, body)
    loop.finish()


def test_stepper_arms_steps_one_call_continues_and_a_closed_tui_releases_the_run(ray_cluster, trainer, hub):
    client = HubClient(hub["url"], hub["token"])
    first, second = Loop(trainer, steps=1), Loop(trainer, steps=1)
    seen = {}

    async def body(app, pilot):
        await pilot.press("4", "a")
        await until(pilot, lambda: gate.active().armed, "the driver to see the armed gate")
        first.start()
        await until(pilot, lambda: app.view.gate.get("waiting"), "the driver to park")
        parked = app.view.gate["pending"]
        assert (parked["method"], parked["phase"]) == ("to_rollout_mode", "before_dispatch")
        for _ in range(8):   # ~1 s: nothing moves while parked
            await pilot.pause(0.12)
            assert app.view.state["calls_done"] == 0 and app.view.gate["pending"] == parked
        await pilot.press("s")   # one call runs, and parks again after its collect
        await until(pilot, lambda: app.view.gate.get("waiting") and app.view.gate["pending"]["phase"] == "after_collect",
                    "the call to finish")
        assert app.view.state["calls_done"] == 1 and app.view.gate["pending"]["id"] == parked["id"]
        await pilot.press("space")
        await until(pilot, lambda: app.view.gate.get("waiting") and app.view.gate["pending"]["method"] == "generate_sequences",
                    "the next call's dispatch")
        assert app.view.state["calls_done"] == 1
        await pilot.pause(0.3)
        text = plain(app, "#stepper-view")
        assert "actor.generate_sequences" in text and "input_ids" in text and "PARKED" in text, text
        await pilot.press("c")
        await until(pilot, lambda: not first.is_alive(), "the loop to finish after continue")
        first.finish()
        # the driver reports progress ~4x/s; the hub then shows every call the step made
        await until(pilot, lambda: app.view.state["calls_done"] == gate.active().calls_done > 1, "every call reported")
        # Arm again, park, then close the TUI: its heartbeats stop and the hub lets the run go.
        await pilot.press("a")
        await until(pilot, lambda: gate.active().armed, "the driver to see the armed gate")
        second.start()
        await until(pilot, lambda: app.view.gate.get("waiting"), "the driver to park again")
        seen["closed_at"] = time.monotonic()

    drive(ray_cluster, body)
    second.finish(timeout=30)
    released_after = time.monotonic() - seen["closed_at"]
    state = client.state()
    assert state["gate"]["armed"] is False and "no heartbeat for 3 s" in state["gate"]["disarm_reason"]
    assert released_after < 30, released_after


def test_memory_view_shows_the_offload_and_reload_of_a_step(ray_cluster, trainer, hub, tmp_path):
    rldbg.trace.start(str(tmp_path / "trace.json"), memory_hz=0)
    loop = Loop(trainer, steps=1)
    try:
        async def body(app, pilot):
            await pilot.press("3")
            loop.start()

            def marks():
                return {name for role, rank, _p, ms, _l in app.view.memory if role == "actor" for _t, _c, name in ms}
            await until(pilot, lambda: {"offload_optimizer", "reload_optimizer", "sync_weights",
                                        "release_kv_cache"} <= marks(), "the step's transitions")
            await pilot.pause(0.5)
            text = plain(app, "#memory-view")
            assert "actor      r0" in text and "actor      r1" in text, text
            lines = text.splitlines()
            marker_lines = [ln for ln in lines if ln.strip() and set(ln.strip()) <= set("ORWK· ")]
            assert any("O" in ln and "R" in ln for ln in marker_lines), text
            assert "ledger" in text

        drive(ray_cluster, body)
        loop.finish()
    finally:
        rldbg.trace.stop(export=False)


def test_the_rldbg_top_binary_runs_in_a_terminal_and_quits_on_q(ray_cluster, trainer, hub):
    exe = shutil.which("rldbg")
    cmd = f"{shlex.quote(exe)} top" if exe else f"{shlex.quote(sys.executable)} -m rldbg.cli top"
    sock = f"rldbg-test-{os.getpid()}"
    tmux = ["tmux", "-L", sock]
    subprocess.run(tmux + ["new-session", "-d", "-s", "top", "-x", "150", "-y", "40",
                           f"{cmd} --address {ray_cluster} --refresh 0.3"], check=True)
    try:
        deadline, screen = time.monotonic() + WAIT_S, ""
        while not ("actor+reward[0]" in screen and "actor+reward[1]" in screen and "gate free" in screen):
            assert time.monotonic() < deadline, screen
            time.sleep(0.3)
            screen = subprocess.run(tmux + ["capture-pane", "-p", "-t", "top"], capture_output=True, text=True).stdout
        assert "rldbg top" in screen and f"job {hub['job_id']}" in screen and "Roles" in screen and "state" in screen
        subprocess.run(tmux + ["send-keys", "-t", "top", "q"], check=True)
        deadline = time.monotonic() + 30
        while subprocess.run(tmux + ["has-session", "-t", "top"], capture_output=True).returncode == 0:
            assert time.monotonic() < deadline, "rldbg top did not exit on q"
            time.sleep(0.2)
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)
    once = subprocess.run(shlex.split(cmd) + ["--once", "--address", ray_cluster], capture_output=True, text=True,
                          timeout=WAIT_S)
    assert once.returncode == 0, once.stderr
    assert "actor+reward[1]" in once.stdout and "gate: off" in once.stdout, once.stdout
    row = next(ln for ln in once.stdout.splitlines() if "actor+reward[1]" in ln)
    import ray
    assert ray.get_runtime_context().get_node_id()[:8] in row, once.stdout   # the node column is filled


def test_once_without_a_hub_still_lists_the_workers(ray_cluster, trainer):
    """A run whose driver started no hub (control.enabled=false, a plain Ray program), or not yet:
    the roles table from the dashboard (this job's live workers) and their identities, and what
    needs the hub. --job names this job: another test's hub may be up in the session's cluster."""
    import ray

    exe = shutil.which("rldbg") or str(Path(sys.executable).with_name("rldbg"))
    job = ray.get_runtime_context().get_job_id()
    once = subprocess.run([exe, "top", "--once", "--address", ray_cluster, "--wait", "30", "--job", job],
                          capture_output=True, text=True, timeout=WAIT_S)
    assert once.returncode == 0, once.stderr
    said, *table = once.stdout.splitlines()
    assert said.startswith(f"rldbg top: waiting for run {job}: no rldbg hub in the dashboard"), once.stdout
    assert said.endswith("the workers below are the dashboard's"), said
    rows = [ln.split() for ln in table[1:]]
    want = {("actor+reward[0]", "actor", "0"), ("actor+reward[1]", "reward", "1")}
    assert {(r[0], r[1], r[2]) for r in rows} >= want, once.stdout
    assert {r[3] for r in rows} == {"alive"}, "without a hub nobody says running or idle"


def test_the_dashboard_going_away_shows_disconnected_retrying_and_recovers(ray_cluster, hub):
    """A real outage: the app talks to the dashboard through a loopback forwarder that is cut
    (connections refused and dropped) and restored on the same port."""
    from urllib.parse import urlparse

    from tcp_proxy import TcpProxy

    target = urlparse(ray_cluster)
    proxy = TcpProxy(target.hostname, target.port).start()

    async def main():
        app = TopApp(LiveSource(proxy.url, timeout=2.0), refresh=0.2)
        async with app.run_test(size=(150, 40)) as pilot:
            await until(pilot, lambda: app.view.status == "connected" and app.view.rows is not None,
                        "the app to connect through the forwarder")
            proxy.stop()
            await until(pilot, lambda: app.view.status == "disconnected", "the app to notice the outage")
            assert "disconnected, retrying" in app.view.message, app.view.message
            await pilot.pause(0.3)
            status = app.query_one("#status").render()
            assert "disconnected, retrying" in str(status), status
            for key in "1234567":   # every view draws the stale picture without crashing
                await pilot.press(key)
                await pilot.pause(0.1)
            assert not [n for n in app._notifications if "could not draw" in n.message]
            proxy.start()
            await until(pilot, lambda: app.view.status == "connected", "the app to reconnect")
            assert app.view.job_id == hub["job_id"]
    try:
        asyncio.run(main())
    finally:
        proxy.stop()
