"""The flow test behind every ForestColl step: can the remaining trees still be packed?

State: integer residual capacities on a directed graph (NPUs and, before edge splitting,
switches); trees not started yet, as a *supply* per NPU (the weight of the trees rooted
there); trees partly built, as *gadgets* (a weight and the nodes the tree already reaches).
Edmonds' branching theorem (with Bang-Jensen, Frank and Jackson's splitting theorem when
switches are still present) says the remaining trees can be completed iff every node set ``X``
holding an NPU receives at least the weight of the trees that must still enter it:

``residual capacity into X  >=  sum of the weights of the unfinished trees that reach no node of X``

-- equivalently, a super source that feeds each not-started root its supply and each gadget
its weight (the gadget passes it on, without limit, to every node its tree reaches) can send
the total weight to every NPU. :meth:`Connectivity.check` runs that max-flow for one sink NPU
per symmetry class (the state is symmetric, so the other sinks give the same value).

>>> net = Connectivity(2, 2, {(0, 1): 2, (1, 0): 2})
>>> net.check({0: 2, 1: 2}).ok              # two one-edge trees per root fit
True
>>> net.check({0: 3, 1: 3}).deficit         # a third does not: 1 unit short at each sink
1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from chakra_collectives.flow import FlowNetwork
from chakra_collectives.flow.capacity import integer_array

SMALL_TEST_EDGES = 128
"""Flow tests on at most this many edges run the pure-Python max-flow (no scipy import for a
small fabric); larger ones, run by the thousand, run scipy's compiled Dinic (2-3x faster per
test on 64-NPU meshes, most of the rest being call overhead)."""


@dataclass
class Gadget:
    """A partly built tree: its weight and the nodes it reaches."""

    weight: int
    nodes: np.ndarray


@dataclass
class CheckResult:
    ok: bool
    deficit: int
    """How much flow the worst sink lacks (0 when ``ok``)."""
    sink: int
    """The worst sink."""
    sink_side: np.ndarray | None = None
    """With ``want_cut``: the min cut's sink side (a boolean mask over the graph's nodes)."""


class Connectivity:
    """Residual capacities of a graph on ``num_nodes`` nodes (``0..num_npus-1`` NPUs) and the flow test."""

    def __init__(self, num_nodes: int, num_npus: int, capacity: dict[tuple[int, int], int], *, sinks: Sequence[int] | None = None) -> None:
        self.num_nodes = num_nodes
        self.num_npus = num_npus
        self.capacity = capacity
        self.sinks = list(range(num_npus)) if sinks is None else list(sinks)
        self.certificates: dict[int, tuple[int, np.ndarray]] = {}
        """Per sink: the last flow that passed the test, ``(total, flow matrix)``; a later test
        whose network has the same nodes and total, and room for that flow, passes for that
        sink without a max-flow."""
        self.flows = 0
        """Max-flows run (tests answered by a certificate run none)."""

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, cap)`` of the edges with positive residual capacity."""
        items = [(u, v, c) for (u, v), c in self.capacity.items() if c > 0]
        if not items:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        src, dst, cap = zip(*items)
        return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64), integer_array(list(cap))

    def network(
        self, supply: dict[int, int], gadgets: Iterable[Gadget] = (), *, base=None, feeder: int | None = None
    ) -> tuple[FlowNetwork, int, int]:
        """``(network, source, total)``: the flow network of the test and the flow every sink needs.

        ``feeder``: a node that feeds the super source without limit (ForestColl's single-edge
        test sends its flow from the tail of the candidate edge). Edges that must not limit
        the flow get the total weight as capacity: no more can ever pass them.
        """
        src, dst, cap = self.edges() if base is None else base
        gadgets = [g for g in gadgets if g.weight > 0]
        source = self.num_nodes + len(gadgets)
        total = sum(supply.values()) + sum(g.weight for g in gadgets)
        parts_src = [src, np.full(len(supply), source, dtype=np.int64)]
        parts_dst = [dst, np.fromiter(supply.keys(), dtype=np.int64, count=len(supply))]
        parts_cap = [cap, integer_array(list(supply.values()))]
        if gadgets:
            weights = np.array([g.weight for g in gadgets], dtype=np.int64)
            sizes = np.array([len(g.nodes) for g in gadgets], dtype=np.int64)
            nodes = np.arange(self.num_nodes, source, dtype=np.int64)
            parts_src += [np.full(len(gadgets), source, dtype=np.int64), np.repeat(nodes, sizes)]
            parts_dst += [nodes, np.concatenate([np.asarray(g.nodes, dtype=np.int64) for g in gadgets])]
            parts_cap += [weights, np.repeat(weights, sizes)]  # a gadget never passes on more than it gets
        bound = total
        if feeder is not None:
            parts_src.append(np.array([feeder], dtype=np.int64))
            parts_dst.append(np.array([source], dtype=np.int64))
            parts_cap.append(np.array([total], dtype=np.int64))
            bound = total + int(sum(cap[src == feeder].tolist()))
        if any(part.dtype == object for part in parts_cap):
            caps = integer_array([int(c) for part in parts_cap for c in part.tolist()])
        else:
            caps = np.concatenate(parts_cap)
        network = FlowNetwork(source + 1, src=np.concatenate(parts_src), dst=np.concatenate(parts_dst), cap=caps, flow_bound=bound, small_edges=SMALL_TEST_EDGES)
        return network, source, total

    def check(self, supply: dict[int, int], gadgets: Iterable[Gadget] = (), *, want_cut: bool = False, base=None) -> CheckResult:
        """Whether every sink can receive the total weight (see the module docstring).

        The sink that failed last is tried first; a sink whose last passing flow still fits
        the network passes without a max-flow (:attr:`certificates`).
        """
        network, source, total = self.network(supply, gadgets, base=base)
        worst, worst_sink = None, self.sinks[0]
        capacity: np.ndarray | None = None
        for sink in self.sinks:
            value = None
            known = self.certificates.get(sink)
            if known is not None and known[0] == total and len(known[1]) == network.num_nodes:
                capacity = network.capacity_matrix() if capacity is None else capacity
                if capacity is not None and bool((known[1] <= capacity).all()):
                    value = total
            if value is None:
                self.flows += 1
                value, flow = network.flow_matrix(source, sink)
                if value >= total and flow is not None:
                    self.certificates[sink] = (total, flow)
            if worst is None or value < worst:
                worst, worst_sink = value, sink
            if value < total and not want_cut:
                break
        if worst is not None and worst < total and worst_sink != self.sinks[0]:
            self.sinks.remove(worst_sink)
            self.sinks.insert(0, worst_sink)
        deficit = max(0, total - (worst if worst is not None else total))
        side = None
        if want_cut and deficit > 0:
            _, side = network.min_cut(source, worst_sink)
            side = side[: self.num_nodes]
        return CheckResult(deficit == 0, deficit, worst_sink, side)


__all__ = ["CheckResult", "Connectivity", "Gadget", "SMALL_TEST_EDGES"]
