"""Which line a FILE:LINE breakpoint should be on, so that it can stop.

debugpy (like pdb) stops at a line only when that line runs. A `def` line runs when the
function is *defined*, never when it is called; decorator, docstring, blank and comment lines
run nothing (pydevd moves such a breakpoint to the line *before*, often the `def`): accepted,
it never stops. resolve() turns the line a user points at into the line they mean: a line of a
function's header or docstring -> the first line of its body that runs; a line inside a body
that runs nothing (blank, comment, `else:`) -> the next line that runs; a line that runs
nothing outside any function -> BreakLineError naming the nearest line that runs.

Which lines run comes from the compiler (co_lines()); functions and headers from the ast.
`rldbg attach --break`, its `b` command and any DAP client of a worker whose debugger rldbg
opened (debugpy_port installs the hook below) all go through here.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import os
import sys
import tokenize
import types
from dataclasses import dataclass


class BreakLineError(ValueError):
    """A line no breakpoint can stop at and rldbg cannot move; the message is one line."""


@dataclass(frozen=True)
class Resolved:
    line: int                 # where to put the breakpoint
    note: str | None = None   # one line saying why it moved (None: it did not)


@dataclass(frozen=True)
class _Function:
    name: str                 # qualified: Class.method, outer.<locals>.inner
    start: int                # first decorator line, or the `def` line
    def_line: int
    decorators: tuple         # (first, last) line of each decorator
    sig_end: int              # the line with the `:` that ends the `def`
    doc: tuple | None         # (first, last) line of the docstring
    body: int                 # line of the first statement after the docstring
    end: int
    code_lines: tuple         # lines of this function's code that run, sorted


@dataclass(frozen=True)
class _FileLines:
    n_lines: int
    runs: frozenset           # every line that runs, in any code object of the file
    functions: tuple          # _Function, outer ones before inner ones
    headers: frozenset        # decorator, `def` and signature lines (they run, but not when called)


def resolve(path: str, line: int, shown: str | None = None) -> Resolved:
    """The line to break at instead of `line` in `path` (`shown`: how to name the file in messages, default `path`). A
    file that cannot be read or compiled here is left to the debugger: Resolved(line)."""
    if (info := _read(path)) is None:
        return Resolved(line)
    where = shown or path
    if not 1 <= line <= info.n_lines:
        raise BreakLineError(f"{where}:{line} is past the end of the file ({info.n_lines} lines)")
    # functions come outer before inner: the last one holding the line is the innermost
    fn = next((f for f in reversed(info.functions) if f.start <= line <= f.end), None)
    if fn is not None and line < fn.body and (line <= fn.sig_end or (fn.doc and fn.doc[0] <= line <= fn.doc[1])):
        first = next((n for n in fn.code_lines if n >= fn.body), None)
        if first is None:
            raise BreakLineError(f"{where}:{line} is {_header_part(fn, line)} of {fn.name}, "
                                 "whose body runs no line to break at")
        return Resolved(first, f"{where}:{line} is {_header_part(fn, line)} of {fn.name}: "
                               f"breaking at {first}, its first line")
    if line in info.runs:
        return Resolved(line)
    what = _idle_kind(path, line)
    if fn is not None:
        later = [n for n in info.runs if line < n <= fn.end]
        earlier = [n for n in info.runs if fn.body <= n < line]
        if later or earlier:
            target, which = (min(later), "the next line") if later else (max(earlier), "the line before it")
            return Resolved(target, f"{where}:{line} is {what} in {fn.name} and runs nothing: "
                                    f"breaking at {target}, {which} that runs")
    candidates = [n for n in info.runs if n not in info.headers] or sorted(info.runs)
    if not candidates:
        raise BreakLineError(f"{where} has no line that runs")
    nearest = min(candidates, key=lambda n: (abs(n - line), -n))   # a tie goes to the later line
    raise BreakLineError(f"{where}:{line} is {what} outside any function and runs nothing; "
                         f"the nearest line that runs is {nearest}")


def _header_part(fn: _Function, line: int) -> str:
    if line == fn.def_line:
        return "the `def`"
    if any(a <= line <= b for a, b in fn.decorators):
        return "a decorator"
    if fn.doc and fn.doc[0] <= line <= fn.doc[1]:
        return "the docstring"
    if line > fn.def_line:
        return "the signature"
    return "a comment among the decorators"


def _idle_kind(path: str, line: int) -> str:
    import linecache
    linecache.checkcache(path)   # the file may have been edited since it was last read
    text = linecache.getline(path, line).strip()
    if not text:
        return "a blank line"
    if text.startswith("#"):
        return "a comment"
    return f"`{text}`" if len(text) <= 40 else "a line"


def _read(path: str) -> _FileLines | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return _analyse(path, st.st_mtime_ns, st.st_size) if path.endswith((".py", ".pyw")) else None


@functools.lru_cache(maxsize=64)
def _analyse(path: str, _mtime_ns: int, _size: int) -> _FileLines | None:
    try:
        with tokenize.open(path) as f:
            source = f.read()
        tree = ast.parse(source, path)
        module = compile(tree, path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None   # another Python's syntax, not Python at all: the debugger decides
    codes: dict[tuple[str, int], types.CodeType] = {}
    runs: set[int] = set()
    stack = [module]
    while stack:
        code = stack.pop()
        codes.setdefault((code.co_name, code.co_firstlineno), code)
        runs.update(n for _, _, n in code.co_lines() if n)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    functions: list[_Function] = []
    headers: set[int] = set()
    _collect(tree, "", codes, _def_colons(source), functions, headers)
    functions.sort(key=lambda f: (f.start, -f.end))
    return _FileLines(len(source.splitlines()), frozenset(runs), tuple(functions), frozenset(headers))


def _def_colons(source: str) -> dict[int, int]:
    """`def` line -> line of the `:` that ends its header (a signature may span lines)."""
    out: dict[int, int] = {}
    depth, open_def = 0, None
    for tok in tokenize.generate_tokens(iter(source.splitlines(keepends=True)).__next__):
        if tok.type == tokenize.NAME and tok.string == "def" and open_def is None:
            open_def, depth = tok.start[0], 0
        elif open_def is not None and tok.type == tokenize.OP:
            if tok.string in "([{":
                depth += 1
            elif tok.string in ")]}":
                depth -= 1
            elif tok.string == ":" and depth == 0:
                out[open_def], open_def = tok.start[0], None
    return out


def _collect(node, prefix: str, codes: dict, colons: dict, out: list, headers: set) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = tuple((d.lineno, d.end_lineno) for d in child.decorator_list)
            start = min([child.lineno] + [a for a, _ in decorators])
            body = child.body
            doc = (body[0].lineno, body[0].end_lineno) if ast.get_docstring(child, clean=False) is not None else None
            body = body[1:] if doc and len(body) > 1 else body
            # The compiler numbers a decorated function from its first decorator (3.8+).
            code = codes.get((child.name, start)) or codes.get((child.name, child.lineno))
            own = sorted({n for _, _, n in code.co_lines() if n}) if code is not None else []
            name = prefix + child.name
            sig_end = colons.get(child.lineno, child.lineno)
            out.append(_Function(name, start, child.lineno, decorators, sig_end, doc, body[0].lineno,
                                 child.end_lineno, tuple(own)))
            # Decorators, `def` and signature run when the function is defined, not when called.
            headers.update(range(start, min(sig_end + 1, body[0].lineno)))   # a one-liner's body runs
            _collect(child, name + ".<locals>.", codes, colons, out, headers)
        elif isinstance(child, ast.ClassDef):
            _collect(child, prefix + child.name + ".", codes, colons, out, headers)
        else:
            _collect(child, prefix, codes, colons, out, headers)


# --- the same for every DAP client of a worker whose debugger rldbg opened -------------------
def install_pydevd_hook() -> bool:
    """Make pydevd's setBreakpoints (VS Code's gutter clicks, `rldbg attach`, any DAP client)
    move each line through resolve() before pydevd sees it; the answer then carries the moved
    line, so the editor shows the breakpoint where it will stop, and the worker prints the note.
    Idempotent. A line resolve() refuses is left to pydevd, with the reason printed."""
    from _pydevd_bundle.pydevd_process_net_command_json import PyDevJsonCommandProcessor as Processor

    original = Processor.on_setbreakpoints_request
    if getattr(original, "_rldbg", False):
        return False

    def on_setbreakpoints_request(self, py_db, request):
        with contextlib.suppress(Exception):   # the debugger must keep working whatever happens here
            _move_requested(request)
        return original(self, py_db, request)

    on_setbreakpoints_request._rldbg = True
    Processor.on_setbreakpoints_request = on_setbreakpoints_request
    return True


def _move_requested(request) -> None:
    import pydevd_file_utils

    args = request.arguments
    path = getattr(args.source, "path", None)
    if not path or not args.breakpoints:
        return
    local = pydevd_file_utils.map_file_to_server(path)   # the client's path, as this machine has it
    for bp in args.breakpoints:
        if not isinstance(bp, dict) or not isinstance(bp.get("line"), int):
            continue
        try:
            got = resolve(local, bp["line"], shown=path)
        except BreakLineError as e:
            print(f"rldbg: {e}", file=sys.stderr, flush=True)
            continue
        if got.note:
            bp["line"] = got.line
            print(f"rldbg: {got.note}", file=sys.stderr, flush=True)
