"""``plot links``: every link's utilization over the replay, as a heatmap (links x time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from chakra_collectives.plot.formats import output_format
from chakra_collectives.plot.output import new_figure, save_figure, time_unit
from chakra_collectives.units import format_time_ns

MAX_LINKS = 64


def plot_links(document: dict[str, Any], path: str | Path) -> Path:
    """Draw link utilization from a replay JSON document (``replay --json`` with its timeline) into ``path``."""
    output_format(path)
    return save_figure(links_figure(document), path)


def links_figure(document: dict[str, Any]) -> Figure:
    """The figure :func:`plot_links` writes.

    The title counts every link that carried traffic and gives their mean utilization over the
    whole run; with more than :data:`MAX_LINKS` of them, the busiest are drawn (and it says so).
    """
    links = document["timeline"]["links"]
    every = sorted(links["rows"], key=lambda r: (r["src"], r["dst"], r["link"]))
    total = float(document["total_ns"]) or 1.0
    unit, scale = time_unit(total)
    rows = every
    shown = f"all {len(every)} drawn" if every else "none drawn"
    if len(every) > MAX_LINKS:
        busiest = sorted(every, key=lambda r: -sum(r["utilization"]))[:MAX_LINKS]
        shown = f"the {MAX_LINKS} busiest drawn"
        rows = sorted(busiest, key=lambda r: (r["src"], r["dst"], r["link"]))
    matrix = np.array([r["utilization"] for r in rows]) if rows else np.zeros((1, max(int(links["bins"]), 1)))
    mean_all = float(np.mean([np.mean(r["utilization"]) for r in every])) if every else 0.0
    figure = new_figure(12, 1.8 + 0.24 * max(len(rows), 4))
    axes = figure.add_subplot()
    image = axes.imshow(matrix, aspect="auto", interpolation="nearest", cmap="magma", vmin=0.0, vmax=1.0,
                        extent=(0, links["bins"] * links["bin_ns"] / scale, len(matrix), 0))
    axes.set_yticks(np.arange(len(rows)) + 0.5, [f"{r['src']}\u2192{r['dst']}" for r in rows], fontsize=8 if len(rows) > 24 else 9)
    axes.set_ylabel("link (src\u2192dst)")
    axes.set_xlabel(f"time ({unit})")
    colorbar = figure.colorbar(image, ax=axes, pad=0.01)
    colorbar.set_label("utilization (busy fraction of each time bin)")
    axes.set_title(
        f"link utilization: {Path(str(document['workload'])).name} on {document['topology']}, {format_time_ns(total)}\n"
        f"{len(every)} links carried traffic ({shown}); their mean utilization over the run: {mean_all:.0%}",
        fontsize=10,
    )
    return figure
