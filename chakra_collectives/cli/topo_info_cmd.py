"""``chakra-coll topo-info``: what a topology offers collectives (ports, diameter, bisection, bounds, BFB)."""

from __future__ import annotations

import typer
from rich.table import Table

from chakra_collectives.cli.app import command, console, err_console, print_json
from chakra_collectives.topology import load_topology
from chakra_collectives.topology_report import topology_info
from chakra_collectives.units import format_size, format_time_ns, parse_size


@command("topo-info")
def topo_info(
    topology: str = typer.Argument(..., help="Builder spec, expansion (line(G), G x H, degree(G,n)) or topology file."),
    size: str = typer.Option("1GiB", "--size", "-s", help="Collective size the bounds are computed for (bytes of the larger per-rank buffer)."),
    bfb: bool = typer.Option(True, "--bfb/--no-bfb", help="Solve BFB's linear programs for its steps and bandwidth term (direct-connect topologies)."),
    force: bool = typer.Option(False, "--force", help="Build expansions above 4,096 NPUs."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Print a topology's NPUs, ports, diameter, bisection, the cut bound per collective and BFB's latency/bandwidth point.

    BFB (breadth-first broadcast, Zhao et al. NSDI'25) takes one step per hop of the diameter (latency term: steps x link latency); its bandwidth term comes from one linear program per NPU and step, and its efficiency is the All-Gather cut bound over that term.

    Example: chakra-coll topo-info totientperms:64,degree=4 --size 1GiB
    """
    nbytes = parse_size(size)
    topo = load_topology(topology, force=force)
    with err_console.status("topology", spinner="dots") as status:
        info = topology_info(topo, nbytes, with_bfb=bfb, on_step=lambda what: status.update(f"{topo.name}: {what}"))
    if as_json:
        print_json(info)
        return
    switches = f", {info['switches']} switch(es)" if info["switches"] else ""
    console.print(f"[bold]{info['topology']}[/bold]: {info['npus']} NPUs{switches}, {info['links']} links")
    if "fat_tree" in info:
        tree = info["fat_tree"]
        console.print(f"ports per NPU      {tree['ports_per_npu']} (one per plane; modeled as one link of {tree['ports_per_npu']}x the bandwidth)")
    else:
        console.print(f"ports per NPU      {_span(info['out_ports'])} out, {_span(info['in_ports'])} in")
    console.print(f"diameter           {info['diameter']} hops (mean {info['mean_distance']:.2f})")
    console.print(f"bisection          {info['bisection_gbps']:,.0f} GB/s ({info['bisection_method']})", soft_wrap=True)
    if "expansion" in info:
        expansion = info["expansion"]
        copies = f", {expansion['copies']} copies" if expansion["kind"] == "degree" else ""
        console.print(f"expansion          {expansion['kind']} of {', '.join(expansion['of'])}{copies}")
    if "fat_tree" in info:
        tree = info["fat_tree"]
        console.print(f"fat-tree planes    {tree['planes']} x ({tree['levels']} level(s), {tree['switches_per_plane']} switch(es) of {tree['radix']} ports)")
    table = Table(title=f"lower bounds at {format_size(nbytes)}", title_justify="left")
    for column in ("collective", "cut", "latency", "best"):
        table.add_column(column, justify="left" if column == "collective" else "right")
    for name, bounds in info["bounds"].items():
        table.add_row(name, format_time_ns(bounds["cut_ns"]), format_time_ns(bounds["latency_ns"]), format_time_ns(bounds["best_ns"]))
    console.print(table)
    if "bfb" in info:
        point = info["bfb"]
        console.print(f"BFB                {point['steps']} steps; All-Gather bandwidth term {format_time_ns(point['all_gather_bandwidth_ns'])}")
        console.print(f"                   = {point['all_gather_efficiency']:.3f} of the cut bound")
        console.print(f"                   busiest link per step (shards): {' '.join(point['step_loads'])}", soft_wrap=True)


def _span(pair: list[int]) -> str:
    return str(pair[0]) if pair[0] == pair[1] else f"{pair[0]}..{pair[1]}"
