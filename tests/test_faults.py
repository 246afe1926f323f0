"""Fault injection, for real: dropped connections to the collector, a stranger at its port, a
killed rank, floods, two runs at once, files damaged byte by byte and hostile input. Every case asserts that nothing is lost without being
reported: events shipped + events counted lost covers everything emitted, and the trace, the
driver's final line and the CLI say what went missing."""
from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import pytest  # noqa: E402
import ray  # noqa: E402

import rldbg  # noqa: E402
from rldbg import instrument as ri  # noqa: E402
from rldbg.store import TraceFileError  # noqa: E402
from rldbg.trace import session  # noqa: E402
from rldbg.trace.spill import SpillError, SpillWriter, read_meta  # noqa: E402
from trace_of import iter_batches, load_trace  # noqa: E402

from polling import until  # noqa: E402

RLDBG = str(Path(sys.executable).with_name("rldbg"))
ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, timeout=120, **kw):
    return subprocess.run([RLDBG, *args], capture_output=True, text=True, timeout=timeout, **kw)


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@ray.remote(num_cpus=0)
class Emitter:
    def __init__(self, role, rank):
        ri.set_worker_identity(role, rank, 2)

    def emit(self, n, name="e"):
        for i in range(n):
            rldbg.instant(name, i=i)
        return n

    def pid(self):
        return os.getpid()


def _spilled(spill, pid, name="e") -> int:
    return sum(1 for b in iter_batches(spill) if b.get("pid") == pid for ev in b["events"] if ev[2] == name)


def _dead(actor) -> bool:
    try:
        ray.get(actor.pid.remote(), timeout=5)
    except ray.exceptions.RayActorError:
        return True
    return False


def _lost(losses, pid) -> int:
    key = f"{socket.gethostname()}:{pid}"
    return (losses["processes"].get(key) or {}).get("lost", 0)


# ---- floods -----------------------------------------------------------------------------------

def test_a_burst_up_to_the_buffer_is_shipped_and_an_overflow_is_counted_exactly(ray_cluster, tmp_path):
    spill = rldbg.trace.start(str(tmp_path / "burst.json"), memory_hz=0, buffer_events=1 << 20, flush_interval=0.1)
    try:
        big, small = Emitter.remote("actor", 0), Emitter.remote("actor", 1)
        pids = ray.get([big.pid.remote(), small.pid.remote()])
        ray.get(big.emit.remote(200_000))
    finally:
        rldbg.trace.stop(export=False)
    losses = rldbg.trace.last_losses()
    assert _spilled(spill, pids[0]) == 200_000 and _lost(losses, pids[0]) == 0
    assert losses["total"] == 0 and not losses["silent"], losses
    ray.kill(big), ray.kill(small)

    # A buffer far smaller than the burst: what did not fit is counted, to the event.
    spill = rldbg.trace.start(str(tmp_path / "over.json"), memory_hz=0, buffer_events=5_000, flush_interval=0.3)
    try:
        w = Emitter.remote("actor", 0)
        pid = ray.get(w.pid.remote())
        ray.get(w.emit.remote(60_000))
    finally:
        out = rldbg.trace.stop()
    losses = rldbg.trace.last_losses()
    shipped, lost = _spilled(spill, pid), _lost(losses, pid)
    assert lost > 0 and shipped + lost == 60_000, (shipped, lost)
    assert losses["by_cause"] == {"buffer full": lost}
    line = rldbg.trace.loss_line(out)
    assert line.startswith(f"trace written with {lost} events lost (") and "buffer full" in line
    events, notes = load_trace(out)
    assert notes == []
    marks = [e for e in events if e.get("name") == "events lost"]
    assert [m["args"]["lost"] for m in marks] == [lost] and marks[0]["args"]["role"] == "actor"
    assert any(e.get("name") == "rldbg trace losses" and e["args"]["total_lost"] == lost for e in events)
    report = _cli("report", out)
    assert f"the trace records {lost} events lost" in report.stdout.splitlines()[0], report.stdout
    ray.kill(w)


# ---- dropped connections, a stranger at the collector's port, a killed rank --------------------

def test_dropped_connections_reconnect_and_every_event_is_shipped_or_counted(ray_cluster, tmp_path):
    """The driver hangs up on every worker (what a network failure does), five times while the
    worker keeps recording: the worker connects again, ships what it buffered meanwhile, and each
    event is in the trace or counted lost (a batch on the wire when the connection broke, whose
    fate is unknown). A hang-up found before a batch goes out loses nothing."""
    spill = rldbg.trace.start(str(tmp_path / "dc.json"), memory_hz=0, flush_interval=0.2)
    try:
        w = Emitter.remote("actor", 1)
        pid = ray.get(w.pid.remote())
        emitted = ray.get(w.emit.remote(5_000))
        until(lambda: _spilled(spill, pid) == 5_000, "the first events on disk", limit=30)
        server, drops = session._session["server"], 0
        for _ in range(5):
            until(lambda: len(server._conns) >= 1, "the worker connected again", limit=30)
            drops += server.drop_connections()
            emitted += ray.get(w.emit.remote(500))
            time.sleep(0.3)
        emitted += ray.get(w.emit.remote(1_000))
    finally:
        out = rldbg.trace.stop()
    assert drops >= 5, drops
    losses = rldbg.trace.last_losses()
    shipped, lost = _spilled(spill, pid), _lost(losses, pid)
    assert shipped <= emitted and shipped + lost >= emitted, (shipped, lost, emitted)
    assert set(losses["by_cause"]) <= {"on the wire when the connection to the collector broke"}, losses
    assert losses["silent"] == [], losses
    events, _ = load_trace(out)
    assert any(e.get("name") == "e" and e["args"]["i"] == 999 and e["args"]["rank"] == 1 for e in events), \
        "events after the last reconnect reach the trace"
    ray.kill(w)


def test_a_stranger_at_the_collectors_port_is_turned_away_and_the_run_goes_on(ray_cluster, tmp_path):
    """Something that finds the collector's port without the session's token, or talks nonsense
    to it, gets a refusal or a hang-up; the collector keeps serving the job's processes."""
    import socket as so

    from rldbg.trace import address, wire
    spill = rldbg.trace.start(str(tmp_path / "st.json"), memory_hz=0, flush_interval=0.2)
    try:
        entry = address.find(ray.get_runtime_context().get_job_id())
        assert entry["spill_dir"] == spill and len(entry["token"]) == 64
        host, port = entry["address"].rsplit(":", 1)
        assert host == "127.0.0.1"   # Ray runs on loopback here: so does the collector
        with pytest.raises(wire.Refused, match="wrong token"):
            wire.Connection(entry["address"], "0" * 64)
        with so.create_connection((host, int(port)), timeout=5) as raw:   # not our protocol at all
            raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                said = raw.recv(100)
            except ConnectionResetError:   # hung up on with our bytes unread
                said = b""
            assert said == b"", said   # nothing said to it
        good = address.connect(entry)
        with pytest.raises(wire.Refused, match="unknown request"):
            good.call("close")   # only the driver closes its trace
        assert good.call("stats")["spill_dir"] == spill
        good.close()
        w = Emitter.remote("actor", 0)
        pid = ray.get(w.pid.remote())
        ray.get(w.emit.remote(100))
    finally:
        rldbg.trace.stop()
    assert _spilled(spill, pid) == 100
    assert address.find(ray.get_runtime_context().get_job_id()) is None   # withdrawn at stop()
    ray.kill(w)


def test_a_collector_address_this_machine_does_not_have_is_one_line_and_nothing_starts(ray_cluster, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.setenv("RLDBG_TRACE_HOST", "192.0.2.1")   # TEST-NET-1: never an address of this machine
    with pytest.raises(RuntimeError, match=r"cannot listen on '192\.0\.2\.1' .*set RLDBG_TRACE_HOST"):
        rldbg.trace.start(str(tmp_path / "h.json"))
    assert session._session.get("collector") is None
    monkeypatch.delenv("RLDBG_TRACE_HOST")
    rldbg.trace.start(str(tmp_path / "h.json"))   # the same path, now on the default address
    assert rldbg.trace.stop(export=False) == str(tmp_path / "h.spill")


def test_export_by_address_finds_the_running_jobs_spill_from_another_shell(ray_cluster, tmp_path):
    """`rldbg export --address` from a second process while the job runs: the collector's entry in
    the cluster's KV store names the spill, which is exported as far as it has been written; a
    --collector that is not a traced job is one line naming it and what is traced."""
    from conftest import ray_cli_env
    spill = rldbg.trace.start(str(tmp_path / "ex.json"), memory_hz=0, flush_interval=0.2)
    try:
        w = Emitter.remote("actor", 0)
        pid = ray.get(w.pid.remote())
        ray.get(w.emit.remote(300))
        until(lambda: _spilled(spill, pid) == 300, "the events on disk", limit=30)
        gcs = ray.get_runtime_context().gcs_address
        name = f"rldbg-collector-{ray.get_runtime_context().get_job_id()}"
        out = str(tmp_path / "live.json")
        got = _cli("export", "--address", gcs, "-o", out, env=ray_cli_env())
        assert got.returncode == 0, got.stdout + got.stderr
        assert f"collector {name} on the Ray cluster at {gcs}" in got.stderr, got.stderr
        events, _ = load_trace(out)
        assert sum(1 for e in events if e.get("name") == "e") == 300
        bad = _cli("export", "--address", gcs, "--collector", "rldbg-collector-ff", "-o", out, env=ray_cli_env())
        assert bad.returncode == 1 and "no traced job 'rldbg-collector-ff'" in _one_line(bad.stderr) \
            and name in bad.stderr, bad.stderr
    finally:
        rldbg.trace.stop()
    ray.kill(w)


def test_a_rank_killed_before_its_last_flush_is_named_in_the_trace(ray_cluster, tmp_path):
    spill = rldbg.trace.start(str(tmp_path / "kr.json"), memory_hz=0, flush_interval=0.5)
    try:
        victim, peer = Emitter.remote("critic", 1), Emitter.remote("critic", 0)
        vpid = ray.get(victim.pid.remote())
        ray.get([victim.emit.remote(1_000), peer.emit.remote(1_000)])
        os.kill(vpid, signal.SIGKILL)
        until(lambda: _dead(victim), "the rank's death", limit=30)
    finally:
        out = rldbg.trace.stop(settle_s=1.0)   # a silent process is waited for this long
    losses = rldbg.trace.last_losses()
    assert [(s["role"], s["rank"]) for s in losses["silent"]] == [("critic", 1)], losses
    assert "critic rank 1" in rldbg.trace.loss_line(out) and "stopped reporting" in rldbg.trace.loss_line(out)
    events, _ = load_trace(out)
    mark = [e for e in events if e.get("name") == "process stopped reporting"]
    assert len(mark) == 1 and mark[0]["args"]["role"] == "critic" and mark[0]["args"]["rank"] == 1
    track = {e["pid"] for e in events if e.get("ph") == "M" and e["args"].get("name") == "critic"}
    assert mark[0]["pid"] in track and mark[0]["tid"] == 2
    assert read_meta(spill)["job_id"]
    ray.kill(peer)


# ---- files damaged byte by byte --------------------------------------------------------------

def _synthetic_spill(d: Path, batches=4, per=5) -> Path:
    w = SpillWriter(str(d), {"origin_ns": 1_000_000, "job_id": "01000000"})
    t = 2_000_000
    for b in range(batches):
        evs = [["X", "step", f"step {b}", t, 400_000, "driver", 0, b, None, None, {"step": b}]]
        for i in range(per - 1):
            evs.append(["X", "call", "update_actor", t + i * 90_000, 80_000, "actor", i % 2, b, "update_actor", b, {}])
        w.write({"pid": 1, "host": "h", "dropped": 0, "events": evs})
        t += 500_000
    w.close()
    return d


def _record_ends(data: bytes) -> list:
    """Where each record of a binary spill file ends (rldbg.trace.spill's header: magic + 3 uint32)."""
    import struct
    ends, at = [], 0
    while at < len(data):
        _, mlen, elen, _ = struct.unpack_from("<4sIII", data, at)
        at += 16 + mlen + elen
        ends.append(at)
    return ends


def test_a_spill_damaged_anywhere_keeps_every_valid_record(tmp_path):
    from rldbg.trace.spill import encode_events
    spill = _synthetic_spill(tmp_path / "s.spill")
    path = spill / "events-1.rlb"
    good = path.read_bytes()
    ends = _record_ends(good)
    assert len(ends) == 4 and ends[-1] == len(good)
    for cut in range(len(good) + 1):   # a crash may stop the writer at any byte
        path.write_bytes(good[:cut])
        damage = []
        got = list(iter_batches(str(spill), damage))
        assert len(got) == sum(1 for e in ends if e <= cut), cut
        assert bool(damage) == (cut not in ends and cut != 0), cut
        assert all(what == "torn last record" for _, _, what in damage), (cut, damage)
    # garbage in between, a record with a malformed event, a record with one byte flipped (its
    # checksum fails), a torn last record: each named, every valid record recovered
    mid = ends[1]
    w = SpillWriter(str(tmp_path / "m.spill"), {"origin_ns": 1})
    w.write_raw({"pid": 1, "host": "h"}, encode_events([["X"], ["i", "user", "ok", 2_000_000, 0, "driver", 0,
                                                                None, None, None, {}]]))
    w.close()
    malformed = (tmp_path / "m.spill" / "events-1.rlb").read_bytes()
    flipped = bytearray(good[:ends[0]])
    flipped[-3] ^= 0xFF
    path.write_bytes(good[:mid] + b"\xf5\xfe\x00junk\n" + good[mid:] + malformed + bytes(flipped) + good[:40])
    damage = []
    got = list(iter_batches(str(spill), damage))
    assert sum(len(b["events"]) for b in got) == 21 and [d[2] for d in damage] == [
        "8 unreadable byte(s)", "1 malformed event(s) in a batch", "corrupt record (checksum mismatch)",
        "torn last record"]
    r = _cli("export", str(spill), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "(21 events)" in r.stdout
    warn = _one_line(r.stderr)
    assert (f"{path} at byte {mid}: 8 unreadable byte(s)" in warn and "malformed event" in warn
            and "checksum mismatch" in warn and "(+1 more)" in warn), warn
    (spill / "meta.json").write_bytes(b'{"origin_ns": 1')
    r = _cli("export", str(spill), "-o", str(tmp_path / "t2.json"))
    assert r.returncode == 2 and f"{spill / 'meta.json'}: damaged" in _one_line(r.stderr)


def test_a_spill_in_the_old_json_lines_format_is_one_line_error(tmp_path):
    spill = tmp_path / "old.spill"
    spill.mkdir()
    (spill / "meta.json").write_text(json.dumps({"origin_ns": 1, "job_id": "01000000"}))
    (spill / "events-1.jsonl").write_text(json.dumps({"pid": 1, "events": [["i", "u", "x", 5, 0, "driver", 0,
                                                                             None, None, None, {}]]}) + "\n")
    r = _cli("export", str(spill), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 2 and "old JSON-lines format" in _one_line(r.stderr), r.stderr
    assert not (tmp_path / "t.json").exists()


def test_report_on_a_truncated_or_malformed_trace_says_so_first(tmp_path):
    from rldbg.trace.export import export_spill
    spill = _synthetic_spill(tmp_path / "s.spill", batches=6, per=6)
    plain = tmp_path / "t.json"
    export_spill(str(spill), str(plain))
    full = plain.read_bytes()
    gz = gzip.compress(full)
    for data, name in ((full, "cut.json"), (gz, "cut.json.gz")):
        for frac in range(1, 20):
            cut = tmp_path / name
            cut.write_bytes(data[: len(data) * frac // 20])
            try:
                events, notes = load_trace(str(cut))
            except TraceFileError:
                continue   # cut before the first event: a one-line error, never a partial report
            assert notes and any("truncated" in n for n in notes), (name, frac)
    cut = tmp_path / "half.json.gz"
    cut.write_bytes(gz[: len(gz) * 2 // 3])
    r = _cli("report", str(cut))
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.splitlines()[0].startswith(f"rldbg report: WARNING: {cut} is truncated/damaged")
    events = json.loads(full)
    del [e for e in events if e.get("ph") == "X"][2]["ts"]
    (tmp_path / "nots.json").write_text(json.dumps(events))
    r = _cli("report", str(tmp_path / "nots.json"))
    assert r.returncode == 3 and "1 malformed event(s) skipped" in r.stdout.splitlines()[0]
    assert "Traceback" not in r.stderr
    # a reader that leaves early: no BrokenPipeError
    r = subprocess.run(f"'{RLDBG}' report '{plain}' | head -1", shell=True, capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith("rldbg report:") and r.stderr == "", r.stderr


# ---- hostile input ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, names", [
    (["trainer.total_steps=-3"], "'trainer.total_steps' must be ≥ 1, got -3"),
    (["resources.n_ranks=64"], "resources.n_ranks=64 × resources.cpus_per_rank=0.5 needs 32 CPU"),
    (["--config", "BAD_YAML"], "is not valid YAML"),
])
def test_bad_trainer_input_fails_in_one_line_before_any_work(tmp_path, args, names):
    bad = tmp_path / "bad.yaml"
    bad.write_text("actor:\n  lr: [1\n")
    args = [str(bad) if a == "BAD_YAML" else a for a in args]
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    r = subprocess.run([sys.executable, "-m", "reference_trainer", *args, f"trainer.run_dir={tmp_path}/run"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert r.returncode == 2 and names in _one_line(r.stderr), r.stderr
    assert not (tmp_path / "run").exists() and time.monotonic() - t0 < 60


def test_other_bad_config_values_name_the_key_and_what_is_accepted():
    from reference_trainer.config import ConfigError, load_config
    cases = {
        'debug.breakpoints=["actor.update_actor@rank=x"]': "rank='x' is not a non-negative number",
        "actor.micro_batch_size=256": "actor.micro_batch_size=256 is larger than actor.mini_batch_size=128",
        'debug.breakpoints=["rollout.generate"]': "unknown role 'rollout'",
        'debug.breakpoints=["actor.update_actr"]': "unknown method 'update_actr'",
        "debug.listen_ranks=[x]": "accepted: 1, 0,1, 0|1, 0-3 or *",
        "debug.listen_roles=[critic]": "names role 'critic'; this run's roles: actor, reward",
        "profile.ranks=[5]": "names rank 5 but resources.n_ranks=2",
        "control.port=70000": "must be in 0..65535",
        "trace.flush_s=0": "'trace.flush_s' must be > 0",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError, match=None) as err:
            load_config("demo", overrides=[override])
        assert message in str(err.value) and "\n" not in str(err.value), (override, str(err.value))
    # the cluster's own resources, before any placement group waits
    from reference_trainer.config_checks import check_fits
    cfg = load_config("demo")
    with pytest.raises(ConfigError, match=r"needs 1 CPU but the Ray cluster has 0.5"):
        check_fits(cfg, {"CPU": 0.5}, "the Ray cluster")


# ---- two runs at once ------------------------------------------------------------------------

DRIVER = textwrap.dedent("""
    import os, sys, socket
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray, rldbg.control
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ray.init(address="local", num_cpus=1, _node_ip_address="127.0.0.1", include_dashboard=True,
             dashboard_host="127.0.0.1",
             dashboard_port=port, log_to_driver=False)
    info = rldbg.control.start()
    print(info["run"], info["job_id"], flush=True)
    sys.stdin.read()            # until the test closes our stdin
    rldbg.control.stop()
    ray.shutdown()
""")


def test_two_runs_at_once_each_keep_their_hub_and_are_watched_by_run(ray_cluster, tmp_path, monkeypatch):
    """This process's run on the session cluster and a second driver with its own fresh embedded
    cluster: both are job 01000000, as every fresh cluster's first job is."""
    import rldbg.control
    home = tmp_path / "home"
    monkeypatch.setenv("RLDBG_HOME", str(home))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    other = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
    mine = rldbg.control.start()
    try:
        theirs = other.stdout.readline().split()
        assert len(theirs) == 2, theirs
        runs = [(mine["run"], mine["job_id"]), tuple(theirs)]
        assert runs[0][1] == runs[1][1] == "01000000"   # same job id: the hub files must not collide
        assert runs[0][0] != runs[1][0]
        assert sorted(p.name for p in home.glob("hub-*.json")) == sorted(f"hub-{r}.json" for r, _ in runs)
        for run, _ in runs:   # each found on its own cluster, from its own hub file
            r = _cli("top", "--job", run, "--once", env=env, timeout=60)
            assert r.returncode == 0, r.stdout + r.stderr
            assert f"rldbg top: run {run}" in r.stdout and "hub http://127.0.0.1:" in r.stdout, r.stdout
            assert f"(from hub file of run {run})" in r.stderr
            assert (f"cluster at {ray_cluster} " in r.stderr) == (run == mine["run"]), r.stderr
        r = _cli("top", "--once", env=env, timeout=60)   # which one? never a silent pick
        assert r.returncode == 2 and all(run in r.stderr for run, _ in runs), r.stderr
        r = _cli("stack", "--role", "actor", env=env, timeout=60)   # it takes no --job: names what it takes
        assert r.returncode != 0 and r.stderr.strip().endswith("pick one with --address URL"), r.stderr
        other.stdin.close()
        assert other.wait(timeout=60) == 0
        # the other run's exit removes its own hub file only, never ours
        assert [p.name for p in home.glob("hub-*.json")] == [f"hub-{mine['run']}.json"]
    finally:
        rldbg.control.stop()
        if other.poll() is None:
            other.stdin.close()
            try:
                other.wait(timeout=60)
            except subprocess.TimeoutExpired:
                other.kill()


def test_a_new_trace_on_a_used_path_starts_fresh_and_a_live_one_is_refused(ray_cluster, tmp_path):
    spill = tmp_path / "t.spill"
    w = SpillWriter(str(spill), {"origin_ns": 1})
    w.write({"pid": 1, "events": [["i", "u", "x", 5, 0, "driver", 0, None, None, None, {}]]})
    w.close()
    SpillWriter(str(spill), {"origin_ns": 2}).close()   # what a new trace on the same path does
    assert list(iter_batches(str(spill))) == []
    # a spill whose driver is still running belongs to that run: refused in one line
    (spill / "meta.json").write_text(json.dumps({"driver_pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(RuntimeError, match=r"belongs to a run that is still going \(driver pid \d+\)"):
        rldbg.trace.start(str(tmp_path / "t.json"))
    (spill / "meta.json").write_text("[]")
    with pytest.raises(SpillError, match="meta.json: damaged"):
        read_meta(str(spill))


def test_top_once_reads_up_to_the_newest_event_of_every_worker(ray_cluster, tmp_path):
    """A poll that read only the first page of the backlog would advance the header's step and not
    the rows: --once (catch_up) reads every page up to the newest event."""
    import rldbg.control
    from rldbg.tui.data import FIRST_PAGE, LiveSource
    rldbg.trace.start(str(tmp_path / "top.json"), memory_hz=0, flush_interval=0.1)
    info = rldbg.control.start()
    try:
        ws = [Emitter.remote("actor", r) for r in range(2)]
        ray.get([w.emit.remote(26_000, name=f"bulk{r}") for r, w in enumerate(ws)])   # > one 50k page
        ray.get([w.emit.remote(1, name=f"newest{r}") for r, w in enumerate(ws)])
        until(lambda: rldbg.control.hub_handle() and session._session.get("collector").stats()
              ["events"] >= 52_002, "every event at the collector", limit=30)
        stale = LiveSource(ray_cluster, info["run"], info["token"]).poll()
        assert len(stale.events) == FIRST_PAGE and stale.behind > 0   # what a plain first poll sees
        name = lambda e: e[2] if isinstance(e, (list, tuple)) else e.get("name")  # noqa: E731
        assert not {"newest0", "newest1"} & {name(e) for e in stale.events}
        src = LiveSource(ray_cluster, info["run"], info["token"])
        src.catch_up = True
        snap = src.poll()
        names = {name(e) for e in snap.events}
        assert snap.status == "connected" and snap.behind == 0
        assert {"newest0", "newest1"} <= names, names
    finally:
        rldbg.control.stop()
        rldbg.trace.stop(export=False)
        for w in ws:
            ray.kill(w)
