"""`rldbg tb [--logdir DIR] [--port P]`: TensorBoard on 127.0.0.1 over torch.profiler output and the trainer's metrics
(the profiler plugin has no authentication, so it is never bound to a public interface)."""
from __future__ import annotations

import contextlib
import os
import signal

from rldbg.commands import fail
from rldbg.profilers import tensorboard as tb
from rldbg.profilers.spec import ProfileSpecError, from_env

DEFAULT_LOGDIR = os.path.join("runs", "demo", "tb")


def add_arguments(parser) -> None:
    parser.add_argument("--logdir", help=f"profile directory (default: dir= of $RLDBG_PROFILE, else {DEFAULT_LOGDIR})")
    parser.add_argument("--port", type=int, default=6006, help="port on 127.0.0.1 (default 6006; 0 picks a free one)")


def _default_logdir() -> str:
    with contextlib.suppress(ProfileSpecError):
        if spec := from_env():
            return spec.dir
    return DEFAULT_LOGDIR


def run(args) -> int:
    logdir = args.logdir or _default_logdir()
    # SIGTERM (kill, timeout, a test's terminate()) must take TensorBoard down too, not orphan it.
    signal.signal(signal.SIGTERM, signal.default_int_handler)   # raises KeyboardInterrupt
    proc = None
    try:
        traces, scalars = tb.check_logdir(logdir)
        proc, base = tb.start(logdir, args.port)
        tb.wait_ready(proc, base)
        if traces:
            print(f"TensorBoard over {len(traces)} trace(s) in {logdir}: {base}/#pytorch_profiler  "
                  "(Ctrl-C stops it)", flush=True)
        if scalars:
            print(f"trainer metrics ({len(scalars)} event file(s)): {base}/#timeseries", flush=True)
        return proc.wait()
    except tb.TensorBoardError as e:
        return fail(f"rldbg tb: {e}", 1)
    except KeyboardInterrupt:
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
