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

Tests come by the hundred on slowly changing states (a tree grows an edge at a time), so two
certificates spare most max-flows: a sink's last passing flow, while it still fits, proves the
next test passes for that sink; a cut that failed lately (the node set a failing flow could not
fill), while it still receives less than the trees must bring into it, proves the next test
fails (mi250:2's packings: 165 of their 181 failing tests).

>>> net = Connectivity(2, 2, {(0, 1): 2, (1, 0): 2})
>>> net.check({0: 2, 1: 2}).ok              # two one-edge trees per root fit
True
>>> net.check({0: 3, 1: 3}).deficit         # a third does not: 1 unit short at each sink
1
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Iterable, Sequence

import numpy as np

from chakra_collectives.flow import FlowNetwork
from chakra_collectives.flow.maxflow import max_flows, small_edges_for
from chakra_collectives.flow.capacity import integer_array

SMALL_TEST_EDGES = 128
"""Flow tests on at most this many edges run the pure-Python max-flow (no scipy import for a
small fabric); larger ones, run by the thousand, run scipy's compiled Dinic (2-3x faster per
test on 64-NPU meshes, most of the rest being call overhead) -- unless they have one sink and
scipy is not loaded yet (:func:`~chakra_collectives.flow.maxflow.small_edges_for`)."""

KEPT_CUTS = 16
"""Failing cuts a :class:`Connectivity` keeps, the latest first
(:meth:`Connectivity.check`): mi250:2's packings catch 113 of their 181 failing tests with the
last one, 141 with four, 165 with sixteen."""


@dataclass
class Gadget:
    """A partly built tree: its weight and the nodes it reaches."""

    weight: int
    nodes: np.ndarray


@dataclass
class CheckResult:
    ok: bool
    deficit: int
    """How much flow the worst sink lacks (0 when ``ok``; at least this much when a kept cut
    decided the test, which happens only without ``want_cut``)."""
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
        self.certificates: dict[int, tuple[int, int, np.ndarray, np.ndarray]] = {}
        """Per sink: the last flow that passed the test, ``(total, nodes, edge keys, flows)``
        (the edges it uses as :meth:`FlowNetwork.distinct_edges` keys); a later test whose
        network has the same nodes and total, and room for that flow, passes for that sink
        without a max-flow."""
        self.flows = 0
        """Max-flows run (tests answered by a certificate run none)."""
        self.failed = False
        """Whether the last test that ran max-flows failed (the next one first tries the sink
        that failed alone; a test a kept cut failed leaves it: the next one mostly passes)."""
        self.cuts: list[tuple[np.ndarray, int]] = []
        """Cuts of failed tests, ``(sink side, sink)`` (the side a boolean mask over the graph's
        nodes), at most :data:`KEPT_CUTS`, the latest first; a later test
        without ``want_cut`` whose state leaves one of them short fails without a max-flow."""
        self._sides = np.zeros((0, num_nodes), dtype=bool)
        """The sides of :attr:`cuts`, stacked."""

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, cap)`` of the edges with positive residual capacity."""
        capacity = self.capacity
        ends = np.fromiter(chain.from_iterable(capacity), dtype=np.int64, count=2 * len(capacity)).reshape(-1, 2)
        try:
            cap = np.fromiter(capacity.values(), dtype=np.int64, count=len(capacity))
            if len(cap) and cap.max() >= 2**62:
                raise OverflowError
        except OverflowError:  # Python integers: exact beyond 64 bits
            cap = integer_array(list(capacity.values()))
        keep = cap > 0
        return ends[keep, 0], ends[keep, 1], cap[keep]

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
            weights = integer_array([g.weight for g in gadgets])
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
        src, dst = np.concatenate(parts_src), np.concatenate(parts_dst)
        small = small_edges_for(1 if feeder is not None else len(self.sinks), source + 1, len(src), SMALL_TEST_EDGES)
        network = FlowNetwork(source + 1, src=src, dst=dst, cap=caps, flow_bound=bound, small_edges=small)
        return network, source, total

    def check(self, supply: dict[int, int], gadgets: Iterable[Gadget] = (), *, want_cut: bool = False, base=None) -> CheckResult:
        """Whether every sink can receive the total weight (see the module docstring).

        A sink whose last passing flow still fits the network passes without a max-flow
        (:attr:`certificates`); the other sinks' flows run together, in one call
        (:func:`~chakra_collectives.flow.maxflow.max_flows`). The sink that failed first, in the
        order the sinks are kept, moves to the front (the failing sink is likely to fail again).
        Without ``want_cut``, a kept cut (:attr:`cuts`) that the state leaves short fails the
        test first, without a max-flow.
        """
        gadgets = [g for g in gadgets if g.weight > 0]
        if not want_cut and self.cuts:
            base = self.edges() if base is None else base
            short = self._short_cut(supply, gadgets, base)
            if short is not None:
                return short
        network, source, total = self.network(supply, gadgets, base=base)
        values: dict[int, int] = {}
        failing: dict[int, np.ndarray] = {}
        keys, capacity = network.distinct_edges() if network.backend != "networkx" and network.fits_int64 else (None, None)
        usable = [s for s in self.sinks if keys is not None and self.certificates.get(s, (0, 0))[:2] == (total, network.num_nodes)]
        fitting = _all_fit([self.certificates[s][2:] for s in usable], keys, capacity)
        values.update((sink, total) for sink, fits in zip(usable, fitting) if fits)
        unknown = [sink for sink in self.sinks if sink not in values]
        if self.failed and not want_cut and unknown and unknown[0] == self.sinks[0]:
            # the sink that failed last, alone first: when it fails again, no other flow is needed
            unknown = [] if self._solve(network, source, total, unknown[:1], values, keys, failing) else unknown[1:]
        self._solve(network, source, total, unknown, values, keys, failing)
        if want_cut:  # the first of the least
            worst_sink = min(self.sinks, key=values.__getitem__)
        else:  # the first failing sink
            worst_sink = next((sink for sink in self.sinks if values[sink] < total), self.sinks[0])
        deficit = max(0, total - values[worst_sink])
        if deficit > 0 and worst_sink != self.sinks[0]:
            self.sinks.remove(worst_sink)
            self.sinks.insert(0, worst_sink)
        self.failed = deficit > 0
        side = None
        if want_cut and deficit > 0:
            _, side = network.min_cut(source, worst_sink)
            side = side[: self.num_nodes]
            self._keep_cut(side, worst_sink)
        elif deficit > 0 and worst_sink in failing:
            self._keep_cut(~network.source_side(source, failing[worst_sink])[: self.num_nodes], worst_sink)
        return CheckResult(deficit == 0, deficit, worst_sink, side)

    def _solve(
        self, network: FlowNetwork, source: int, total: int, sinks: list[int], values: dict[int, int], keys, failing: dict[int, np.ndarray]
    ) -> list[int]:
        """Run the flows to ``sinks`` together, into ``values`` (passing flows become
        certificates, failing ones go into ``failing``); the sinks that failed."""
        self.flows += len(sinks)
        failed = []
        for sink, (value, flow) in zip(sinks, max_flows([(network, source, sink) for sink in sinks], with_flows=keys is not None)):
            values[sink] = value
            if value < total:
                failed.append(sink)
                if flow is not None:
                    failing[sink] = flow
            elif flow is not None:
                used = flow > 0
                self.certificates[sink] = (total, network.num_nodes, keys[used], flow[used])
        return failed

    def _keep_cut(self, side: np.ndarray, sink: int) -> None:
        """Keep a failed test's cut (:attr:`cuts`), first."""
        self.cuts = [(side, sink)] + [cut for cut in self.cuts if not np.array_equal(cut[0], side)][: KEPT_CUTS - 1]
        self._sides = np.array([side for side, _ in self.cuts])

    def _short_cut(self, supply: dict[int, int], gadgets: list[Gadget], base) -> CheckResult | None:
        """The failed test a kept cut proves, or ``None``.

        A cut (sink side ``X``) receives the residual capacity of the edges into it, the supply
        of the roots in it, and the weight of every gadget reaching a node of it (a gadget's
        node takes the cheaper side); less than the total weight means no flow can bring the
        total into ``X``'s sink: the test fails (its sink moves to the front of the sinks)."""
        src, dst, cap = base
        total = sum(supply.values()) + sum(g.weight for g in gadgets)
        if cap.dtype == object or total >= 2**62:
            return None  # beyond 64 bits: the max-flows decide
        sides = self._sides
        received = (~sides[:, src] & sides[:, dst]).astype(np.int64) @ cap.astype(np.int64)
        if supply:
            roots = np.fromiter(supply.keys(), dtype=np.int64, count=len(supply))
            received += sides[:, roots].astype(np.int64) @ np.fromiter(supply.values(), dtype=np.int64, count=len(supply))
        if gadgets:
            nodes = np.concatenate([np.asarray(g.nodes, dtype=np.int64) for g in gadgets])
            starts = np.cumsum([0] + [len(g.nodes) for g in gadgets[:-1]])
            reached = np.logical_or.reduceat(sides[:, nodes], starts, axis=1)
            received += reached.astype(np.int64) @ np.array([g.weight for g in gadgets], dtype=np.int64)
        short = np.flatnonzero(received < total)
        if not len(short):
            return None
        first = int(short[0])
        sink = self.cuts[first][1]
        if sink != self.sinks[0]:
            self.sinks.remove(sink)
            self.sinks.insert(0, sink)
        return CheckResult(False, total - int(received[first]), sink)


def _all_fit(flows: list[tuple[np.ndarray, np.ndarray]], keys: np.ndarray, capacity: np.ndarray) -> list[bool]:
    """Per flow ``(edge keys, flows)``, whether it fits a network's distinct edges ``keys`` and
    ``capacity`` (all flows looked up at once)."""
    if not flows:
        return []
    flow_keys = np.concatenate([f[0] for f in flows])
    if not len(keys):
        return [not len(f[0]) for f in flows]
    at = np.minimum(np.searchsorted(keys, flow_keys), len(keys) - 1)
    good = (keys[at] == flow_keys) & (capacity[at] >= np.concatenate([f[1] for f in flows]))
    bounds = np.cumsum([0] + [len(f[0]) for f in flows])
    return [bool(good[a:b].all()) for a, b in zip(bounds[:-1], bounds[1:])]


__all__ = ["CheckResult", "Connectivity", "Gadget", "KEPT_CUTS", "SMALL_TEST_EDGES"]
