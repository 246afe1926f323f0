"""A feature whose optional library is missing says in one line which extra installs it
(`pip install rldbg` alone brings no torch, TensorBoard or trainer libraries). The missing
library is made missing for real: a child interpreter in which importing it fails, as in a venv
without it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rldbg.extras import MissingExtra, check, need

# None in sys.modules: `import m` raises ModuleNotFoundError naming m, find_spec(m) returns None.
_HIDE = "import sys\nfor m in HIDDEN:\n    sys.modules[m] = None\n"


def _without(hidden: tuple, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", f"HIDDEN = {hidden!r}\n{_HIDE}{code}"],
                          capture_output=True, text=True, timeout=120)


def test_a_missing_library_names_its_extra():
    with pytest.raises(MissingExtra) as e:
        need("rldbg_no_such_library", "profiling actor.update_actor", "torch")
    assert str(e.value) == ("profiling actor.update_actor needs rldbg_no_such_library, which is not installed "
                            "here: pip install 'rldbg[torch]'")
    with pytest.raises(MissingExtra, match=r"rldbg tb needs rldbg_no_such_library, .*pip install 'rldbg\[tensorboard\]'"):
        check(("json", "rldbg_no_such_library"), "rldbg tb", "tensorboard")
    assert need("json", "x", "torch").__name__ == "json"


def test_a_library_that_is_there_but_broken_keeps_its_own_error(tmp_path, monkeypatch):
    (tmp_path / "rldbg_broken_lib.py").write_text("import rldbg_its_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as e:
        need("rldbg_broken_lib", "x", "torch")
    assert not isinstance(e.value, MissingExtra) and e.value.name == "rldbg_its_missing_dependency"


def test_profiling_without_torch_says_which_extra():
    code = ("import os\nos.environ['RLDBG_PROFILE'] = 'dir=/tmp/rldbg-x;roles=actor'\n"
            "from rldbg.profilers.torch_prof import profile_call\n"
            "try:\n    profile_call('actor', 0, 'update_actor', 1)\n"
            "except ImportError as e:\n    print(e)\n")
    r = _without(("torch",), code)
    assert r.stdout.strip() == ("profiling actor.update_actor (RLDBG_PROFILE selects it) needs torch, which is not "
                                "installed here: pip install 'rldbg[torch]'"), r.stderr


def test_the_trainer_without_its_libraries_says_which_extra():
    r = _without(("torch", "transformers"), "import sys\nfrom reference_trainer.__main__ import main\nsys.exit(main([]))")
    assert r.returncode == 2 and r.stderr.strip() == (
        "python -m reference_trainer needs torch, transformers, not installed here: pip install 'rldbg[trainer]' "
        "(from a checkout: pip install -e '.[trainer]')"), r.stderr
