"""rldbg export: a spill goes into the run's store (trace.rldbg.db beside the output, what `rldbg
report` reads), and the trace is exported from the store.

A damaged spill (torn or failing records, malformed events) is recovered: every valid event is
exported, a warning on stderr names each damaged file and offset, and the status stays 0. A
damaged meta.json, or a spill in the old JSON-lines format, is a one-line error (rc 2)."""
from __future__ import annotations

import sys

from rldbg.commands import fail


def add_arguments(parser) -> None:
    parser.add_argument("spill_dir", nargs="?", help="a spill directory (<trace>.spill) left by a run")
    parser.add_argument("--address", help="Ray cluster address of a running traced job (e.g. auto)")
    parser.add_argument("--collector", help="the traced job's collector, rldbg-collector-<job id> "
                                            "(default: the only traced job on the cluster)")
    parser.add_argument("-o", "--output", required=True, help="output trace, .json or .json.gz")


def _spill_from_cluster(address: str, name: str | None) -> str:
    from rldbg.commands.dump import traced_job
    name, entry = traced_job(address, name, "rldbg export")
    print(f"rldbg export: collector {name} on the Ray cluster at {address}", file=sys.stderr)
    # The collector writes each batch to disk on arrival; export reads the same files.
    if not entry.get("spill_dir"):
        raise SystemExit(f"rldbg export: {name} keeps only its last steps in memory (trace.window) and "
                         "writes nothing until a trigger: `rldbg dump` writes that window now")
    return entry["spill_dir"]


def run(args) -> int:
    from rldbg.trace.export import export_spill
    if not (args.output.endswith(".json") or args.output.endswith(".json.gz")):
        return fail(f"rldbg export: output {args.output!r} must end in .json or .json.gz", 2)
    if bool(args.spill_dir) == bool(args.address):
        return fail("rldbg export: give either SPILL_DIR or --address (not both, not neither)", 2)
    try:
        spill = args.spill_dir or _spill_from_cluster(args.address, args.collector)
        damage: list = []
        info = export_spill(spill, args.output, damage=damage)   # damage noted on the way
    except (FileNotFoundError, ValueError) as e:
        return fail(f"rldbg export: {e}", 2)
    except OSError as e:   # the disk filled, the directory went away: after the checks, while writing
        return fail(f"rldbg export: cannot write {args.output!r}: {e.strerror or e}", 2)
    if damage:
        from rldbg.trace.spill import damage_summary
        print(f"rldbg export: WARNING: damaged spill, {len(damage)} bad region(s) skipped: {damage_summary(damage)}; "
              f"every valid record was recovered", file=sys.stderr)
    print(f"wrote {info['path']} ({info['events']} events) and its store {info['store']}")
    return 0
