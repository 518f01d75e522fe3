"""``chakra-coll workload from-pytorch``: PyTorch profiler traces to workload ETs."""

from __future__ import annotations

import glob
from collections import Counter
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from chakra_collectives.cli.app import command, console, err_console, print_json
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


@command("from-pytorch", group=workload_app)
def from_pytorch_command(
    host: List[str] = typer.Argument(..., help="PyTorch execution traces (ExecutionTraceObserver JSON, .json or .json.gz), one per rank; globs allowed."),
    kineto: Optional[List[str]] = typer.Option(None, "--kineto", "-k", help="Kineto traces (torch.profiler JSON) of the same runs, one per rank (repeatable; globs allowed): GPU kernel times."),
    output: Path = typer.Option(..., "--output", "-o", help="Write PREFIX.{rank}.et (and PREFIX.json when there are process groups)."),
    replicate: Optional[int] = typer.Option(None, "--replicate", help="Run one rank's trace on N ranks (an SPMD job traced on one rank)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Convert PyTorch profiler traces (execution trace schema 1.0.1 or later, + Kineto) into workload ETs that replay.

    GPU kernels become COMP nodes with their Kineto durations, host operators CPU COMP nodes, torch.distributed calls COMM_COLL nodes with their type, bytes and process group; dependencies are the host threads' call order, each stream's order, launches, waits and synchronizations. Without --kineto only the collectives (and host times, if recorded) remain.

    Example: [bold]chakra-coll workload from-pytorch 'traces/et_rank*.json' --kineto 'traces/kineto_rank*.json' -o out/step[/bold]
    """
    hosts = expand(list(host), "execution trace")
    kinetos = expand(list(kineto), "Kineto trace") if kineto else None
    with err_console.status(f"converting {len(hosts)} trace(s)..."):
        result = convert_pytorch(hosts, kinetos, output, replicate=replicate)
    for warning in result.warnings:
        err_console.print(f"chakra-coll: warning: {warning}", markup=False, soft_wrap=True)
    if as_json:
        print_json(result.as_dict())
        return
    num_ranks = len(result.paths) - (1 if result.groups else 0)
    first = result.ranks[0]
    linked = f"Kineto linked by {first['linked_by']}" if first["kineto_trace"] else "no Kineto trace"
    console.print(
        f"[bold]{num_ranks} rank(s)[/bold], execution trace schema {first['schema']}, {linked} "
        f"(rank 0: {first['host_ops_timed']:,} of {first['host_ops']:,} host operators timed)"
    )
    table = Table(show_edge=False, pad_edge=False)
    for column in ("rank", "nodes", "cpu", "gpu", "comm", "host cpu", "gpu busy"):
        table.add_column(column, justify="right")
    shown = result.ranks if len(result.ranks) <= 16 else result.ranks[:8] + result.ranks[-8:]
    for r in shown:
        table.add_row(
            str(r["rank"]), f"{r['nodes']:,}", f"{r['cpu_nodes']:,}", f"{r['gpu_nodes']:,}", str(r["collective_nodes"]),
            format_time_ns(r["cpu_us"] * 1000), format_time_ns(r["gpu_us"] * 1000),
        )
    console.print(table)
    calls = Counter((c["collective"], c["size_bytes"], c["group"]) for c in result.collectives)
    if calls:
        table = Table(show_edge=False, pad_edge=False, title="collectives of rank 0")
        for column in ("collective", "group", "size", "calls"):
            table.add_column(column, justify="left" if column in ("collective", "group") else "right")
        for (kind, size, group), count in calls.items():
            table.add_row(kind, group or "all ranks", format_size(size), str(count))
        console.print(table)
    else:
        console.print("no collectives found")
    extra = f" and {groups_path(output)}" if result.groups else ""
    console.print(f"written: {output}.{{rank}}.et ({num_ranks} files){extra}")
    groups = f" --comm-groups {groups_path(output)}" if result.groups else ""
    console.print(f"next: chakra-coll replay {output} -t switch:{num_ranks}{groups}", soft_wrap=True)
