"""End to end: conditional breakpoints in Ray actors, found through the dashboard,
inspected and changed over DAP against the workers' real debugpy listeners."""
import io
import json
import os
from contextlib import redirect_stdout
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_DEBUG"] = "1"

import pytest  # noqa: E402
from polling import until  # noqa: E402
import ray  # noqa: E402

import rldbg  # noqa: E402
from rldbg.cli import main as cli_main  # noqa: E402
from rldbg.dashboard import Dashboard  # noqa: E402
from rldbg.debug.dap import DAPClient  # noqa: E402
from rldbg.debug.terminal import Session  # noqa: E402
from rldbg.debug.paused_workers import resolve_target  # noqa: E402

from conftest import DASHBOARD_URL as DASH  # noqa: E402
THIS = str(Path(__file__).resolve())


def _line_of(marker: str) -> int:
    for no, text in enumerate(Path(THIS).read_text().splitlines(), 1):
        if text.rstrip().endswith(marker) and "_line_of" not in text:
            return no
    raise AssertionError(marker)


@ray.remote
class Shard:
    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        rldbg.set_identity("actor", rank, world)

    def __repr__(self):
        return f"actor[rank {self.rank}/{self.world}]"

    def update(self, x):
        batch_size = 8
        rldbg.breakpoint(rank=1)  # ASKS-TO-STOP
        result = batch_size * x  # STOP-UPDATE
        return result

    def explode(self):
        from rldbg.debug.breakpoints import post_mortem_guard

        with post_mortem_guard():
            self._inner()

    def _inner(self):
        shard = [1, 2, 3]
        raise ValueError(f"bad shard {shard}")  # RAISE-HERE

    def entry(self, method, step):
        # Stands in for the trainer's dispatch wrapper: the seam checks specs at entry.
        from rldbg.debug.breakpoints import check_method_entry, set_active_specs

        set_active_specs(["actor.train_step@rank=1,step=3"])
        check_method_entry("actor", self.rank, method, step)
        out = self.train_step(step)  # ENTRY-STOP
        return out

    def train_step(self, step):
        return step * 10


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    dash = Dashboard(ray_cluster)
    _until(lambda: dash.workers(detail=False) is not None, "dashboard up")
    return dash


@pytest.fixture(scope="module")
def shards(cluster):
    actors = [Shard.remote(r, 2) for r in range(2)]
    ray.get([a.__ray_ready__.remote() for a in actors])
    yield actors
    for a in actors:  # a test that fails mid-pause must not leave a paused worker for the next ones
        ray.kill(a)


def _until(fn, what, limit=60.0):
    return until(fn, what, limit)


def _cli(*argv) -> tuple[int, str]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = cli_main(list(argv))
    return rc, buf.getvalue()


def _no_pauses(dash):
    return _until(lambda: dash.paused_workers() == [], "no paused workers")


def test_only_rank1_pauses_attach_inspect_change(cluster, shards, tmp_path):
    dash = cluster
    refs = [a.update.remote(2) for a in shards]
    assert ray.get(refs[0], timeout=60) == 16  # rank 0 never pauses
    paused = _until(dash.paused_workers, "rank 1 paused")
    assert len(paused) == 1

    rc, out = _cli("breakpoints", "--address", DASH, "--json")
    listed = json.loads(out)
    assert rc == 0 and len(listed) == 1
    w = listed[0]
    assert (w["role"], w["rank"], w["world"], w["method"]) == ("actor", 1, 2, "update")
    assert w["port"] == paused[0]["debugger_port"] and w["host"] == "127.0.0.1"
    rc, out = _cli("stack", "--address", DASH, "--role", "actor")   # the pause reads as one, not a hang
    assert rc == 0 and (f"actor: rank 1 still in a call (paused at a breakpoint at Shard.update "
                        f"(test_debug_e2e.py:{_line_of('# ASKS-TO-STOP')}): `rldbg attach` reaches it); rank 0 finished"
                        ) in out, out

    launch = tmp_path / ".vscode" / "launch.json"
    rc, _ = _cli("vscode", "--address", DASH, "--output", str(launch))
    cfg = json.loads(launch.read_text())["configurations"]
    assert rc == 0 and [c["name"] for c in cfg] == ["rldbg: actor rank 1"]
    assert cfg[0]["connect"] == {"host": "127.0.0.1", "port": w["port"]}
    assert cfg[0]["type"] == "debugpy" and cfg[0]["justMyCode"] is False
    assert cfg[0]["pathMappings"] == [{"localRoot": "${workspaceFolder}", "remoteRoot": w["cwd"]}] and w["cwd"]

    client = DAPClient(w["host"], w["port"])
    client.attach()
    stop = client.wait_stopped(30)
    assert stop["reason"] == "breakpoint"
    top = client.stack_trace()[0]
    assert (top["source"]["path"], top["line"], top["name"]) == (THIS, _line_of("# STOP-UPDATE"), "update")
    assert client.evaluate("batch_size", top["id"])["result"] == "8"
    client.evaluate("batch_size = 100", top["id"])
    locals_ = client.variables(client.scopes(top["id"])[0]["variablesReference"])
    assert {"name": "x", "value": "2"}.items() <= {v["name"]: v for v in locals_}["x"].items()
    client.resume()
    client.disconnect()
    assert ray.get(refs[1], timeout=60) == 200  # the changed local took effect
    _no_pauses(dash)
    rc, out = _cli("breakpoints", "--address", DASH, "--json")
    assert json.loads(out) == []


def test_disconnect_without_continue_resumes(cluster, shards):
    ref = shards[1].update.remote(3)
    w = _until(cluster.paused_workers, "rank 1 paused")[0]
    client = DAPClient(w["ip"], w["debugger_port"])
    client.attach()
    client.wait_stopped(30)
    client.disconnect()  # no continue
    assert ray.get(ref, timeout=60) == 24
    _no_pauses(cluster)


def test_attach_session_scripted(cluster, shards):
    ref = shards[1].update.remote(5)
    _until(cluster.paused_workers, "rank 1 paused")
    host, port, worker = resolve_target("actor:1", lambda: cluster)
    assert worker.method == "update" and worker.label == "actor rank 1"
    lines = []
    session = Session(DAPClient(host, port), out=lines.append, continue_timeout=2)
    session.start()
    session.run(["bt", "p batch_size * 2", "l", "up", "down", "!batch_size = 3", "n", "p result", "bogus", "c"])
    text = "\n".join(lines)
    assert f"{THIS}:{_line_of('# STOP-UPDATE')} in update" in text
    assert "-> " in text and "result = batch_size * x" in text  # source shown
    assert "\n16\n" in text  # p batch_size * 2
    assert "batch_size = 8  (int)" in text and "x = 5  (int)" in text  # locals
    assert "\n15\n" in text  # p result after next, with batch_size changed to 3
    assert "unknown command 'bogus'" in text
    assert not session.active  # c with no further stop detaches
    assert ray.get(ref, timeout=60) == 15
    _no_pauses(cluster)


def test_spec_pauses_at_method_entry(cluster, shards):
    refs = [a.entry.remote("train_step", 3) for a in shards]
    assert ray.get(refs[0], timeout=60) == 30  # rank 0 does not match the spec
    w = _until(cluster.paused_workers, "rank 1 paused at entry")[0]
    with DAPClient(w["ip"], w["debugger_port"]) as client:
        client.attach()
        client.wait_stopped(30)
        top = client.stack_trace()[0]
        assert (top["name"], top["line"]) == ("entry", _line_of("# ENTRY-STOP"))
        client.resume("stepIn")
        client.wait_stopped(30)
        assert client.stack_trace()[0]["name"] == "train_step"
        client.resume()
    assert ray.get(refs[1], timeout=60) == 30
    _no_pauses(cluster)


@pytest.mark.parametrize("switch", ["RAY_DEBUG_POST_MORTEM", "RLDBG_POST_MORTEM"])
def test_post_mortem_is_attachable(cluster, switch):
    actor = Shard.options(runtime_env={"env_vars": {switch: "1"}}).remote(0, 1)
    ref = actor.explode.remote()
    w = _until(cluster.paused_workers, "post-mortem pause")[0]
    client = DAPClient(w["ip"], w["debugger_port"])
    client.attach(exception_filters=["uncaught"])
    stop = client.wait_stopped(30)
    assert stop["reason"] == "exception"
    frames = client.stack_trace()
    assert (frames[0]["name"], frames[0]["line"]) == ("_inner", _line_of("# RAISE-HERE"))
    assert client.evaluate("shard", frames[0]["id"])["result"] == "[1, 2, 3]"
    client.resume()
    client.disconnect()
    with pytest.raises(ray.exceptions.RayTaskError, match="bad shard"):
        ray.get(ref, timeout=60)
    ray.kill(actor)
    _no_pauses(cluster)
