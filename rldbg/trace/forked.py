"""Work handed to a forked helper while this process does other work, for `rldbg report` on a
big trace: its CLI is a process without threads, the only kind that may fork safely, and its
work splits into parts that need the same objects (a forked helper sees them without copying).

Forked(fn) forks; the helper computes fn() and sends it back pickled through a pipe, or the
exception it raised (if that pickles), then leaves without any exit work. result() waits for the
answer: fn()'s value, its exception raised again here, or HelperLost when the helper died before
answering (killed, out of memory) so that the caller does the work itself. Leaving the `with`
block without the answer (an error or Ctrl-C here) kills the helper; it is always waited for:
no process is left behind.
"""
from __future__ import annotations

import os
import pickle
import signal


class HelperLost(RuntimeError):
    """The forked helper died without answering."""


class Forked:
    def __init__(self, fn):
        rfd, wfd = os.pipe()
        # A Ctrl-C between the fork and the helper's pid being kept here would leave the helper
        # running with this process's stdout (a caller waiting for that pipe's end waits for it):
        # held off across the fork, it is raised below, where the helper is known and ended.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            signal.signal(signal.SIGINT, signal.SIG_DFL)   # a Ctrl-C at the terminal ends it too
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            try:
                try:
                    answer = (True, fn())
                except Exception as e:
                    answer = (False, e)
                try:
                    data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:   # an exception that does not pickle: say nothing, as if lost
                    data = b""
                view = memoryview(data)
                while view:
                    view = view[os.write(wfd, view):]
            finally:
                os._exit(0)
        os.close(wfd)
        self.pid, self.fd = pid, rfd
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)   # a Ctrl-C held off is raised here
        except BaseException:
            self.close()
            raise

    def result(self):
        try:
            with os.fdopen(self.fd, "rb") as f:
                self.fd = None
                data = f.read()
        finally:
            self.close()
        try:
            ok, value = pickle.loads(data)
        except Exception:   # nothing, or cut short: it died on the way
            raise HelperLost("the forked helper died before it answered") from None
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Kills the helper unless its answer was read, then waits for it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            os.kill(self.pid, signal.SIGKILL)
        if self.pid:
            os.waitpid(self.pid, 0)
            self.pid = 0

    def __enter__(self) -> "Forked":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
