"""``chakra-coll plot``: pictures of a replay (timeline, link utilization) and of an algorithm."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from chakra_collectives.cli.app import command, command_group, say
from chakra_collectives.cli.options import NETWORK_MODEL, OLD_MODE, collective_option, network_model_option, size_option
from chakra_collectives.plot.formats import output_format

plot_app = command_group(
    "plot",
    "Draw a replay's timeline or link utilization, or an algorithm's chunks.\n\nPNG or SVG, by the "
    "output's suffix. timeline and links draw what chakra-coll replay --json printed; algorithm "
    "times an algorithm's files alone on a small topology.",
)


@command("timeline", group=plot_app)
def timeline_command(
    replay_json: Path = typer.Argument(..., metavar="REPLAY_JSON", help="What chakra-coll replay --json printed (with its timeline)."),
    output: Path = typer.Option(Path("timeline.png"), "--output", "-o", metavar="FILE", help="Image file: .png or .svg."),
    ranks: Optional[str] = typer.Option(
        None, "--ranks", metavar="RANKS",
        help="Ranks to draw: 0-3,8,12-15 or all. Default: all up to 16, else 16 spread over them (with the last to finish).",
    ),
) -> None:
    """Per rank: compute by phase (forward, backward, optimizer) and communication over time.

    \b
    Example:
      chakra-coll replay sample_traces/workload/train_step \\
        -t sample_traces/topology/two_servers.yaml --json > replay.json
      chakra-coll plot timeline replay.json -o timeline.png --ranks 0-3
    """
    output_format(output)
    from chakra_collectives.plot import load_replay_document, plot_timeline  # matplotlib only when drawing

    say(f"wrote {plot_timeline(load_replay_document(replay_json), output, ranks=ranks)}")


@command("links", group=plot_app)
def links_command(
    replay_json: Path = typer.Argument(..., metavar="REPLAY_JSON", help="What chakra-coll replay --json printed (with its timeline)."),
    output: Path = typer.Option(Path("links.png"), "--output", "-o", metavar="FILE", help="Image file: .png or .svg."),
) -> None:
    """Link utilization over time: a heatmap of links x time bins (the 64 busiest links).

    \b
    Example:
      chakra-coll plot links replay.json -o links.svg
    """
    output_format(output)
    from chakra_collectives.plot import load_replay_document, plot_links

    say(f"wrote {plot_links(load_replay_document(replay_json, need_links=True), output)}")


@command("algorithm", group=plot_app)
def algorithm_command(
    prefix: Path = typer.Argument(..., metavar="PREFIX", help="Algorithm files PREFIX.{rank}.et (or one of them)."),
    topology: str = typer.Option(..., "--topology", "-t", metavar="SPEC|FILE", help="Topology spec or file (at most 16 NPUs)."),
    size: Optional[str] = typer.Option(None, "--size", "-s", metavar="SIZE", help="Collective size (default: the files' own)."),
    collective: Optional[str] = typer.Option(None, "--collective", "-c", metavar="NAME", help="Collective of foreign files (default: what the files claim)."),
    network_model: Optional[str] = NETWORK_MODEL,
    old_mode: Optional[str] = OLD_MODE,
    output: Path = typer.Option(Path("algorithm.png"), "--output", "-o", metavar="FILE", help="Image file: .png or .svg."),
) -> None:
    """Which chunk crosses which link when (the time-expanded network) on a small topology.

    \b
    Example:
      chakra-coll plot algorithm sample_traces/collectives/all_reduce_tacos \\
        -t sample_traces/topology/two_servers.yaml -o ar.png
    """
    output_format(output)
    model = network_model_option(network_model, old_mode)
    from chakra_collectives.converters.chakra_et import read_algorithm
    from chakra_collectives.topology import load_topology

    algo = read_algorithm(prefix, collective=collective_option(collective))
    topo = load_topology(topology)
    from chakra_collectives.plot import plot_algorithm

    say(f"wrote {plot_algorithm(algo, topo, output, size_bytes=size_option(size), network_model=model)}")
