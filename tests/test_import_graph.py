"""rldbg has no import circles, counting imports inside functions too (a lazy import that closes
a circle still ties the modules together), and the trace exporter does not reach the profilers.
The seam is one-way: rldbg never imports reference_trainer, and the trainer uses rldbg's public API
(rldbg.__all__) only. Each RLDBG_* switch is named in rldbg/switches.py alone.
Static checks over the source: fast, and each names the circle or the offending line."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "rldbg"


def _modules() -> dict[str, Path]:
    """Every module by name."""
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _graph() -> dict[str, set]:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    deps.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        # Importing a module also runs its packages' __init__; those edges are Python's, not ours.
        graph[name] = {d for d in deps if d in mods and d != name and not name.startswith(d + ".")}
    return graph


def _cycles(graph: dict[str, set]) -> list[list[str]]:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _reach(graph: dict[str, set], start: str) -> set:
    seen, todo = set(), [start]
    while todo:
        for d in graph[todo.pop()] - seen:
            seen.add(d)
            todo.append(d)
    return seen


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_exporter_does_not_import_the_profilers():
    reached = _reach(_graph(), "rldbg.trace.export")
    assert not {m for m in reached if m.startswith("rldbg.profilers")}, sorted(reached)


def test_the_check_sees_a_circle():
    # The checker itself must be able to fail: a hand-made circle through a lazy import.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_session_is_imported_on_first_use():
    """`import rldbg` (every traced process) leaves the trace session (collector, Ray glue) until
    rldbg.trace.start or stop is looked up. Run in a fresh interpreter, as processes start."""
    import subprocess
    import sys

    code = ("import sys, rldbg, rldbg.trace as t\n"
            "assert 'rldbg.trace.session' not in sys.modules, 'session imported with the package'\n"
            "from rldbg.trace import stop\n"
            "assert t.start is sys.modules['rldbg.trace.session'].start and stop is t.stop\n"
            "try:\n    t.nope\nexcept AttributeError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "has no attribute 'nope'" in r.stdout, r.stderr


# ---- the one-way seam: rldbg never imports the trainer; the trainer uses rldbg's public API ----

REPO = ROOT.parent
TRAINER = REPO / "reference_trainer"


def _public_api() -> dict[str, set | None]:
    """rldbg.__all__ -> for a public module, the names a client may use from it (its __all__, else
    its public top-level names that are not modules); None for a function, class or value."""
    import types

    import rldbg
    out = {}
    for name in rldbg.__all__:
        value = getattr(rldbg, name)
        if isinstance(value, types.ModuleType):
            names = getattr(value, "__all__", None) or [
                n for n, v in vars(value).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)]
            out[name] = set(names)
        else:
            out[name] = None
    return out


def _seam_violations(label: str, source: str, api: dict) -> list[str]:
    """Each use of rldbg in `source` (a trainer module) outside the public API, named with its line."""
    tree = ast.parse(source, label)
    bad, bound = [], {}   # local name -> "rldbg" or a public module's name
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] != "rldbg":
                    continue
                if len(parts) > 2 or (len(parts) == 2 and api.get(parts[1], None) is None):
                    bad.append(f"{label}:{node.lineno}: import {a.name}")
                elif a.asname:
                    bound[a.asname] = "rldbg" if len(parts) == 1 else parts[1]
                else:
                    bound["rldbg"] = "rldbg"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rldbg" and not node.level:
            if node.module != "rldbg":
                bad.append(f"{label}:{node.lineno}: from {node.module} import "
                           f"{', '.join(a.name for a in node.names)}")
                continue
            for a in node.names:
                if a.name not in api:
                    bad.append(f"{label}:{node.lineno}: from rldbg import {a.name}")
                elif api[a.name] is not None:
                    bound[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        owner = bound.get(node.value.id)
        if owner == "rldbg" and node.attr not in api:
            bad.append(f"{label}:{node.lineno}: rldbg.{node.attr}")
        elif owner is not None and owner != "rldbg" and node.attr not in api[owner]:
            bad.append(f"{label}:{node.lineno}: rldbg.{owner}.{node.attr}")
    for node in ast.walk(tree):   # rldbg.<public module>.<name>
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name) and bound.get(node.value.value.id) == "rldbg"
                and api.get(node.value.attr) is not None and node.attr not in api[node.value.attr]):
            bad.append(f"{label}:{node.lineno}: rldbg.{node.value.attr}.{node.attr}")
    return bad


def test_the_trainer_uses_only_rldbgs_public_api():
    api = _public_api()
    bad = []
    for path in sorted(TRAINER.rglob("*.py")):
        bad += _seam_violations(str(path.relative_to(REPO)), path.read_text(), api)
    assert not bad, ("the trainer reaches past rldbg's public API (rldbg.__all__: "
                     f"{', '.join(sorted(api))}):\n" + "\n".join(bad))


def test_the_seam_check_names_what_reaches_past_the_api():
    api = _public_api()
    src = ("import rldbg\nfrom rldbg import instrument as ri, sentinel\nfrom rldbg.debug import death\n"
           "import rldbg.control.gate\nrldbg.span('x')\nrldbg.context.current()\nri.call_begin\nri._env\n"
           "rldbg.control.gate.release('x')\nrldbg.trace.start\n")
    assert sorted(_seam_violations("t.py", src, api)) == [
        "t.py:2: from rldbg import sentinel", "t.py:3: from rldbg.debug import death", "t.py:4: import rldbg.control.gate",
        "t.py:6: rldbg.context", "t.py:8: rldbg.instrument._env", "t.py:9: rldbg.control.gate"]


def _imports_of(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.append((node.lineno, node.module or ""))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
            out.append((node.lineno, str(node.args[0].value)))
    return out


def test_rldbg_never_imports_the_trainer():
    files = sorted(ROOT.rglob("*.py")) + [REPO / "rldbg_verl_plugin.py"]
    bad = [f"{p.relative_to(REPO)}:{line}: imports {name}" for p in files for line, name in _imports_of(p)
           if name.split(".")[0] == "reference_trainer"]
    assert not bad, "\n".join(bad)


# ---- one owner per RLDBG_* switch: its name is spelled in rldbg/switches.py only ----

SWITCH_NAME = re.compile(r"RLDBG_[A-Z0-9_]+")


def _spelled_names(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each string that is exactly an RLDBG_* name: a definition of the switch."""
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and SWITCH_NAME.fullmatch(n.value)]


def test_each_switch_name_is_spelled_once_in_switches():
    owner = ROOT / "switches.py"
    owned = _spelled_names(owner)
    names = [name for _, name in owned]
    assert len(names) == len(set(names)), f"a switch defined twice in rldbg/switches.py: {sorted(names)}"
    files = sorted(ROOT.rglob("*.py")) + sorted((REPO / "reference_trainer").rglob("*.py")) + [REPO / "rldbg_verl_plugin.py"]
    spelled = {str(p.relative_to(REPO)): found for p in files if p != owner and (found := _spelled_names(p))}
    bad = [f"{path}:{line}: {name!r} (import it from rldbg.switches)" for path, found in sorted(spelled.items())
           for line, name in found]
    assert not bad, "RLDBG_* names spelled outside rldbg/switches.py:\n" + "\n".join(bad)


def test_the_switch_check_sees_a_second_spelling(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('import os\nX = "RLDBG_BREAKPOINTS"\nos.environ.get("RLDBG_NEW")\nprint("set RLDBG_X=1")\n')
    assert _spelled_names(p) == [(2, "RLDBG_BREAKPOINTS"), (3, "RLDBG_NEW")]
