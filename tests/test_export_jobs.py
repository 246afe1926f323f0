"""Exporting a spill with several processes side by side (rldbg.trace.export_jobs) writes the
very file one process writes: tracks and pids in first-seen order, each process's best clock
estimate, driver calls whose rank slices lie in another part, drops, and damage in the middle
of a part, across rotated files. A helper that cannot start leaves the one-process export to
write the trace. As users run it: `rldbg export --jobs N` in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rldbg.trace import events as ev
from rldbg.trace.export import export_spill
from rldbg.trace.spill import SpillWriter

RLDBG = str(Path(sys.executable).with_name("rldbg"))


def _spill(tmp_path, monkeypatch) -> str:
    """Batches from three processes as a run ships them: each rank's call slices (flows), user
    spans, instants, memory samples; the driver's calls (each expanded at export, its ranks'
    slices shipped in other batches); clock estimates improving over the run; drops."""
    monkeypatch.setattr(SpillWriter, "ROTATE", 15_000)   # several files, parts cut inside them
    spill = str(tmp_path / "t.spill")
    w = SpillWriter(spill, {"origin_ns": 1_000_000, "job_id": "j"})
    t = 2_000_000
    for step in range(30):
        for rank, (pid, off, rtt) in enumerate([(11, 40_000 - step, 900 - 10 * step), (12, -7_000, 500)]):
            evs = []
            for k in range(3):
                flow = step * 3 + k + 1
                evs.append(ev.slice_event("call", "update_actor", t + k * 10_000 + rank * 7, 6_000 + rank * 900, "actor",
                                          rank, step, "update_actor", flow, {"group": "actor"}))
                evs.append(ev.slice_event("user", "forward", t + k * 10_000 + 100, 2_000, "actor", rank, step,
                                          "update_actor", None, None if k else {"n": k, "s": "é"}))
                evs.append(ev.memory_event(t + k * 10_000 + 50, "actor", rank, step, "update_actor",
                                           {"rss": 1 << 30 + k, "device_used": 0.5}))
            if step == 7 and rank == 1:
                evs.append(ev.instant_event("user", "mark", t, "reward", 0, step, None, {"why": "new role mid-run"}))
            w.write({"pid": pid, "host": "h", "node_id": f"node{pid}", "node_ip": "127.0.0.1",
                     "clock_offset_ns": off, "clock_rtt_ns": rtt, "dropped": step // 10, "events": evs})
        drv = [ev.driver_call_event("update_actor", t - 1_000, 35_000, step, "update_actor", step * 3 + k + 1,
                                    {"group": "actor", "mode": "DP_COMPUTE_PROTO", "world": 2, "status": "ok",
                                     "t_dispatched": t - 500, "shards": [16, 16]}) for k in range(3)]
        drv.append(ev.slice_event("step", "step", t - 2_000, 40_000, "driver", 0, step, None))
        w.write({"pid": 10, "host": "h", "node_id": "node10", "node_ip": "127.0.0.1", "events": drv})
        t += 50_000
    w.close()
    files = sorted(Path(spill).glob("events-*.rlb"))
    assert len(files) >= 3
    # Garbage in the middle of the second file: the part holding those bytes names it, once.
    data = files[1].read_bytes()
    files[1].write_bytes(data[:len(data) // 2] + b"\xf5junk" + data[len(data) // 2:])
    return spill


def test_side_by_side_export_writes_the_file_one_process_writes(tmp_path, monkeypatch):
    spill = _spill(tmp_path, monkeypatch)
    outs, damages = {}, {}
    for jobs in (1, 2, 3):
        damages[jobs] = []
        out = tmp_path / f"j{jobs}.json"
        info = export_spill(spill, str(out), damage=damages[jobs], jobs=jobs)
        outs[jobs] = out.read_bytes()
        assert info["written"] > info["events"] > 500
    assert outs[2] == outs[1] and outs[3] == outs[1]
    assert damages[2] == damages[1] == damages[3] and len(damages[1]) == 1, damages
    got = json.loads(outs[1])
    pids = {e["args"]["name"]: e["pid"] for e in got if e.get("name") == "process_name"}
    assert pids == {"driver": 1, "actor": 2, "reward": 3}
    # Every send and recv of a driver call is bound to the rank slice it joins.
    ranks = {e["bind_id"] for e in got if e.get("cat") == "call" and "bind_id" in e}
    sends = [e["bind_id"] for e in got if e.get("name", "").startswith("send") and "bind_id" in e]
    recvs = [e["bind_id"] for e in got if e.get("name", "").startswith("recv") and "bind_id" in e]
    assert len(ranks) > 100 and set(sends) <= ranks and set(recvs) <= ranks and len(sends) == len(recvs) > 100
    clock = next(e for e in got if e.get("name") == "rldbg trace start")["args"]["clock"]["processes"]
    assert clock["h:11"]["uncertainty_ns"] == (900 - 10 * 29 + 1) // 2 and clock["h:11"]["offset_ns"] == 40_000 - 29


def test_cli_jobs_as_users_run_it(tmp_path, monkeypatch):
    spill = _spill(tmp_path, monkeypatch)
    one, two = tmp_path / "one.json.gz", tmp_path / "two.json.gz"
    for out, jobs in ((one, "1"), (two, "2")):
        r = subprocess.run([RLDBG, "export", spill, "-o", str(out), "--jobs", jobs], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and "wrote" in r.stdout, r.stderr
        assert "damaged spill, 1 bad region(s)" in r.stderr and "failed" not in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and "RuntimeWarning" not in r.stderr, r.stderr   # helpers stay quiet
    import gzip
    assert gzip.decompress(one.read_bytes()) == gzip.decompress(two.read_bytes())
    for bad in ("0", "two", "-1"):
        r = subprocess.run([RLDBG, "export", spill, "-o", str(tmp_path / "x.json"), "--jobs", bad],
                           capture_output=True, text=True, timeout=60)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and f"--jobs must be a positive integer, got '{bad}'" in lines[0]
        assert not (tmp_path / "x.json").exists()
    # An output that cannot be written: one line naming it, before the spill is read, no part left.
    (tmp_path / "dir.json").mkdir()
    for out, why in ((tmp_path / "one.json.gz" / "x.json", "is not a directory"), (tmp_path / "dir.json", "is a directory")):
        r = subprocess.run([RLDBG, "export", spill, "-o", str(out), "--jobs", "2"], capture_output=True, text=True,
                           timeout=60)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and f"cannot write '{out}'" in lines[0] and why in lines[0], r.stderr
    assert not list(tmp_path.rglob("*.part*"))


def test_a_helper_that_cannot_start_leaves_the_export_to_one_process(tmp_path, monkeypatch, capsys):
    spill = _spill(tmp_path, monkeypatch)
    export_spill(spill, str(tmp_path / "one.json"), jobs=1)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    info = export_spill(spill, str(tmp_path / "two.json"), jobs=2)
    err = capsys.readouterr().err
    assert "exporting with 2 processes failed (cannot start" in err and "exporting in one process" in err
    assert (tmp_path / "two.json").read_bytes() == (tmp_path / "one.json").read_bytes() and info["events"] > 500
    assert not list(tmp_path.glob("two.json.part*"))


@pytest.mark.parametrize("after", [0, 1000])
def test_a_file_system_without_copy_file_range_still_gets_every_byte(tmp_path, monkeypatch, after):
    """A helper's part is appended in the kernel (copy_file_range); where the file system refuses,
    at once or part way through, the rest is copied through Python and the file is the same."""
    import errno

    from rldbg.trace import export_jobs
    spill = _spill(tmp_path, monkeypatch)
    export_spill(spill, str(tmp_path / "one.json"), jobs=1)
    real, calls = os.copy_file_range, []

    def refusing(src, dst, count, *a):
        calls.append(count)
        if after and len(calls) == 1:
            return real(src, dst, after)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(export_jobs.os, "copy_file_range", refusing)
    export_spill(spill, str(tmp_path / "two.json"), jobs=2)
    assert calls and (tmp_path / "two.json").read_bytes() == (tmp_path / "one.json").read_bytes()


def _record_starts(data: bytes) -> list[int]:
    from rldbg.trace.spill import _HEAD
    out, at = [], 0
    while at < len(data):
        out.append(at)
        _, mlen, elen, _crc = _HEAD.unpack_from(data, at)
        at += _HEAD.size + mlen + elen
    return out


def test_damage_at_a_part_boundary_is_named_once_by_the_part_before(tmp_path, monkeypatch):
    """Readers of parts side by side read and name what one reader over the spill does, for a
    checksum failure or garbage in each record around the cut: the reader before the cut names
    damage up to the next whole record, the reader after starts there without naming it again."""
    from rldbg.trace.spill import iter_records, split
    spill = Path(_spill(tmp_path, monkeypatch))
    files = sorted(spill.glob("events-*.rlb"))
    for extra in files[1:]:   # the first file alone, undamaged: the cut falls inside it
        extra.unlink()
    path, good = files[0], files[0].read_bytes()
    starts = _record_starts(good)
    cut = split(str(spill), 2)[1][0][1]
    after = [s for s in starts if s >= cut][:3]
    before = [s for s in starts if s < cut][-1:]
    assert after and before
    for at in before + after:
        for how in ("flip", "garbage"):
            bad = bytearray(good)
            if how == "flip":
                bad[at + 20] ^= 0xFF            # inside its meta: the checksum fails
            else:
                bad[at:at + 4] = b"junk"        # its magic gone: unreadable bytes up to the next record
            path.write_bytes(bytes(bad))
            whole_dmg, part_dmg = [], []
            whole = list(iter_records(str(spill), whole_dmg, tuples=True))
            parts = [r for piece in split(str(spill), 2) for r in iter_records(None, part_dmg, tuples=True, pieces=piece)]
            assert parts == whole and part_dmg == whole_dmg and len(whole_dmg) == 1, (at, how, whole_dmg, part_dmg)


def test_a_helper_that_dies_mid_export_leaves_the_export_to_one_process(tmp_path, monkeypatch, capsys):
    """A helper killed after it started (as the OOM killer would): the exporting process sees its
    pipe end, says so in one line, ends the rest and writes the trace itself."""
    import signal
    from rldbg.trace import export_jobs
    spill = _spill(tmp_path, monkeypatch)
    export_spill(spill, str(tmp_path / "one.json"), jobs=1)
    real_send = export_jobs._send

    def send_then_kill(h, msg):
        real_send(h, msg)
        if msg[0] == "index":
            h.send_signal(signal.SIGKILL)

    monkeypatch.setattr(export_jobs, "_send", send_then_kill)
    export_spill(spill, str(tmp_path / "two.json"), jobs=2)
    err = capsys.readouterr().err
    assert "exporting with 2 processes failed (helper pid" in err and "ended early (rc -9)" in err, err
    assert (tmp_path / "two.json").read_bytes() == (tmp_path / "one.json").read_bytes()
    assert not list(tmp_path.glob("two.json.part*"))


def test_an_old_trace_is_replaced_and_a_symlink_written_through(tmp_path, monkeypatch):
    """An existing file at the output is replaced by a new one, not truncated (ext4 writes a
    truncated-and-rewritten file back to disk at close, which the export would wait for): a
    hard link to the old trace keeps the old trace. A symlink is written through, as before."""
    spill = _spill(tmp_path, monkeypatch)
    want = tmp_path / "want.json"
    export_spill(spill, str(want), jobs=1)
    out, old = tmp_path / "out.json", tmp_path / "old.json"
    out.write_bytes(b"[\n]\n")
    os.link(out, old)
    export_spill(spill, str(out), jobs=2)
    assert out.read_bytes() == want.read_bytes() and old.read_bytes() == b"[\n]\n"
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_bytes(b"stale")
    link.symlink_to(target)
    export_spill(spill, str(link), jobs=2)
    assert link.is_symlink() and target.read_bytes() == want.read_bytes()
