"""VeRL as main_ppo runs it: the controller is a TaskRunner actor, not the driver
(tests/verl_taskrunner_program.py, no rldbg in it). Run as users run it, with RLDBG_VERL=1
RLDBG_TRACE=PATH, while `rldbg top` (its Textual app, through its own test driver, in this
process) arms the stepper on the program's cluster; then `rldbg report` on the trace."""
from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from verl_support import program_env, require_entry_point, sweep
from polling import until

from rldbg.control.discovery import read_hub_files
from rldbg.ray_auth import token
from rldbg.trace.report import analyse_trace
from rldbg.tui.app import TopApp
from rldbg.tui.data import LiveSource
import pytest

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

TESTS = Path(__file__).parent
ROOT = TESTS.parent
PORT = int(os.environ.get("RLDBG_TEST_DASHBOARD_PORT", "8270")) + 2   # the program's own cluster
DASH = f"http://127.0.0.1:{PORT}"
STEPS, THINK_S, SLOW_S = 4, 0.2, 0.3
WAIT_S = 240   # liveness bound (this machine may be busy), not a timing assertion


async def _until(pilot, pred, what):
    deadline = time.monotonic() + WAIT_S
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {pilot.app.view.status} {pilot.app.view.gate}"
        await pilot.pause(0.1)


def _plain(app, selector) -> str:
    widget = app.query_one(selector)
    if hasattr(widget, "plain_text"):
        return widget.plain_text()
    if not hasattr(widget, "content"):
        return widget.render().plain
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(widget.content)
    return console.export_text()


def _step_through(seen: list):
    """Arm in `rldbg top`, park before a dispatch and after a collect, then continue."""
    async def main():
        app = TopApp(LiveSource(DASH), refresh=0.2)
        async with app.run_test(size=(150, 45)) as pilot:
            await _until(pilot, lambda: app.view.status == "connected", "rldbg top to find the run's hub")
            await pilot.press("4", "a")
            phases = set()
            while phases != {"before_dispatch", "after_collect"}:
                await _until(pilot, lambda: app.view.gate.get("waiting"), "the TaskRunner to park")
                parked = dict(app.view.gate["pending"])
                done = app.view.state.get("calls_done")
                for _ in range(5):   # parked: nothing moves
                    await pilot.pause(0.12)
                    assert app.view.gate.get("waiting") and app.view.gate["pending"] == parked
                    assert app.view.state.get("calls_done") == done
                await pilot.pause(0.3)
                seen.append((parked, _plain(app, "#stepper-view")))
                phases.add(parked["phase"])
                await pilot.press("s")
                await _until(pilot, lambda: not app.view.gate.get("waiting") or app.view.gate["pending"] != parked,
                             "the TaskRunner to move on")
            await pilot.press("c")
            await _until(pilot, lambda: not app.view.gate.get("armed"), "the gate to open")
    asyncio.run(main())


def test_taskrunner_controller_stepper_steps_stragglers_idle(tmp_path, monkeypatch):
    require_entry_point()
    trace, home = tmp_path / "out.json.gz", tmp_path / "home"
    monkeypatch.setenv("RLDBG_HOME", str(home))   # where `rldbg top` finds the run's token
    if token():   # as `rldbg top` does (rldbg.cli) before it opens a Ray client on the program's cluster
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
    env = program_env(RLDBG_VERL=1, RLDBG_TRACE=trace, RLDBG_HOME=home, SLOW_RANK=1, SLOW_METHOD="update_actor",
               SLOW_S=SLOW_S, STEPS=STEPS, THINK_S=THINK_S, DASHBOARD_PORT=PORT)
    prog = subprocess.Popen([sys.executable, str(TESTS / "verl_taskrunner_program.py")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path, start_new_session=True)
    seen: list = []
    try:
        until(lambda: read_hub_files(), "the driver to start the control hub", limit=WAIT_S, interval=0.5)
        _step_through(seen)
        out, _ = prog.communicate(timeout=WAIT_S)
    finally:
        if prog.poll() is None:
            prog.kill()
            prog.communicate()
        sweep(prog)
    assert prog.returncode == 0, out[-3000:]
    assert f"step {STEPS}:" in out and f"rldbg: trace written to {trace}" in out, out[-3000:]

    # The stepper parked the controller inside the TaskRunner before a dispatch (with the shard
    # table) and after that call's collect.
    before, text = next((p, txt) for p, txt in seen if p["phase"] == "before_dispatch")
    assert before["group"] in ("actor", "critic") and before["world"] == 2
    assert [s["rows"] for s in before["shards"]] == [4, 4]
    assert f"{before['group']}.{before['method']}" in text and "PARKED" in text and "x" in text, text
    after = next(p for p, _ in seen if p["phase"] == "after_collect")
    assert after["method"] in ("update_actor", "compute_values")

    r = subprocess.run([sys.executable, "-m", "rldbg", "report", "--json", str(trace)], capture_output=True,
                       text=True, env=program_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    # Steps numbered from call order, the first pass included.
    assert rep["time"]["steps"] == STEPS
    _, t = analyse_trace(str(trace))
    assert [s["step"] for s in t.steps] == list(range(1, STEPS + 1))
    assert sorted((d["step"], d["args"]["group"], d["method"]) for d in t.driver_calls) == sorted(
        (n, *call) for n in range(1, STEPS + 1) for call in (("actor", "update_actor"), ("critic", "compute_values")))
    # The slow rank, and only it.
    assert [(s["role"], s["rank"], s["method"]) for s in rep["stragglers"]] == [("actor", 1, "update_actor")]
    # The controller's track is the TaskRunner's, and its idle time between calls is measured there.
    pid = int(re.search(r"controller pid (\d+)", out).group(1))
    assert [x["pid"] for x in rep["ranks"] if x["role"] == "driver"] == [pid]
    gaps = [g for g in rep["controller"]["largest_gaps"] if (g["after"], g["before"]) ==
            ("update_actor", "compute_values")]
    assert len(gaps) >= STEPS - 1 and all(g["idle_s"] >= 0.9 * THINK_S for g in gaps), gaps
    assert rep["controller"]["between_calls_s"] >= 0.9 * THINK_S * STEPS


def test_sigterm_to_the_driver_writes_the_trace_with_the_taskrunners_calls(tmp_path):
    # `ray job stop`, SLURM or `timeout` send SIGTERM to main_ppo's driver, which is waiting on the
    # TaskRunner: the trace is written with the TaskRunner's calls, and the driver exits 143.
    import signal
    import threading

    require_entry_point()
    trace = tmp_path / "out.json.gz"
    env = program_env(RLDBG_VERL=1, RLDBG_TRACE=trace, RLDBG_HOME=tmp_path / "home", STEPS=100000, THINK_S=0.05,
                      DASHBOARD_PORT=PORT + 1)
    prog = subprocess.Popen([sys.executable, str(TESTS / "verl_taskrunner_program.py")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path, start_new_session=True)
    lines: list = []
    reader = threading.Thread(target=lambda: lines.extend(prog.stdout), daemon=True)
    reader.start()
    try:
        until(lambda: any("taskrunner step 4" in line for line in lines), "the TaskRunner's fourth step",
              limit=2 * WAIT_S, interval=0.5)   # worker groups start first: slow on a busy machine
        seen = max(int(m) for m in re.findall(r"taskrunner step (\d+)", "".join(lines)))
        prog.send_signal(signal.SIGTERM)
        prog.wait(timeout=WAIT_S)
    finally:
        if prog.poll() is None:
            prog.kill()
            prog.wait()
        sweep(prog)
    reader.join(timeout=10)
    out = "".join(lines)
    assert prog.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert f"rldbg: trace written to {trace}" in out, out[-3000:]
    # Every step the TaskRunner had finished when the signal came is in it (the trace closes while
    # the TaskRunner goes on for a moment: later steps may be in it too).
    _, t = analyse_trace(str(trace))
    assert [s["step"] for s in t.steps][:seen - 1] == list(range(1, seen))
    done = sorted((d["step"], d["args"]["group"]) for d in t.driver_calls if d["step"] < seen)
    assert done == [(n, g) for n in range(1, seen) for g in ("actor", "critic")], done
