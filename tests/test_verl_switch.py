"""The zero-code switch on an unmodified VeRL program (tests/verl_program.py), run as users run it:
RLDBG_VERL=1 RLDBG_TRACE=out.json.gz python verl_program.py, then `rldbg report` and, while a
breakpoint spec holds one rank, `rldbg breakpoints` and `rldbg attach` from other processes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_support import program_env, require_entry_point
from polling import until

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

TESTS = Path(__file__).parent
ROOT = TESTS.parent
PORT = int(os.environ.get("RLDBG_TEST_DASHBOARD_PORT", "8270")) + 1   # the program's own cluster
DASH = f"http://127.0.0.1:{PORT}"


def _rldbg(*args, env=None, input=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "rldbg", *args], capture_output=True, text=True,
                          env=env or program_env(), input=input, timeout=timeout)


def test_switch_loads_only_when_on():
    require_entry_point()
    probe = ("import sys, verl; print('rldbg.integrations.verl' in sys.modules, "
             "','.join(sorted(m for m in sys.modules if m.startswith('rldbg'))))")
    off = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=program_env(), timeout=120)
    on = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=program_env(RLDBG_VERL=1),
                        timeout=120)
    # off: nothing of rldbg runs, only the switch's name is read (the package's names load on first use)
    assert off.stdout.split() == ["False", "rldbg,rldbg.switches,rldbg_verl_plugin"], off.stderr
    assert on.stdout.split()[0] == "True", on.stderr


@pytest.mark.parametrize("env, says", [
    ({"RLDBG_VERL": "yes"}, "RLDBG_VERL='yes' is not accepted: use 1 (on) or 0 (off)"),
    ({"RLDBG_VERL": "1", "RLDBG_PROFILE": "dir=p;ranks=-1"},
     "RLDBG_PROFILE: bad ranks value '-1': expected non-negative rank numbers"),
    ({"RLDBG_VERL": "1", "RLDBG_TRACE": "out.txt"}, "RLDBG_TRACE='out.txt' is not accepted: use a file path"),
])
def test_bad_switch_values_fail_in_one_line(env, says):
    require_entry_point()
    r = subprocess.run([sys.executable, "-c", "import verl; print('ran')"], capture_output=True, text=True,
                       env=program_env(**env), timeout=120)
    assert r.returncode == 2 and "ran" not in r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("rldbg:")]
    assert len(lines) == 1 and says in lines[0], r.stderr


def test_unmodified_program_straggler_breakpoint_attach(tmp_path):
    """An unmodified VeRL program, end to end: rank 1 of `actor` sleeps in update_actor; the report names that
    role, rank and method (and nothing else); the spec pauses only rank 1; attach reaches it."""
    require_entry_point()
    trace = tmp_path / "out.json.gz"
    env = program_env(RLDBG_VERL=1, RLDBG_TRACE=trace, RLDBG_BREAKPOINTS="actor.update_actor@rank=1,step=3",
               SLOW_RANK=1, SLOW_METHOD="update_actor", SLOW_S=0.3, STEPS=3, DASHBOARD_PORT=PORT,
               RLDBG_HOME=tmp_path / "home")
    prog = subprocess.Popen([sys.executable, str(TESTS / "verl_program.py")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    try:
        def paused():
            r = _rldbg("breakpoints", "--address", DASH, "--json", env=env, timeout=30)
            return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None

        listed = until(paused, "actor rank 1 paused at update_actor", limit=240, interval=1.0)
        assert [(w["role"], w["rank"], w["world"], w["method"]) for w in listed] == [("actor", 1, 2, "update_actor")]
        r = _rldbg("attach", "actor:1", "--address", DASH, env=env, input="bt\ndetach\n", timeout=120)
        assert r.returncode == 0, r.stderr
        assert "attached to actor rank 1 (update_actor)" in r.stdout
        assert "verl_workers.py" in r.stdout or "update_actor" in r.stdout.split("attached", 1)[1]
        out, _ = prog.communicate(timeout=240)
    finally:
        if prog.poll() is None:
            prog.kill()
            prog.communicate()
    assert prog.returncode == 0, out[-3000:]
    assert "step 2:" in out and f"rldbg: trace written to {trace}" in out

    r = _rldbg("report", str(trace))
    assert r.returncode == 0, r.stderr
    flagged = [ln.strip() for ln in r.stdout.splitlines() if "STRAGGLER" in ln]
    assert len(flagged) == 1 and flagged[0].startswith("STRAGGLER actor rank 1: update_actor "), r.stdout
    assert "time per role:" in r.stdout and "critic" in r.stdout


def test_profiled_calls_are_merged_into_the_trace(tmp_path):
    """RLDBG_PROFILE under VeRL: the selected call's torch.profiler file, and its operators in the
    Perfetto trace inside that rank's call, as with the reference trainer."""
    require_entry_point()
    trace, prof = tmp_path / "out.json", tmp_path / "prof"
    env = program_env(RLDBG_VERL=1, RLDBG_TRACE=trace, STEPS=3, DASHBOARD_PORT=PORT, RLDBG_HOME=tmp_path / "home",
                      RLDBG_PROFILE=f"dir={prof};roles=actor;ranks=0;steps=2;methods=update_actor")
    prog = subprocess.run([sys.executable, str(TESTS / "verl_program.py")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert prog.returncode == 0, (prog.stdout + prog.stderr)[-3000:]
    assert [p.name for p in prof.rglob("*.pt.trace.json")] == ["actor_rank0.000002.pt.trace.json"]
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    calls = [e for e in events if e.get("cat") == "call" and e.get("name") == "update_actor"
             and (e.get("args") or {}).get("rank") == 0 and (e.get("args") or {}).get("step") == 2]
    assert len(calls) == 1, [e for e in events if e.get("name") == "update_actor"][:4]
    call = calls[0]
    ops = [e for e in events if str(e.get("name", "")).startswith("aten::") and e.get("ph") == "X"]
    assert ops, "no operator of the profiled call in the trace"
    inside = [e for e in ops if (e["pid"], e["tid"]) == (call["pid"], call["tid"])
              and float(call["ts"]) <= float(e["ts"]) <= float(call["ts"]) + float(call["dur"])]
    assert len(inside) == len(ops), f"{len(ops) - len(inside)} of {len(ops)} operators outside actor rank 0's call"
