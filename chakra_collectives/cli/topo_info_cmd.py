"""``chakra-coll topo-info``: what a topology offers collectives (ports, diameter, bisection, bounds, BFB)."""

from __future__ import annotations

import typer

from chakra_collectives.cli.app import command, console, err_console, print_json, say
from chakra_collectives.cli.tables import print_table
from chakra_collectives.topology import load_topology
from chakra_collectives.topology_report import topology_info
from chakra_collectives.units import format_size, format_time_ns, parse_size


SCHEMA_VERSION = 1
"""Version of ``chakra-coll topo-info --json`` (``schemas/topo-info.schema.json``)."""


@command("topo-info")
def topo_info(
    topology: str = typer.Argument(..., help="Builder spec, expansion (line(G), G x H, degree(G,n)) or topology file."),
    size: str = typer.Option("1GiB", "--size", "-s", help="Collective size the bounds are computed for (bytes of the larger per-rank buffer)."),
    bfb: bool = typer.Option(True, "--bfb/--no-bfb", help="Solve BFB's linear programs for its steps and bandwidth term (direct-connect topologies)."),
    force: bool = typer.Option(False, "--force", help="Build expansions above 4,096 NPUs."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """What a topology offers collectives: ports, diameter, bisection, bounds, BFB.

    Prints a topology's NPUs, ports, diameter, bisection, the cut bound per collective and
    BFB's latency/bandwidth point. BFB (breadth-first broadcast, Zhao et al. NSDI'25) takes one
    step per hop of the diameter (latency term: steps x link latency); its bandwidth term
    comes from one linear program per NPU and step, and its efficiency is the All-Gather cut
    bound over that term.

    \b
    Example:
      chakra-coll topo-info totientperms:64,degree=4 --size 1GiB
    """
    nbytes = parse_size(size)
    topo = load_topology(topology, force=force)
    with err_console.status("topology", spinner="dots") as status:
        info = topology_info(topo, nbytes, with_bfb=bfb, on_step=lambda what: status.update(f"{topo.name}: {what}"))
    if as_json:
        print_json({
            "schema_version": SCHEMA_VERSION, **info,
            "num_npus": info["npus"], "num_switches": info["switches"], "num_links": info["links"],
            "deprecated": {"npus": "num_npus", "switches": "num_switches", "links": "num_links"},
        })
        return
    switches = f", {info['switches']} switch(es)" if info["switches"] else ""
    say(f"{info['topology']}: {info['npus']} NPUs{switches}, {info['links']} links", style="bold")
    rows = []
    if "fat_tree" in info:
        tree = info["fat_tree"]
        rows.append(("ports per NPU", f"{tree['ports_per_npu']} (one per plane; modeled as one link of {tree['ports_per_npu']}x the bandwidth)"))
    else:
        rows.append(("ports per NPU", f"{_span(info['out_ports'])} out, {_span(info['in_ports'])} in"))
    rows.append(("diameter", f"{info['diameter']} hops (mean {info['mean_distance']:.2f})"))
    rows.append(("bisection", f"{info['bisection_gbps']:,.0f} GB/s ({info['bisection_method']})"))
    if "expansion" in info:
        expansion = info["expansion"]
        copies = f", {expansion['copies']} copies" if expansion["kind"] == "degree" else ""
        rows.append(("expansion", f"{expansion['kind']} of {', '.join(expansion['of'])}{copies}"))
    if "fat_tree" in info:
        tree = info["fat_tree"]
        rows.append(("fat-tree planes", f"{tree['planes']} x ({tree['levels']} level(s), {tree['switches_per_plane']} switch(es) of {tree['radix']} ports)"))
    for label, text in rows:
        say(text, prefix=f"{label:<17}  ")
    console.print()
    table = [[name, format_time_ns(b["cut_ns"]), format_time_ns(b["latency_ns"]), format_time_ns(b["best_ns"])] for name, b in info["bounds"].items()]
    print_table(["collective", "cut", "latency", "best"], table, title=f"lower bounds at {format_size(nbytes)}")
    if "bfb" in info:
        point = info["bfb"]
        console.print()
        say(f"{point['steps']} steps; All-Gather bandwidth term {format_time_ns(point['all_gather_bandwidth_ns'])} = "
            f"{point['all_gather_efficiency']:.3f} of the cut bound; busiest link per step (shards): {' '.join(point['step_loads'])}", prefix=f"{'BFB':<17}  ")


def _span(pair: list[int]) -> str:
    return str(pair[0]) if pair[0] == pair[1] else f"{pair[0]}..{pair[1]}"
