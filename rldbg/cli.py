"""`rldbg` command line. Each subcommand lives in rldbg/commands/<name>.py and exposes
HELP (one line), add_arguments(parser) and run(args) -> int. Modules are imported only
when their subcommand runs, so `rldbg --help` and `rldbg top` start fast."""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "demo": "run the reference trainer's demo with tracing on (embedded local Ray cluster)",
    "top": "live TUI attached to the Ray dashboard",
    "report": "summarise a trace: time per role, stragglers, idle time, memory",
    "export": "write a run's collected events as a Perfetto trace",
    "open": "open a trace in the Perfetto UI (served once from 127.0.0.1, never uploaded)",
    "breakpoints": "list paused workers (role, rank, method, debugpy address)",
    "attach": "terminal debugger for a paused or listening worker",
    "vscode": "write VS Code launch.json entries for paused or listening workers",
    "stack": "py-spy stacks of a role's workers, identical stacks grouped",
    "flame": "py-spy recording of a role's workers (speedscope + SVG)",
    "tb": "start TensorBoard on loopback over torch.profiler output and trainer metrics",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="rldbg", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    name = argv[0] if argv and argv[0] in COMMANDS else None
    for cmd, help_text in COMMANDS.items():
        p = sub.add_parser(cmd, help=help_text, description=help_text)
        if cmd == name:
            module = _load(cmd)
            if module is None:
                print(f"rldbg {cmd}: not available in this build", file=sys.stderr)
                return 2
            module.add_arguments(p)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from rldbg.ray_auth import prepare_client
    prepare_client()   # a second terminal on a token-auth cluster: before any Ray client opens
    try:
        return int(_load(args.command).run(args) or 0)
    except KeyboardInterrupt:
        return 130


def _load(cmd: str):
    try:
        return importlib.import_module(f"rldbg.commands.{cmd}")
    except ModuleNotFoundError as e:
        if e.name == f"rldbg.commands.{cmd}":
            return None
        raise


if __name__ == "__main__":
    sys.exit(main())
