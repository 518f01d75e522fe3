"""``chakra-coll replay``: time a workload's ETs with collective algorithms on a topology."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, List, Optional

import typer

from chakra_collectives.cli import options
from chakra_collectives.cli.app import command, console, err_console, print_json, say
from chakra_collectives.cli.options import JSON, NETWORK_MODEL, OLD_MODE, REDUCE_BANDWIDTH, TOPOLOGY, merged, network_model_option, warn
from chakra_collectives.cli.progress_view import showing_progress
from chakra_collectives.cli.tables import print_table
from chakra_collectives.errors import InputError
from chakra_collectives.replay.algorithms import DEFAULT_ALGORITHMS
from chakra_collectives.synth.registry import names as synthesizer_names
from chakra_collectives.units import format_size, format_time_ns

TIMELINE_AUTO_NODES = 100_000
"""``replay --json`` includes the timeline by default up to this many workload nodes."""

SCHEMA_VERSION = 1
"""Version of ``chakra-coll replay --json`` (``schemas/replay.schema.json``)."""

MAX_RANK_ROWS = 16
"""Ranks listed one per row; more are summarized (min, median, max; the slowest)."""


@command("replay")
def replay_command(
    workload: Path = typer.Argument(..., metavar="WORKLOAD", help="Workload ETs PREFIX.{rank}.et (or one of them)."),
    topology: str = TOPOLOGY,
    algorithm: Optional[List[str]] = typer.Option(
        None, "--algorithm", "-a", metavar="TYPE=PREFIX",
        help="Files of the algorithm a collective type runs, e.g. all-reduce=out/ar (repeatable); a bare PREFIX takes the type from the files; "
        "all-reduce=out/dp_{group} reads every set synth --groups FILE -o out/dp wrote, each serving the group it was placed on (other groups run --default-algorithm's).",
    ),
    old_algorithm: Optional[List[str]] = typer.Option(None, "--collective", "-c", hidden=True, help="Deprecated: --algorithm."),
    override_collective: bool = typer.Option(
        False, "--override-collective", help="Run TYPE=PREFIX files as TYPE even when they say they implement another collective."
    ),
    default_algorithm: str = typer.Option(
        DEFAULT_ALGORITHMS, "--default-algorithm", metavar="TYPE=NAME,...", show_default=False,
        help=f"What collectives without --algorithm run, per type: TYPE=NAME entries and *=NAME, each NAME one of {', '.join(synthesizer_names())} "
        "or a fallback chain tacos|ring, made for each group size; over the default, and *=NAME serves only the types NAME implements. "
        f"Default: {DEFAULT_ALGORITHMS.replace(',', ', ')}.",
    ),
    in_step_choice: bool = typer.Option(
        True, "--in-step-choice/--no-in-step-choice",
        help="Time each kind of call (collective, concurrent groups, size) a --default-algorithm producer other than the built-in serves "
        "against the built-in (ring, direct...) in the step, and run the built-in where the producer's is not faster (--json: step_choices).",
    ),
    comm_groups: Optional[Path] = typer.Option(
        None, "--comm-groups", metavar="FILE",
        help="ASTRA-sim's communicator-group JSON: {\"pg_name\": [ranks, ...], ...}. Default: PREFIX.json beside the ETs when there is one.",
    ),
    network_model: Optional[str] = NETWORK_MODEL,
    old_mode: Optional[str] = OLD_MODE,
    system: Optional[Path] = typer.Option(
        None, "--system", metavar="FILE",
        help="With --network-model astra-sim: ASTRA-sim's system JSON; models ASTRA-sim as a whole -- native collectives (splits, phases, queues, endpoint and local-memory delays), custom ones, both backends.",
    ),
    astra_sim_backend: Optional[str] = typer.Option(
        None, "--astra-sim-backend", metavar="aware|unaware",
        help="With --system: aware (congestion-aware, one dimension) or unaware (any dimensions, no contention); default: what ASTRA-sim can run for the network.",
    ),
    rescale: bool = typer.Option(
        False, "--rescale", help="In the astra-sim network model, scale --algorithm files to each call's size (ASTRA-sim runs a custom collective at the size it was written for)."
    ),
    concurrency: str = typer.Option(
        "unlimited", "--concurrency", metavar="RULE",
        help="unlimited (dependencies only) or astra-sim (per rank one GPU COMP, one CPU op, one communication in flight).",
    ),
    reduce_bandwidth_gbps: Optional[float] = REDUCE_BANDWIDTH,
    old_reduce_bandwidth: Optional[float] = typer.Option(None, "--reduce-bandwidth", hidden=True, help="Deprecated: --reduce-bandwidth-gbps."),
    trace: Optional[Path] = typer.Option(
        None, "--trace", metavar="FILE", help="Write a Perfetto / Chrome trace (JSON): per rank a compute and a collective track, per link a track, message flows."
    ),
    top_links: int = typer.Option(5, "--top-links", metavar="N", help="How many of the busiest links to list."),
    timeline: Optional[bool] = typer.Option(
        None, "--timeline/--no-timeline",
        help=f"With --json: include every node's interval and the links' utilization over time (for chakra-coll plot). Default: on up to {TIMELINE_AUTO_NODES:,} nodes.",
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
    """Time a workload's ETs with its collectives expanded, on a topology.

    Every COMM_COLL node runs the sends, receives and reductions of its collective's
    algorithm, scaled to the node's size, beside compute; prints the total time, per-rank
    finish and exposed communication, per-collective bandwidth and the busiest links. Files
    other tools wrote are repaired as the policy flags say (one line tells what was
    repaired; --strict refuses instead).

    \b
    Example:
      chakra-coll replay sample_traces/workload/train_step \\
        -t sample_traces/topology/two_servers.yaml \\
        -a all-reduce=sample_traces/collectives/all_reduce_tacos --trace step.json

    With ASTRA-sim's own configuration, it predicts every rank's "sys[i] finished, T cycles":

    \b
      chakra-coll replay step -t network.yml --network-model astra-sim \\
        --system system.json
    """
    from chakra_collectives.converters.chakra_et import read_workload
    from chakra_collectives.replay import write_trace
    from chakra_collectives.topology import load_topology
    from chakra_collectives.workload_replay import check_replay_options, replay_workload

    model = network_model_option(network_model, old_mode)
    reduce_gbps = merged(reduce_bandwidth_gbps, "--reduce-bandwidth-gbps", old_reduce_bandwidth, "--reduce-bandwidth", None)
    given = list(algorithm or [])
    if old_algorithm:
        warn("-c/--collective TYPE=PREFIX is deprecated for replay and will be removed in the next release; use -a/--algorithm TYPE=PREFIX (-c names a collective type in every other command)")
        given += old_algorithm
    check_replay_options(network_model=model, system=system, astra_sim_backend=astra_sim_backend, concurrency=concurrency)
    if system is not None:
        groups_file = _groups_file(workload, comm_groups)
        with showing_progress(err_console, "ASTRA-sim model", enabled=not as_json):
            modeled = replay_workload(workload, load_topology(topology), network_model=model, system=system, astra_sim_backend=astra_sim_backend,
                                      algorithms=given, override_collective=override_collective, comm_groups=groups_file, rescale=rescale)
        _print_astra_sim(modeled, as_json)
        return
    policy = options.read_policy(strict, dangling=dangling, self_deps=self_deps, ctrl_deps=ctrl_deps, cpu_comm=cpu_comm,
                                 int_bools=int_bools, invalid_nodes=invalid_nodes, incomplete=incomplete, other_times=other_times)
    with showing_progress(err_console, "replay", enabled=not as_json):
        work = read_workload(workload, policy)
        with_timeline = as_json and (timeline if timeline is not None else len(work) <= TIMELINE_AUTO_NODES)
        topo = load_topology(topology)
        result = replay_workload(
            work,
            topo,
            network_model=model,
            algorithms=given,
            override_collective=override_collective,
            default_algorithm=default_algorithm,
            in_step_choice=in_step_choice,
            comm_groups=_groups_file(workload, comm_groups, uses_groups=any(name is not None for name in work.pg_name)),
            concurrency=concurrency,
            reduce_bandwidth_gbps=reduce_gbps,
            rescale=rescale,
            record_links=trace is not None or with_timeline,
        )
        if trace is not None:
            write_trace(result, topo, trace)
    summary = work.repairs.summary()
    if summary:
        err_console.print(f"chakra-coll: {summary}", markup=False, soft_wrap=True)
    for message in result.warnings:
        warn(message)
    if as_json:
        print_json({"schema_version": SCHEMA_VERSION, **result.as_dict(top_links=top_links, timeline=with_timeline)})
        return
    _print(result, top_links)
    if trace is not None:
        say(f"trace: {trace} (open it in https://ui.perfetto.dev)")


def _groups_file(workload: Path, given: Path | None, *, uses_groups: bool = True) -> Path | None:
    """``--comm-groups``, else ``PREFIX.json`` beside the ETs when it is a communicator-group
    file (what ``workload hybrid`` and ``pytorch`` write there) and the workload names groups;
    the choice is said on stderr."""
    from chakra_collectives.converters.chakra_et import rank_files
    from chakra_collectives.converters.chakra_et.reader import split_prefix
    from chakra_collectives.replay import ProcessGroups
    from chakra_collectives.workload import groups_path

    if given is not None or not uses_groups:
        return given
    beside = groups_path(split_prefix(workload))
    if not beside.is_file():
        return None
    try:
        ProcessGroups.load(beside, num_ranks=len(rank_files(workload)))
    except InputError:  # some other JSON (a trace, a report) of the same name
        return None
    err_console.print(f"chakra-coll: communicator groups from {beside} (beside the ETs; --comm-groups FILE gives others)", markup=False, soft_wrap=True, highlight=False)
    return beside


def _print_astra_sim(result: Any, as_json: bool) -> None:
    for message in result.warnings:
        warn(message)
    if as_json:
        print_json({"schema_version": SCHEMA_VERSION, **result.as_dict()})
        return
    say(f"{result.workload} as ASTRA-sim's {result.backend} binary runs it: {format_time_ns(result.total_ns)} ({result.total_ns:,} ns)", style="bold")
    say(f"network {result.network}")
    say(f"system {result.system}")
    if result.collectives:
        console.print()
        calls = result.collectives if len(result.collectives) <= 40 else result.collectives[:20] + result.collectives[-20:]
        rows = [
            [str(c["node"]), c["collective"], format_size(c["size_bytes"]), c["implementation"], format_time_ns(c["start_ns"]),
             "-" if c["end_ns"] is None else format_time_ns(c["end_ns"] - c["start_ns"])]
            for c in calls
        ]
        print_table(["node", "collective", "size", "implementation", "start", "time"], rows, title="collectives of rank 0", right=("size",))
        if len(calls) < len(result.collectives):
            say(f"(the first and last 20 of {len(result.collectives)} calls; --json has all)", style="dim")
    console.print()
    ranks = result.ranks if len(result.ranks) <= 32 else result.ranks[:16] + result.ranks[-16:]
    rows = [
        [str(r["rank"]), "never" if r["finish_ns"] is None else f"{r['finish_ns']:,}", "-" if r["exposed_communication_ns"] is None else format_time_ns(r["exposed_communication_ns"])]
        for r in ranks
    ]
    print_table(["rank", "finish (cycles)", "exposed comm"], rows, title="ranks: what ASTRA-sim prints as sys[i] finished, T cycles (1 cycle = 1 ns)", right=("finish (cycles)",))
    if len(ranks) < len(result.ranks):
        say(f"(the first and last 16 of {len(result.ranks)} ranks; --json has all)", style="dim")


def _print(result: Any, top_links: int) -> None:
    exact = f" ({result.total_ns:,.0f} ns)" if result.network_model == "astra-sim" else ""  # to hold beside ASTRA-sim's cycles
    say(
        f"{result.workload} on {result.topology}: {format_time_ns(result.total_ns)}{exact} "
        f"({result.network_model} network model, {result.concurrency} concurrency; {len(result.ranks)} rank{'s' if len(result.ranks) != 1 else ''}, "
        f"{result.num_nodes:,} workload nodes, {result.num_tasks:,} tasks simulated)",
        style="bold",
    )
    if result.collectives:
        console.print()
        _print_collectives(result.collectives)
    console.print()
    _print_ranks(result.ranks)
    if result.links and top_links > 0:
        console.print()
        rows = [
            [str(l.link), f"{l.src}->{l.dst}", format_time_ns(l.busy_ns), f"{l.utilization:.1%}", format_size(l.bytes), f"{l.messages:,}"]
            for l in result.links[:top_links]
        ]
        print_table(["link", "src->dst", "busy", "utilization", "bytes", "messages"], rows, title=f"busiest {len(rows)} of {len(result.links)} links")


def _print_collectives(collectives: list) -> None:
    """One row per kind of call (collective, group, size, algorithm): calls, time and bus bandwidth."""
    kinds: dict[tuple, list] = defaultdict(list)
    for c in collectives:
        kinds[(c.collective, "all" if c.group is None else c.group, c.size_bytes, c.algorithm)].append(c)
    grouped = any(c.group is not None for c in collectives)
    def order(kind: tuple) -> tuple:
        name, group, size, algo = kind
        return (name, (0, int(group)) if str(group).isdigit() else (1, str(group)), size, algo)

    rows = []
    for (name, group, size, algo), calls in sorted(kinds.items(), key=lambda item: order(item[0])):
        times = [c.time_ns for c in calls]
        row = [name, *([group] if grouped else []), format_size(size), str(len(calls)), algo, format_time_ns(statistics.mean(times))]
        row += [format_time_ns(max(times)), f"{statistics.mean(c.bus_bandwidth_gbps for c in calls):.1f}"]
        rows.append(row)
    header = ["collective", *(["group"] if grouped else []), "size", "calls", "algorithm", "mean", "max", "busbw GB/s"]
    print_table(header, rows, title=f"{len(collectives)} collective calls: time per call, mean and max (--json lists each)", right=("size",))


def _print_ranks(ranks: list) -> None:
    columns = ["finish", "compute", "communication", "exposed comm"]
    values = [[r.finish_ns, r.compute_ns, r.communication_ns, r.exposed_communication_ns] for r in ranks]
    if len(ranks) <= MAX_RANK_ROWS:
        rows = [[str(r.rank), *(format_time_ns(v) for v in row)] for r, row in zip(ranks, values)]
        print_table(["rank", *columns], rows, title="ranks")
        return
    rows = []
    for label, pick in (("min", min), ("median", statistics.median), ("max", max)):
        rows.append([label, *(format_time_ns(pick(row[i] for row in values)) for i in range(len(columns)))])
    slowest = max(ranks, key=lambda r: r.finish_ns)
    print_table(["ranks", *columns], rows, title=f"{len(ranks)} ranks (--json lists each)", right=columns)
    say(f"slowest: rank {slowest.rank} (finishes at {format_time_ns(slowest.finish_ns)})", style="dim")
