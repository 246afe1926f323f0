"""One live run per run_dir. Two runs writing one folder truncate each other's metrics.jsonl,
mix their checkpoints and flight-recorder dumps; rldbg's trace spill refuses a second live run, but
a flight recorder or an untraced run has no spill to refuse it. The run holds an flock on
RUN/.run.lock for as long as it trains: the kernel releases it when the process ends, however it
ends, so a crashed or killed run never leaves the folder locked."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
from pathlib import Path

from reference_trainer.config_checks import ConfigError

NAME = ".run.lock"


@contextlib.contextmanager
def hold(run_dir: str):
    """Hold `run_dir` for the block; ConfigError naming the live run's pid when another holds it.
    Where the file system cannot lock (some network mounts), one line says so and the run goes on."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    path, fd = Path(run_dir) / NAME, -1
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            print(f"warning: cannot lock {path} ({e.strerror}): a second run into trainer.run_dir would not be "
                  "refused", file=sys.stderr, flush=True)
            if fd >= 0:
                os.close(fd)
            yield
            return
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError(f"config key 'trainer.run_dir' is {run_dir!r}, where a live run (pid {pid}) writes; "
                          "give this run another trainer.run_dir") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)   # the lock goes with the descriptor
