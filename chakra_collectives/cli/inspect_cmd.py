"""``chakra-coll inspect``: per-rank statistics of an algorithm's or a workload's ET files."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from chakra_collectives.cli import options
from chakra_collectives.cli.app import command, console, err_console, print_json, say
from chakra_collectives.cli.options import JSON, size_option
from chakra_collectives.cli.tables import print_table
from chakra_collectives.errors import InputError

SCHEMA_VERSION = 1
"""Version of ``chakra-coll inspect --json`` (``schemas/inspect.schema.json``)."""

MAX_RANK_ROWS = 16
"""Ranks listed one per row; above this, the first and last 8 (the JSON has all)."""

KINDS = ("SEND", "RECV", "REDUCE", "COPY", "COMPUTE")


@command("inspect")
def inspect(
    prefix: Path = typer.Argument(..., metavar="PREFIX", help="ET files PREFIX.{rank}.et (or one of them): a collective algorithm or a workload."),
    size: Optional[str] = typer.Option(None, "--size", "-s", metavar="SIZE", help="Algorithms: report bytes for this collective size instead of the files' own."),
    kind: str = typer.Option(
        "auto", "--as", metavar="KIND",
        help="auto (a workload when the files hold COMM_COLL, MEM, METADATA, INVALID or CPU nodes, or no messages), workload or algorithm.",
    ),
    as_json: bool = JSON,
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
    """Per-rank statistics of an algorithm's or a workload's files.

    An algorithm: operations by kind, bytes sent and received, and the longest dependency
    chain, per rank and in total; and the critical path through messages. A workload: nodes
    by type, compute time and the critical path of compute per rank, collectives by type,
    group and size, process groups, and what reading repaired (the read policy flags are
    replay's).

    \b
    Example:
      chakra-coll inspect sample_traces/collectives/all_reduce_tacos
    """
    from chakra_collectives.converters.chakra_et import rank_files, read_algorithm
    from chakra_collectives.converters.chakra_et.read_policy import is_workload
    from chakra_collectives.summary import summarize
    from chakra_collectives.units import format_size

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
        print_json({"schema_version": SCHEMA_VERSION, "kind": "algorithm", "source": str(prefix), **stats})
        return
    say(f"{prefix}: {algo.describe()}, {format_size(stats['size_bytes'])}", style="bold")
    if algo.placement:
        from chakra_collectives.topology.groups import describe_group

        say(f"process group: rank i runs on the i-th of NPUs {describe_group(algo.placement)} (its routes name fabric nodes)")
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


def _inspect_workload(prefix: Path, policy: object, as_json: bool) -> None:
    from chakra_collectives.converters.chakra_et import read_workload
    from chakra_collectives.units import format_size, format_time_ns
    from chakra_collectives.workload.summary import summarize_workload

    workload = read_workload(prefix, policy)
    stats = summarize_workload(workload)
    if as_json:
        print_json({"schema_version": SCHEMA_VERSION, "kind": "workload", "source": str(prefix), **stats})
        return
    if stats["repairs"]:
        err_console.print(f"chakra-coll: {workload.repairs.summary()}", markup=False, soft_wrap=True)
    say(f"{prefix}: workload, {stats['num_ranks']} rank(s), {stats['nodes']:,} nodes", style="bold")
    ranks = stats["ranks"]
    shown = ranks if len(ranks) <= MAX_RANK_ROWS else ranks[:8] + [None] + ranks[-8:]
    rows = []
    for row in shown:
        if row is None:
            rows.append(["...", *([""] * 8)])
            continue
        types = row["types"]
        comp = types.get("COMP", 0)
        p2p = types.get("COMM_SEND", 0) + types.get("COMM_RECV", 0)
        other = row["nodes"] - comp - types.get("COMM_COLL", 0) - p2p
        rows.append([
            str(row["rank"]), f"{row['nodes']:,}", f"{comp - row['cpu_comp_nodes']:,}", f"{row['cpu_comp_nodes']:,}",
            str(types.get("COMM_COLL", 0)), str(p2p), str(other), format_time_ns(row["compute_ns"]),
            format_time_ns(row["critical_path_ns"]) + (" *" if row["blocked_by_cycles"] else ""),
        ])
    print_table(["rank", "nodes", "gpu", "cpu", "coll", "p2p", "other", "compute", "crit. path"], rows, right=("rank", "crit. path"))
    if len(ranks) > MAX_RANK_ROWS:
        say(f"(the first and last 8 of {len(ranks)} ranks; --json has all)", style="dim")
    if any(row["blocked_by_cycles"] for row in ranks):
        say("* some nodes sit on or behind a dependency cycle and never run (replay names the cycle)")
    if stats["collectives"]:
        console.print()
        rows = [[c["collective"], c["group"] or "all ranks", format_size(c["size_bytes"]), str(c["calls"]), str(c["ranks"])] for c in stats["collectives"]]
        print_table(["collective", "group", "size", "calls", "ranks"], rows, title="collectives", right=("size",))
    if stats["groups"]:
        say(f"process groups (pg_name): {', '.join(stats['groups'])}")
    say("gpu/cpu: COMP nodes; coll: COMM_COLL; p2p: COMM_SEND/RECV; crit. path: the longest chain of compute, collectives taking no time", style="dim")
