"""The trainer's console: a progress bar on a terminal, plain lines in a log file (a redirected
run, a Ray job's log, a batch system's output), where the bar's carriage-return redraws would pile
up as one endless line."""
from __future__ import annotations

import fcntl
import os
import pty
import struct
import termios
import subprocess
import sys

SCRIPT = """
from reference_trainer.metrics_log import _Console
c = _Console(total_steps=3, start_step=0, progress=True)
for step in range(3):
    c.write({"step": step, "reward/mean": 0.5, "time/step": 0.1})
c.close()
"""


def test_a_log_file_gets_lines_and_no_bar(tmp_path):
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        subprocess.run([sys.executable, "-c", SCRIPT], stdout=f, stderr=subprocess.STDOUT, check=True, timeout=60)
    text = log.read_text()
    assert "\r" not in text and "it/s" not in text and "step/s" not in text, repr(text)
    assert [ln.split(" | ")[0] for ln in text.splitlines()] == ["step    0", "step    1", "step    2"]


def test_a_terminal_gets_the_bar():
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))   # 100 columns for the bar
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=child, stderr=child)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:   # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.wait(timeout=60) == 0
    assert b"3/3" in out and b"step/s" in out and b"step    2" in out, out
