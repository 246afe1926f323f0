"""RLDBG_TRACE=PATH: trace a VeRL job from the moment its driver initialises Ray.
RLDBG_TRACE_WINDOW=N with it: the flight recorder instead (the last N steps, written on a
trigger); RLDBG_TRACE_STEPS=100-110,500: only those steps.

`ray.init` and `ray.shutdown` are wrapped in the process that imports VeRL; only a driver calls
ray.init, so workers and VeRL's TaskRunner actor just find the job's collector. The driver also
starts the job's control hub (`rldbg top`), which a controller inside an actor joins at its first
worker-group call (rldbg.control.controller). The trace is written when the driver shuts Ray down
or exits, or gets SIGTERM (`ray job stop`, SLURM, `timeout`: see _on_sigterm). `{pid}` in PATH
becomes the driver's pid.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading

from rldbg.integrations.verl.hooks import MARK, patches
from rldbg.integrations.verl.steps import STEPS
from rldbg.switches import TRACE, TRACE_STEPS, TRACE_WINDOW, VERL

ACCEPTED = "a file path ending in .json or .json.gz ({pid} may appear in it)"
HUB_STOP_BOUND_S = 15.0

_started: list = []
_terminating: list = []
_started_hub: list = []


class SwitchError(SystemExit):
    """A bad RLDBG_* value: one line on stderr, exit status 2, before any work starts."""

    def __init__(self, line: str):
        print(f"rldbg: {line}", file=sys.stderr)
        super().__init__(2)


def trace_path() -> str | None:
    raw = os.environ.get(TRACE, "").strip()
    if not raw:
        return None
    if not raw.endswith((".json", ".json.gz")):
        raise SwitchError(f"{TRACE}={raw!r} is not accepted: use {ACCEPTED}")
    recording()   # a bad window or steps fails here too, before Ray starts
    return raw.replace("{pid}", str(os.getpid()))


def recording() -> dict:
    """{"window": N, "steps": ranges} from RLDBG_TRACE_WINDOW / RLDBG_TRACE_STEPS."""
    from rldbg.trace.window import parse_steps

    raw = os.environ.get(TRACE_WINDOW, "").strip() or "0"
    if not raw.isdigit():
        raise SwitchError(f"{TRACE_WINDOW}={raw!r} is not accepted: use N, the steps the flight recorder "
                          "keeps (0: off)")
    try:
        steps = parse_steps(os.environ.get(TRACE_STEPS, "").strip())
    except ValueError as e:
        raise SwitchError(f"{TRACE_STEPS}: {e}") from None
    if int(raw) and steps:
        raise SwitchError(f"{TRACE_WINDOW} and {TRACE_STEPS}: choose one")
    return {"window": int(raw), "steps": steps}


def check_switch() -> None:
    raw = os.environ.get(VERL, "").strip()
    if raw not in ("", "0", "1"):
        raise SwitchError(f"{VERL}={raw!r} is not accepted: use 1 (on) or 0 (off)")
    from rldbg.profilers.spec import from_env
    try:
        from_env()   # here, not in the first profiled call inside a rank
    except ValueError as e:
        raise SwitchError(str(e)) from None


def install_trace_switch() -> None:
    import ray

    if trace_path() is None or getattr(ray.init, MARK, False):
        return
    init, shutdown = ray.init, ray.shutdown

    @patches(ray, "init")
    def traced_init(*args, **kwargs):
        path = trace_path()                       # a bad value fails before Ray starts
        ctx = init(*args, **kwargs)
        start(path)
        return ctx

    @patches(ray, "shutdown")
    def traced_shutdown(*args, **kwargs):
        stop()
        return shutdown(*args, **kwargs)

    if ray.is_initialized() and _is_driver(ray):   # VeRL imported after ray.init
        start(trace_path())


def _is_driver(ray) -> bool:
    try:
        from ray._private.worker import SCRIPT_MODE, global_worker

        return global_worker.mode == SCRIPT_MODE
    except Exception:
        return False


def start(path: str | None) -> None:
    import rldbg.trace

    if path is None or _started:
        return
    from rldbg.profilers.spec import from_env
    spec = from_env()   # its torch.profiler files are merged into the trace, where the driver can read them
    rldbg.trace.start(path, profile_dir=spec and spec.dir, **recording())
    _started.append(path)
    _start_hub()
    atexit.register(stop)   # after trace.start's own hook, so it runs first: the last step closes
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):   # not where signals can be handled: written at exit
            signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame) -> None:
    """SIGTERM while tracing. Ray's handler in a driver aborts the process, and the trace with it
    (and a controller parked at the step gate, in VeRL's TaskRunner, would wait for nobody). The
    handler may run inside Ray's C++ wait (main_ppo's driver waits in ray.get on the TaskRunner),
    where raising breaks the core worker, so it only starts a thread that writes the trace (every
    process ships what it holds: the TaskRunner's last calls are in it), stops the hub (releasing
    a parked controller; bounded) and ends the process with 128 + SIGTERM, as Ray's handler would
    have: an embedded cluster's processes share the driver's fate (Ray starts them so). A second
    SIGTERM exits at once."""
    if _terminating:
        os._exit(128 + signum)
    _terminating.append(signum)
    threading.Thread(target=_stop_and_exit, args=(signum,), name="rldbg-sigterm", daemon=True).start()


def _stop_and_exit(signum: int) -> None:
    try:
        print(f"rldbg: {signal.Signals(signum).name}: writing the trace, then exiting", file=sys.stderr, flush=True)
        stop(reason=signal.Signals(signum).name)
    except BaseException as e:   # noqa: BLE001 - exiting is what the signal asked for
        print(f"rldbg: while stopping on SIGTERM: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)


def _start_hub() -> None:
    import rldbg.control

    if rldbg.control.info() is not None:
        return   # the program started its own
    try:
        info = rldbg.control.start()
    except Exception as e:   # the trace goes on without the stepper
        print(f"rldbg: no control hub for `rldbg top` ({e})", file=sys.stderr)
        return
    print(f"rldbg: control hub at {info['url']}; watch with `rldbg top --job {info['run']}`", file=sys.stderr)
    _started_hub.append(True)


def _stop_hub(bound_s: float | None = None) -> None:
    """Stop the hub this switch started (releasing a parked controller); with `bound_s`, give up
    waiting after that long (the process is about to exit)."""
    if not _started_hub:
        return
    import rldbg.control

    _started_hub.clear()
    if bound_s is None:
        rldbg.control.stop()
        return
    t = threading.Thread(target=rldbg.control.stop, name="rldbg-hub-stop", daemon=True)
    t.start()
    t.join(bound_s)


def stop(reason: str | None = None) -> None:
    """Write the trace (`reason`, a signal's name: the flight recorder dumps its window first)."""
    if not _started:
        return
    import rldbg.trace

    STEPS.close()
    if reason is None:
        _stop_hub()   # releases a controller parked at the gate before the trace waits for it
    path = _started.pop()
    written = rldbg.trace.stop(reason=reason)
    if reason is not None:
        # On a signal the trace comes first: stopping the hub asks Ray (the hub's shutdown, its
        # name gone), which on a busy cluster may not answer while the driver waits in ray.get.
        # A parked controller's events still ship (its shipper is a thread of its own).
        _stop_hub(bound_s=HUB_STOP_BOUND_S)
    if recording()["window"]:
        dumps = rldbg.trace.last_dumps()
        for d in dumps:
            print(f"rldbg: flight recorder: {d['reason']} at step {d['step']}, {d['state']} {d['path']}", file=sys.stderr)
        if not dumps:
            print("rldbg: flight recorder: no trigger, nothing written", file=sys.stderr)
    elif written:
        print(f"rldbg: trace written to {written}", file=sys.stderr)
    elif path:
        print(f"rldbg: trace for {path} was not written", file=sys.stderr)
