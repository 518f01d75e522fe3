"""``chakra-coll inspect``: per-rank statistics of an algorithm's or a workload's ET files."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from chakra_collectives.cli import options
from chakra_collectives.cli.app import command, console, err_console, print_json
from chakra_collectives.cli.options import size_option
from chakra_collectives.converters.chakra_et import rank_files, read_algorithm, read_workload
from chakra_collectives.converters.chakra_et.read_policy import ReadPolicy, is_workload
from chakra_collectives.errors import InputError
from chakra_collectives.ir import OpKind
from chakra_collectives.summary import summarize
from chakra_collectives.units import format_size, format_time_ns
from chakra_collectives.workload.summary import summarize_workload


@command("inspect")
def inspect(
    prefix: Path = typer.Argument(..., help="ET files PREFIX.{rank}.et (or one of them): a collective algorithm or a workload."),
    size: Optional[str] = typer.Option(None, "--size", help="Algorithms: report bytes for this collective size instead of the files' own."),
    kind: str = typer.Option("auto", "--as", help="auto (a workload when the files hold COMM_COLL, MEM, METADATA, INVALID or CPU nodes, or no messages), workload or algorithm."),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
    strict: bool = options.STRICT,
    dangling: Optional[str] = options.DANGLING,
    self_deps: Optional[str] = options.SELF_DEPS,
    ctrl_deps: Optional[str] = options.CTRL_DEPS,
    cpu_comm: Optional[str] = options.CPU_COMM,
    int_bools: Optional[str] = options.INT_BOOLS,
    invalid_nodes: Optional[str] = options.INVALID_NODES,
    incomplete: Optional[str] = options.INCOMPLETE,
    other_times: Optional[bool] = options.OTHER_TIMES,
) -> None:
    """Nodes by type, bytes sent and received, longest dependency chain: per rank and in total.

    For a workload: nodes by type, compute time and the critical path of compute per rank, collectives by type, group and size, process groups, and what reading repaired (the read policy flags are replay's).

    Example: [bold]chakra-coll inspect out/ar --json[/bold]
    """
    if kind not in ("auto", "workload", "algorithm"):
        raise InputError(f"unknown --as {kind!r} (valid: auto, workload, algorithm)")
    if kind == "workload" or (kind == "auto" and is_workload(rank_files(prefix))):
        policy = options.read_policy(strict, dangling=dangling, self_deps=self_deps, ctrl_deps=ctrl_deps, cpu_comm=cpu_comm,
                                     int_bools=int_bools, invalid_nodes=invalid_nodes, incomplete=incomplete, other_times=other_times)
        _inspect_workload(prefix, policy, as_json)
        return
    algo = read_algorithm(prefix)
    stats = summarize(algo, size_option(size))
    if as_json:
        print_json(stats)
        return
    console.print(f"[bold]{prefix}[/bold]: {algo.describe()}, {format_size(stats['size_bytes'])}")
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("rank", justify="right")
    for kind in OpKind:
        table.add_column(kind.name, justify="right")
    for column in ("sent", "received", "longest chain"):
        table.add_column(column, justify="right")
    rows = stats["ranks"] if len(stats["ranks"]) <= 64 else stats["ranks"][:32] + stats["ranks"][-32:]
    for row in rows:
        table.add_row(
            str(row["rank"]),
            *(str(row["ops"][k.name]) for k in OpKind),
            format_size(row["bytes_sent"]),
            format_size(row["bytes_received"]),
            str(row["longest_chain"]),
        )
    totals = stats["totals"]
    table.add_row(
        "total",
        *(str(totals["ops"][k.name]) for k in OpKind),
        format_size(totals["bytes_sent"]),
        format_size(totals["bytes_received"]),
        str(totals["longest_chain"]),
        style="bold",
    )
    console.print(table)
    if len(stats["ranks"]) > 64:
        console.print(f"(showing the first and last 32 of {len(stats['ranks'])} ranks; --json has all)")
    console.print(f"critical path through messages: {totals['critical_path_ops']} operations")


def _inspect_workload(prefix: Path, policy: ReadPolicy, as_json: bool) -> None:
    workload = read_workload(prefix, policy)
    stats = summarize_workload(workload)
    if as_json:
        print_json(stats)
        return
    if stats["repairs"]:
        err_console.print(f"chakra-coll: {workload.repairs.summary()}", markup=False, soft_wrap=True)
    console.print(f"[bold]{prefix}[/bold]: workload, {stats['num_ranks']} rank(s), {stats['nodes']:,} nodes")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("rank", "nodes", "gpu", "cpu", "coll", "p2p", "other", "compute", "crit. path"):
        table.add_column(column, justify="right")
    rows = stats["ranks"] if len(stats["ranks"]) <= 32 else stats["ranks"][:16] + stats["ranks"][-16:]
    for row in rows:
        types = row["types"]
        comp = types.get("COMP", 0)
        p2p = types.get("COMM_SEND", 0) + types.get("COMM_RECV", 0)
        other = row["nodes"] - comp - types.get("COMM_COLL", 0) - p2p
        table.add_row(
            str(row["rank"]), f"{row['nodes']:,}", f"{comp - row['cpu_comp_nodes']:,}", f"{row['cpu_comp_nodes']:,}",
            str(types.get("COMM_COLL", 0)), str(p2p), str(other), format_time_ns(row["compute_ns"]),
            format_time_ns(row["critical_path_ns"]) + (" *" if row["blocked_by_cycles"] else ""),
        )
    console.print(table)
    if len(stats["ranks"]) > 32:
        console.print(f"(showing the first and last 16 of {len(stats['ranks'])} ranks; --json has all)")
    if any(row["blocked_by_cycles"] for row in stats["ranks"]):
        console.print("* some nodes sit on or behind a dependency cycle and never run (replay names the cycle)")
    if stats["collectives"]:
        table = Table(show_edge=False, pad_edge=False, title="collectives")
        for column in ("collective", "group", "size", "calls", "ranks"):
            table.add_column(column, justify="left" if column in ("collective", "group") else "right")
        for c in stats["collectives"]:
            table.add_row(c["collective"], c["group"] or "all ranks", format_size(c["size_bytes"]), str(c["calls"]), str(c["ranks"]))
        console.print(table)
    if stats["groups"]:
        console.print(f"process groups (pg_name): {', '.join(stats['groups'])}")
    console.print("gpu/cpu: COMP nodes; coll: COMM_COLL; p2p: COMM_SEND/RECV")
    console.print("crit. path: the longest chain of compute, collectives taking no time")
