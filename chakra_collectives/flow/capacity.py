"""Bandwidths as exact rationals, and a topology as an integer-capacity graph.

Exact flow computations need exact numbers. A link's bandwidth (a float, GB/s) is read as a
rational by one rule, :func:`exact_bandwidth`:

* a float that is a multiple of 2^-24 is its exact value (``50.0`` is 50, ``12.5`` is 25/2);
* otherwise, when it is within one part in 10^9 of a fraction whose denominator is at most
  10^6, it is that fraction -- so ``100 / 3`` (printed ``33.333333333333336``) is 100/3 and
  ``0.1`` is 1/10;
* otherwise it is the float's exact binary value (every float is a rational), which is
  exact but can make the numbers of a flow computation very large (they stay exact: Python
  integers, networkx instead of scipy).

:class:`CapacityGraph` then scales all bandwidths by the least common multiple of their
denominators, so every capacity is an integer: ``bandwidth_gbps = capacity / scale``.
Parallel links between the same two nodes are summed into one edge.

>>> exact_bandwidth(12.5), exact_bandwidth(100 / 3), exact_bandwidth(0.1)
(Fraction(25, 2), Fraction(100, 3), Fraction(1, 10))
>>> from chakra_collectives.topology import Topology
>>> t = Topology(2)
>>> t.add_link(0, 1, 12.5, 0.0, bidirectional=True)
>>> t.add_link(0, 1, 50.0, 0.0)
>>> g = CapacityGraph.from_topology(t)
>>> g.src.tolist(), g.dst.tolist(), g.cap.tolist(), g.scale
([0, 1], [1, 0], [125, 25], 2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from chakra_collectives.topology import Topology

MAX_DENOMINATOR = 10**6
"""Largest denominator :func:`exact_bandwidth` rounds a bandwidth to."""
TOLERANCE = 1e-9
"""Relative distance within which a float is taken as the nearby simple fraction."""


def exact_bandwidth(gbps: float) -> Fraction:
    """``gbps`` as an exact rational (see the module docstring for the rule)."""
    value = Fraction(gbps)
    if value.denominator <= 2**24:
        return value
    simple = value.limit_denominator(MAX_DENOMINATOR)
    if abs(simple - value) <= TOLERANCE * abs(value):
        return simple
    return value


def integer_array(values: list[int]) -> np.ndarray:
    """Python integers as an ``int64`` array, or an object array when one does not fit."""
    try:
        array = np.asarray(values, dtype=np.int64)
    except OverflowError:
        return integer_array_object(values)
    if len(array) and (array.max() >= 2**62 or array.min() <= -(2**62)):
        return integer_array_object(values)
    return array


def integer_array_object(values) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = [int(v) for v in values]
    return array


def scaled(values: np.ndarray, factor: int) -> np.ndarray:
    """``values * factor`` without overflow: ``int64`` while it fits, Python integers beyond."""
    if values.dtype != object and len(values) and int(np.abs(values).max()) * abs(factor) < 2**62:
        return values * factor
    return integer_array([int(v) * factor for v in values.tolist()])


@dataclass(frozen=True, eq=False)
class CapacityGraph:
    """A directed graph with integer capacities: node ``i`` of the topology is node ``i`` here.

    ``src``, ``dst`` and ``cap`` are aligned arrays, one entry per ordered node pair that has
    links (sorted by ``(src, dst)``); ``bandwidth_gbps = cap / scale``. Nodes ``0 ..
    num_npus-1`` are NPUs, the rest switches.
    """

    num_nodes: int
    num_npus: int
    src: np.ndarray
    dst: np.ndarray
    cap: np.ndarray
    scale: int

    @classmethod
    def from_topology(cls, topology: Topology, *, reverse: bool = False) -> "CapacityGraph":
        """The topology's links as integer capacities (every link reversed when ``reverse``)."""
        bandwidths: dict[tuple[int, int], list[float]] = {}
        for link in topology.links:
            key = (link.dst, link.src) if reverse else (link.src, link.dst)
            bandwidths.setdefault(key, []).append(link.bandwidth_gbps)
        rational = {gbps: exact_bandwidth(gbps) for gbps in {b for values in bandwidths.values() for b in values}}
        exact = {key: rational[values[0]] if len(values) == 1 else sum((rational[b] for b in values), Fraction(0)) for key, values in bandwidths.items()}
        keys = sorted(exact)
        scale = math.lcm(*{exact[key].denominator for key in keys}) if keys else 1
        caps = [exact[key].numerator * (scale // exact[key].denominator) for key in keys]
        return cls(
            num_nodes=topology.num_nodes,
            num_npus=topology.num_npus,
            src=np.array([key[0] for key in keys], dtype=np.int64),
            dst=np.array([key[1] for key in keys], dtype=np.int64),
            cap=integer_array(caps),
            scale=scale,
        )

    def in_capacity(self) -> list[int]:
        """Total capacity into every node (Python integers)."""
        total = [0] * self.num_nodes
        for v, c in zip(self.dst.tolist(), self.cap.tolist()):
            total[v] += c
        return total

    def capacity_into(self, sink_side: np.ndarray) -> int:
        """Total capacity of the edges entering the node set ``sink_side`` (a boolean mask)."""
        entering = ~sink_side[self.src] & sink_side[self.dst]
        return int(sum(self.cap[entering].tolist()))

    def gbps(self, capacity: int) -> Fraction:
        """An integer capacity of this graph in GB/s."""
        return Fraction(capacity, self.scale)


__all__ = ["MAX_DENOMINATOR", "TOLERANCE", "CapacityGraph", "exact_bandwidth", "integer_array", "scaled"]
