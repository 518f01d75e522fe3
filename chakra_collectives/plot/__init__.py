"""Pictures (matplotlib, Agg; PNG or SVG by the file's suffix).

* :func:`plot_timeline` -- per-rank compute and communication from ``replay --json``;
* :func:`plot_links` -- link utilization over time from ``replay --json``;
* :func:`plot_algorithm` -- which chunk crosses which link when, for one algorithm on a small topology.
"""

from chakra_collectives.plot.algorithm import plot_algorithm
from chakra_collectives.plot.document import load_replay_document
from chakra_collectives.plot.links import plot_links
from chakra_collectives.plot.timeline import plot_timeline

__all__ = ["load_replay_document", "plot_algorithm", "plot_links", "plot_timeline"]
