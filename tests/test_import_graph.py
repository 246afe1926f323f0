"""rldbg has no import circles, counting imports inside functions too (a lazy import that closes
a circle still ties the modules together), and the trace exporter does not reach the profilers.
A static check over the source: fast, and it names the circle when there is one."""
from __future__ import annotations

import ast
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
