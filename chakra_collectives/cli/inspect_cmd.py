"""``chakra-coll inspect``: per-rank statistics of an algorithm file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from chakra_collectives.cli.app import command, print_json, say
from chakra_collectives.cli.options import JSON, size_option
from chakra_collectives.cli.tables import print_table

SCHEMA_VERSION = 1
"""Version of ``chakra-coll inspect --json`` (``schemas/inspect.schema.json``)."""

MAX_RANK_ROWS = 16
"""Ranks listed one per row; above this, the first and last 8 (the JSON has all)."""

KINDS = ("SEND", "RECV", "REDUCE", "COPY", "COMPUTE")


@command("inspect")
def inspect(
    prefix: Path = typer.Argument(..., metavar="PREFIX", help="Algorithm files PREFIX.{rank}.et (or one of them)."),
    size: Optional[str] = typer.Option(None, "--size", "-s", metavar="SIZE", help="Report bytes for this collective size instead of the files' own."),
    as_json: bool = JSON,
) -> None:
    """Per-rank statistics of an algorithm's files.

    Operations by kind, bytes sent and received, and the longest dependency chain, per rank
    and in total; and the critical path through messages.

    \b
    Example:
      chakra-coll inspect sample_traces/collectives/all_reduce_tacos
    """
    from chakra_collectives.converters.chakra_et import read_algorithm
    from chakra_collectives.summary import summarize
    from chakra_collectives.units import format_size

    algo = read_algorithm(prefix)
    stats = summarize(algo, size_option(size))
    if as_json:
        print_json({"schema_version": SCHEMA_VERSION, "source": str(prefix), **stats})
        return
    say(f"{prefix}: {algo.describe()}, {format_size(stats['size_bytes'])}", style="bold")
    kinds = [k for k in KINDS if stats["totals"]["ops"][k]]
    ranks = stats["ranks"]
    shown = ranks if len(ranks) <= MAX_RANK_ROWS else ranks[:8] + [None] + ranks[-8:]

    def row(label: str, values: dict) -> list[str]:
        return [label, *(f"{values['ops'][k]:,}" for k in kinds), format_size(values["bytes_sent"]), format_size(values["bytes_received"]), f"{values['longest_chain']:,}"]

    rows = [row(str(r["rank"]), r) if r is not None else ["...", *([""] * (len(kinds) + 3))] for r in shown]
    rows.append(row("total", stats["totals"]))
    print_table(["rank", *(k.lower() for k in kinds), "sent", "received", "longest chain"], rows, right=("rank", "sent", "received"))
    if len(ranks) > MAX_RANK_ROWS:
        say(f"(the first and last 8 of {len(ranks)} ranks; --json has all)", style="dim")
    say(f"critical path through messages: {stats['totals']['critical_path_ops']:,} operations")
