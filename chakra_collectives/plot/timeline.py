"""``plot timeline``: per rank, when it computes (forward, backward, optimizer) and when it communicates.

Each rank is a row: compute in its upper lane, coloured by training phase (blues: forward dark,
backward light, optimizer darkest; grey-blue: other compute), communication in its lower lane
(collectives in warm colours by collective and process group, point-to-point messages in green).
Calls in flight at once on a rank (several all-reduces overlapping the backward pass) are
split into up to :data:`MAX_SUBLANES` thin sub-lanes; more overlap is drawn translucent.

Up to :data:`MAX_AUTO_RANKS` ranks are drawn; with more, a spread of them (the first, the last,
the one that finishes last and ranks evenly between) unless ``ranks`` chooses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from chakra_collectives.errors import InputError
from chakra_collectives.plot.formats import output_format
from chakra_collectives.plot.output import new_figure, save_figure, time_unit
from chakra_collectives.replay.lanes import assign_lanes
from chakra_collectives.units import format_time_ns

MAX_AUTO_RANKS = 16
"""Ranks drawn when none are chosen (more make rows too thin to read)."""
MAX_SUBLANES = 3
PHASE_COLORS = {"forward": "#3B6FB6", "backward": "#8DB8E8", "optimizer": "#1B2F4F", "compute": "#9AA5B1"}
MESSAGE_COLOR = "#3A9B5B"
MEMORY_COLOR = "#C8C8C8"
COLLECTIVE_COLORS = ("#E07B39", "#C0392B", "#8E5A2B", "#D4679B", "#E8B33A", "#7D3C98", "#B5651D")


def choose_ranks(document: dict[str, Any], wanted: str | Sequence[int] | None = None) -> tuple[list[int], str]:
    """The ranks to draw and how they were chosen (for the title).

    ``wanted``: ``None`` (all up to :data:`MAX_AUTO_RANKS`, else a spread), ``"all"``, a spec
    like ``"0-3,8,12-15"``, or a list of ranks.

    >>> doc = {"ranks": [{"rank": r, "finish_ns": 10.0 + (r == 7)} for r in range(64)]}
    >>> choose_ranks(doc, "0-2,5")
    ([0, 1, 2, 5], 'ranks 0-2, 5 of 64')
    >>> ranks, how = choose_ranks(doc)
    >>> len(ranks), ranks[:3], 7 in ranks, 63 in ranks, how
    (16, [0, 4, 7], True, True, '16 of 64 ranks: evenly spread, with the last to finish (7); --ranks to choose')
    """
    total = len(document["ranks"])
    if wanted is None:
        if total <= MAX_AUTO_RANKS:
            return list(range(total)), f"{total} ranks"
        slowest = max(document["ranks"], key=lambda r: r["finish_ns"])["rank"]
        spread = {int(round(x)) for x in np.linspace(0, total - 1, MAX_AUTO_RANKS - 1)}
        chosen = sorted(spread | {slowest})
        if len(chosen) < MAX_AUTO_RANKS:
            chosen = sorted(set(chosen) | set(int(round(x)) for x in np.linspace(0, total - 1, MAX_AUTO_RANKS)))[:MAX_AUTO_RANKS]
        return chosen, f"{len(chosen)} of {total} ranks: evenly spread, with the last to finish ({slowest}); --ranks to choose"
    if isinstance(wanted, str):
        if wanted.strip() == "all":
            return list(range(total)), f"{total} ranks"
        chosen = _parse_ranks(wanted, total)
        return chosen, f"ranks {_spans(chosen)} of {total}"
    chosen = sorted(set(int(r) for r in wanted))
    bad = [r for r in chosen if not 0 <= r < total]
    if bad:
        raise InputError(f"rank {bad[0]} is not in the replay (0..{total - 1})")
    return chosen, f"ranks {_spans(chosen)} of {total}"


def _parse_ranks(text: str, total: int) -> list[int]:
    chosen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        low, sep, high = part.partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise InputError(f"--ranks {text!r}: expected ranks and ranges such as 0-3,8,12-15, or all") from None
        if not 0 <= first <= last < total:
            raise InputError(f"--ranks {text!r}: {part} is not a range of the replay's ranks (0..{total - 1})")
        chosen.update(range(first, last + 1))
    return sorted(chosen)


def _spans(ranks: list[int]) -> str:
    spans, start = [], ranks[0]
    for previous, current in zip(ranks, ranks[1:] + [None]):  # type: ignore[operator]
        if current != previous + 1:
            spans.append(str(start) if start == previous else f"{start}-{previous}")
            start = current
    return ", ".join(spans)


def plot_timeline(document: dict[str, Any], path: str | Path, *, ranks: str | Sequence[int] | None = None) -> Path:
    """Draw the timeline of a replay JSON document (``replay --json`` with its timeline) into ``path``."""
    output_format(path)
    return save_figure(timeline_figure(document, ranks=ranks), path)


def timeline_figure(document: dict[str, Any], *, ranks: str | Sequence[int] | None = None) -> Figure:
    """The figure :func:`plot_timeline` writes."""
    timeline = document["timeline"]
    kinds = timeline["kinds"]
    nodes = {k: np.asarray(v) for k, v in timeline["nodes"].items()}
    phases = timeline.get("phases", ["compute"])
    phase = nodes.get("phase", np.full(len(nodes["rank"]), len(phases) - 1))
    shown, how = choose_ranks(document, ranks)
    row_of = {r: i for i, r in enumerate(shown)}
    compact = len(shown) > 24
    total = float(document["total_ns"]) or 1.0
    unit, scale = time_unit(total)
    collectives = document.get("collectives", [])
    styles: dict[tuple[str, int, bool], str] = {}
    style_of = lambda c: (c["collective"], c["members"], c["group"] is None)  # noqa: E731
    for c in collectives:
        styles.setdefault(style_of(c), COLLECTIVE_COLORS[len(styles) % len(COLLECTIVE_COLORS)])

    row_height = min(0.16, 18.0 / len(shown)) if compact else 0.46
    figure = new_figure(12, 1.7 + row_height * len(shown))
    axes = figure.add_subplot()
    code = {name: kinds.index(name) for name in kinds}
    start, end = nodes["start_ns"] / scale, nodes["end_ns"] / scale
    used_phases: set[str] = set()
    has_messages = has_memory = overlapped = False
    for rank in shown:
        y = row_of[rank]
        mine = nodes["rank"] == rank
        for p, name in enumerate(phases):
            pick = mine & (nodes["kind"] == code["compute"]) & (phase == p)
            if np.any(pick):
                used_phases.add(name)
                _bars(axes, start[pick], end[pick], y + 0.06, 0.4, PHASE_COLORS.get(name, PHASE_COLORS["compute"]), compact)
        memory = mine & (nodes["kind"] == code["memory"])
        if np.any(memory):
            has_memory = True
            _bars(axes, start[memory], end[memory], y + 0.06, 0.4, MEMORY_COLOR, compact)
        comm = np.flatnonzero(mine & np.isin(nodes["kind"], [code["collective"], code["send"], code["recv"]]))
        if not len(comm):
            continue
        colors = []
        for i in comm.tolist():
            index = int(nodes["collective"][i])
            if 0 <= index < len(collectives):
                colors.append(styles[style_of(collectives[index])])
            else:
                colors.append(MESSAGE_COLOR)
                has_messages = True
        lane = assign_lanes(start[comm], end[comm])
        lanes = int(lane.max()) + 1
        translucent = lanes > MAX_SUBLANES or compact
        overlapped = overlapped or (translucent and lanes > 1)
        height = 0.42 if translucent else 0.42 / lanes
        for k in range(1 if translucent else lanes):
            pick = np.ones(len(comm), dtype=bool) if translucent else lane == k
            for color in set(c for c, p in zip(colors, pick) if p):
                sel = pick & np.array([c == color for c in colors])
                _bars(axes, start[comm][sel], end[comm][sel], y + 0.52 + k * height, height * 0.92, color, compact, alpha=0.55 if translucent else 1.0)
    axes.set_ylim(len(shown), 0)
    step = max(1, len(shown) // 32)
    ticks = list(range(0, len(shown), step))
    axes.set_yticks([t + 0.5 for t in ticks], [f"rank {shown[t]}" for t in ticks], fontsize=7 if compact else 9)
    axes.set_xlim(0, total / scale)
    axes.set_xlabel(f"time ({unit})")
    axes.grid(axis="x", alpha=0.3)
    axes.tick_params(axis="y", length=0)
    axes.set_title(
        f"{Path(str(document['workload'])).name} on {document['topology']}: {format_time_ns(total)} "
        f"({document.get('network_model', document.get('mode'))} network model)\n"
        f"{how}; each rank: compute above, communication below" + ("; darker: several calls in flight" if overlapped else ""),
        fontsize=10,
    )
    handles = [Patch(color=PHASE_COLORS[name], label=name if name != "compute" else "other compute") for name in phases if name in used_phases]
    if has_memory:
        handles.append(Patch(color=MEMORY_COLOR, label="memory"))
    for (name, members, world), color in styles.items():
        handles.append(Patch(color=color, label=f"{name} (all ranks)" if world else f"{name} (groups of {members})"))
    if has_messages:
        handles.append(Patch(color=MESSAGE_COLOR, label="send / recv"))
    figure.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5), frameon=False, fontsize=9)
    return figure


def _bars(axes, start: np.ndarray, end: np.ndarray, bottom: float, height: float, color: str, compact: bool, alpha: float = 1.0) -> None:
    if len(start):
        axes.broken_barh(
            list(zip(start.tolist(), np.maximum(end - start, 0).tolist())), (bottom, height),
            facecolors=color, edgecolor="white", linewidth=0.0 if compact else 0.4, alpha=alpha,
        )
