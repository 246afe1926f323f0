"""The non-finite sentinel on VeRL as main_ppo runs it (the controller a TaskRunner actor,
tests/verl_nonfinite_program.py, no rldbg in it): a NaN in one rank's DataProto output is named
by that rank, and a NaN that only a custom collect makes is named by the controller's check of the
merged result; every other output stays silent. By default the run goes on (warn);
RLDBG_ON_NONFINITE=stop stops it at the first one, naming it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from verl_support import program_env, require_entry_point

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

TESTS = Path(__file__).parent
PORT = int(os.environ.get("RLDBG_TEST_DASHBOARD_PORT", "8270")) + 6   # the program's own cluster
WAIT_S = 600   # liveness bound (this machine may be busy), not a timing assertion


def _run(tmp_path: Path, **env) -> subprocess.CompletedProcess:
    require_entry_point()
    return subprocess.run([sys.executable, str(TESTS / "verl_nonfinite_program.py")], capture_output=True,
                          text=True, timeout=WAIT_S, cwd=tmp_path,
                          env=program_env(RLDBG_VERL=1, DASHBOARD_PORT=PORT, RLDBG_HOME=tmp_path / "home", **env))


def test_a_ranks_nan_and_a_merged_nan_are_named_and_the_run_goes_on(tmp_path):
    trace = tmp_path / "trace.json.gz"
    run = _run(tmp_path, RLDBG_TRACE=trace)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    warned = sorted(x.split("non-finite output: ", 1)[1].split(":")[0] for x in out.splitlines()
                    if "rldbg warning: non-finite output: " in x)
    assert warned == ["actor (merged) total at step 3", "actor rank 1 score at step 2"], out[-3000:]
    r = subprocess.run([sys.executable, "-m", "rldbg", "report", "--json", str(trace)], capture_output=True,
                       text=True, env=program_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    found = [(a["role"], a["rank"], a["method"], a["step"], a["key"]) for a in json.loads(r.stdout)["nonfinite"]]
    assert found == [("actor", 1, "score", 2, "scores"), ("actor", None, "total", 3, "ratio")], found


def test_stop_mode_stops_the_run_at_the_first_naming_it(tmp_path):
    run = _run(tmp_path, RLDBG_ON_NONFINITE="stop")
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "controller pid" not in run.stdout, out[-3000:]
    assert "non-finite output: actor rank 1 score at step 2: 'scores' has 1 of 4 NaN/Inf element(s)" in out, \
        out[-3000:]
