"""The bisection bandwidth of a topology: the least bandwidth (GB/s) from one half of the NPUs to the other.

Exact by enumeration up to 16 NPUs; above that the best of a few Kernighan-Lin bisections
(networkx), so an upper bound on the minimum; with switches, the halves are the first and last
NPUs by number and the switches sit wherever a minimum cut puts them: the max-flow between the
halves (:class:`~chakra_collectives.flow.maxflow.FlowNetwork` on the exact capacities of
:class:`~chakra_collectives.flow.capacity.CapacityGraph`).

>>> from chakra_collectives.topology import load_topology
>>> bisection_gbps(load_topology("hypercube:3"))
(200.0, 'exact')
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np

from chakra_collectives.flow.capacity import CapacityGraph
from chakra_collectives.flow.maxflow import FlowNetwork
from chakra_collectives.topology import Topology

EXACT_BISECTION_NPUS = 16


def bisection_gbps(topology: Topology, *, seeds: int = 3) -> tuple[float, str]:
    """``(GB/s, method)``: the least bandwidth from one half of the NPUs to the other (see the module docstring)."""
    n = topology.num_npus
    if n < 2:
        return 0.0, "exact"
    if topology.num_switches:
        return _flow_between(topology, range(n // 2), range(n // 2, n)), "NPU halves by number, max-flow"
    arrays = topology.link_arrays
    src, dst, bw = arrays["src"], arrays["dst"], arrays["bandwidth_gbps"]

    def cut(side: np.ndarray) -> float:
        crossing_out = side[src] & ~side[dst]
        crossing_in = ~side[src] & side[dst]
        return float(min(bw[crossing_out].sum(), bw[crossing_in].sum()))

    if n <= EXACT_BISECTION_NPUS:
        best = float("inf")
        for half in itertools.combinations(range(1, n), n // 2 - 1):
            side = np.zeros(n, dtype=bool)
            side[[0, *half]] = True
            best = min(best, cut(side))
        return best, "exact"
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    for a, b, w in zip(src.tolist(), dst.tolist(), bw.tolist()):
        previous = graph.get_edge_data(a, b, {"weight": 0.0})["weight"]
        graph.add_edge(a, b, weight=previous + w)
    best = float("inf")
    for seed in range(seeds):
        left, _ = nx.algorithms.community.kernighan_lin_bisection(graph, weight="weight", seed=seed)
        side = np.zeros(n, dtype=bool)
        side[list(left)] = True
        best = min(best, cut(side))
    return best, f"Kernighan-Lin, best of {seeds}: an upper bound"


def _flow_between(topology: Topology, left, right) -> float:
    """Max-flow (GB/s) from the NPUs ``left`` to the NPUs ``right``, switches anywhere."""
    graph = CapacityGraph.from_topology(topology)
    source, sink = graph.num_nodes, graph.num_nodes + 1
    left, right = list(left), list(right)
    unbounded = sum(graph.cap.tolist()) + 1  # more than any cut: the halves' own edges are never cut
    network = FlowNetwork(
        graph.num_nodes + 2,
        src=[*graph.src.tolist(), *[source] * len(left), *right],
        dst=[*graph.dst.tolist(), *left, *[sink] * len(right)],
        cap=[*graph.cap.tolist(), *[unbounded] * (len(left) + len(right))],
        flow_bound=unbounded - 1,
    )
    return float(graph.gbps(network.max_flow(source, sink)))


__all__ = ["bisection_gbps"]
