"""Pictures (matplotlib, Agg; PNG or SVG by the file's suffix).

* :func:`plot_timeline` -- per-rank compute and communication from ``replay --json``;
* :func:`plot_links` -- link utilization over time from ``replay --json``;
* :func:`plot_algorithm` -- which chunk crosses which link when, for one algorithm on a small topology;
* :func:`plot_iteration_vs_cost`, :func:`plot_small_vs_large` -- a search's Pareto fronts.

Each ``plot_*`` writes what the matching ``*_figure`` function returns (a matplotlib Figure
on the Agg canvas, for a caller who wants to change it or look at what was drawn).

The functions load on first use, so importing the package (e.g. for :mod:`.formats`) does not
import matplotlib, which takes a noticeable fraction of a second.
"""

from importlib import import_module

_HOMES = {
    "load_replay_document": "chakra_collectives.plot.document",
    "algorithm_figure": "chakra_collectives.plot.algorithm",
    "plot_algorithm": "chakra_collectives.plot.algorithm",
    "iteration_vs_cost_figure": "chakra_collectives.plot.pareto",
    "plot_iteration_vs_cost": "chakra_collectives.plot.pareto",
    "links_figure": "chakra_collectives.plot.links",
    "plot_links": "chakra_collectives.plot.links",
    "small_vs_large_figure": "chakra_collectives.plot.pareto",
    "plot_small_vs_large": "chakra_collectives.plot.pareto",
    "timeline_figure": "chakra_collectives.plot.timeline",
    "plot_timeline": "chakra_collectives.plot.timeline",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
