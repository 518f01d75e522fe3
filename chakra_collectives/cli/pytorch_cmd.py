"""``chakra-coll workload from-pytorch``: PyTorch profiler traces to workload ETs."""

from __future__ import annotations

import glob
from collections import Counter
from pathlib import Path
from typing import List, Optional

import typer

from chakra_collectives.cli.app import command, console, err_console, invocation, print_json, say
from chakra_collectives.cli.options import prefix_option, warn
from chakra_collectives.cli.tables import print_table
from chakra_collectives.cli.workload_cmd import workload_app
from chakra_collectives.converters.pytorch.convert import convert_pytorch
from chakra_collectives.errors import InputError
from chakra_collectives.units import format_size, format_time_ns
from chakra_collectives.workload import groups_path


def expand(patterns: list[str], what: str) -> list[Path]:
    """Paths as given, or every match of a glob pattern (``traces/rank*.json``)."""
    found: list[Path] = []
    for pattern in patterns:
        if Path(pattern).exists():
            found.append(Path(pattern))
        elif any(ch in pattern for ch in "*?["):
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise InputError(f"no {what} matches {pattern!r}")
            found.extend(Path(m) for m in matches)
        else:
            raise InputError(f"{what} not found", path=pattern)
    return found


SCHEMA_VERSION = 1
"""Version of ``chakra-coll workload from-pytorch --json`` (``schemas/from-pytorch.schema.json``)."""


@command("from-pytorch", group=workload_app)
def from_pytorch_command(
    host: List[str] = typer.Argument(..., help="PyTorch execution traces (ExecutionTraceObserver JSON, .json or .json.gz), one per rank; globs allowed. Kineto traces among them are recognized by their content."),
    kineto: Optional[List[str]] = typer.Option(None, "--kineto", "-k", help="Kineto traces (torch.profiler JSON) of the same runs, one per rank: GPU kernel times. Globs allowed; the files after the first are read as traces too and recognized as Kineto traces, so --kineto a.json b.json takes both."),
    output_text: str = typer.Option(
        ..., "--output", "-o", metavar="PREFIX", help="Write PREFIX.{rank}.et (and PREFIX.json when there are process groups); a folder (out/) means out/workload."
    ),
    replicate: Optional[int] = typer.Option(None, "--replicate", help="Run one rank's trace on N ranks (an SPMD job traced on one rank)."),
    strict: bool = typer.Option(False, "--strict", help="Refuse what the defaults repair in the traces (negative durations, malformed attributes, operators whose parent comes after them...)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Convert PyTorch profiler traces (execution trace schema 1.0.1 or later, + Kineto) into workload ETs that replay.

    GPU kernels become COMP nodes with their Kineto durations, host operators CPU COMP nodes, torch.distributed calls COMM_COLL nodes with their type, bytes and process group; dependencies are the host threads' call order, each stream's order, launches, waits and synchronizations. Without --kineto only the collectives (and host times, if recorded) remain.

    \b
    Example:
      chakra-coll workload from-pytorch 'traces/et_rank*.json' \\
        --kineto 'traces/kineto_rank*.json' -o out/step
    """
    output = prefix_option(output_text, "workload")
    hosts = expand(list(host), "execution trace")
    kinetos = expand(list(kineto), "Kineto trace") if kineto else None
    with err_console.status(f"converting {len(hosts)} trace(s)..."):
        result = convert_pytorch(hosts, kinetos, output, replicate=replicate, strict=strict)
    for warning in result.warnings:
        warn(warning)
    if as_json:
        num_ranks = len(result.paths) - (1 if result.groups else 0)
        print_json({"schema_version": SCHEMA_VERSION, "num_ranks": num_ranks, **result.as_dict()})
        return
    num_ranks = len(result.paths) - (1 if result.groups else 0)
    first = result.ranks[0]
    linked = f"Kineto linked by {first['linked_by']}" if first["kineto_trace"] else "no Kineto trace"
    say(
        f"{num_ranks} rank(s), execution trace schema {first['schema']}, {linked} "
        f"(rank 0: {first['host_ops_timed']:,} of {first['host_ops']:,} host operators timed)",
        style="bold",
    )
    shown = result.ranks if len(result.ranks) <= 16 else result.ranks[:8] + result.ranks[-8:]
    rows = [
        [str(r["rank"]), f"{r['nodes']:,}", f"{r['cpu_nodes']:,}", f"{r['gpu_nodes']:,}", str(r["collective_nodes"]),
         format_time_ns(r["cpu_us"] * 1000), format_time_ns(r["gpu_us"] * 1000)]
        for r in shown
    ]
    print_table(["rank", "nodes", "cpu", "gpu", "comm", "host cpu", "gpu busy"], rows)
    if len(shown) < len(result.ranks):
        say(f"(the first and last 8 of {len(result.ranks)} ranks; --json has all)", style="dim")
    calls = Counter((c["collective"], c["size_bytes"], c["group"]) for c in result.collectives)
    if calls:
        console.print()
        rows = [[kind, group or "all ranks", format_size(size), str(count)] for (kind, size, group), count in calls.items()]
        print_table(["collective", "group", "size", "calls"], rows, title="collectives of rank 0", right=("size",))
    else:
        say("no collectives found")
    extra = f" and {groups_path(output)}" if result.groups else ""
    say(f"written: {output}.{{rank}}.et ({num_ranks} files){extra}")
    groups = f" --comm-groups {groups_path(output)}" if result.groups else ""
    say(f"next: {invocation()} replay {output} -t switch:{num_ranks}{groups}")
