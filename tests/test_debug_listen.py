"""Debug mode end to end: workers of a chosen role listen for a debugger from start-up,
are found through Ray's internal KV, and an editor-style DAP client sets a breakpoint by
file and line in the actor's update code on one rank, while the training step runs."""
import ast
import io
import json
import os
import sys
import subprocess
import threading
from pathlib import Path

import pytest
from polling import until
import ray
from conftest import DASHBOARD_URL

from rldbg.dashboard import Dashboard
from rldbg.debug import listen
from rldbg.debug.dap import DAPClient
from rldbg.debug.registry import ListeningWorker, listening_workers
from rldbg.debug.specs import parse_ranks

import reference_trainer.workers.hybrid as hybrid
from reference_trainer.config import load_config
from reference_trainer.data import PromptSource
from reference_trainer.roles import build_role_groups
from reference_trainer.single_controller import shutdown_groups
from reference_trainer.tasks import build_tokenizer, get_task
from reference_trainer.trainer import train_step, worker_env

HYBRID = str(Path(hybrid.__file__).resolve())
REL_HYBRID = os.path.relpath(HYBRID)
# A line of update_actor itself (once per update per rank; loss_fn runs per micro-batch).
LINE = next(no for no, text in enumerate(Path(HYBRID).read_text().splitlines(), 1)
            if text.strip() == "temperature = self.config.rollout.temperature")
# update_actor's `def` line (debugpy never stops there when the method is called) and the line its
# body starts at, both read from the source as it is today.
_UPDATE = next(n for n in ast.walk(ast.parse(Path(HYBRID).read_text()))
               if isinstance(n, ast.FunctionDef) and n.name == "update_actor")
DEF_LINE, FIRST_LINE = _UPDATE.lineno, _UPDATE.body[0].lineno


def _until(fn, what, limit=90.0):
    return until(fn, what, limit)


def _cli_env() -> dict:
    """The environment of a user's second terminal: Ray set RAY_AUTH_MODE=token in this
    (pytest) process when it created the cluster; a fresh shell has no such variable."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    return {**env, "PYTHONUNBUFFERED": "1"}


def _cli(*argv, stdin: str | None = None, buf: io.StringIO | None = None) -> tuple[int, str]:
    """Run `python -m rldbg ARGV` as a separate process, as a user does from another terminal;
    stdout streams into buf (when given) so a caller can poll it while the command runs."""
    buf = buf or io.StringIO()
    proc = subprocess.Popen([sys.executable, "-m", "rldbg", *argv], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_cli_env())
    if stdin is not None:
        proc.stdin.write(stdin)
    proc.stdin.close()
    for line in proc.stdout:
        buf.write(line)
    return proc.wait(timeout=300), buf.getvalue()


# --- no cluster needed ---------------------------------------------------------------------

def test_choosing_roles_and_ranks():
    env = {"RLDBG_LISTEN_ROLES": "actor, critic", "RLDBG_LISTEN_RANKS": "1"}
    assert listen.chosen("actor", 1, env) and listen.chosen("actor+reward", 1, env)
    assert not listen.chosen("actor", 0, env) and not listen.chosen("reward", 1, env)
    assert listen.chosen(["reward"], 3, {"RLDBG_LISTEN_ROLES": "*"})
    assert not listen.chosen("actor", 0, {})
    assert parse_ranks("0-2|5") == {0, 1, 2, 5} and parse_ranks("*") is None
    with pytest.raises(ValueError, match=r"bad RLDBG_LISTEN_RANKS 'x1': 'x1' is not a rank; accepted"):
        listen.check_env({"RLDBG_LISTEN_RANKS": "x1"})


def test_local_paths_map_to_the_workers_root(tmp_path):
    w = ListeningWorker("actor", 1, 2, "127.0.0.1", 1, 1, cwd="/srv/job", purelib="/opt/py/site-packages")
    assert w.to_remote(str(tmp_path / "pkg" / "m.py"), str(tmp_path)) == "/srv/job/pkg/m.py"
    import sysconfig
    lib = sysconfig.get_paths()["purelib"]
    assert w.to_remote(os.path.join(lib, "torch", "nn.py"), str(tmp_path)) == "/opt/py/site-packages/torch/nn.py"
    assert w.to_remote("/elsewhere/x.py", str(tmp_path)) == "/elsewhere/x.py"


# --- a plain Ray actor: listen, registry, stale entries ------------------------------------

@ray.remote
class Lone:
    def __init__(self):
        from rldbg import instrument
        from rldbg.debug.listen import maybe_listen
        # A colocated worker declares all its roles; rldbg reads no actor name.
        instrument.set_worker_identity("critic", 0, 1, roles=("critic", "reward"))
        self.entry = maybe_listen("critic", 0, 1)   # the listener set_worker_identity opened

    def get(self):
        return self.entry


def test_listener_registers_and_disappears_with_its_actor(ray_cluster, tmp_path):
    env = {"env_vars": {"RLDBG_LISTEN_ROLES": "reward"}}
    lone = Lone.options(name="t-lone:critic+reward:rank0", runtime_env=env).remote()
    entry = ray.get(lone.get.remote(), timeout=120)
    assert entry and entry["role"] == "critic+reward" and entry["host"] == "127.0.0.1"
    found = [w for w in listening_workers(role="reward") if w.pid == entry["pid"]]
    assert [(w.port, w.rank, w.roles) for w in found] == [(entry["port"], 0, ["critic", "reward"])]
    # The dashboard shows the listener as the worker's debugger_port.
    dash = Dashboard(ray_cluster)
    rows = dash.workers(filters=[("pid", "=", entry["pid"])])
    assert rows and rows[0]["debugger_port"] == entry["port"]
    launch = tmp_path / "launch.json"
    rc, out = _cli("vscode", "--attach-role", "reward", "--address", ray_cluster, "--output", str(launch))
    assert rc == 0, out
    ray.kill(lone)
    _until(lambda: not [w for w in listening_workers(role="reward") if w.pid == entry["pid"]], "stale entry gone")
    rc, _ = _cli("vscode", "--attach-role", "reward", "--address", ray_cluster, "--output", str(launch))
    assert rc == 1  # nothing listens any more; the file keeps the last good entries


# --- the reference trainer in debug mode ---------------------------------------------------

@pytest.fixture(scope="module")
def trainer(ray_cluster, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("listen_run")
    cfg = load_config("demo", overrides=[
        f"trainer.run_dir={run_dir}", "trace.enabled=false", "sft.steps=0", "trainer.progress=false",
        "data.prompts_per_step=4", "data.group_size=4", "actor.mini_batch_size=16",
        "critic.mini_batch_size=16", "actor.micro_batch_size=8", "critic.micro_batch_size=8",
        "debug.listen_roles=[actor]", "debug.pg_timeout_s=300"])
    groups = build_role_groups(cfg, worker_env(cfg))
    try:
        for name in ("actor", "reward", "critic"):
            if groups.get(name):
                groups[name].init_model()
        src = PromptSource(get_task(cfg.data.task), build_tokenizer(), cfg.data.prompts_per_step,
                           cfg.data.group_size, 0)
        yield cfg, groups, src
    finally:
        shutdown_groups(groups.values())


def _step_in_background(trainer, step):
    cfg, groups, src = trainer
    out: dict = {}

    def go():
        try:
            out["record"] = train_step(step, src.batch(step), groups["actor"], groups.get("critic"),
                                       groups["reward"], cfg)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def _finish(t, out, groups):
    t.join(300)
    assert not t.is_alive(), "train_step did not finish"
    assert "error" not in out, out.get("error")
    record = out["record"]
    assert "actor/pg_loss" in record and "reward/mean" in record
    sums = groups["actor"].weights_checksum()
    assert len(sums) == 2 and sums[0] == pytest.approx(sums[1], rel=0, abs=1e-9)
    return record


def test_vscode_launch_names_every_listening_actor(trainer, tmp_path):
    workers = listening_workers(role="actor")
    assert sorted(w.rank for w in workers) == [0, 1]
    launch = tmp_path / ".vscode" / "launch.json"
    launch.parent.mkdir()
    launch.write_text('{ // mine\n "version": "0.2.0", "configurations": [{"name": "Mine", "type": "debugpy",'
                      ' "request": "launch", "program": "x.py"},],\n "compounds": [{"name": "My pair",'
                      ' "configurations": ["Mine"]}]}')
    rc, out = _cli("vscode", "--attach-role", "actor", "--address", DASHBOARD_URL, "--output", str(launch))
    assert rc == 0, out
    data = json.loads(launch.read_text())
    by_name = {c["name"]: c for c in data["configurations"]}
    assert "Mine" in by_name and [c["name"] for c in data["compounds"]][0] == "My pair"
    for w in workers:
        c = by_name[f"rldbg: actor rank {w.rank}"]
        assert c["connect"] == {"host": w.host, "port": w.port}  # ports match the registry
        assert c["type"] == "debugpy" and c["request"] == "attach" and c["justMyCode"] is False
        assert {"localRoot": "${workspaceFolder}", "remoteRoot": w.cwd} in c["pathMappings"]
    assert data["compounds"][1] == {"name": "rldbg: actor (all listening ranks)", "stopAll": False,
                                    "configurations": ["rldbg: actor rank 0", "rldbg: actor rank 1"]}
    rc, _ = _cli("vscode", "--attach-role", "actor", "--ranks", "1", "--address", DASHBOARD_URL, "--output", str(launch))
    names = [c["name"] for c in json.loads(launch.read_text())["configurations"]]
    assert rc == 0 and names == ["Mine", "rldbg: actor rank 1"]


def test_breakpoint_on_rank1_only_while_training(trainer, ray_cluster):
    cfg, groups, src = trainer
    w0, w1 = sorted(listening_workers(role="actor"), key=lambda w: w.rank)
    rank1 = DAPClient(w1.host, w1.port, timeout=30)
    rank1.attach(breakpoints={HYBRID: [LINE]})
    # Rank 0 gets the same breakpoint guarded by the rank the worker exposes: it never stops.
    rank0 = DAPClient(w0.host, w0.port, timeout=30)
    rank0.attach(breakpoints={HYBRID: [{"line": LINE, "condition": "RLDBG_RANK == 1"}]})

    t, out = _step_in_background(trainer, 0)
    stop = rank1.wait_stopped(240)
    assert stop["reason"] == "breakpoint"
    top = rank1.stack_trace()[0]
    assert (top["source"]["path"], top["line"], top["name"]) == (HYBRID, LINE, "update_actor")
    rows = rank1.evaluate('batch.tensors["responses"].shape[0]', top["id"])["result"]
    assert rows == "8"  # 4 prompts x 4 samples, half on rank 1
    assert rank1.evaluate("RLDBG_RANK", top["id"])["result"] == "1"
    hits = rank1.evaluate("__import__('rldbg.debug.breakpoints').debug.breakpoints.paused()", top["id"])["result"]
    assert "dap breakpoint" in hits and f"'line': {LINE}" in hits

    # Listed as paused like any breakpoint: the worker's num_paused_threads went up.
    listed = _until(lambda: [p for p in json.loads(_cli("breakpoints", "--address", ray_cluster, "--json")[1])
                             if p["rank"] is not None], "listed")
    assert [(p["role"], p["rank"], p["pid"]) for p in listed] == [("actor+reward", 1, w1.pid)]

    rank1.set_breakpoints(HYBRID, [])
    rank1.resume()
    _finish(t, out, groups)
    assert rank0.stopped_thread is None  # rank 0 never stopped
    rank1.disconnect()
    rank0.disconnect()
    _until(lambda: json.loads(_cli("breakpoints", "--address", ray_cluster, "--json")[1]) == [], "no pauses")


def test_rldbg_attach_break_waits_for_the_hit(trainer):
    cfg, groups, src = trainer
    script = 'p batch.tensors["responses"].shape[0]\np RLDBG_ROLE\nclear\ndetach\n'
    buf, result = io.StringIO(), {}
    cli = threading.Thread(target=lambda: result.update(rc=_cli(
        "attach", "--role", "actor", "--rank", "1", "--address", DASHBOARD_URL, "--break", f"{REL_HYBRID}:{LINE}", stdin=script, buf=buf)[0]))
    cli.start()
    _until(lambda: "waiting for the breakpoint" in buf.getvalue(), "attach ready", 60)
    t, out = _step_in_background(trainer, 1)  # started only once the breakpoint is set
    cli.join(300)
    text = buf.getvalue()
    assert result.get("rc") == 0, text
    assert f"breakpoint {HYBRID}:{LINE}: set" in text
    assert "stopped: breakpoint" in text and f"> {HYBRID}:{LINE} in update_actor" in text
    assert "(rldbg) 8\n" in text and "(rldbg) 'actor+reward'\n" in text and "breakpoints cleared" in text
    _finish(t, out, groups)


def test_a_breakpoint_on_the_def_line_stops_at_the_first_line_and_says_so(trainer):
    """`rldbg attach --break hybrid.py:<the def of update_actor>` must not wait forever: a def line never
    runs when the method is called, so the breakpoint moves to the body's first line and says so."""
    assert Path(HYBRID).read_text().splitlines()[DEF_LINE - 1].strip().startswith("def update_actor(")
    cfg, groups, src = trainer
    script = "p RLDBG_RANK\nclear\ndetach\n"
    buf, result = io.StringIO(), {}
    cli = threading.Thread(target=lambda: result.update(rc=_cli(
        "attach", "--role", "actor", "--rank", "1", "--address", DASHBOARD_URL, "--timeout", "240",
        "--break", f"{REL_HYBRID}:{DEF_LINE}", stdin=script, buf=buf)[0]))
    cli.start()
    _until(lambda: "waiting for the breakpoint" in buf.getvalue(), "attach ready", 60)
    t, out = _step_in_background(trainer, 2)
    cli.join(300)
    text = buf.getvalue()
    assert result.get("rc") == 0, text
    said = (f"{REL_HYBRID}:{DEF_LINE} is the `def` of ActorRolloutRefWorker.update_actor: "
            f"breaking at {FIRST_LINE}, its first line")
    assert said in text.splitlines(), text
    assert f"breakpoint {HYBRID}:{FIRST_LINE}: set" in text
    assert "stopped: breakpoint" in text and f"> {HYBRID}:{FIRST_LINE} in update_actor" in text, text
    assert "(rldbg) 1\n" in text
    _finish(t, out, groups)


def test_an_editors_breakpoint_on_the_def_line_moves_to_the_first_line(trainer):
    """What VS Code sends on a gutter click, straight to the worker's debugger: the worker answers
    with the line it will stop at (the editor moves the marker there) and stops there."""
    cfg, groups, src = trainer
    w1 = next(w for w in listening_workers(role="actor") if w.rank == 1)
    client = DAPClient(w1.host, w1.port, timeout=30)
    client.attach()
    answer = client.set_breakpoints(HYBRID, [DEF_LINE])
    assert [(a["line"], a["verified"]) for a in answer] == [(FIRST_LINE, True)], answer
    t, out = _step_in_background(trainer, 3)
    try:
        client.wait_stopped(240)
        top = client.stack_trace()[0]
        assert (top["line"], top["name"]) == (FIRST_LINE, "update_actor")
    finally:
        client.set_breakpoints(HYBRID, [])
        if client.stopped_thread is not None:
            client.resume()
        client.disconnect()
    _finish(t, out, groups)
