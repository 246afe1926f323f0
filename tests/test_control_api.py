"""The control hub's HTTP API on loopback: token auth, state/events shapes, breakpoint specs,
export of a live trace, the hub file and discovery through the dashboard."""
from __future__ import annotations

import json
import os
import stat
import time
import urllib.error
import urllib.request

import pytest

import rldbg
import rldbg.control
import rldbg.trace
from rldbg.control.client import HubClient, HubError
from rldbg.control.discovery import discover, hub_file
from rldbg.trace import runtime


@pytest.fixture(scope="module")
def hub(ray_cluster):
    """One hub for the module (starting an actor costs seconds); tests leave it disarmed and
    without specs, and the discovery test, last, stops it."""
    info = rldbg.control.start(gate_timeout_s=30.0)
    try:
        yield info
    finally:
        rldbg.control.stop()


def _raw(url, method="GET", body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_requests_without_the_right_token_get_401(hub):
    assert hub["url"].startswith("http://127.0.0.1:")
    code, body = _raw(hub["url"] + "/api/state")
    assert code == 401 and "bearer token" in body["error"]
    code, _ = _raw(hub["url"] + "/api/gate", "POST", b'{"action": "arm"}', {"Authorization": "Bearer nope"})
    assert code == 401
    with pytest.raises(HubError, match="refused the request") as err:
        HubClient(hub["url"], "wrong").state()
    assert err.value.status == 401
    assert HubClient(hub["url"], hub["token"]).state()["gate"]["armed"] is False   # nothing was armed


def test_state_and_events_shapes_without_tracing(hub):
    c = HubClient(hub["url"], hub["token"])
    s = c.state()
    assert s["job_id"] == hub["job_id"] and s["trace"] == {"enabled": False, "path": None}
    g = s["gate"]
    assert {k: g[k] for k in ("armed", "mode", "target", "waiting", "pending", "last_result")} == {
        "armed": False, "mode": "off", "target": None, "waiting": False, "pending": None, "last_result": None}
    assert g["timeout_s"] == 30.0 and s["calls_done"] == 0
    assert s["breakpoints"]["specs"] == [] and s["breakpoints"]["paused"] == []
    assert set(s["stats"]) >= {"trace", "driver", "hub"}
    assert c.events(0, 10) == {"cursor": 0, "events": [], "trace_enabled": False}
    assert c.heartbeat()["ok"] is True


def test_gate_actions_and_bad_input_answer_one_line_400s(hub):
    c = HubClient(hub["url"], hub["token"])
    assert c.gate("arm")["armed"] is True and c.gate("arm")["mode"] == "step"
    got = c.gate("run_to_method", method="update_actor")
    assert (got["mode"], got["target"]) == ("run_to_method", "update_actor")
    assert c.gate("run_to_step", step=3)["target"] == "3"
    assert c.gate("continue")["armed"] is False
    for kw, msg in [({"action": "jump"}, "unknown gate action 'jump'"),
                    ({"action": "run_to_method"}, "run_to_method needs a method name"),
                    ({"action": "run_to_step"}, "has reported no step yet"),
                    ({"action": "run_to_step", "step": "x"}, "step='x' must be an integer")]:
        with pytest.raises(HubError, match=msg) as err:
            c.gate(**kw)
        assert err.value.status == 400 and "\n" not in str(err.value)
    code, body = _raw(hub["url"] + "/api/events?cursor=-1", headers={"Authorization": f"Bearer {hub['token']}"})
    assert code == 400 and body["error"] == "cursor=-1 must be >= 0"
    code, _ = _raw(hub["url"] + "/api/nothing", headers={"Authorization": f"Bearer {hub['token']}"})
    assert code == 404


def test_breakpoint_specs_add_remove_and_reject_bad_ones(hub):
    c = HubClient(hub["url"], hub["token"])
    assert c.add_breakpoint("actor.update_actor@rank=1,step=3") == ["actor.update_actor@rank=1,step=3"]
    assert c.add_breakpoint("critic.*") == ["actor.update_actor@rank=1,step=3", "critic.*"]
    with pytest.raises(HubError, match=r"bad breakpoint spec 'actor.update_actor@rnk=1'.*unknown filter 'rnk'") as err:
        c.add_breakpoint("actor.update_actor@rnk=1")
    assert err.value.status == 400 and "\n" not in str(err.value)
    assert c.remove_breakpoint("critic.*") == ["actor.update_actor@rank=1,step=3"]
    assert c.state()["breakpoints"]["specs"] == ["actor.update_actor@rank=1,step=3"]
    # The driver gate picks the live specs up on its next poll, for the seam to push to workers.
    deadline = time.monotonic() + 30
    while rldbg.control.gate.current_specs()[1] != ["actor.update_actor@rank=1,step=3"]:
        assert time.monotonic() < deadline, rldbg.control.gate.current_specs()
        time.sleep(0.1)
    assert rldbg.control.gate.current_specs()[0] >= 3
    assert c.remove_breakpoint("actor.update_actor@rank=1,step=3") == []


def test_breakpoint_pauses_reported_by_workers_show_in_state(hub):
    from rldbg.control.notify import notify_pause, notify_resume
    c = HubClient(hub["url"], hub["token"])
    entry = {"reason": "spec actor.update_actor", "role": "actor", "rank": 1, "step": 3, "method": "update_actor",
             "pid": 4242, "thread": 7, "host": "127.0.0.1", "port": 5678, "file": "hybrid.py", "line": 170}
    notify_pause(entry)
    s = _until_state(c, lambda s: s["breakpoints"]["paused"])
    assert s["breakpoints"]["paused"] == [entry] and s["breakpoints"]["hits"][-1] == entry
    notify_resume(entry)
    s = _until_state(c, lambda s: not s["breakpoints"]["paused"])
    assert s["breakpoints"]["hits"][-1] == entry


def _until_state(c, pred):
    deadline = time.monotonic() + 30
    while not pred(s := c.state()):
        assert time.monotonic() < deadline, s["breakpoints"]
        time.sleep(0.05)
    return s


def test_events_come_from_the_collector_and_export_snapshots_a_live_trace(hub, tmp_path):
    c = HubClient(hub["url"], hub["token"])
    trace = tmp_path / "run" / "trace.json"
    trace.parent.mkdir()
    rldbg.trace.start(str(trace), memory_hz=0)
    try:
        rldbg.instant("control-test-mark", answer=42)
        runtime.flush()
        events, cursor, deadline = [], 0, time.monotonic() + 30
        while not any(e["name"] == "control-test-mark" for e in events):
            assert time.monotonic() < deadline, events
            got = c.events(cursor, 1000)
            cursor = got["cursor"]
            events += got["events"]
        mark = next(e for e in events if e["name"] == "control-test-mark")
        assert set(mark) == {"ph", "cat", "name", "ts_ns", "dur_ns", "role", "rank", "step", "method", "flow", "args"}
        assert mark["ph"] == "i" and mark["args"]["answer"] == 42 and mark["role"] == "driver"
        s = c.state()
        assert s["trace"] == {"enabled": True, "path": str(trace)} and s["stats"]["trace"]["events"] >= 1
        snap = c.export()["path"]
        assert snap.startswith(str(tmp_path / "run" / "trace.snapshot-")) and os.path.exists(snap)
        named = c.export(str(tmp_path / "snap.json"))["path"]
        assert "control-test-mark" in open(named).read()
        with pytest.raises(HubError, match="must end in .json or .json.gz") as err:
            c.export(str(tmp_path / "snap.txt"))
        assert err.value.status == 400
    finally:
        rldbg.trace.stop(export=False)
    with pytest.raises(HubError, match="tracing is off") as err:
        c.export()
    assert err.value.status == 409


def test_the_hub_and_the_collector_add_no_tasks_to_the_dashboard(hub, tmp_path):
    """The gate syncs with the hub 4 times a second and every traced process ships to the
    collector each second, for the whole run: none of it may show as tasks (the GCS keeps a
    bounded number; `rldbg breakpoints` looks a paused worker's task up there). The collector is
    no actor at all: it listens in the driver (trace/server.py)."""
    import ray
    from conftest import task_listed, tasks_of_actors

    @ray.remote(num_cpus=0)
    def user_task_probe():
        return 1

    with rldbg.trace.tracing(str(tmp_path / "t.json"), memory_hz=10):
        ray.get(user_task_probe.remote())
        time.sleep(1.5)   # six gate syncs and a shipping round
    assert task_listed("user_task_probe")   # task events do reach the dashboard
    n, names = tasks_of_actors("ControlHub")
    assert n >= 1 and names == [], (n, names)
    assert tasks_of_actors("Collector") == (0, [])


def test_hub_file_is_private_and_discovery_finds_the_hub_through_the_dashboard(hub, ray_cluster):
    path = hub_file(hub["job_id"])
    assert str(path) == hub["file"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    saved = json.loads(path.read_text())
    assert {k: saved[k] for k in ("url", "token", "job_id", "pid")} == {
        "url": hub["url"], "token": hub["token"], "job_id": hub["job_id"], "pid": os.getpid()}
    # keyed by run, not job id alone: every fresh embedded cluster's first job is 01000000
    assert saved["run"] == f"{hub['job_id']}-{os.getpid()}" and path.name == f"hub-{saved['run']}.json"
    assert saved["dashboard"] == ray_cluster
    found = [h for h in discover(ray_cluster) if h["job_id"] == hub["job_id"]]
    assert len(found) == 1 and found[0]["url"] == hub["url"] and found[0]["token"] == hub["token"]
    assert HubClient(found[0]["url"], found[0]["token"]).state()["job_id"] == hub["job_id"]
    with pytest.raises(RuntimeError, match="already running"):
        rldbg.control.start()
    rldbg.control.stop()
    assert not path.exists()
    with pytest.raises(HubError, match=r"cannot reach the rldbg hub at http://127\.0\.0\.1:\d+"):
        HubClient(hub["url"], hub["token"], timeout=3).state()
