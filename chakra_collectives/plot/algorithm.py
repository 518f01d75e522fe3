"""``plot algorithm``: which chunk crosses which link when -- the time-expanded network view.

Every message hop of the algorithm, timed alone on the topology by the shared network model
(:func:`~chakra_collectives.network.simulate_collective`), is a bar on its link's row from when
it starts to occupy the link to when it leaves it. The bar is labelled with the chunk it
carries -- found by following the data (:func:`~chakra_collectives.ir.chunks.sent_chunks`),
so a partial sum sent from a scratch slot is labelled with its chunk, not the slot -- and
coloured by the rank whose share the chunk is (chunk ``c`` of ``K`` per rank: rank
``c // K``). A message of several chunks is labelled ``first-last``. Labels are drawn on the
bars wide enough to hold them; the subtitle says whether that is all of them. Only small
topologies make a readable picture, so larger ones are refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from chakra_collectives.deprecation import renamed_keyword
from chakra_collectives.errors import InputError
from chakra_collectives.ir import CollectiveAlgorithm
from chakra_collectives.ir.chunks import sent_chunks
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.network import simulate_collective
from chakra_collectives.plot.formats import output_format
from chakra_collectives.plot.output import new_figure, save_figure, time_unit
from chakra_collectives.topology import Topology
from chakra_collectives.units import format_size, format_time_ns

MAX_NPUS = 16
MAX_HOPS = 3000

KELLY = (
    "#F3C300", "#875692", "#F38400", "#A1CAF1", "#BE0032", "#C2B280", "#848482", "#008856",
    "#E68FAC", "#0067A5", "#F99379", "#604E97", "#F6A600", "#B3446C", "#DCD300", "#882D17",
)
"""Kelly's colours of maximum contrast (without white and black): 16 that stay distinct."""


def rank_colors(count: int) -> list:
    """``count`` distinguishable colours: matplotlib's tab10 up to 10, Kelly's up to 16."""
    if count <= 10:
        return [colormaps["tab10"](i) for i in range(count)]
    return [KELLY[i % len(KELLY)] for i in range(count)]


def _text_color(color) -> str:
    r, g, b = to_rgb(color)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


@renamed_keyword("mode", "network_model")
def plot_algorithm(algo: CollectiveAlgorithm, topology: Topology, path: str | Path, *, size_bytes: int | None = None, network_model: str = "default") -> Path:
    """Draw ``algo`` on ``topology`` (see the module docstring) into ``path``; PNG or SVG by suffix."""
    output_format(path)
    return save_figure(algorithm_figure(algo, topology, size_bytes=size_bytes, network_model=network_model), path)


@renamed_keyword("mode", "network_model")
def algorithm_figure(algo: CollectiveAlgorithm, topology: Topology, *, size_bytes: int | None = None, network_model: str = "default") -> Figure:
    """The figure :func:`plot_algorithm` writes."""
    if topology.num_npus > MAX_NPUS:
        raise InputError(
            f"plot algorithm draws every message on every link; {topology.name} has {topology.num_npus} NPUs, "
            f"more than the {MAX_NPUS} that stay readable (plot a smaller topology)"
        )
    size = algo.size_bytes if size_bytes is None else size_bytes
    timing = simulate_collective(algo, topology, size_bytes=size, network_model=network_model, record_links=True)
    hops = timing.links.intervals
    if len(hops) > MAX_HOPS:
        raise InputError(
            f"plot algorithm: {algo.name or algo.collective.value} makes {len(hops)} link crossings, more than the {MAX_HOPS} "
            "that stay readable (use fewer chunks per NPU)"
        )
    partner = match_messages(algo).partner
    first, count = sent_chunks(algo, partner, execute(algo, partner).order)
    per_rank = max(algo.chunk_count // max(algo.num_ranks, 1), 1)
    used = sorted({h[0] for h in hops}, key=lambda l: (topology.links[l].src, topology.links[l].dst, l))
    row = {link: i for i, link in enumerate(used)}
    span = timing.time_ns or 1.0
    unit, scale = time_unit(span)
    owners = sorted({int(first[h[3]]) // per_rank for h in hops if first[h[3]] >= 0})
    palette = rank_colors(max(len(owners), 1))
    color_of = {owner: palette[i] for i, owner in enumerate(owners)}
    unknown_color = "#D0D0D0"

    width_in = 12.0
    figure = new_figure(width_in, 1.9 + 0.3 * max(len(used), 3))
    axes = figure.add_subplot()
    # a label fits when the bar is wider than its text at 7 pt (about 0.075 in per character)
    inch = span / (width_in * 0.82)
    bars: dict[int, tuple[list, list]] = {i: ([], []) for i in range(len(used))}
    labelled = drawable = 0
    for link, begin, end, op in hops:
        c, n = int(first[op]), int(count[op])
        owner = c // per_rank if c >= 0 else None
        color = color_of.get(owner, unknown_color)
        y = row[link]
        bars[y][0].append((begin / scale, (end - begin) / scale))
        bars[y][1].append(color)
        label = "?" if c < 0 else (str(c) if n <= 1 else f"{c}-{c + n - 1}")
        drawable += 1
        if end - begin >= (0.075 * len(label) + 0.04) * inch:
            axes.text((begin + end) / 2 / scale, y + 0.5, label, ha="center", va="center", fontsize=7, color=_text_color(color))
            labelled += 1
    for y, (ranges, colors) in bars.items():
        axes.broken_barh(ranges, (y + 0.1, 0.8), facecolors=colors, edgecolor="black", linewidth=0.4)
    names = [f"{_node(topology, topology.links[l].src)}\u2192{_node(topology, topology.links[l].dst)}" for l in used]
    axes.set_yticks(np.arange(len(used)) + 0.5, names, fontsize=8 if len(used) > 24 else 9)
    axes.set_ylim(len(used), 0)
    axes.set_xlim(0, span / scale)
    axes.set_xlabel(f"time ({unit})")
    axes.set_ylabel("link (src\u2192dst)")
    axes.grid(axis="x", alpha=0.3)
    if labelled == drawable:
        how = "label: the chunk a message carries; colour: whose share it is"
    elif labelled:
        how = f"label (on {labelled} of {drawable} bars, those wide enough): the chunk carried; colour: whose share it is"
    else:
        how = "colour: whose share the chunk carried is (bars too narrow to label)"
    axes.set_title(
        f"{algo.name or algo.collective.value}: {algo.collective.value} of {format_size(size)} in {algo.chunk_count} chunks "
        f"on {topology.name}, {format_time_ns(span)} ({network_model} network model)\n{how}",
        fontsize=10,
    )
    handles = [Patch(color=color_of[o], label=f"rank {o}'s chunks" if per_rank > 1 else f"chunk {o} (rank {o}'s)") for o in owners]
    if any(first[h[3]] < 0 for h in hops):
        handles.append(Patch(color=unknown_color, label="unknown chunk"))
    axes.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=8)
    return figure


def _node(topology: Topology, node: int) -> str:
    return f"s{node - topology.num_npus}" if topology.is_switch(node) else str(node)
