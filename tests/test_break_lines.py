"""A file:line breakpoint on a line that can never stop (a `def`, decorator, signature, docstring,
blank or comment line) moves to the line the user meant, saying so in one line; a line outside any
function that runs nothing is refused with the nearest line that runs. The module on its own, then
the CLI (`rldbg attach --break`, the trainer's `debug.breakpoints`) as users run them. The stop at
the moved line in a live worker: tests/test_debug_listen.py."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rldbg.debug.lines import BreakLineError, resolve

SOURCE = textwrap.dedent('''\
    import functools


    def plain(x):
        return x + 1


    class Worker:
        """A class docstring."""

        @functools.lru_cache
        @staticmethod
        def update(batch,
                   scale=2):
            """Two lines
            of docstring."""
            # a comment before the first statement
            global COUNT

            total = batch * scale
            if total:
                total += 1
            else:
                total -= 1

            def inner():
                return total
            return inner

        async def fetch(self):
            await self.go()

        def one_liner(self): return 1

    # a comment at module level
    ''')


@pytest.fixture()
def module(tmp_path):
    path = tmp_path / "worker_mod.py"
    path.write_text(SOURCE)
    return str(path)


def line_of(text: str) -> int:
    return next(no for no, t in enumerate(SOURCE.splitlines(), 1) if t.strip() == text)


@pytest.mark.parametrize("asked, expected_line, words", [
    ("def plain(x):", "return x + 1", "is the `def` of plain: breaking at {line}, its first line"),
    ("@functools.lru_cache", "total = batch * scale", "is a decorator of Worker.update: breaking at {line}, its first line"),
    ("@staticmethod", "total = batch * scale", "is a decorator of Worker.update"),
    ("def update(batch,", "total = batch * scale", "is the `def` of Worker.update: breaking at {line}, its first line"),
    ("scale=2):", "total = batch * scale", "is the signature of Worker.update"),
    ('"""Two lines', "total = batch * scale", "is the docstring of Worker.update"),
    ('of docstring."""', "total = batch * scale", "is the docstring of Worker.update"),
    ("# a comment before the first statement", "total = batch * scale",
     "is a comment in Worker.update and runs nothing: breaking at {line}, the next line that runs"),
    ("global COUNT", "total = batch * scale", "is `global COUNT` in Worker.update and runs nothing"),
    ("else:", "total -= 1", "is `else:` in Worker.update and runs nothing: breaking at {line}, the next line that runs"),
    ("def inner():", "return total", "is the `def` of Worker.update.<locals>.inner: breaking at {line}, its first line"),
    ("async def fetch(self):", "await self.go()", "is the `def` of Worker.fetch"),
])
def test_lines_that_cannot_stop_move_to_the_line_meant(module, asked, expected_line, words):
    got = resolve(module, line_of(asked), shown="worker_mod.py")
    want = line_of(expected_line)
    assert got.line == want
    assert got.note.startswith(f"worker_mod.py:{line_of(asked)} ") and words.format(line=want) in got.note, got.note
    assert "\n" not in got.note


def test_a_blank_line_in_a_body_moves_to_the_next_line_that_runs(module):
    blank = line_of("total = batch * scale") - 1
    assert SOURCE.splitlines()[blank - 1].strip() == ""
    got = resolve(module, blank, shown="m.py")
    assert got.line == blank + 1
    assert got.note == f"m.py:{blank} is a blank line in Worker.update and runs nothing: breaking at {blank + 1}, the next line that runs"


@pytest.mark.parametrize("text", ["return x + 1", "total = batch * scale", "total += 1", "return inner",
                                  "def one_liner(self): return 1", "import functools", '"""A class docstring."""'])
def test_lines_that_run_stay_where_they_are(module, text):
    got = resolve(module, line_of(text))
    assert (got.line, got.note) == (line_of(text), None)


def test_a_line_outside_any_function_that_runs_nothing_is_refused_with_the_nearest_line_that_runs(module):
    with pytest.raises(BreakLineError) as e:
        resolve(module, 2, shown="worker_mod.py")   # the blank line after the import
    assert str(e.value) == ("worker_mod.py:2 is a blank line outside any function and runs nothing; "
                            "the nearest line that runs is 1")
    comment = line_of("# a comment at module level")
    with pytest.raises(BreakLineError, match=rf"worker_mod.py:{comment} is a comment outside any function and runs "
                                             rf"nothing; the nearest line that runs is {line_of('def one_liner(self): return 1')}"):
        resolve(module, comment, shown="worker_mod.py")
    with pytest.raises(BreakLineError, match=r"worker_mod.py:999 is past the end of the file \(\d+ lines\)"):
        resolve(module, 999, shown="worker_mod.py")


def test_a_file_that_is_not_here_or_not_python_is_left_to_the_debugger(tmp_path):
    assert resolve(str(tmp_path / "absent.py"), 3).line == 3
    bad = tmp_path / "broken.py"
    bad.write_text("def f(:\n    pass\n")
    assert resolve(str(bad), 1).line == 1


def test_an_edited_file_is_read_again(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    return 1\n")
    assert resolve(str(path), 1).line == 2
    path.write_text("def f():\n    '''doc'''\n\n    return 1\n")
    os.utime(path, ns=(1, 1))   # the same second as the first write must not hide the change
    assert resolve(str(path), 1).line == 4


# --- as users run it ---------------------------------------------------------------------------

def _rldbg(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "rldbg", *argv], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)})


def test_attach_refuses_a_line_that_runs_nothing_before_looking_for_a_worker(module, tmp_path):
    out = _rldbg("attach", "--role", "actor", "--break", "worker_mod.py:2", "--address", "http://127.0.0.1:9",
                 cwd=str(Path(module).parent))
    assert out.returncode == 1, out
    assert out.stderr.strip() == ("rldbg attach: worker_mod.py:2 is a blank line outside any function and runs "
                                  "nothing; the nearest line that runs is 1")


def test_a_file_line_breakpoint_in_the_trainer_config_is_named_with_where_it_belongs(tmp_path):
    spec = "reference_trainer/workers/hybrid.py:120"
    proc = subprocess.run([sys.executable, "-m", "reference_trainer", "--preset", "demo",
                           f"trainer.run_dir={tmp_path}", f'debug.breakpoints=["{spec}"]'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if spec in ln]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "FILE:LINE is not a spec" in lines[0] and f"rldbg attach --role ROLE --break {spec}" in lines[0]
    assert "Traceback" not in proc.stderr
