"""`rldbg stack` names the hung rank and groups the rest; `rldbg flame` records a busy rank;
py-spy without ptrace permission gives one clear line. Real Ray actors, real py-spy."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from rldbg import cli
from rldbg.profilers import pyspy

WORLD = 3


@pytest.fixture(scope="module")
def hung_ranks(ray_cluster):
    """3 ranks of role actor in run stk-<id>; rank 1 blocks in wait_for_peer, 0 and 2 are idle."""
    import ray
    from prof_workers import HangRank

    run = f"stk-{uuid.uuid4().hex[:6]}"
    actors = [ray.remote(HangRank).options(name=f"{run}:actor:rank{r}", num_cpus=0).remote("actor", r, WORLD)
              for r in range(WORLD)]
    ray.get([a.pid.remote() for a in actors])
    refs = [a.step.remote(1, 120) for a in actors]
    ray.get([refs[0], refs[2]])
    try:
        yield ray_cluster, run, actors
    finally:
        for a in actors:
            ray.kill(a)


def _stack(capsys, *argv) -> str:
    rc = cli.main(["stack", *argv])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


def test_stack_names_the_hung_rank(hung_ranks, capsys):
    url, run, _ = hung_ranks
    # Rank 1 may not have entered its call yet: poll until it shows (no timing assertion).
    for _ in range(30):
        out = _stack(capsys, "--address", url, "--role", "actor", "--run", run)
        if "wait_for_peer" in out:
            break
        time.sleep(1)
    lines = out.splitlines()
    hung = [ln for ln in lines if ln.startswith("actor rank 1 in ")]
    assert hung and "wait_for_peer (prof_workers.py:" in hung[0], out
    grouped = [ln for ln in lines if ln.startswith("2 ranks (actor rank 0, 2) ")]
    assert grouped and "idle between calls" in grouped[0], out
    assert lines.index(hung[0]) < lines.index(grouped[0])   # the odd one out first
    assert "    Queue.get (queue.py:" in out

    data = json.loads(_stack(capsys, "--address", url, "--role", "actor", "--run", run, "--json"))
    by_count = {g["count"]: g for g in data["groups"]}
    assert sorted(by_count) == [1, 2] and not data["errors"]
    assert [w["rank"] for w in by_count[1]["workers"]] == [1]
    assert by_count[1]["where"].startswith("wait_for_peer")
    assert {w["rank"] for w in by_count[2]["workers"]} == {0, 2}

    one = _stack(capsys, "--address", url, "--role", "actor", "--rank", "1", "--run", run, "--via", "local")
    assert one.startswith("actor rank 1 in wait_for_peer"), one


def test_stack_bad_inputs(hung_ranks, capsys):
    url, run, _ = hung_ranks
    assert cli.main(["stack", "--address", url, "--role", "nosuchrole", "--run", run]) == 1
    err = capsys.readouterr().err
    assert "no alive worker matches role 'nosuchrole'" in err and "roles seen:" in err
    assert cli.main(["stack", "--address", url, "--rank", "-1"]) == 2
    assert "bad --rank -1" in capsys.readouterr().err


def test_flame_records_a_busy_rank(hung_ranks, tmp_path, capsys):
    import ray

    url, run, actors = hung_ranks
    busy = actors[2].spin.remote(6)   # the idle actor starts it at once; the recording overlaps it
    rc = cli.main(["flame", "--address", url, "--role", "actor", "--rank", "2", "--run", run,
                   "--seconds", "3", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    ray.get(busy)
    assert rc == 0, out
    assert f"actor rank 2: {tmp_path}/actor_rank2.speedscope.json  {tmp_path}/actor_rank2.svg" in out
    ss = json.loads((tmp_path / "actor_rank2.speedscope.json").read_text())
    names = {f["name"] for f in ss["shared"]["frames"]}
    assert "busy_loop" in names and sum(ss["profiles"][0]["weights"]) > 0
    svg = (tmp_path / "actor_rank2.svg").read_text()
    assert svg.startswith("<svg") and "busy_loop" in svg


def test_flame_says_when_the_worker_exits_mid_recording(ray_cluster, tmp_path, capsys):
    import ray
    from prof_workers import HangRank

    run = f"cut-{uuid.uuid4().hex[:6]}"
    actor = ray.remote(HangRank).options(name=f"{run}:actor:rank0", num_cpus=0, max_restarts=0).remote("actor", 0, 1)
    ray.get(actor.pid.remote())
    actor.spin_then_exit.remote(8)   # time for the dashboard lookup and py-spy's attach on a loaded machine
    rc = cli.main(["flame", "--address", ray_cluster, "--role", "actor", "--run", run, "--seconds", "30",
                   "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    line = next(ln for ln in out.splitlines() if ln.startswith("actor rank 0:"))   # Ray's worker-death notice aside
    assert line.startswith(f"actor rank 0: {tmp_path}/actor_rank0.speedscope.json  {tmp_path}/actor_rank0.svg "
                           "(cut short: "), out
    assert line.endswith(" s of 30, the worker exited or stopped answering)"), out


def test_ptrace_denied_is_one_clear_line(tmp_path, monkeypatch):
    """py-spy run as 'nobody' against our (root) process really gets EPERM."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run py-spy as an unprivileged user")
    real = tmp_path / "py-spy-real"
    from rldbg import tools
    shutil.copy(tools.find("py-spy"), real)
    os.chmod(tmp_path, 0o755)
    wrapper = tmp_path / "bin" / "py-spy"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec setpriv --reuid 65534 --regid 65534 --clear-groups {real} "$@"\n')
    wrapper.chmod(0o755)
    # rldbg runs the py-spy beside the interpreter first: point it at the unprivileged wrapper.
    monkeypatch.setattr(pyspy.tools, "find", lambda name: str(wrapper))
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(pyspy.PySpyError) as info:
            pyspy.dump(victim.pid)
    finally:
        victim.kill()
        victim.wait()
    msg = str(info.value)
    assert f"pid {victim.pid}" in msg and "ptrace not permitted" in msg and "\n" not in msg


def test_an_address_of_this_machine_is_local_whatever_the_host_name_resolves_to():
    """Ray names a node by its primary address (here 192.0.2.x), which the host name need not
    resolve to (only 127.0.0.1 on some machines): each interface's address is this machine's."""
    import subprocess

    from rldbg.profilers.targets import is_local
    mine = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    assert mine and all(is_local(ip) for ip in mine), mine
    assert not is_local("198.51.100.7")   # TEST-NET-2: no machine's
