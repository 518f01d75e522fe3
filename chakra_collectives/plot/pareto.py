"""``chakra-coll search``'s pictures: Pareto fronts of a design space.

:func:`plot_iteration_vs_cost` draws, per panel (one NPU count and workload), every evaluated
design as a point -- cost (ports) across, iteration time up -- coloured by topology family,
shaped by algorithm, with the Pareto front as a step line and its designs labelled.
:func:`plot_small_vs_large` draws each design's collective time at the small probe size
across and at the large one up (log scales): latency-bound against bandwidth-bound.

Rows are the search's result rows (dicts with ``topology``, ``candidate``, ``family``,
``algorithm``, ``cost``, ``iteration_ns``, ``probe_small_ns``, ``probe_large_ns``...). Colours
are candidates (a space's topology entries) when there are at most :data:`MAX_COLOURS`, else
families; designs at the same spot are drawn side by side.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatter
from matplotlib.transforms import ScaledTranslation

from chakra_collectives.plot.formats import output_format
from chakra_collectives.plot.output import new_figure, save_figure, time_unit
from chakra_collectives.units import format_size

MARKERS = "osD^vP*Xh<>p"
MAX_LABELS = 6
MAX_COLOURS = 10
DODGE_POINTS = 7.0
"""Sideways step (typographic points) between designs drawn at the same spot."""


def _styles(panels: Sequence[dict[str, Any]]) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The row key colours follow (candidate or family), the colour of each value, the marker of each algorithm."""
    import matplotlib

    rows = [r for p in panels for r in p["rows"]]
    key = "candidate" if len({r.get("candidate") for r in rows}) <= MAX_COLOURS and all(r.get("candidate") for r in rows) else "family"
    values = list(dict.fromkeys(r[key] for r in rows))
    palette = matplotlib.colormaps["tab10" if len(values) <= 10 else "tab20"]
    colors = {v: palette(i % palette.N) for i, v in enumerate(values)}
    markers = {a: MARKERS[i % len(MARKERS)] for i, a in enumerate(sorted({r["algorithm"] for r in rows}))}
    return key, colors, markers


def _grid(count: int) -> tuple[int, int]:
    columns = 1 if count == 1 else 2 if count <= 4 else 3
    return math.ceil(count / columns), columns


_PLACEHOLDER_WORDS = {"{npus}": "N", "{grid2}": "RxC", "{grid3}": "XxYxZ", "{log2}": "log2 N"}
"""How a search space's placeholders read in a legend, where one entry stands for every panel's size."""


def readable(template: str) -> str:
    """A candidate's spec as a legend shows it: placeholders in words.

    >>> readable("torus2d:{grid2}"), readable("totientperms:{npus},degree=4")
    ('torus2d:RxC', 'totientperms:N,degree=4')
    """
    for placeholder, word in _PLACEHOLDER_WORDS.items():
        template = template.replace(placeholder, word)
    return template


def _legend(figure, key: str, colors: dict[str, Any], markers: dict[str, str]) -> None:
    handles = [Line2D([], [], color=c, marker="o", linestyle="", label=_short(readable(f), 40)) for f, c in colors.items()]
    handles += [Line2D([], [], color="0.3", marker=m, linestyle="", label=a, markerfacecolor="none") for a, m in markers.items()]
    figure.legend(handles=handles, loc="outside right upper", fontsize=8, title=f"{key} / algorithm", title_fontsize=8)


def _short(text: str, width: int = 36) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _draw(axes, rows, front, x_key, y_key, x_scale, y_scale, style) -> None:
    """Every row as a point; designs that land on one spot (to 3 digits) are spread sideways, so none hides another."""
    key, colors, markers = style
    seen: dict[tuple[str, str], int] = {}
    spots = [(f"{r[x_key]:.3g}", f"{r[y_key]:.3g}") for r in rows]
    crowd = {spot: spots.count(spot) for spot in spots}
    for row, spot in zip(rows, spots):
        index = seen[spot] = seen.get(spot, -1) + 1
        shift = (index - (crowd[spot] - 1) / 2) * DODGE_POINTS / 72
        transform = axes.transData + ScaledTranslation(shift, 0, axes.figure.dpi_scale_trans)
        axes.scatter(row[x_key] / x_scale, row[y_key] / y_scale, color=colors[row[key]], marker=markers[row["algorithm"]],
                     s=36, alpha=0.85, edgecolors="0.2", linewidths=0.4, zorder=3, transform=transform)
    if rows:  # points drawn through a shifted transform do not grow the data limits by themselves
        axes.update_datalim([(r[x_key] / x_scale, r[y_key] / y_scale) for r in rows])
        axes.margins(y=0.12)  # room for the front's labels above and below its points
        axes.autoscale_view()
    if front:
        xs = [r[x_key] / x_scale for r in front]
        ys = [r[y_key] / y_scale for r in front]
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        axes.step([xs[i] for i in order], [ys[i] for i in order], where="post", color="0.25", linewidth=1.0, linestyle="--", zorder=2,
                  label="Pareto front")
        for n, i in enumerate(order[:MAX_LABELS]):
            axes.annotate(_short(f"{front[i]['algorithm']} on {front[i]['topology']}"), (xs[i], ys[i]), textcoords="offset points",
                          xytext=(6, 5 if n % 2 == 0 else -11), fontsize=7, color="0.15")
    axes.grid(True, linewidth=0.3, alpha=0.6)


def plot_iteration_vs_cost(panels: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Draw iteration time against cost, one panel per ``{"title", "rows", "front"}``, into ``path``."""
    output_format(path)
    return save_figure(iteration_vs_cost_figure(panels), path)


def iteration_vs_cost_figure(panels: Sequence[dict[str, Any]]) -> Figure:
    """The figure :func:`plot_iteration_vs_cost` writes."""
    style = _styles(panels)
    rows_n, columns = _grid(len(panels))
    figure = new_figure(5.2 * columns + 2.6, 3.8 * rows_n)
    for index, panel in enumerate(panels):
        axes = figure.add_subplot(rows_n, columns, index + 1)
        rows = panel["rows"]
        unit, scale = time_unit(max((r["iteration_ns"] for r in rows), default=1.0))
        _draw(axes, rows, panel["front"], "cost", "iteration_ns", 1.0, scale, style)
        axes.set_xlabel("cost (ports, weighted by bandwidth)")
        axes.set_ylabel(f"iteration time ({unit})")
        axes.set_title(f"{panel['title']}: {len(rows)} designs", fontsize=10)
        times = [r["iteration_ns"] for r in rows]
        if times and max(times) > 10 * min(times):
            axes.set_yscale("log")  # a slow design would flatten the others
        else:
            axes.set_ylim(bottom=0)
    _legend(figure, *style)
    return figure


def plot_small_vs_large(panels: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Draw collective time at the small probe size against the large one (log-log), one panel per group, into ``path``."""
    output_format(path)
    return save_figure(small_vs_large_figure(panels), path)


def small_vs_large_figure(panels: Sequence[dict[str, Any]]) -> Figure:
    """The figure :func:`plot_small_vs_large` writes."""
    style = _styles(panels)
    rows_n, columns = _grid(len(panels))
    figure = new_figure(5.2 * columns + 2.6, 3.8 * rows_n)
    for index, panel in enumerate(panels):
        axes = figure.add_subplot(rows_n, columns, index + 1)
        rows = [r for r in panel["rows"] if r.get("probe_small_ns") is not None]
        x_unit, x_scale = time_unit(max((r["probe_small_ns"] for r in rows), default=1.0))
        y_unit, y_scale = time_unit(max((r["probe_large_ns"] for r in rows), default=1.0))
        _draw(axes, rows, panel["front"], "probe_small_ns", "probe_large_ns", x_scale, y_scale, style)
        for axis, scale in ((axes.xaxis, axes.set_xscale), (axes.yaxis, axes.set_yscale)):
            scale("log")
            axis.set_major_formatter(LogFormatter(labelOnlyBase=False))  # 20, 50, 100: not 2 x 10^1
            axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
        small = format_size(rows[0]["probe_small_bytes"]) if rows else "small"
        large = format_size(rows[0]["probe_large_bytes"]) if rows else "large"
        collective = rows[0]["probe_collective"] if rows else "collective"
        axes.set_xlabel(f"{collective} of {small} ({x_unit})")
        axes.set_ylabel(f"{collective} of {large} ({y_unit})")
        axes.set_title(f"{panel['title']}: latency vs bandwidth", fontsize=10)
    _legend(figure, *style)
    return figure


__all__ = ["iteration_vs_cost_figure", "plot_iteration_vs_cost", "plot_small_vs_large", "readable", "small_vs_large_figure"]
