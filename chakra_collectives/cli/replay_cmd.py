"""``chakra-coll replay``: time a workload's ETs with collective algorithms on a topology."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from chakra_collectives.astra_system.report import replay_astra_sim
from chakra_collectives.cli import options
from chakra_collectives.cli.app import command, console, err_console, print_json
from chakra_collectives.errors import InputError
from chakra_collectives.converters.chakra_et import read_workload
from chakra_collectives.network.model import Mode
from chakra_collectives.replay import ProcessGroups, load_algorithms, replay, write_trace
from chakra_collectives.replay.algorithms import DEFAULT_ALGORITHMS
from chakra_collectives.replay.expand import CONCURRENCY
from chakra_collectives.synth.registry import names as synthesizer_names
from chakra_collectives.topology import load_topology
from chakra_collectives.units import format_size, format_time_ns

TIMELINE_AUTO_NODES = 100_000
"""``replay --json`` includes the timeline by default up to this many workload nodes."""


@command("replay")
def replay_command(
    workload: Path = typer.Argument(..., help="Workload ETs PREFIX.{rank}.et (or one of them)."),
    topology: str = typer.Option(..., "--topology", "-t", help="Topology spec (ring:8, torus2d:4x4, switch:16...) or file (ASTRA-sim network YAML, our YAML/JSON, GraphML, edge list)."),
    collective: Optional[List[str]] = typer.Option(None, "--collective", "-c", help="Algorithm for a collective type: all-reduce=out/ar (repeatable); a bare PREFIX takes the type from its metadata."),
    default_algorithm: str = typer.Option(DEFAULT_ALGORITHMS, "--default-algorithm", help=f"Built-in algorithms for collectives without --collective, per type: TYPE=NAME entries and *=NAME, each NAME one of {', '.join(synthesizer_names())} or a fallback chain tacos|ring; over the default, and *=NAME serves only the types NAME implements."),
    comm_groups: Optional[Path] = typer.Option(None, "--comm-groups", help="ASTRA-sim communicator-group JSON: {pg_name: [ranks...]}."),
    mode: str = typer.Option("tacos", "--mode", help="Network model: tacos (exact ns, link busy latency + size/bw) or astra-sim (ASTRA-sim's congestion-aware model, to the ns)."),
    system: Optional[Path] = typer.Option(None, "--system", help="With --mode astra-sim: ASTRA-sim's system JSON; models ASTRA-sim as a whole -- native collectives (splits, phases, queues, endpoint and local-memory delays), custom ones, both backends."),
    astra_sim_backend: Optional[str] = typer.Option(None, "--astra-sim-backend", help="With --system: aware (congestion-aware, one dimension) or unaware (any dimensions, no contention); default: what ASTRA-sim can run for the network."),
    rescale: bool = typer.Option(False, "--rescale", help="In astra-sim mode, scale --collective algorithms to each call's size (ASTRA-sim runs a custom collective at the size it was written for)."),
    concurrency: str = typer.Option("unlimited", "--concurrency", help="unlimited (dependencies only) or astra-sim (per rank one GPU COMP, one CPU op, one communication in flight)."),
    reduce_bandwidth: Optional[float] = typer.Option(None, "--reduce-bandwidth", help="GB/s of reductions inside collectives that carry no duration (default: they take no time)."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Write a Chrome-trace / Perfetto JSON (a track per rank and per link)."),
    top_links: int = typer.Option(5, "--top-links", help="How many of the busiest links to list."),
    timeline: Optional[bool] = typer.Option(None, "--timeline/--no-timeline", help=f"With --json: include every node's interval and the links' utilization over time (for chakra-coll plot); default: on up to {TIMELINE_AUTO_NODES:,} nodes."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
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
    """Replay a workload: every COMM_COLL node runs its collective algorithm on the topology.

    Files other tools wrote are repaired as the policy flags say (one line tells what was repaired; --strict refuses instead).

    Example: [bold]chakra-coll replay sample_traces/workload/train_step -t sample_traces/topology/two_servers.yaml -c all-reduce=sample_traces/collectives/all_reduce_tacos --trace step.json[/bold]

    With ASTRA-sim's own configuration: [bold]chakra-coll replay step -t network.yml --mode astra-sim --system system.json[/bold] predicts every rank's "sys\\[i] finished, T cycles".
    """
    parsed_mode = Mode.parse(mode)
    if system is not None or astra_sim_backend is not None:
        if parsed_mode is not Mode.ASTRA_SIM:
            raise InputError("--system and --astra-sim-backend model ASTRA-sim: add --mode astra-sim")
        if system is None:
            raise InputError("--astra-sim-backend needs --system (ASTRA-sim's system JSON)")
        _replay_astra_sim(workload, topology, system, astra_sim_backend, comm_groups, list(collective or []), rescale, as_json)
        return
    if concurrency not in CONCURRENCY:
        raise InputError(f"unknown --concurrency {concurrency!r} (valid: {', '.join(CONCURRENCY)})")
    with err_console.status("reading the workload...") as status:
        policy = options.read_policy(strict, dangling=dangling, self_deps=self_deps, ctrl_deps=ctrl_deps, cpu_comm=cpu_comm,
                                     int_bools=int_bools, invalid_nodes=invalid_nodes, incomplete=incomplete, other_times=other_times)
        work = read_workload(workload, policy)
        with_timeline = as_json and (timeline if timeline is not None else len(work) <= TIMELINE_AUTO_NODES)
        topo = load_topology(topology)
        algorithms = load_algorithms(list(collective or []))
        groups = ProcessGroups.load(comm_groups, num_ranks=work.num_ranks) if comm_groups else None
        status.update(f"replaying {len(work)} nodes on {topo.name}...")
        result = replay(
            work,
            topo,
            algorithms=algorithms,
            default_algorithm=default_algorithm,
            groups=groups,
            mode=mode,
            reduce_bandwidth_gbps=reduce_bandwidth,
            concurrency=concurrency,
            record_links=trace is not None or with_timeline,
            rescale=True if rescale else None,
        )
        if trace is not None:
            status.update(f"writing {trace}...")
            write_trace(result, topo, trace)
    summary = work.repairs.summary()
    if summary:
        err_console.print(f"chakra-coll: {summary}", markup=False, soft_wrap=True)
    for warning in result.warnings:
        err_console.print(f"chakra-coll: warning: {warning}", markup=False, soft_wrap=True)
    if as_json:
        document = result.as_dict(top_links=top_links, timeline=with_timeline)
        document["repairs"] = work.repairs.describe()
        print_json(document)
        return
    _print(result, top_links)
    if trace is not None:
        console.print(f"trace: {trace} (open in https://ui.perfetto.dev or chrome://tracing)")


def _replay_astra_sim(workload: Path, topology: str, system: Path, backend: str | None, comm_groups: Path | None, collectives: list[str], rescale: bool, as_json: bool) -> None:
    with err_console.status("running the ASTRA-sim model..."):
        result = replay_astra_sim(workload, load_topology(topology), system, backend=backend, comm_groups=comm_groups, collectives=collectives, rescale=rescale)
    for warning in result.warnings:
        err_console.print(f"chakra-coll: warning: {warning}", markup=False, soft_wrap=True)
    if as_json:
        print_json(result.as_dict())
        return
    console.print(
        f"[bold]{result.workload}[/bold] as ASTRA-sim's {result.backend} binary runs it: [bold]{format_time_ns(result.total_ns)}[/bold] "
        f"({result.total_ns:,} ns)\nnetwork {result.network}\nsystem {result.system}"
    )
    if result.collectives:
        table = Table(title="collectives (rank 0)", show_edge=False, pad_edge=False)
        for column in ("node", "collective", "size", "implementation", "start ns", "time"):
            table.add_column(column, justify="left" if column in ("collective", "implementation") else "right")
        rows = result.collectives if len(result.collectives) <= 40 else result.collectives[:20] + result.collectives[-20:]
        for c in rows:
            time = "-" if c["end_ns"] is None else format_time_ns(c["end_ns"] - c["start_ns"])
            table.add_row(str(c["node"]), c["collective"], format_size(c["size_bytes"]), c["implementation"], f"{c['start_ns']:,}", time)
        console.print(table)
    table = Table(title="ranks: sys\\[i] finished, T cycles", show_edge=False, pad_edge=False)
    for column in ("rank", "finish ns", "exposed comm"):
        table.add_column(column, justify="right")
    ranks = result.ranks if len(result.ranks) <= 32 else result.ranks[:16] + result.ranks[-16:]
    for r in ranks:
        finish = "never" if r["finish_ns"] is None else f"{r['finish_ns']:,}"
        exposed = "-" if r["exposed_communication_ns"] is None else format_time_ns(r["exposed_communication_ns"])
        table.add_row(str(r["rank"]), finish, exposed)
    console.print(table)
    if len(ranks) < len(result.ranks):
        console.print(f"(showing 32 of {len(result.ranks)} ranks; --json has all)")


def _print(result, top_links: int) -> None:
    console.print(
        f"[bold]{result.workload}[/bold] on {result.topology} ({result.mode} model, {result.concurrency} concurrency): "
        f"[bold]{format_time_ns(result.total_ns)}[/bold] ({result.total_ns:,.0f} ns); "
        f"{result.num_nodes:,} workload nodes, {result.num_tasks:,} tasks simulated"
    )
    if result.collectives:
        grouped = any(c.group is not None for c in result.collectives)
        table = Table(title="collectives", show_edge=False, pad_edge=False)
        columns = ["#", "collective", *(["group"] if grouped else []), "size", "algorithm", "start ns", "time", "busbw GB/s"]
        for column in columns:
            table.add_column(column, justify="left" if column in ("collective", "algorithm", "group") else "right")
        shown = result.collectives if len(result.collectives) <= 40 else result.collectives[:20] + result.collectives[-20:]
        for c in shown:
            group = ["all" if c.group is None else c.group] if grouped else []
            table.add_row(
                str(c.index), c.collective, *group, format_size(c.size_bytes), c.algorithm,
                f"{c.start_ns:,.0f}", format_time_ns(c.time_ns), f"{c.bus_bandwidth_gbps:.2f}",
            )
        console.print(table)
        if len(shown) < len(result.collectives):
            console.print(f"(showing 40 of {len(result.collectives)} collectives; --json has all, with algorithm bandwidth)")
    table = Table(title="ranks", show_edge=False, pad_edge=False)
    for column in ("rank", "finish", "compute", "communication", "exposed comm"):
        table.add_column(column, justify="right")
    ranks = result.ranks if len(result.ranks) <= 32 else result.ranks[:16] + result.ranks[-16:]
    for r in ranks:
        table.add_row(str(r.rank), f"{r.finish_ns:,.0f}", format_time_ns(r.compute_ns), format_time_ns(r.communication_ns), format_time_ns(r.exposed_communication_ns))
    console.print(table)
    if len(ranks) < len(result.ranks):
        console.print(f"(showing 32 of {len(result.ranks)} ranks; --json has all)")
    if result.links and top_links > 0:
        table = Table(title="busiest links", show_edge=False, pad_edge=False)
        for column in ("link", "src->dst", "busy", "utilization", "bytes", "messages"):
            table.add_column(column, justify="right")
        for l in result.links[:top_links]:
            table.add_row(str(l.link), f"{l.src}->{l.dst}", format_time_ns(l.busy_ns), f"{l.utilization:.1%}", format_size(l.bytes), str(l.messages))
        console.print(table)
