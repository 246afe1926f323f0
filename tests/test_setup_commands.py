"""The README's two set-up commands are what users and CI run: each starts by upgrading the pip of a
new venv (the one `python3 -m venv` installs backtracks for more than 12 minutes on the test
dependencies), and .ci/run runs the README's test command word for word. Timed in a new venv: see
the README's set-up section."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup_commands() -> dict[str, str]:
    """{"1": command, "2": command} from the README's "Set-up: two commands" code block."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands, number = {}, None
    for line in block.splitlines():
        m = re.match(r"# (\d)\. ", line)
        if m:
            number = m.group(1)
        elif line.strip() and not line.startswith("#"):
            commands[number] = line.strip()
    return commands


def test_each_readme_command_upgrades_a_new_venvs_pip_first():
    commands = _setup_commands()
    assert sorted(commands) == ["1", "2"], commands
    for cmd in commands.values():
        assert cmd.startswith("python -m pip install --upgrade pip && pip install \"torch==2.13.0\" -e "), cmd
    assert commands["1"].endswith("-e \".[trainer]\" && python -m reference_trainer --preset demo")
    assert commands["2"].endswith("-e \".[trainer,test,verl]\" && python -m pytest")


def test_ci_runs_the_readme_test_command_word_for_word_in_a_new_venv():
    ci = (ROOT / ".ci" / "run").read_text()
    lines = [ln.strip() for ln in ci.splitlines()]
    assert _setup_commands()["2"] in lines, ci
    assert lines.index("python3 -m venv .venv-ci") < lines.index(". .venv-ci/bin/activate") \
        < lines.index(_setup_commands()["2"])
    assert 'if [ "$rc" -eq 5 ]; then' in lines   # "no tests collected" still fails CI
    assert subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")]).returncode == 0

