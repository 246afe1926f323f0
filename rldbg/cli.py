"""The `rldbg` command. Each subcommand lives in rldbg/commands/<name>.py and exposes add_arguments(parser) and
run(args) -> int. Modules are imported only when their subcommand runs, so `rldbg --help` and `rldbg top` start fast. A
cluster that cannot be found or read (DashboardError, RegistryError) or a debug target that names no worker
(TargetError) ends any command with one line on stderr and status 1."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# What `rldbg --help` opens with: what the tool is for, then where a new user starts.
DESCRIPTION = """\
rldbg debugs and profiles reinforcement learning on LLMs that runs on Ray: a timeline of every
role and rank with memory across offload and weight sync, breakpoints scoped by role, rank and
step, a live terminal UI, and profilers."""

START_WITH = """\
start with:
  rldbg demo                               a traced GRPO training run on a local Ray cluster
  rldbg report runs/demo/trace.json.gz     where its time went: roles, stragglers, idle, memory
  rldbg top                                watch a running job live (run it in a second terminal)

`rldbg COMMAND --help` gives one command's options."""

COMMANDS = {
    "demo": "run the reference trainer's demo with tracing on (embedded local Ray cluster)",
    "top": "live TUI attached to the Ray dashboard",
    "report": "summarise a trace: time per role, stragglers, idle time, memory",
    "export": "write a run's collected events as a Perfetto trace",
    "dump": "write a running job's flight-recorder window now (the run goes on)",
    "open": "open a trace in the Perfetto UI (served once from 127.0.0.1, never uploaded)",
    "breakpoints": "list paused workers (role, rank, method, debugpy address)",
    "attach": "terminal debugger for a paused or listening worker",
    "vscode": "write VS Code launch.json entries for paused or listening workers",
    "stack": "py-spy stacks of a role's workers, identical stacks grouped",
    "flame": "py-spy recording of a role's workers (speedscope + SVG)",
    "tb": "start TensorBoard on loopback over torch.profiler output and trainer metrics",
}


def main(argv: list[str] | None = None) -> int:
    own_process = argv is None   # run as `rldbg ...`, not called from other Python code
    argv = sys.argv[1:] if own_process else argv
    parser = argparse.ArgumentParser(prog="rldbg", description=DESCRIPTION, epilog=START_WITH,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    version = importlib.import_module("importlib.metadata").version("rldbg") if "--version" in argv else ""
    parser.add_argument("--version", action="version", version=f"rldbg {version}")   # looked up only when asked
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    name = argv[0] if argv and argv[0] in COMMANDS else None
    for cmd, help_text in COMMANDS.items():
        p = sub.add_parser(cmd, help=help_text, description=help_text)
        if cmd == name:
            importlib.import_module(f"rldbg.commands.{cmd}").add_arguments(p)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from rldbg.ray_auth import prepare_client
    prepare_client()   # a second terminal on a token-auth cluster: before any Ray client opens
    module = importlib.import_module(f"rldbg.commands.{args.command}")
    try:
        rc = int(module.run(args) or 0)
        sys.stdout.flush()   # a closed pipe shows up here, inside the handler, not at exit
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `rldbg report T | head`: the reader left; end quietly as other tools do (128 + SIGPIPE).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        if not isinstance(e, _user_errors()):
            raise
        print(f"rldbg {args.command}: {e}", file=sys.stderr)
        return 1
    if own_process and getattr(module, "EXIT_AT_ONCE", False):
        # A command that leaves millions of objects behind (a loaded trace): freeing them one by one at
        # exit took 2.4 s of 8.4 s on 1M events. Output is flushed and no atexit work is pending; only
        # as a process of its own (argv None): a caller in-process keeps its interpreter.
        sys.stderr.flush()
        os._exit(rc)
    return rc


def _user_errors() -> tuple:
    from rldbg.dashboard import DashboardError
    from rldbg.debug.paused_workers import TargetError
    from rldbg.debug.registry import RegistryError
    return DashboardError, RegistryError, TargetError


if __name__ == "__main__":
    sys.exit(main())
