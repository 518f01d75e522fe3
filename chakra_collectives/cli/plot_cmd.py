"""``chakra-coll plot``: pictures of a replay (timeline, link utilization) and of an algorithm."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from chakra_collectives.cli.app import command, command_group, console
from chakra_collectives.cli.options import collective_option, size_option
from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.network.model import Mode
from chakra_collectives.plot.formats import output_format
from chakra_collectives.topology import load_topology

plot_app = command_group("plot", "Pictures (PNG or SVG, by the output's suffix): a replay's timeline and link utilization, an algorithm's chunks on links.")


@command("timeline", group=plot_app)
def timeline_command(
    replay_json: Path = typer.Argument(..., help="What chakra-coll replay --json printed (with its timeline)."),
    output: Path = typer.Option(Path("timeline.png"), "--output", "-o", help="Image file: .png or .svg."),
) -> None:
    """Per-rank compute and communication bars over time.

    Example: [bold]chakra-coll replay sample_traces/workload/train_step -t sample_traces/topology/two_servers.yaml --json > replay.json && chakra-coll plot timeline replay.json -o timeline.png[/bold]
    """
    output_format(output)
    from chakra_collectives.plot import load_replay_document, plot_timeline  # matplotlib only when drawing

    console.print(f"wrote {plot_timeline(load_replay_document(replay_json), output)}")


@command("links", group=plot_app)
def links_command(
    replay_json: Path = typer.Argument(..., help="What chakra-coll replay --json printed (with its timeline)."),
    output: Path = typer.Option(Path("links.png"), "--output", "-o", help="Image file: .png or .svg."),
) -> None:
    """Link utilization over time: a heatmap of links x time bins.

    Example: [bold]chakra-coll plot links replay.json -o links.svg[/bold]
    """
    output_format(output)
    from chakra_collectives.plot import load_replay_document, plot_links

    console.print(f"wrote {plot_links(load_replay_document(replay_json, need_links=True), output)}")


@command("algorithm", group=plot_app)
def algorithm_command(
    prefix: Path = typer.Argument(..., help="Algorithm files PREFIX.{rank}.et (or one of them)."),
    topology: str = typer.Option(..., "--topology", "-t", help="Topology spec or file (at most 16 NPUs)."),
    size: Optional[str] = typer.Option(None, "--size", help="Collective size (default: the files' own)."),
    collective: Optional[str] = typer.Option(None, "--collective", "-c", help="Collective of foreign files (default: what the files claim)."),
    mode: str = typer.Option("tacos", "--mode", help="Network model: tacos or astra-sim."),
    output: Path = typer.Option(Path("algorithm.png"), "--output", "-o", help="Image file: .png or .svg."),
) -> None:
    """Which chunk crosses which link when (the time-expanded-network view) for a small topology.

    Example: [bold]chakra-coll plot algorithm out/ar -t ring:4 -o ar.png[/bold]
    """
    output_format(output)
    Mode.parse(mode)
    algo = read_algorithm(prefix, collective=collective_option(collective))
    topo = load_topology(topology)
    from chakra_collectives.plot import plot_algorithm

    console.print(f"wrote {plot_algorithm(algo, topo, output, size_bytes=size_option(size), mode=mode)}")
