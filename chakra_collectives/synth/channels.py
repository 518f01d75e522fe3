"""Channels: the NPU-to-NPU paths the TACOS matcher can put a message on.

A *direct* channel is a link between two NPUs. A *routed* channel joins two NPUs through
switches only: it is the route the network model gives (the one predictions and the
replayer use), crossed store-and-forward, one hop after the other. Pairs whose route
passes through another NPU get no channel: the synthesized algorithm relays through that NPU
itself (receive, then send), as TACOS does on direct-connect networks. There is at most one
channel per ordered pair of NPUs -- unless *detours* are asked for (a process group's view of a
fabric, whose "switches" are the other NPUs, :func:`detour_channels`): then every pair also gets a
routed channel for each way out of its sender and way into its receiver, so that a group uses
every link of its members, not only those its pairs' own routes cross.

Channels are built from the network model (:class:`~chakra_collectives.network.NetworkModel`,
tacos mode): its routes, and its hop cost -- a message of ``m`` chunks takes
``latency + m * chunk_bytes / bandwidth`` on each hop (:meth:`Channels.hop_ns` is the model's
:meth:`~chakra_collectives.network.NetworkModel.hop_ns`), so the matcher's schedule and the
model's prediction agree to the last bit.

>>> from chakra_collectives.topology import ring, switch
>>> ch = build_channels(ring(4), chunk_bytes=2**20)
>>> len(ch.direct_src), len(ch.routed), bool(ch.hop_ns(ch.direct_link[:1], 2)[0] == ch.model.hop_ns([0], 2**21)[0])
(8, 0, True)
>>> sw = build_channels(switch(4), chunk_bytes=2**20)
>>> len(sw.direct_src), len(sw.routed), sw.routed[0].links
(0, 12, (0, 3))
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from chakra_collectives.ir.grouping import occurrence
from chakra_collectives.network.model import NetworkModel
from chakra_collectives.topology.core import Topology


@dataclass(frozen=True)
class RoutedChannel:
    src: int
    dst: int
    links: tuple[int, ...]


@dataclass(frozen=True)
class Channels:
    """Direct channels as columns, routed channels as a list, and the network model they use."""

    num_npus: int
    chunk_bytes: int
    direct_src: np.ndarray
    direct_dst: np.ndarray
    direct_link: np.ndarray
    routed: list[RoutedChannel]
    model: NetworkModel
    """The network model (tacos mode): link latencies and rates, hop costs, routes."""
    detours: bool = False
    """Routed channels include :func:`detour_channels` (several per pair): a message's route is
    its channel's, named explicitly (:meth:`routing`), and routed channels may carry chunks a
    direct in-neighbour of the destination could bring too."""

    @property
    def num_direct(self) -> int:
        return len(self.direct_src)

    @property
    def link_latency(self) -> np.ndarray:
        """ns, per topology link."""
        return self.model.link_latency

    @property
    def link_rate(self) -> np.ndarray:
        """bytes/ns, per topology link."""
        return self.model.link_rate

    def hop_ns(self, links: np.ndarray, count: np.ndarray | int) -> np.ndarray:
        """Time a message of ``count`` chunks takes over each of ``links`` (the model's hop cost)."""
        return self.model.hop_ns(links, np.asarray(count, dtype=np.int64) * self.chunk_bytes)

    def reversed(self) -> "Channels":
        """The same channels run backwards in time: ``dst -> src``, hops in reverse order.

        A schedule on the reversed channels, read backwards in time, uses every physical link
        in its own direction (how Reduce-Scatter is derived from All-Gather). Channel indices
        are kept, so channel ``i`` of both sides joins the same pair of NPUs.
        """
        routed = [RoutedChannel(c.dst, c.src, c.links[::-1]) for c in self.routed]
        return replace(self, direct_src=self.direct_dst, direct_dst=self.direct_src, routed=routed)


    def routing(self) -> "ChannelRouting":
        """The node path of every routed channel and every channel's position among the channels
        joining its pair of NPUs (what tells their messages' tags apart)."""
        src = np.concatenate([self.direct_src, np.array([c.src for c in self.routed], dtype=np.int32)]).astype(np.int64)
        dst = np.concatenate([self.direct_dst, np.array([c.dst for c in self.routed], dtype=np.int32)]).astype(np.int64)
        dst_of_link = self.model.link_dst
        paths = tuple((c.src, *(int(dst_of_link[l]) for l in c.links)) for c in self.routed)
        return ChannelRouting(num_direct=self.num_direct, paths=paths, pair_slot=occurrence(src * self.num_npus + dst))

    def mirror(self) -> np.ndarray | None:
        """For a network that looks the same reversed: the reversed channel matching each channel.

        ``mirror[i] = j`` when channel ``j`` joins channel ``i``'s NPUs the other way round with the
        same latency and bandwidth, so a schedule on these channels is, with channel ``i`` renamed
        ``j``, a schedule on :meth:`reversed` with the same times. ``None`` when some channel has no
        such twin, or when there are routed channels (their switch queues do not mirror).

        >>> from chakra_collectives.topology import ring
        >>> build_channels(ring(3), chunk_bytes=64).mirror() is not None
        True
        >>> build_channels(ring(3, bidirectional=False), chunk_bytes=64).mirror() is None
        True
        """
        if self.routed:
            return None
        return self._direct_twins()

    def _direct_twins(self) -> np.ndarray | None:
        """:meth:`mirror`'s direct channels, whatever the routed ones."""
        n = self.num_npus
        key = self.direct_src.astype(np.int64) * n + self.direct_dst
        twin_key = self.direct_dst.astype(np.int64) * n + self.direct_src
        order = np.argsort(key)
        position = np.searchsorted(key[order], twin_key)
        position = np.minimum(position, len(key) - 1)
        twin = order[position]
        if not np.array_equal(key[twin], twin_key):
            return None
        links, twin_links = self.direct_link, self.direct_link[twin]
        if not (np.array_equal(self.link_latency[links], self.link_latency[twin_links]) and np.array_equal(self.link_rate[links], self.link_rate[twin_links])):
            return None
        return twin.astype(np.int32)


    def twins(self) -> np.ndarray | None:
        """:meth:`mirror` for channels that include routed ones (:func:`detour_channels`): a map of
        schedule channel keys (direct ``i >= 0``, routed ``-1 - j``) to their twins' keys, where
        every routed channel has a twin joining its NPUs the other way round over its links'
        reverse links in reverse order, every link's reverse with the same latency and bandwidth.
        A schedule on these channels, renamed so, is a schedule on :meth:`reversed` with the same
        times (every link's messages carried by its reverse link); ``None`` when some channel has
        no twin. Index the result with ``key + len(routed)``.

        >>> from chakra_collectives.topology import mesh2d
        >>> from chakra_collectives.topology.groups import group_view
        >>> ch = build_channels(group_view(mesh2d(3, 3), (0, 2)).topology, chunk_bytes=64, detours=True)
        >>> twins = ch.twins()
        >>> keys = np.arange(-len(ch.routed), ch.num_direct)
        >>> bool((twins[twins[keys] + len(ch.routed)] == keys).all())     # an involution
        True
        """
        direct = self._direct_twins() if self.num_direct else np.zeros(0, dtype=np.int32)
        if direct is None:
            return None
        model = self.model
        reverse: dict[tuple[int, int], int] = {}
        for link, (a, b) in enumerate(zip(model.link_src.tolist(), model.link_dst.tolist())):
            if (a, b) in reverse:
                return None  # parallel links: no one reverse
            reverse[a, b] = link
        twin_link = np.array([reverse.get((b, a), -1) for a, b in zip(model.link_src.tolist(), model.link_dst.tolist())], dtype=np.int64)
        used = np.unique(np.concatenate([np.asarray(c.links, dtype=np.int64) for c in self.routed])) if self.routed else np.zeros(0, dtype=np.int64)
        if (twin_link[used] < 0).any():
            return None
        if not (np.array_equal(self.link_latency[used], self.link_latency[twin_link[used]]) and np.array_equal(self.link_rate[used], self.link_rate[twin_link[used]])):
            return None
        index = {(c.src, c.dst, tuple(c.links)): j for j, c in enumerate(self.routed)}
        routed = np.empty(len(self.routed), dtype=np.int64)
        for j, c in enumerate(self.routed):
            found = index.get((c.dst, c.src, tuple(int(twin_link[l]) for l in reversed(c.links))))
            if found is None:
                return None
            routed[j] = found
        return np.concatenate([(-1 - routed)[::-1], direct.astype(np.int64)]).astype(np.int32)


@dataclass(frozen=True)
class ChannelRouting:
    """What a lowering needs to name the routes of channels that share a pair of NPUs."""

    num_direct: int
    paths: tuple[tuple[int, ...], ...]
    """Routed channel ``j``'s node path (its SENDs' ``route`` is ``j``)."""
    pair_slot: np.ndarray
    """Per channel (direct, then routed): how many channels of the same ordered pair come before it."""


def build_channels(topology: Topology, *, chunk_bytes: int, detours: bool = False) -> Channels:
    """Direct and switch-routed channels of ``topology`` for chunks of ``chunk_bytes``
    (``detours``: and :func:`detour_channels`)."""
    model = NetworkModel(topology)
    n = topology.num_npus
    src, dst = model.link_src, model.link_dst
    npu_link = np.flatnonzero((src < n) & (dst < n))
    pairs = src[npu_link] * n + dst[npu_link]
    unique_pairs, first, counts = np.unique(pairs, return_index=True, return_counts=True)
    chosen = npu_link[first]
    for i in np.flatnonzero(counts > 1):  # parallel links: the one the model routes over
        a, b = divmod(int(unique_pairs[i]), n)
        chosen[i] = model.route(a, b)[0]
    return Channels(
        num_npus=n,
        chunk_bytes=int(chunk_bytes),
        direct_src=src[chosen].astype(np.int32),
        direct_dst=dst[chosen].astype(np.int32),
        direct_link=chosen.astype(np.int32),
        routed=(detour_channels(topology, model) if detours else _routed_channels(topology, model)) if topology.num_switches else [],
        model=model,
        detours=detours and bool(topology.num_switches),
    )


DETOUR_BUDGET = 4096
"""Routed channels :func:`detour_channels` makes at most; past it, one per (sender, first link, receiver)."""


def detour_channels(topology: Topology, model: NetworkModel) -> list[RoutedChannel]:
    """Routed channels through switches for every ordered pair of NPUs: for each link out of the
    sender into a switch and each link into the receiver from a switch, a fastest path between
    them through switches only (single-hop cost: latency plus a byte's serialization; the least
    hops among equals). Pairs joined by a
    direct link get detours too. Past :data:`DETOUR_BUDGET` channels, only the fastest per
    (sender, first link, receiver) are kept.

    >>> from chakra_collectives.topology import mesh2d
    >>> from chakra_collectives.topology.groups import group_view
    >>> view = group_view(mesh2d(2, 2), (0, 1))    # a 2x2 mesh's first row: the other row is the detour
    >>> [view.to_fabric((c.src, *(view.topology.links[l].dst for l in c.links))) for c in detour_channels(view.topology, NetworkModel(view.topology))]
    [(0, 2, 3, 1), (1, 3, 2, 0)]
    """
    from scipy.sparse import csr_matrix  # imported when used (start-up time)
    from scipy.sparse.csgraph import dijkstra

    n = topology.num_npus
    src, dst = model.link_src, model.link_dst
    inner = np.flatnonzero((src >= n) & (dst >= n))
    cost = model.link_latency + 1.0 / model.link_rate + 1e-6  # per hop: fewest hops among equally fast paths
    nodes = topology.num_nodes
    best_link: dict[tuple[int, int], int] = {}
    for l in inner.tolist():
        key = (int(src[l]), int(dst[l]))
        if key not in best_link or cost[l] < cost[best_link[key]]:
            best_link[key] = l
    pairs = np.array(list(best_link), dtype=np.int64).reshape(-1, 2)
    weights = cost[list(best_link.values())] if best_link else np.zeros(0)
    graph = csr_matrix((weights, (pairs[:, 0], pairs[:, 1])), shape=(nodes, nodes))
    out_links = [l for l in range(len(src)) if src[l] < n and dst[l] >= n]
    in_links = [l for l in range(len(src)) if src[l] >= n and dst[l] < n]
    heads = sorted({int(dst[l]) for l in out_links})
    if not heads:
        return []
    dist, pred = dijkstra(graph, directed=True, indices=heads, return_predecessors=True)
    row_of = {h: i for i, h in enumerate(heads)}
    candidates: dict[tuple[int, int], list[tuple[float, tuple[int, ...], int]]] = defaultdict(list)
    for first in out_links:
        a, row = int(src[first]), row_of[int(dst[first])]
        for last in in_links:
            b, tail = int(dst[last]), int(src[last])
            if b == a or not np.isfinite(dist[row, tail]):
                continue
            hops = []
            node = tail
            while node != int(dst[first]):
                before = int(pred[row, node])
                hops.append(best_link[(before, node)])
                node = before
            links = (first, *reversed(hops), last)
            candidates[a, b].append((float(cost[list(links)].sum()), links, first))
    total = sum(len(c) for c in candidates.values())
    channels = []
    for (a, b) in sorted(candidates):
        options = sorted(candidates[a, b])
        if total > DETOUR_BUDGET:
            kept: dict[int, tuple[int, ...]] = {}
            for _, links, first in options:
                kept.setdefault(first, links)
            routes = list(kept.values())
        else:
            routes = list(dict.fromkeys(links for _, links, _ in options))
        channels.extend(RoutedChannel(a, b, links) for links in routes)
    return channels


def _routed_channels(topology: Topology, model: NetworkModel) -> list[RoutedChannel]:
    """Pairs of NPUs not directly linked whose route crosses switches only."""
    n = topology.num_npus
    direct = {(l.src, l.dst) for l in topology.links if l.src < n and l.dst < n}
    via_switch: dict[int, set[int]] = defaultdict(set)
    for start in range(n):
        # NPUs reachable from ``start`` through switches only
        frontier = [l.dst for i in topology.out_links[start] for l in (topology.links[i],) if l.dst >= n]
        seen = set(frontier)
        while frontier:
            node = frontier.pop()
            for i in topology.out_links[node]:
                nxt = topology.links[i].dst
                if nxt >= n:
                    if nxt not in seen:
                        seen.add(nxt)
                        frontier.append(nxt)
                elif nxt != start:
                    via_switch[start].add(nxt)
    channels = []
    for a in range(n):
        for b in sorted(via_switch.get(a, ())):
            if (a, b) in direct:
                continue
            route = model.route(a, b)
            if all(topology.links[i].dst >= n for i in route[:-1]):
                channels.append(RoutedChannel(a, b, route))
    return channels
