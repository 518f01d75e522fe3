"""``plot timeline``: per rank, when it computes and when it communicates.

Each rank is one row: compute in its top lane, communication (collectives, point-to-point
messages) in its bottom lane, split into sub-lanes where calls overlap (several all-reduces in
flight at once). Collectives are coloured by collective and process group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.patches import Patch

from chakra_collectives.plot.output import new_figure, save_figure, time_unit
from chakra_collectives.units import format_time_ns

MAX_RANKS = 64
COMPUTE_COLOR = "#4C72B0"
MESSAGE_COLOR = "#55A868"
MEMORY_COLOR = "#8C8C8C"
COLLECTIVE_COLORS = ("#DD8452", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#CCB974", "#64B5CD")


def _lanes(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, int]:
    """Greedy interval colouring: a lane per interval so overlapping ones never share a lane.

    >>> _lanes(np.array([0.0, 1, 5]), np.array([2.0, 3, 6]))[0].tolist()
    [0, 1, 0]
    """
    lane = np.zeros(len(start), dtype=np.int64)
    free_at: list[float] = []
    for i in np.argsort(start, kind="stable").tolist():
        for k, t in enumerate(free_at):
            if t <= start[i]:
                lane[i], free_at[k] = k, end[i]
                break
        else:
            lane[i] = len(free_at)
            free_at.append(end[i])
    return lane, max(len(free_at), 1)


def plot_timeline(document: dict[str, Any], path: str | Path) -> Path:
    """Draw the timeline of a replay JSON document (``replay --json`` with its timeline)."""
    timeline = document["timeline"]
    kinds = timeline["kinds"]
    nodes = {k: np.asarray(v) for k, v in timeline["nodes"].items()}
    num_ranks = len(document["ranks"])
    shown = min(num_ranks, MAX_RANKS)
    total = float(document["total_ns"]) or 1.0
    unit, scale = time_unit(total)
    collectives = document.get("collectives", [])
    styles: dict[tuple[str, int, bool], str] = {}
    style_of = lambda c: (c["collective"], c["members"], c["group"] is None)  # noqa: E731
    for c in collectives:
        styles.setdefault(style_of(c), COLLECTIVE_COLORS[len(styles) % len(COLLECTIVE_COLORS)])

    figure = new_figure(12, 1.6 + 0.42 * shown)
    axes = figure.add_subplot()
    code = {name: kinds.index(name) for name in kinds}
    for rank in range(shown):
        mine = nodes["rank"] == rank
        for kind_name, lane_base, color in (("compute", 0.05, COMPUTE_COLOR), ("memory", 0.05, MEMORY_COLOR)):
            pick = mine & (nodes["kind"] == code[kind_name])
            _bars(axes, nodes["start_ns"][pick] / scale, nodes["end_ns"][pick] / scale, rank + lane_base, 0.4, [color] * int(pick.sum()))
        comm = np.flatnonzero(mine & np.isin(nodes["kind"], [code["collective"], code["send"], code["recv"]]))
        if len(comm):
            lane, count = _lanes(nodes["start_ns"][comm], nodes["end_ns"][comm])
            height = 0.42 / count
            colors = []
            for i in comm.tolist():
                index = int(nodes["collective"][i])
                if index >= 0 and index < len(collectives):
                    c = collectives[index]
                    colors.append(styles[style_of(c)])
                else:
                    colors.append(MESSAGE_COLOR)
            for k in range(count):
                pick = lane == k
                _bars(axes, nodes["start_ns"][comm][pick] / scale, nodes["end_ns"][comm][pick] / scale,
                      rank + 0.53 + k * height, height * 0.9, [c for c, p in zip(colors, pick) if p])
    axes.set_ylim(shown, 0)
    axes.set_yticks(np.arange(shown) + 0.5, [f"rank {r}" for r in range(shown)])
    axes.set_xlim(0, total / scale)
    axes.set_xlabel(f"time ({unit})")
    axes.grid(axis="x", alpha=0.3)
    axes.tick_params(axis="y", length=0)
    more = f" (first {shown} of {num_ranks} ranks)" if shown < num_ranks else ""
    axes.set_title(
        f"{Path(str(document['workload'])).name} on {document['topology']}: {format_time_ns(total)} ({document['mode']} model){more}\n"
        "top lane: compute; bottom lane: communication",
        fontsize=10,
    )
    handles = [Patch(color=COMPUTE_COLOR, label="compute")]
    for (name, members, world), color in styles.items():
        handles.append(Patch(color=color, label=f"{name} (all ranks)" if world else f"{name} (groups of {members})"))
    if np.any(np.isin(nodes["kind"], [code["send"], code["recv"]])):
        handles.append(Patch(color=MESSAGE_COLOR, label="send / recv"))
    figure.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
    return save_figure(figure, path)


def _bars(axes, start: np.ndarray, end: np.ndarray, bottom: float, height: float, colors: list[str]) -> None:
    if len(start):
        axes.broken_barh(list(zip(start.tolist(), np.maximum(end - start, 0).tolist())), (bottom, height), facecolors=colors, edgecolor="white", linewidth=0.3)
