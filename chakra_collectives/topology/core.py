"""Topology: NPUs, switches and the directed links between them.

Nodes ``0 .. num_npus-1`` are NPUs (the ranks of an algorithm); nodes ``num_npus ..`` are
switches, present when a user describes them. Every link is directed and has its own bandwidth
(GB/s, 1 GB = 2^30 bytes) and latency (ns), so asymmetric and heterogeneous networks are
plain topologies. Several links may join the same pair (a multigraph).

What a message costs on a link is the network model's business
(:class:`~chakra_collectives.network.NetworkModel`); :meth:`Topology.route` gives the links a
message between two NPUs crosses.

>>> t = Topology(3, name="tiny")
>>> t.add_link(0, 1, 50.0, 500.0, bidirectional=True)
>>> t.add_link(1, 2, 50.0, 500.0, bidirectional=True)
>>> t.route(0, 2), t.links[2]
([0, 2], Link(src=1, dst=2, bandwidth_gbps=50.0, latency_ns=500.0))
>>> one_way = Topology(2, name="one-way")
>>> one_way.add_link(0, 1, 50.0, 500.0)
>>> one_way.validate()
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: one-way: NPU 1 cannot reach NPU 0
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from typing import TYPE_CHECKING

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.limits import check_bandwidth, check_latency, check_links, check_npus, check_switches

if TYPE_CHECKING:
    import networkx as nx
    from chakra_collectives.topology.symmetry import NpuSymmetry


@dataclass(frozen=True)
class Link:
    """One directed link."""

    src: int
    dst: int
    bandwidth_gbps: float
    latency_ns: float


class Topology:
    """NPUs, switches and directed links with bandwidth and latency."""

    def __init__(self, num_npus: int, *, num_switches: int = 0, name: str = "") -> None:
        if num_npus < 1:
            raise InputError(f"a topology needs at least one NPU, got {num_npus}")
        self.name = name or f"{num_npus} NPUs"
        self.num_npus = check_npus(num_npus, self.name)
        self.num_switches = check_switches(num_switches, self.name)
        self.links: list[Link] = []
        self.uniform = False
        """Every NPU looks alike (some symmetry of the network maps any NPU to any other).
        Builders that guarantee it set it after adding their links; adding a link clears it.
        Lower bounds use it to try one NPU instead of all."""
        self.symmetry: "NpuSymmetry | None" = None
        """Automorphisms acting freely on the NPUs (:mod:`~chakra_collectives.topology.symmetry`),
        set by builders that know them; adding a link clears it."""
        self._routes: dict[int, list[int]] = {}
        self._connected = False

    # ------------------------------------------------------------------ building
    @property
    def num_nodes(self) -> int:
        return self.num_npus + self.num_switches

    def add_switch(self) -> int:
        """Add a switch node and return its id."""
        self.num_switches = check_switches(self.num_switches + 1, self.name)
        self.symmetry = None
        self._invalidate()
        return self.num_nodes - 1

    def add_link(self, src: int, dst: int, bandwidth_gbps: float, latency_ns: float, *, bidirectional: bool = False) -> None:
        """Add a directed link (and its reverse when ``bidirectional``).

        Bandwidth and latency must be finite and inside :mod:`~chakra_collectives.limits`'
        range; a topology holds at most :data:`~chakra_collectives.limits.MAX_LINKS` links.
        """
        for node in (src, dst):
            if not 0 <= node < self.num_nodes:
                raise InputError(f"{self.name}: link {src}->{dst} names node {node}, which does not exist (0..{self.num_nodes - 1})")
        if src == dst:
            raise InputError(f"{self.name}: link {src}->{dst} is a self-loop")
        where = f"{self.name}: link {src}->{dst}"
        bandwidth_gbps = check_bandwidth(bandwidth_gbps, where)
        latency_ns = check_latency(latency_ns, where)
        check_links(len(self.links) + (2 if bidirectional else 1), self.name)
        self.links.append(Link(src, dst, bandwidth_gbps, latency_ns))
        self.uniform = False
        self.symmetry = None
        if bidirectional:
            self.links.append(Link(dst, src, bandwidth_gbps, latency_ns))
        self._invalidate()

    def _invalidate(self) -> None:
        self._routes.clear()
        self._connected = False
        for cached in ("graph", "link_arrays", "out_links", "in_links", "_out_hops"):
            self.__dict__.pop(cached, None)

    def is_switch(self, node: int) -> bool:
        return node >= self.num_npus

    # ------------------------------------------------------------------ views
    @cached_property
    def graph(self) -> nx.MultiDiGraph:
        """The topology as a networkx MultiDiGraph (edge key = link id)."""
        import networkx as nx  # imported when used: it takes a noticeable part of a command's start-up

        graph = nx.MultiDiGraph(name=self.name)
        graph.add_nodes_from(range(self.num_npus), kind="npu")
        graph.add_nodes_from(range(self.num_npus, self.num_nodes), kind="switch")
        for index, link in enumerate(self.links):
            graph.add_edge(link.src, link.dst, key=index, bandwidth=link.bandwidth_gbps, latency=link.latency_ns)
        return graph

    @cached_property
    def link_arrays(self) -> dict[str, np.ndarray]:
        """Columns ``src``, ``dst``, ``bandwidth_gbps``, ``latency_ns`` of all links."""
        return {
            "src": np.array([l.src for l in self.links], dtype=np.int64),
            "dst": np.array([l.dst for l in self.links], dtype=np.int64),
            "bandwidth_gbps": np.array([l.bandwidth_gbps for l in self.links]),
            "latency_ns": np.array([l.latency_ns for l in self.links]),
        }

    @cached_property
    def out_links(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.num_nodes)]
        for index, link in enumerate(self.links):
            out[link.src].append(index)
        return out

    @cached_property
    def in_links(self) -> list[list[int]]:
        into: list[list[int]] = [[] for _ in range(self.num_nodes)]
        for index, link in enumerate(self.links):
            into[link.dst].append(index)
        return into

    @cached_property
    def _out_hops(self) -> list[list[tuple[int, int, float]]]:
        """Per node, ``(link id, link.dst, link.latency_ns)`` of its :attr:`out_links`: what
        :meth:`_tree_from` reads of a link, without an attribute lookup per link and source
        (torus3d:8x8x8's 512 trees: about 0.23 -> 0.16 s of CPU)."""
        return [[(index, self.links[index].dst, self.links[index].latency_ns) for index in out] for out in self.out_links]

    # ------------------------------------------------------------------ routing
    def route(self, src: int, dst: int) -> list[int]:
        """Link ids a message from NPU ``src`` to NPU ``dst`` crosses.

        Fewest hops; among those, the lowest total latency; among those, the links added
        first. Deterministic, so synthesis and replay route identically.
        """
        via = self._routes.get(src)
        if via is None:
            via = self._routes[src] = self._tree_from(src)
        return self._path(via, src, dst)

    def routes_from(self, src: int, dsts: "list[int]") -> list[list[int]]:
        """:meth:`route` from ``src`` to each of ``dsts``, the same links; without the whole
        shortest-path tree of ``src`` when it is not known yet: the search stops at the hop
        count that reaches the last of ``dsts`` (a ring's neighbours on a 1,024-NPU mesh are one
        hop away: one level searched instead of the whole mesh).

        >>> from chakra_collectives.topology import load_topology
        >>> mesh = load_topology("mesh2d:8x8")
        >>> mesh.routes_from(7, [8, 6]) == [load_topology("mesh2d:8x8").route(7, 8), mesh.route(7, 6)]
        True
        """
        via = self._routes.get(src)
        if via is None:
            via = self._tree_from(src, until=dsts)
        return [self._path(via, src, dst) for dst in dsts]

    def _path(self, via: list[int], src: int, dst: int) -> list[int]:
        """The links from ``src`` to ``dst`` in the shortest-path tree ``via`` of ``src``."""
        if dst != src and (via[dst] < 0 or dst >= self.num_npus):
            raise InputError(f"{self.name}: NPU {dst} cannot be reached from NPU {src}")
        path = []
        cursor = dst
        while cursor != src:
            index = via[cursor]
            path.append(index)
            cursor = self.links[index].src
        return path[::-1]

    def _tree_from(self, src: int, until: "list[int] | None" = None) -> list[int]:
        """The shortest-path tree from ``src``: for every node, the link it is reached by (-1:
        ``src`` itself, or unreachable). BFS by hops with latency tie-break (lexicographic
        (hops, latency, link order)). One list per source, so routes between all pairs take
        O(N^2) memory, not the O(N^3) of keeping every path. ``until``: stop after the hop
        count that reaches every one of these nodes (the links into the nodes reached so far
        are final: a node's link is chosen among the previous level's only)."""
        remaining = None if until is None else set(until) - {src}
        best: list[tuple[int, float] | None] = [None] * self.num_nodes
        via: list[int] = [-1] * self.num_nodes
        best[src] = (0, 0.0)
        frontier = [src]
        hops = 0
        while frontier:
            hops += 1
            candidates: dict[int, tuple[float, int]] = {}
            for node in frontier:
                reached = best[node][1]  # type: ignore[index]
                for index, dst, link_latency in self._out_hops[node]:
                    if best[dst] is not None:
                        continue
                    # switches forward traffic; NPUs also forward (direct-connect networks route through NPUs)
                    latency = reached + link_latency
                    current = candidates.get(dst)
                    if current is None or latency < current[0]:
                        candidates[dst] = (latency, index)
            for node, (latency, index) in candidates.items():
                best[node] = (hops, latency)
                via[node] = index
            if remaining is not None:
                remaining.difference_update(candidates)
                if not remaining:
                    break
            frontier = sorted(candidates)
        return via

    # ------------------------------------------------------------------ checks
    def validate(self) -> "Topology":
        """Every NPU must reach every other NPU; returns ``self`` for chaining.

        Checked once until the topology changes: every entry point that needs a connected
        network (the network model, TACOS, replay, bounds) calls it.
        """
        if self._connected:
            return self
        reach_from_0 = self._reachable(0, self.out_links, lambda i: self.links[i].dst)
        reach_to_0 = self._reachable(0, self.in_links, lambda i: self.links[i].src)
        for npu in range(self.num_npus):
            if npu not in reach_from_0:
                raise InputError(f"{self.name}: NPU {npu} cannot be reached from NPU 0")
            if npu not in reach_to_0:
                raise InputError(f"{self.name}: NPU {npu} cannot reach NPU 0")
        self._connected = True
        return self

    def _reachable(self, start: int, adjacency: list[list[int]], other) -> set[int]:
        seen = {start}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            for index in adjacency[node]:
                nxt = other(index)
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return seen

    def describe(self) -> str:
        switches = f", {self.num_switches} switches" if self.num_switches else ""
        return f"{self.name}: {self.num_npus} NPUs{switches}, {len(self.links)} links"
