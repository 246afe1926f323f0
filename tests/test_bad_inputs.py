"""Bad inputs a new user gives first, each caught before any work in one line naming the value and
what is accepted: `rldbg attach --timeout`, `rldbg flame --out/--rank`, the driver's report timers
in the environment, `rldbg tb --logdir`, a dead cluster's address, and the identity a worker gives itself. No cluster: each must fail before
one is asked."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rldbg import instrument as ri
from rldbg.context import worker_label

RLDBG = str(Path(sys.executable).with_name("rldbg"))
NOWHERE = "http://127.0.0.1:9"   # nothing listens: a command that got as far as the cluster says "cannot reach"


def _one_line(args, rc=2, asked=False) -> str:
    out = subprocess.run([RLDBG, *args], capture_output=True, text=True, timeout=60)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == rc and "Traceback" not in out.stderr and len(lines) == 1, out.stderr
    assert ("cannot reach" in lines[0]) == asked, lines   # else it failed before the cluster was asked
    return lines[0]


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf"])
def test_attach_timeout_outside_its_range(value):
    # A 0 s connect left debugpy's listener unable to take the next attach: refused up front.
    line = _one_line(["attach", "127.0.0.1:5999", "--timeout", value])
    assert line.startswith("rldbg attach: bad --timeout ") and "expected 0 < seconds <= 86400" in line


def test_flame_output_folder_and_rank_checked_first(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    out = tmp_path / "afile" / "flames"
    line = _one_line(["flame", "--role", "actor", "--seconds", "1", "--out", str(out), "--address", NOWHERE])
    assert line == f"rldbg flame: cannot write to {out}: a file is where a folder would be"
    line = _one_line(["flame", "--role", "actor", "--rank", "-2", "--seconds", "1", "--address", NOWHERE])
    assert line == "rldbg flame: bad --rank -2: expected a rank >= 0"
    # Nothing recorded (no cluster there): the folder it made for the recording does not stay behind.
    made = tmp_path / "fresh"
    _one_line(["flame", "--role", "actor", "--seconds", "1", "--out", str(made), "--address", NOWHERE], rc=1, asked=True)
    assert not made.exists()


@pytest.mark.parametrize("cmd", [["dump"], ["export", "-o", "x.json"]])
def test_a_dead_cluster_address_is_said_at_once(cmd):
    """ray.init would retry the GCS for a minute, printing Ray's own warnings, before failing."""
    line = _one_line([*cmd, "--address", "127.0.0.1:9"], rc=1)
    assert line == f"rldbg {cmd[0]}: no Ray cluster at --address '127.0.0.1:9' (127.0.0.1:9: [Errno 111] Connection refused)"


@pytest.mark.parametrize("cmd", [["dump"], ["export", "-o", "x.json"]])
def test_an_address_of_no_known_form_is_one_line(cmd):
    line = _one_line([*cmd, "--address", "bogus"], rc=1)   # was ray.init's ValueError, with its traceback
    assert line == f"rldbg {cmd[0]}: no Ray cluster at --address 'bogus' (Invalid address format: bogus)"


# Hides any Ray cluster of this machine from Ray's "auto" lookup (raylets found in `ps`, /tmp/ray's
# last `ray start`), so `rldbg dump` runs as on a machine where none is running; the command is unchanged.
NO_LOCAL_CLUSTER = ("from ray._private import services as s\n"
                    "s._find_address_from_flag = lambda flag: set(); s.find_bootstrap_address = lambda temp_dir: None\n")


@pytest.mark.parametrize("cmd", [["dump"], ["export", "-o", "x.json", "--address", "auto"]])
def test_no_running_cluster_is_said_plainly(cmd, tmp_path):
    """It said "no Ray cluster at --address 'auto' (Could not find any running Ray instance...)" to a user
    who never passed --address."""
    (tmp_path / "sitecustomize.py").write_text(NO_LOCAL_CLUSTER)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    out = subprocess.run([RLDBG, *cmd], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert out.returncode == 1 and out.stderr.strip() == (
        f"rldbg {cmd[0]}: no running Ray cluster found on this machine; pass --address HOST:PORT (the GCS address "
        "`ray start` printed) or set RAY_ADDRESS"), out.stderr


def test_open_that_times_out_fails_saying_what_to_try(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    # port 0 and a self-hosted origin: no fixed port to collide on, no port warning
    out = subprocess.run([RLDBG, "open", str(trace), "--no-browser", "--port", "0", "--origin", "http://127.0.0.1:9",
                          "--timeout", "0.5"], capture_output=True, text=True, timeout=60)
    port = re.search(r"on 127\.0\.0\.1:(\d+) until", out.stdout)[1]
    assert out.returncode == 1 and out.stderr.strip() == (
        f"rldbg open: timed out: no browser fetched t.json within 0.5 s; open the link above in a browser that "
        f"reaches 127.0.0.1:{port} (from another machine: ssh -L {port}:127.0.0.1:{port}), or wait longer with "
        "--timeout S"), out.stderr


def test_dump_wait_nan():
    assert _one_line(["dump", "--wait", "nan"]) == "rldbg dump: --wait nan: seconds to wait, >= 0"


def test_tb_on_a_port_something_holds_says_so_before_starting(tmp_path):
    """It printed the URL of whatever answered there (another TensorBoard, another logdir), then exited 255."""
    import socket
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "events.out.tfevents.1").write_bytes(b"")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        line = _one_line(["tb", "--logdir", str(tmp_path), "--port", str(port)], rc=1)
    assert line == f"rldbg tb: port {port} on 127.0.0.1 is in use: pass --port 0 for a free one"


def test_tb_names_what_its_logdir_is(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert _one_line(["tb", "--logdir", str(afile)], rc=1).startswith(f"rldbg tb: '{afile}' is a file, not a directory;")
    assert _one_line(["tb", "--logdir", str(tmp_path / "nope")], rc=1).startswith(f"rldbg tb: '{tmp_path / 'nope'}' does not exist;")


@pytest.mark.parametrize("name", ["RLDBG_HANG_REPORT_S", "RLDBG_WAIT_REPORT_S"])
def test_a_bad_report_timer_is_said_once_and_never_stops_the_loop(name):
    """The driver reads these inside the user's training loop (the first slow call): a bad value
    keeps the default and says so, it never raises there."""
    code = ("from rldbg.debug import wait_report as w; "
            "print(w.REPORT_AFTER_S, w.HANG_AFTER_S); w.report('actor', 'update', 1, 0.0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, name: "abc"})
    assert out.returncode == 0 and out.stdout.split() == ["5.0", "60.0"], out.stderr
    assert out.stderr.strip().splitlines() == [f"rldbg: ignoring {name}='abc': expected seconds > 0; using "
                                               f"{5.0 if 'WAIT' in name else 60.0}"]


@pytest.mark.parametrize("rank, world", [(-1, 2), (2, 2), (5, 2), (0, 0), ("x", 2), (0.5, 2), (True, 2)])
def test_a_worker_identity_outside_its_world(rank, world):
    with pytest.raises(ValueError, match=rf"^set_worker_identity: bad rank {rank!r} of world {world!r}: expected"):
        ri.set_worker_identity("actor", rank, world)


def test_a_worker_identity_takes_any_integer_type():
    """numpy's integers (a rank read from an array, a launcher's env parsed by numpy) are integers too."""
    code = ("import numpy; from rldbg import instrument as ri; "
            "print(ri.set_worker_identity('actor', numpy.int64(1), numpy.int32(2)).label)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "actor[rank 1/2]\n", out.stderr


@pytest.mark.parametrize("role", ["my.role", "a:b", "two words", ""])
def test_a_role_the_tools_could_not_name(role):
    # "my.role" reads as ROLE.METHOD in a breakpoint spec, "a:b" as HOST:PORT to `rldbg attach`.
    with pytest.raises(ValueError, match="bad role"):
        ri.set_worker_identity(role, 0, 1)
    with pytest.raises(ValueError, match="bad role"):
        worker_label(role, 0, 1)
