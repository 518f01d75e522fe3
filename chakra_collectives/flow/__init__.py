"""Exact network flows on topologies: integer capacities, max-flow / min-cut, the cut ratio.

* :mod:`~chakra_collectives.flow.capacity` -- bandwidths as exact rationals, and a topology as
  an integer-capacity graph (:class:`CapacityGraph`), with the one rounding rule;
* :mod:`~chakra_collectives.flow.maxflow` -- max-flow / min-cut on integer capacities
  (scipy's Dinic where the numbers fit 32 bits, networkx otherwise);
* :mod:`~chakra_collectives.flow.global_cut` -- :func:`global_min_cut`, the lightest cut of an
  undirected graph (Stoer-Wagner), All-Reduce's weakest NPU cut on fabrics without switches;
* :mod:`~chakra_collectives.flow.bisection` -- :func:`bisection_gbps`, a topology's bisection bandwidth;
* :mod:`~chakra_collectives.flow.cut_ratio` -- :func:`max_cut_ratio`, the exact
  ``max over cuts S of demand(S) / B+(S)``: the one definition behind the cut bound
  (:mod:`chakra_collectives.bounds`) and ForestColl's optimum.
"""

from chakra_collectives.flow.capacity import CapacityGraph, exact_bandwidth
from chakra_collectives.flow.cut_ratio import CutRatio, max_cut_ratio, max_demand_ratio
from chakra_collectives.flow.maxflow import FlowNetwork

__all__ = ["CapacityGraph", "CutRatio", "FlowNetwork", "exact_bandwidth", "max_cut_ratio", "max_demand_ratio"]
