"""Exporting a big spill with several processes side by side.

Reading the spill (msgpack) and formatting each event's JSON are both per-event Python work, a
few µs an event on one core. The spill is cut into parts of about equal bytes
(rldbg.trace.spill.split); the exporting process reads and formats the first part itself and
one helper process per other part does the same for its part:

1. pass 1: each reads its part and learns what it holds (tracks, processes, clocks, the rank
   slices that end each driver call) and sends that to the exporting process, which merges the
   parts in order (export._Index.merge): the same index one pass over the whole spill learns.
   The rank slice ends follow in a second exchange, only for the driver calls found anywhere;
2. pass 2: each gets the merged index back and writes its part's event lines to a file of its
   own beside the output; the exporting process writes the head, its own part, then each
   helper's lines in part order, then the tail.

The file is the one a single process writes (bind ids are computed, not handed out in order).
A helper is a fresh Python running helper() here (_LAUNCH), talking pickles over its
stdin/stdout: no fork, so it is safe from a Ray driver full of threads. This module is handed
the exporter module (`ex`) rather than importing it, so the two do not import each other. Whatever goes wrong on the way (a helper
that dies, a pickle that does not arrive) ends the helpers and the single-process export runs
instead: the trace is written either way. Other errors (a bad output path, what `extra` raises)
are the export's own and propagate as they would from one process.
"""
from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys

class HelperFailed(RuntimeError):
    """A helper could not start, died, or answered with an error: the export goes on in one process."""


# A helper's program. The exporting process waits for its helpers' first answer, so their start-up
# is on the export's critical path: it imports rldbg.trace.export under a bare `rldbg` package
# (not the package's __init__: the user API, the context and the recorder, about 40 ms of imports
# a helper never uses) and starts without site (-S, another 20 ms of .pth files: its path is this
# process's sys.path, handed over in PYTHONPATH).
_LAUNCH = """import os, sys, types
pkg = types.ModuleType("rldbg")
pkg.__path__ = [sys.argv[1]]
sys.modules["rldbg"] = pkg
from rldbg.trace import export, export_jobs
code = export_jobs.helper(export)
sys.stderr.flush()
os._exit(code)   # at once: freeing its half of the spill object by object took up to 0.4 s
"""
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # rldbg/, as this process found it


def helper_command(program: str = _LAUNCH) -> tuple[list, dict]:
    """The argv and environment a helper starts with (`program`: _LAUNCH, or a test's probe)."""
    return ([sys.executable, "-S", "-c", program, _PACKAGE],
            dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))

MIN_BYTES = 16 << 20   # below about 300k events a helper's start-up eats what it saves
MAX_JOBS = 4


def choose(spill_dir: str, jobs: int | None) -> int:
    """How many processes export this spill: `jobs` when given, else 1 for a small spill and
    otherwise one per core this process may run on, up to MAX_JOBS."""
    if jobs is not None:
        return jobs
    from rldbg.trace.spill import SpillError, event_files
    try:
        size = sum(os.path.getsize(p) for p in event_files(spill_dir))
    except (OSError, SpillError):
        return 1   # the single-process path says what is wrong with it
    if size < MIN_BYTES:
        return 1
    from rldbg.environ import usable_cores
    return max(1, min(usable_cores(), MAX_JOBS, size // (MIN_BYTES // 2)))


def export(ex, spill_dir: str, out_path: str, extra, align: bool, damage: list | None, jobs: int) -> dict | None:
    """The trace written with `jobs` processes by the exporter module `ex`; None when that
    failed (nothing of it is left: the caller then exports in one process)."""
    from rldbg.trace.spill import split
    parts = split(spill_dir, jobs)
    helpers: list[subprocess.Popen] = []
    outs = [f"{out_path}.part{k}.{os.getpid()}" for k in range(1, jobs)]
    try:
        argv, env = helper_command()
        for k in range(1, jobs):
            try:
                h = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            except OSError as e:
                raise HelperFailed(f"cannot start {sys.executable}: {e}") from None
            helpers.append(h)
            _send(h, ("index", spill_dir, parts[k], align, ex.KEEP_DECODED // jobs))
        dmg: list = []
        idx = ex._index(spill_dir, align, dmg, pieces=parts[0], keep=ex.KEEP_DECODED // jobs)
        flows = [idx.driver_flows]
        for h in helpers:
            later, later_dmg = _receive(h)
            idx.merge(later)
            flows.append(later.driver_flows)
            dmg += later_dmg
        # Rank slice ends travel only for the driver calls of the whole spill (a few per step),
        # not one per rank call: ask each helper for those now that all are known.
        wanted = idx.driver_flows
        for h in helpers:   # asked first: they work out theirs while this process works out its own
            _send(h, ("ends", wanted))
        idx.rank_ends = idx.ends_for(wanted)
        for h in helpers:
            for f, ends in _receive(h).items():
                idx.rank_ends.setdefault(f, {}).update(ends)
        idx.finish(align)
        kept, idx.kept = idx.kept, None
        for h, part_out, fl in zip(helpers, outs, flows[1:]):
            _send(h, ("format", idx.for_flows(fl), part_out))
        idx.kept = kept

        def events(f) -> int:
            n = ex.write_events(f, idx, spill_dir, parts[0])
            for h, part_out in zip(helpers, outs):
                n += _receive(h)
                _append(f, part_out)
            return n

        out = ex.write_trace(out_path, idx, align, extra, events)
    except HelperFailed as e:   # the single-process export writes the trace instead
        print(f"rldbg export: exporting with {jobs} processes failed ({e}); exporting in one process",
              file=sys.stderr)
        return None
    finally:
        for h in helpers:
            _end(h)
        for p in outs:
            _remove(p)
    if damage is not None:
        damage += dmg
    return out


def _append(f, path: str) -> None:
    """The file at `path` added to the output `f`. A plain file gets it by copy_file_range: the
    kernel moves the pages, where reading and writing them through Python copied a helper's
    part (half the trace) twice more; a .gz output compresses it through the Python stream."""
    with open(path, "rb") as src:
        if hasattr(os, "copy_file_range") and type(f) is io.BufferedWriter:
            f.flush()
            try:
                while os.copy_file_range(src.fileno(), f.fileno(), 1 << 30):
                    pass
                return
            except OSError:   # a file system without it: the bytes copied so far stand, the rest below
                f.seek(0, os.SEEK_END)
        while chunk := src.read(16 << 20):
            f.write(chunk)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:   # never made (or its directory never was): nothing to remove
        pass


def _send(h: subprocess.Popen, msg) -> None:
    try:
        pickle.dump(msg, h.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        h.stdin.flush()
    except OSError:   # a broken pipe: it is gone
        raise HelperFailed(f"helper pid {h.pid} ended early (rc {h.wait()})") from None


def _receive(h: subprocess.Popen):
    try:
        kind, value = pickle.load(h.stdout)
    except (EOFError, OSError, pickle.UnpicklingError):
        raise HelperFailed(f"helper pid {h.pid} ended early (rc {h.wait()})") from None
    if kind == "error":
        raise HelperFailed(f"helper pid {h.pid}: {value}")
    return value


def _end(h: subprocess.Popen) -> None:
    for pipe in (h.stdin, h.stdout):
        try:
            pipe.close()
        except OSError:
            pass
    try:
        h.wait(timeout=5)
    except subprocess.TimeoutExpired:
        h.kill()
        h.wait()


def helper(ex) -> int:
    """One helper, with the exporter module `ex`: pass 1 over its part, then pass 2 into the file
    it is told. Its stdout carries only pickles (fd 1 goes to stderr, so that nothing printed on
    the way can garble them); an exporting process that goes away closes its stdin and the
    helper ends."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    from rldbg.trace.load import no_gc

    def reply(kind, value) -> None:
        pickle.dump((kind, value), out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()

    try:
        with no_gc():
            _, spill_dir, pieces, align, keep = pickle.load(inp)
            dmg: list = []
            mine = ex._index(spill_dir, align, dmg, pieces=pieces, keep=keep)   # all together keep what one would
            kept, mine.kept = mine.kept, None
            calls, mine.calls = mine.calls, []
            reply("index", (mine, dmg))
            _, wanted = pickle.load(inp)
            mine.calls = calls
            reply("ends", mine.ends_for(wanted))
            _, idx, part_out = pickle.load(inp)
            idx.kept = kept
            try:
                with open(part_out, "wb") as f:
                    n = ex.write_events(f, idx, spill_dir, pieces)
                reply("written", n)
            except BaseException:
                _remove(part_out)   # nobody will read it: never leave it beside the trace
                raise
    except (EOFError, BrokenPipeError):
        return 0   # the exporting process went away or gave up: end quietly
    except Exception as e:
        try:
            reply("error", f"{type(e).__name__}: {e}")
        except BrokenPipeError:
            pass
        return 1
    return 0

