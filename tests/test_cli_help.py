"""`rldbg --help`, as a new user first runs it: it opens with what rldbg is, then the commands to
start with, each of them a real command."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RLDBG = str(Path(sys.executable).with_name("rldbg"))


def test_help_says_what_rldbg_is_and_where_to_start():
    out = subprocess.run([RLDBG, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    paragraphs = out.stdout.split("\n\n")
    assert paragraphs[0].startswith("usage: rldbg ")
    intro = " ".join(paragraphs[1].split())
    assert intro.startswith("rldbg debugs and profiles reinforcement learning on LLMs that runs on Ray:"), intro
    assert intro.endswith(".") and "rldbg/commands" not in out.stdout
    start = out.stdout.split("start with:\n", 1)[1].split("\n\n")[0].splitlines()
    commands = [line.split()[1] for line in start]
    assert commands == ["demo", "report", "top"], start
    for cmd in commands:   # each one it names runs and has help of its own
        sub = subprocess.run([RLDBG, cmd, "--help"], capture_output=True, text=True, timeout=60)
        assert sub.returncode == 0 and sub.stdout.startswith(f"usage: rldbg {cmd}"), sub.stderr


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    out = subprocess.run([RLDBG, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == f"rldbg {version('rldbg')}\n", (out.stdout, out.stderr)
