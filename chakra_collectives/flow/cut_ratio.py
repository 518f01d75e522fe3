"""The cut ratio: ``max over cuts S of demand(S) / B+(S)``, exactly (Newton--Dinkelbach).

For All-Gather of ``M`` bytes over ``N`` NPUs, every NPU owning ``M/N``, the shares owned inside
a node set ``S`` that leaves out at least one NPU must all leave ``S`` through the links out of
it, so any schedule takes at least ``(M/N) * |S ∩ NPUs| / B+(S)``; ForestColl (Zhao et al.,
arXiv 2402.06787) shows the best schedule meets the largest such ratio exactly. With a
*demand* ``d_r`` per NPU (``1`` everywhere for All-Gather; ``1`` at the root and ``0``
elsewhere for a broadcast) the ratio is ``sum of d_r over NPUs in S`` over ``B+(S)``.

:func:`max_demand_ratio` finds it on an integer-capacity graph by Dinkelbach's parametric
search (Newton's method on the ratio): for a candidate ``x = p/q``, a set beats it iff
``q * d(X) + p * B-(X) < q * D`` for its complement ``X`` (``D`` the total demand, ``B-`` the
capacity into ``X``) -- a min cut between a source feeding every NPU ``q * d_r`` and a sink NPU
in ``X``, over links of capacity ``p * c``. The most violated cut over all sinks gives the next
ratio; a few rounds reach the maximum. Every number is an integer: the result is exact.

Sinks: any NPU may be the one a cut leaves out, so every NPU is tried -- unless the topology
says its NPUs fall into symmetry classes (:mod:`~chakra_collectives.topology.symmetry`: one
sink per class is exact when the demand is the same on every NPU of a class) or that every NPU
looks alike (``uniform``: one sink).

>>> from chakra_collectives.topology import load_topology
>>> r = max_cut_ratio(load_topology("dgx:2x4"))     # NPU ingress: 3 x 50 + 25 GB/s
>>> r.ratio, r.demand, r.bandwidth_gbps
(Fraction(1, 25), 7, Fraction(175, 1))
>>> max_cut_ratio(load_topology("ring:4")).ratio    # 3 shares through 2 x 50 GB/s
Fraction(3, 100)
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.flow.capacity import CapacityGraph, integer_array, scaled
from chakra_collectives.flow.maxflow import FlowNetwork, max_flows, small_edges_for
from chakra_collectives.topology import Topology


@dataclass(frozen=True)
class CutRatio:
    """The largest ``demand(S) / B+(S)`` over node sets ``S`` that leave out an NPU."""

    ratio: Fraction
    """``demand / B+(S)`` in shares per GB/s (:meth:`time_ns` turns it into time)."""
    cut_nodes: tuple[int, ...]
    """The set ``S`` achieving it (switches included)."""
    demand: int
    """Demand inside ``S`` (``|S ∩ NPUs|`` for All-Gather)."""
    bandwidth_gbps: Fraction
    """``B+(S)``: bandwidth of the links leaving ``S``."""

    def time_ns(self, share_bytes: float) -> float:
        """``share_bytes * demand / B+(S)`` in ns: the cut bound of a share of ``share_bytes``."""
        from chakra_collectives.units import bytes_per_ns

        return share_bytes * self.demand / bytes_per_ns(float(self.bandwidth_gbps))


def max_demand_ratio(
    graph: CapacityGraph, demand: Sequence[int], *, sinks: Sequence[int], small_edges: int | None = None
) -> tuple[Fraction, np.ndarray]:
    """``(ratio, sink_side)``: the largest ``d(V - X) / B-(X)`` over node sets ``X`` holding a sink.

    ``demand`` has one non-negative integer per NPU; ratios are in the graph's integer
    capacity units. ``sink_side`` is a boolean mask of the best ``X``. Each round's flows to
    every sink run together (:func:`~chakra_collectives.flow.maxflow.max_flows`); ``small_edges``:
    see :class:`~chakra_collectives.flow.maxflow.FlowNetwork` (a caller that loads scipy
    anyway asks for fewer: one compiled call beats a pure-Python flow per sink).
    """
    n, nodes = graph.num_npus, graph.num_nodes
    demand = [int(d) for d in demand]
    total = sum(demand)
    into = graph.in_capacity()
    candidates = [v for v in sinks if into[v] > 0 or total - demand[v] == 0]
    if len(candidates) < len(set(sinks)):
        starved = next(v for v in sinks if into[v] == 0 and total - demand[v] > 0)
        raise InputError(f"NPU {starved} has no incoming links")
    best_sink = max(candidates, key=lambda v: (Fraction(total - demand[v], into[v]), -v))
    ratio = Fraction(total - demand[best_sink], into[best_sink])
    best_side = np.zeros(nodes, dtype=bool)
    best_side[best_sink] = True
    source = nodes
    suppliers = [r for r in range(n) if demand[r] > 0]
    while True:
        p, q = ratio.numerator, ratio.denominator
        network = FlowNetwork(
            nodes + 1,
            src=np.concatenate([graph.src, np.full(len(suppliers), source, dtype=np.int64)]),
            dst=np.concatenate([graph.dst, np.asarray(suppliers, dtype=np.int64)]),
            cap=_concatenate(scaled(graph.cap, p), integer_array([q * demand[r] for r in suppliers])),
            small_edges=small_edges,
        )
        values = {v: value for v, (value, _) in zip(candidates, max_flows([(network, source, v) for v in candidates]))}
        worst = min(candidates, key=lambda v: (values[v], v))
        if values[worst] >= q * total:
            return ratio, best_side
        _, side = network.min_cut(source, worst)
        side = side[:nodes]
        inside = sum(demand[r] for r in range(n) if side[r])
        better = Fraction(total - inside, graph.capacity_into(side))
        if better <= ratio:  # cannot happen with exact arithmetic; guards against a bad flow
            raise AssertionError(f"Dinkelbach step did not improve {ratio} (got {better})")
        ratio, best_side = better, side


def _concatenate(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    if first.dtype == object or second.dtype == object:
        return integer_array(first.tolist() + second.tolist())
    return np.concatenate([first, second])


def default_sinks(topology: Topology, demand: Sequence[int] | None = None) -> list[int]:
    """The NPUs a cut must be tried against: one per symmetry class when that is exact."""
    n = topology.num_npus
    symmetry = topology.symmetry
    if symmetry is not None:
        reps, orbit = symmetry.npu_orbits()
        if demand is None or all(demand[v] == demand[reps[orbit[v]]] for v in range(n)):
            return list(reps)
    if topology.uniform and (demand is None or len(set(demand)) == 1):
        return [0]
    return list(range(n))


def max_cut_ratio(
    topology: Topology,
    *,
    reverse: bool = False,
    demand: Sequence[int] | None = None,
    sinks: Sequence[int] | None = None,
) -> CutRatio:
    """The cut ratio of ``topology`` (every link reversed when ``reverse``: Reduce-Scatter's).

    ``demand`` defaults to one per NPU (All-Gather); ``sinks`` to :func:`default_sinks`. Any
    subset of sinks still gives a valid, possibly smaller, ratio.
    """
    n = topology.num_npus
    if n < 2:
        raise InputError("a cut ratio needs at least two NPUs")
    graph = CapacityGraph.from_topology(topology, reverse=reverse)
    weights = [1] * n if demand is None else [int(d) for d in demand]
    if len(weights) != n or min(weights) < 0 or sum(weights) == 0:
        raise InputError(f"demand must give a non-negative integer for each of the {n} NPUs, not all zero")
    chosen = default_sinks(topology, None if demand is None else weights) if sinks is None else sorted(set(sinks))
    if not chosen or chosen[0] < 0 or chosen[-1] >= n:
        raise InputError(f"sinks must name NPUs 0..{n - 1}")
    ratio, sink_side = max_demand_ratio(graph, weights, sinks=chosen, small_edges=small_edges_for(len(chosen), graph.num_nodes + 1, len(graph.src) + n))
    inside = [v for v in range(topology.num_nodes) if not sink_side[v]]
    demand_inside = sum(weights[v] for v in inside if v < n)
    bandwidth = graph.gbps(graph.capacity_into(sink_side))
    return CutRatio(ratio * graph.scale, tuple(inside), demand_inside, bandwidth)


__all__ = ["CutRatio", "default_sinks", "max_cut_ratio", "max_demand_ratio"]
