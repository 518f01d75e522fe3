"""``plot algorithm``: which chunk crosses which link when -- the time-expanded network view.

Every message hop of the algorithm, timed alone on the topology by the shared network model
(:func:`~chakra_collectives.network.simulate_collective`), is a bar on its link's row from
when it starts to occupy the link to when it leaves it, coloured and labelled by the chunk it
carries (the chunk's index in the collective; a reduce-scatter's partial sums of chunk ``k``
are chunk ``k`` too). Only small topologies make a readable picture, so larger ones are refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.patches import Patch

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm
from chakra_collectives.network import simulate_collective
from chakra_collectives.plot.output import new_figure, save_figure, time_unit
from chakra_collectives.topology import Topology
from chakra_collectives.units import format_size, format_time_ns

MAX_NPUS = 16
MAX_HOPS = 3000


def chunk_of_sends(algo: CollectiveAlgorithm) -> np.ndarray:
    """Per operation, the collective chunk index its source names (-1: no chunk identity).

    An all-gather's input slot ``s`` on rank ``r`` is chunk ``r*K + s``; other buffers name
    chunks by offset (``K`` = chunks per rank).
    """
    ops = algo.ops
    chunk = np.where(ops.count >= 0, ops.src_off, -1).astype(np.int64)
    per_rank = max(algo.chunk_count // max(algo.num_ranks, 1), 1)
    if algo.collective is Collective.ALL_GATHER:
        own = (ops.src_buf == Buffer.INPUT) & (chunk >= 0)
        chunk[own] = ops.rank[own] * per_rank + ops.src_off[own]
    return chunk


def plot_algorithm(algo: CollectiveAlgorithm, topology: Topology, path: str | Path, *, size_bytes: int | None = None, mode: str = "tacos") -> Path:
    """Draw ``algo`` on ``topology`` (see the module docstring); PNG or SVG by suffix."""
    if topology.num_npus > MAX_NPUS:
        raise InputError(
            f"plot algorithm draws every message on every link; {topology.name} has {topology.num_npus} NPUs, "
            f"more than the {MAX_NPUS} that stay readable (plot a smaller topology)"
        )
    size = algo.size_bytes if size_bytes is None else size_bytes
    timing = simulate_collective(algo, topology, size_bytes=size, mode=mode, record_links=True)
    hops = timing.links.intervals
    if len(hops) > MAX_HOPS:
        raise InputError(
            f"plot algorithm: {algo.name or algo.collective.value} makes {len(hops)} link crossings, more than the {MAX_HOPS} "
            "that stay readable (use fewer chunks per NPU)"
        )
    chunk = chunk_of_sends(algo)
    used = sorted({h[0] for h in hops}, key=lambda l: (topology.links[l].src, topology.links[l].dst, l))
    row = {link: i for i, link in enumerate(used)}
    span = timing.time_ns or 1.0
    unit, scale = time_unit(span)
    chunks = sorted({int(chunk[h[3]]) for h in hops})
    palette = colormaps["tab20"] if len(chunks) > 10 else colormaps["tab10"]
    color_of = {c: palette(i % palette.N) for i, c in enumerate(chunks)}

    figure = new_figure(12, 1.8 + 0.34 * max(len(used), 3))
    axes = figure.add_subplot()
    label_room = 0.03 * span
    bars: dict[int, tuple[list, list]] = {i: ([], []) for i in range(len(used))}
    for link, begin, end, op in hops:
        c = int(chunk[op])
        y = row[link]
        bars[y][0].append((begin / scale, (end - begin) / scale))
        bars[y][1].append(color_of[c])
        if end - begin >= label_room and len(used) <= 40:
            axes.text((begin + end) / 2 / scale, y + 0.5, "?" if c < 0 else str(c), ha="center", va="center", fontsize=7)
    for y, (ranges, colors) in bars.items():
        axes.broken_barh(ranges, (y + 0.1, 0.8), facecolors=colors, edgecolor="black", linewidth=0.4)
    names = [f"{_node(topology, topology.links[l].src)}\u2192{_node(topology, topology.links[l].dst)}" for l in used]
    axes.set_yticks(np.arange(len(used)) + 0.5, names, fontsize=8 if len(used) > 24 else 9)
    axes.set_ylim(len(used), 0)
    axes.set_xlim(0, span / scale)
    axes.set_xlabel(f"time ({unit})")
    axes.set_ylabel("link (src\u2192dst)")
    axes.grid(axis="x", alpha=0.3)
    axes.set_title(
        f"{algo.name or algo.collective.value}: {algo.collective.value} of {format_size(size)} on {topology.name}, "
        f"{format_time_ns(span)} ({mode} model)\nwhich chunk crosses which link when (bar label = chunk index)",
        fontsize=10,
    )
    if len(chunks) <= 20:
        handles = [Patch(color=color_of[c], label=f"chunk {c}") for c in chunks]
        axes.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=8)
    return save_figure(figure, path)


def _node(topology: Topology, node: int) -> str:
    return f"s{node - topology.num_npus}" if topology.is_switch(node) else str(node)
