"""A second SIGTERM while the trainer cleans up after the first: it exits at once, as the user
insists, and says what that costs (no export; where the events are), not silently."""
from __future__ import annotations

import signal
import subprocess
import sys

SCRIPT = """
import os, signal, time
from reference_trainer.stop import stop_on_signals
with stop_on_signals() as guard:
    os.kill(os.getpid(), signal.SIGTERM)      # the first: the run would stop at its next safe point
    guard.begin_cleanup("/runs/x/trace.spill")
    print("cleaning up", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)      # the second, during the cleanup
    time.sleep(30)
"""


def test_a_second_sigterm_exits_at_once_and_says_so():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 128 + signal.SIGTERM, out.stderr
    assert out.stdout == "cleaning up\n"
    assert out.stderr == ("SIGTERM again: exiting now, without cleanup (no trace export; the events recorded so far "
                          "stay in /runs/x/trace.spill: `rldbg export /runs/x/trace.spill`)\n")
