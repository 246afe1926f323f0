"""`pip install rldbg` is the debugger alone, beside the user's own Ray: the core dependencies hold
no trainer or model library, Ray is a range whose floor VeRL accepts, and no rldbg module imports
at load time a library the core does not bring (the rest are imported inside the function that
needs them, behind rldbg.extras). A fresh venv at the Ray floor is the README's install section."""
from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# What each core distribution is imported as (textual brings rich; py-spy is a program, not a module).
IMPORTED_AS = {"ray": {"ray"}, "debugpy": {"debugpy"}, "textual": {"textual", "rich"}, "pygal": {"pygal"},
               "msgpack": {"msgpack"}, "orjson": {"orjson"}, "isal": {"isal"}, "nvidia-ml-py": {"pynvml"},
               "py-spy": set()}
TRAINER_ONLY = {"torch", "transformers", "tokenizers", "safetensors", "numpy", "pyyaml", "tqdm", "tensorboard",
                "torch-tb-profiler"}


def _name(req: str) -> str:
    return req.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].split("!")[0].strip().lower()


def test_the_core_brings_no_trainer_library_and_ray_as_a_range():
    core = {_name(r): r for r in PROJECT["dependencies"]}
    assert not TRAINER_ONLY & set(core), sorted(TRAINER_ONLY & set(core))
    assert core["ray"].startswith("ray[default]>=") and "==" not in core["ray"], core["ray"]
    assert {_name(r) for r in PROJECT["optional-dependencies"]["trainer"]} >= TRAINER_ONLY - {"torch-tb-profiler"}
    assert set(core) == set(IMPORTED_AS), "a core dependency without its import name here, or one gone"


def test_rays_floor_is_one_verl_accepts():
    from importlib.metadata import PackageNotFoundError, requires
    try:
        verl = [r for r in requires("verl") or [] if _name(r) == "ray" and "extra ==" not in r]
    except PackageNotFoundError:
        pytest.skip("verl is not installed (pip install -e '.[verl]')")
    floor = lambda req: tuple(int(x) for x in req.split(">=")[1].split(",")[0].strip().split("."))  # noqa: E731
    ours = next(r for r in PROJECT["dependencies"] if _name(r) == "ray")
    assert verl and floor(ours) <= floor(verl[0]), (ours, verl)


def _load_time_imports(path: Path) -> set:
    """Top-level packages a module imports when it loads (not inside a function)."""
    out, tree = set(), ast.parse(path.read_text(), str(path))
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
        todo.extend(ast.iter_child_nodes(node))
    return out


def test_no_rldbg_module_needs_more_than_the_core_to_load():
    allowed = set(sys.stdlib_module_names) | {"rldbg", "__future__"} | set().union(*IMPORTED_AS.values())
    files = sorted((REPO / "rldbg").rglob("*.py")) + [REPO / "rldbg_verl_plugin.py"]
    bad = {str(p.relative_to(REPO)): sorted(extra) for p in files if (extra := _load_time_imports(p) - allowed)}
    assert not bad, f"imported at load time but not a core dependency (import it where it is used): {bad}"


def test_the_gzip_export_deflates_with_isal():
    """The .json.gz export's speed is ISA-L's: installed as a core dependency, it is what the
    export writes with (the stdlib's gzip only stands in where it is missing)."""
    from rldbg.trace import export
    assert export.gzip.__name__ == "isal.igzip"
