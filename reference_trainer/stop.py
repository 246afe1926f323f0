"""Stopping a run from outside: SIGTERM to the driver (`ray job stop`, Kubernetes, `timeout
--foreground`) and SIGINT (Ctrl-C) end training in the driver at the next safe point, and fit()'s
cleanup still runs: the trace is flushed and exported, the control hub releases its gate and
removes its file, the workers and an embedded Ray cluster are shut down. A second signal exits
immediately, cleanup or not, and kills the process tree an embedded cluster is.

Safe points: between steps, and every slice of a worker-group wait (so a call that blocks
forever, a hung collective, does not hold the stop); a parked step gate is released at once.
The handler itself only records the signal: an exception raised inside Ray's C++ wait (where the
handler may run) leaves the core worker broken ("returned a result with an exception set").

A SIGTERM to the whole process group (`timeout`, `scancel`) reaches an embedded cluster's GCS and
raylet too (Ray blocks SIGINT in them, not SIGTERM): they exit at once and the driver cannot clean up.

Ray installs a C++ handler in the driver that aborts the process on SIGTERM (no Python cleanup, an
embedded cluster's agents left running); the Python handler installed here replaces it for the run.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_state = {"signum": None, "cleaning": False, "spill": None, "written": None}


class Stopped(BaseException):
    """Raised at a safe point after the first SIGTERM/SIGINT. A BaseException, like
    KeyboardInterrupt, so `except Exception` on the way up does not swallow it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.signame = signal.Signals(signum).name
        self.step: int | None = None
        self.trace: str | None = None

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def check() -> None:
    """Raise Stopped when a stop was asked for and training has not ended yet."""
    signum = _state["signum"]
    if signum is not None and not _state["cleaning"]:
        raise Stopped(signum)


def _handler(signum, frame) -> None:
    if _state["signum"] is not None:         # the user insists: no more waiting on cleanup
        spill, written = _state["spill"], _state["written"]
        # Untraced, or a flight recorder (its window is in memory): nothing to point at.
        trace = (f"the trace is written: {written}" if written else
                 f"no trace export; the events recorded so far stay in {spill}: `rldbg export {spill}`" if spill
                 else "no trace export")
        os.write(2, f"{signal.Signals(signum).name} again: exiting now, without cleanup ({trace})\n".encode())
        _kill_descendants()
        os._exit(128 + signum)
    _state["signum"] = signum
    import rldbg.control
    rldbg.control.release(f"stopping on {signal.Signals(signum).name}")   # a parked gate must not hold the stop


def _kill_descendants() -> None:
    """An embedded cluster is this driver's process tree. Ray's fate sharing takes its GCS and raylet
    down with the driver, but the agents the raylet started outlive it (reparented, for minutes):
    killed here. A driver of a cluster it joined has no children of Ray's."""
    with contextlib.suppress(Exception):   # exiting is what was asked; nothing here may stop it
        import psutil   # Ray's dependency

        for p in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                p.kill()


class _Guard:
    def begin_cleanup(self, spill: str | None = None) -> None:
        """The run's cleanup starts; `spill`: where its trace's events are until the export."""
        _state.update(cleaning=True, spill=spill)

    def trace_written(self, path: str) -> None:
        _state["written"] = path


@contextlib.contextmanager
def stop_on_signals():
    """Yields a guard; call guard.begin_cleanup() where the run's cleanup starts."""
    _state.update(signum=None, cleaning=False, spill=None, written=None)
    if threading.current_thread() is not threading.main_thread():
        yield _Guard()                           # signals are only delivered to the main thread
        return
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    try:
        yield _Guard()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _state.update(signum=None, cleaning=False, spill=None, written=None)


def job_stop_notice() -> str | None:
    """A line for a run submitted with `ray job submit` whose stop grace is too short to export
    the trace: Ray SIGKILLs the entrypoint RAY_JOB_STOP_WAIT_TIME_S (default 3) s after SIGTERM."""
    if "RAY_JOB_CONFIG_JSON_ENV_VAR" not in os.environ:   # set by Ray's job supervisor only
        return None
    try:
        grace = float(os.environ.get("RAY_JOB_STOP_WAIT_TIME_S", "3"))
    except ValueError:
        return None
    if grace >= 15:
        return None
    return (f"rldbg: `ray job stop` gives this job {grace:g} s before SIGKILL, which may not be enough to export "
            "the trace; submit with --runtime-env-json '{\"env_vars\": {\"RAY_JOB_STOP_WAIT_TIME_S\": \"30\"}}' "
            "(a killed run's events stay in RUN/trace.spill: `rldbg export`)")
