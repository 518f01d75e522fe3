"""ForestColl's optimum ``(U, k)``: how many trees per root, and how much capacity they get.

On a graph with integer bandwidths ``b(e)`` (:class:`~chakra_collectives.flow.CapacityGraph`)
and a demand ``d_r`` per NPU (one per NPU for All-Gather, one at the root for a broadcast),
ForestColl gives every root ``k * d_r`` spanning out-trees of one *unit* each (a unit carries
``1/k`` of the root's data) and lets them load every edge with at most ``U * b(e)`` units. The
bandwidth term of the schedule is then ``share * (U / k)`` per unit of bandwidth, and the best
``U / k`` is exactly the cut ratio ``x* = max over X of d(V - X) / B-(X)``
(:func:`~chakra_collectives.flow.max_demand_ratio`): Edmonds' theorem packs the trees iff
``floor(U * B-(X)) >= k * d(V - X)`` for every ``X`` holding an NPU.

* Optimal (:func:`optimum`): with ``x* = p/q`` in lowest terms and ``g = gcd(q, all b(e))``,
  ``k = q / g`` and ``U = p / g``: the fewest trees per root that reach ``x*`` with integer
  capacities ``U * b(e)``.
* Fixed ``k`` (:func:`fixed_k_optimum`, ForestColl's ``fixed_K``): the least ``U`` with
  ``floor(U * b(e))`` capacities that still pass the test -- found by Newton's method on the
  most violated cut, each step jumping to the smallest ``U`` that cut needs.

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.flow import CapacityGraph
>>> g = CapacityGraph.from_topology(load_topology("a100:2"))
>>> best = optimum(g, [1] * 16, sinks=[0])
>>> best.k, best.U, best.ratio_gbps, round(16 / float(best.ratio_gbps), 3)   # GPU ingress 15/325
(13, Fraction(3, 5), Fraction(3, 65), 346.667)
>>> one = fixed_k_optimum(g, [1] * 16, sinks=[0], k=1)    # floor(300 U) + floor(25 U) >= 15
>>> one.k, one.U, one.capacities[:2], round(16 / float(one.ratio_gbps), 3)
(1, Fraction(7, 150), (14, 1), 342.857)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Sequence

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.flow import CapacityGraph, max_demand_ratio
from chakra_collectives.flow.maxflow import small_edges_for
from chakra_collectives.synth.forestcoll.connectivity import SMALL_TEST_EDGES, Connectivity


@dataclass(frozen=True)
class Optimum:
    """Trees per unit of demand, the capacity factor, and the resulting integer capacities."""

    k: int
    U: Fraction
    """Capacity factor in the graph's integer bandwidth units: edge ``e`` carries ``floor(U * b(e))`` tree units."""
    capacities: tuple[int, ...]
    """``floor(U * b(e))`` for every edge of the graph, in its order."""
    ratio_gbps: Fraction
    """``U / k`` in shares per GB/s: the bandwidth term of a share of ``S`` bytes is ``S * ratio`` (GB/s)⁻¹."""
    optimal_ratio_gbps: Fraction
    """The cut ratio ``x*`` (equal to :attr:`ratio_gbps` unless ``k`` was fixed below the optimum's)."""
    critical: np.ndarray | None = field(default=None, compare=False, repr=False)
    """The sink side of the cut that sets ``x*`` (a boolean mask over the graph's nodes), when
    known: :func:`fixed_k_optimum` starts from the least ``U`` it allows, without a flow test."""

    @property
    def is_optimal(self) -> bool:
        return self.ratio_gbps == self.optimal_ratio_gbps


def _capacities(graph: CapacityGraph, U: Fraction) -> list[int]:
    return [(U.numerator * b) // U.denominator for b in graph.cap.tolist()]


def optimum(graph: CapacityGraph, demand: Sequence[int], *, sinks: Sequence[int]) -> Optimum:
    """The optimal ``(U, k)`` (see the module docstring)."""
    small = small_edges_for(len(sinks), graph.num_nodes + 1, len(graph.src) + sum(1 for d in demand if d > 0), SMALL_TEST_EDGES)  # as the tests that follow
    ratio, side = max_demand_ratio(graph, demand, sinks=sinks, small_edges=small)
    p, q = ratio.numerator, ratio.denominator
    g = math.gcd(q, *graph.cap.tolist())
    U = Fraction(p, g)
    x = ratio * graph.scale
    return Optimum(k=q // g, U=U, capacities=tuple(_capacities(graph, U)), ratio_gbps=x, optimal_ratio_gbps=x, critical=side)


def fixed_k_optimum(graph: CapacityGraph, demand: Sequence[int], *, sinks: Sequence[int], k: int, best: Optimum | None = None) -> Optimum:
    """The least ``U`` for exactly ``k`` trees per unit of demand (``k`` at most the optimum's;
    ``best``: the optimum, when already known)."""
    best = optimum(graph, demand, sinks=sinks) if best is None else best
    if k < 1:
        raise InputError(f"trees per NPU must be positive, got {k}")
    if k > best.k:
        raise InputError(
            f"{k} trees per NPU is more than the optimum needs ({best.k} reach the best "
            f"bandwidth exactly); use at most {best.k}"
        )
    if k == best.k:
        return best
    U = best.U * k / best.k  # no smaller U can do: floor only loses capacity
    cap = graph.cap.tolist()
    total_demand = sum(demand)
    supply = {r: k * d for r, d in enumerate(demand) if d > 0}

    def least_for(side) -> Fraction:
        """The least ``U`` with which the edges into ``side`` carry what its NPUs lack."""
        needed = k * (total_demand - sum(d for r, d in enumerate(demand) if side[r]))
        entering = [b for u, v, b in zip(graph.src.tolist(), graph.dst.tolist(), cap) if not side[u] and side[v]]
        return _least_factor(entering, needed)

    if best.critical is not None:  # the optimum's own cut: floors on its edges mostly lose some
        U = max(U, least_for(best.critical))
    while True:
        capacities = _capacities(graph, U)
        residual = {(u, v): c for u, v, c in zip(graph.src.tolist(), graph.dst.tolist(), capacities) if c > 0}
        found = Connectivity(graph.num_nodes, graph.num_npus, residual, sinks=sinks).check(supply, want_cut=True)
        if found.ok:
            return Optimum(k=k, U=U, capacities=tuple(capacities), ratio_gbps=U / k * graph.scale, optimal_ratio_gbps=best.ratio_gbps)
        U = max(U, least_for(found.sink_side))


def same_optimum(graph: CapacityGraph, found: Optimum) -> Optimum:
    """``found`` (its ``k`` and ``U``) on ``graph``, a graph with the same edges in another order
    (the reverse of a fabric equal to its reverse): only the capacities follow its order (its
    critical cut is the original graph's)."""
    return replace(found, capacities=tuple(_capacities(graph, found.U)), critical=None)


def _least_factor(bandwidths: list[int], needed: int) -> Fraction:
    """The least ``U`` with ``sum(floor(U * b)) >= needed`` over ``bandwidths`` (a breakpoint ``m / b``)."""
    counts: dict[int, int] = {}
    for b in bandwidths:
        counts[b] = counts.get(b, 0) + 1

    def total(U: Fraction) -> int:
        return sum(c * ((U.numerator * b) // U.denominator) for b, c in counts.items())

    best = None
    for b in counts:
        # smallest m with total(m / b) >= needed: total is non-decreasing in m
        low, high = 0, -(-needed // counts[b]) * 1 + 1  # total(high / b) >= counts[b] * high >= needed
        while low < high:
            middle = (low + high) // 2
            if total(Fraction(middle, b)) >= needed:
                high = middle
            else:
                low = middle + 1
        candidate = Fraction(low, b)
        best = candidate if best is None or candidate < best else best
    return best


__all__ = ["Optimum", "fixed_k_optimum", "optimum", "same_optimum"]
