"""Debugging a run whose ranks sit on two nodes of a real cluster (the session's `two_nodes`,
tests/cluster_host.py: profiling routes on), as a user does from another terminal: `rldbg top
--once` and `rldbg breakpoints` list both ranks with their nodes, `rldbg stack` dumps the rank on
the non-head node through that node's dashboard agent, and `rldbg attach --role actor --rank 1
--break FILE:LINE` stops in the rank on the non-head node and evaluates there."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ray_cli_env, stop_child
from polling import until

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).parent
WORKERS = str((HERE / "node_workers.py").resolve())
TICK = next(no for no, text in enumerate(Path(WORKERS).read_text().splitlines(), 1) if "# TICK" in text)


def _rldbg(*argv, timeout=120):
    return subprocess.run([sys.executable, "-m", "rldbg", *argv], capture_output=True, text=True, timeout=timeout,
                          env=ray_cli_env(), cwd=REPO)


@pytest.fixture(scope="module")
def run(two_nodes, tmp_path_factory):
    """The driver, its ranks listening; yields (cluster, {rank: (pid, node_id)}, head, other)."""
    trace = tmp_path_factory.mktemp("debug_nodes") / "trace.json"
    proc = subprocess.Popen([sys.executable, str(HERE / "two_node_debug_driver.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=ray_cli_env(RAY_ADDRESS=two_nodes["address"], TRACE=str(trace)))
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-3000:]
        where = {int(r): tuple(w) for r, w in json.loads(line).items()}
        head = next(n["node_id"] for n in two_nodes["nodes"] if n["head"])
        other = next(n["node_id"] for n in two_nodes["nodes"] if not n["head"])
        assert (where[0][1], where[1][1]) == (head, other), (where, two_nodes["nodes"])
        yield two_nodes, where, head, other
    finally:
        stop_child(proc, timeout=120)


def test_top_and_stack_reach_both_nodes(run):
    cluster, where, head, other = run
    top = _rldbg("top", "--once", "--address", cluster["dashboard"])
    assert top.returncode == 0, top.stdout + top.stderr
    rows = [ln.split() for ln in top.stdout.splitlines() if ln.startswith("actor[")]
    nodes = {(r[0], r[1]): r for r in rows}
    assert set(nodes) == {("actor[0]", "actor"), ("actor[1]", "actor")}, top.stdout
    assert head[:8] in nodes[("actor[0]", "actor")] and str(where[0][0]) in nodes[("actor[0]", "actor")], top.stdout
    assert other[:8] in nodes[("actor[1]", "actor")] and str(where[1][0]) in nodes[("actor[1]", "actor")], top.stdout

    # Only through the dashboard (no local py-spy fallback): the agent of rank 1's node dumps it.
    st = _rldbg("stack", "--role", "actor", "--rank", "1", "--via", "dashboard", "--json",
                "--address", cluster["dashboard"])
    assert st.returncode == 0, st.stdout + st.stderr
    out = json.loads(st.stdout)
    assert out["errors"] == [] and len(out["groups"]) == 1, out
    group = out["groups"][0]
    assert [(w["rank"], w["pid"], w["source"]) for w in group["workers"]] == [(1, where[1][0], "dashboard")]
    mine = [f["name"] for f in group["frames"] if f["file"].endswith("node_workers.py")]
    assert {"Looper.spin", "Looper.tick"} & set(mine), group["frames"]


_AGENT_KV = """
import sys, ray
from ray.experimental import internal_kv as kv
ray.init(address=sys.argv[1], log_to_driver=False)
key = "DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX:" + sys.argv[2]
if len(sys.argv) > 3:
    kv._internal_kv_put(key, sys.argv[3], namespace="dashboard")
else:
    print(kv._internal_kv_get(key, namespace="dashboard").decode())
    kv._internal_kv_del(key, namespace="dashboard")
"""


def _agent_entry(cluster, node_id, put_back=None) -> str:
    """Take a node's agent address out of the GCS, where the head's dashboard looks it up (a node
    whose agent is gone or not registered yet), returning it; or put it back."""
    out = subprocess.run([sys.executable, "-c", _AGENT_KV, cluster["address"], node_id,
                          *([put_back] if put_back else [])], capture_output=True, text=True, timeout=120,
                         env=ray_cli_env(), cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_a_node_whose_agent_the_head_does_not_know_fails_alone(run):
    """The head's agent unknown: rank 0 (on the head) cannot be dumped through the dashboard, and
    says why; rank 1, asked after it, still is, through its own node's agent."""
    cluster, where, head, other = run
    entry = _agent_entry(cluster, head)
    try:
        st = _rldbg("stack", "--role", "actor", "--via", "dashboard", "--json", "--address", cluster["dashboard"])
    finally:
        _agent_entry(cluster, head, put_back=entry)
    out = json.loads(st.stdout)
    assert [(e["label"], e["pid"]) for e in out["errors"]] == [("actor rank 0", where[0][0])], out
    assert "Failed to get agent address" in out["errors"][0]["error"], out
    assert [[(w["rank"], w["source"]) for w in g["workers"]] for g in out["groups"]] == [[(1, "dashboard")]], out


class _Attach:
    """`rldbg attach --role actor --rank N --break FILE:LINE` as a second terminal runs it; commands are
    typed once it has stopped."""

    def __init__(self, cluster, rank):
        self.buf = io.StringIO()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rldbg", "attach", "--role", "actor", "--rank", str(rank), "--address",
             cluster["dashboard"], "--ray-address", cluster["address"], "--break", f"{WORKERS}:{TICK}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
            env=ray_cli_env(PYTHONUNBUFFERED="1"))
        self.reader = threading.Thread(target=lambda: [self.buf.write(ln) for ln in self.proc.stdout], daemon=True)
        self.reader.start()

    def type(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def finish(self):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.reader.join(10)
        return rc, self.buf.getvalue()


def test_attach_and_breakpoints_on_both_nodes(run):
    cluster, where, head, other = run
    sessions = {rank: _Attach(cluster, rank) for rank in (1, 0)}
    try:
        for rank, s in sessions.items():
            until(lambda s=s: "stopped: breakpoint" in s.buf.getvalue() or s.proc.poll() is not None,
                  what=f"rank {rank} to stop", limit=90)
            assert "stopped: breakpoint" in s.buf.getvalue(), s.buf.getvalue()

        # Both paused ranks, each on its own node.
        bp = _rldbg("breakpoints", "--json", "--address", cluster["dashboard"])
        assert bp.returncode == 0, bp.stderr
        paused = {p["rank"]: p for p in json.loads(bp.stdout)}
        assert {r: (p["role"], p["pid"], p["node_id"]) for r, p in paused.items()} == {
            0: ("actor", where[0][0], head), 1: ("actor", where[1][0], other)}, paused
        table = _rldbg("breakpoints", "--address", cluster["dashboard"]).stdout
        assert "1/2" in table and other[:8] in table and head[:8] in table, table

        # Evaluated in the rank on the other node: its rank, its node.
        s1 = sessions[1]
        s1.type("p self.rank\np __import__('ray').get_runtime_context().get_node_id()\n")
        until(lambda: f"'{other}'" in s1.buf.getvalue(), what="rank 1's answers", limit=60)
        assert "(rldbg) 1\n" in s1.buf.getvalue(), s1.buf.getvalue()
        for s in sessions.values():
            s.type("clear\ndetach\n")
    finally:
        results = {rank: s.finish() for rank, s in sessions.items()}
    for rank, (rc, text) in results.items():
        assert rc == 0, text
        assert f"> {WORKERS}:{TICK} in tick" in text, text
    until(lambda: json.loads(_rldbg("breakpoints", "--json", "--address", cluster["dashboard"]).stdout) == [],
          what="no paused workers after detaching", limit=60)
