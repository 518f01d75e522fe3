"""``chakra-coll inspect``: per-rank statistics of an algorithm file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from chakra_collectives.cli.app import command, console, print_json
from chakra_collectives.cli.options import size_option
from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.ir import OpKind
from chakra_collectives.summary import summarize
from chakra_collectives.units import format_size


@command("inspect")
def inspect(
    prefix: Path = typer.Argument(..., help="Algorithm files PREFIX.{rank}.et (or one of them)."),
    size: Optional[str] = typer.Option(None, "--size", help="Report bytes for this collective size instead of the files' own."),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
) -> None:
    """Nodes by type, bytes sent and received, longest dependency chain: per rank and in total.

    Example: [bold]chakra-coll inspect out/ar --json[/bold]
    """
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
