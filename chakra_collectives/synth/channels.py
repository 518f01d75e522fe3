"""Channels: the NPU-to-NPU paths the TACOS matcher can put a chunk on.

A *direct* channel is a link between two NPUs. A *routed* channel joins two NPUs through
switches only: it is the route :meth:`Topology.route` gives (the one the network model and
the replayer use), crossed store-and-forward, one hop after the other. Pairs whose route
passes through another NPU get no channel: the synthesized algorithm relays through that NPU
itself (receive, then send), as TACOS does on direct-connect networks.

Each hop's time is the network model's: ``latency + chunk_bytes / bandwidth``
(:meth:`Link.transfer_ns`), so the matcher's schedule and the model's prediction use the same
numbers.

>>> from chakra_collectives.topology import ring, switch
>>> ch = build_channels(ring(4), chunk_bytes=2**20)
>>> len(ch.direct_src), len(ch.routed)
(8, 0)
>>> sw = build_channels(switch(4), chunk_bytes=2**20)
>>> len(sw.direct_src), len(sw.routed), sw.routed[0].links
(0, 12, (0, 3))
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from chakra_collectives.topology.core import Topology


@dataclass(frozen=True)
class RoutedChannel:
    src: int
    dst: int
    links: tuple[int, ...]
    hop_ns: tuple[float, ...]


@dataclass(frozen=True)
class Channels:
    """Direct channels as columns, routed channels as a list."""

    num_npus: int
    direct_src: np.ndarray
    direct_dst: np.ndarray
    direct_link: np.ndarray
    direct_ns: np.ndarray
    routed: list[RoutedChannel]

    def reversed(self) -> "Channels":
        """The same channels run backwards in time: ``dst -> src``, hops in reverse order.

        A schedule on the reversed channels, read backwards in time, uses every physical link
        in its own direction (how Reduce-Scatter is derived from All-Gather).
        """
        routed = [RoutedChannel(c.dst, c.src, c.links[::-1], c.hop_ns[::-1]) for c in self.routed]
        return replace(self, direct_src=self.direct_dst, direct_dst=self.direct_src, routed=routed)


def build_channels(topology: Topology, *, chunk_bytes: int) -> Channels:
    """Direct and switch-routed channels of ``topology`` for chunks of ``chunk_bytes``."""
    n = topology.num_npus
    arrays = topology.link_arrays
    src, dst = arrays["src"], arrays["dst"]
    npu_link = np.flatnonzero((src < n) & (dst < n))
    pairs = src[npu_link] * n + dst[npu_link]
    unique_pairs, first, counts = np.unique(pairs, return_index=True, return_counts=True)
    chosen = npu_link[first]
    for i in np.flatnonzero(counts > 1):  # parallel links: the one the model routes over
        a, b = divmod(int(unique_pairs[i]), n)
        chosen[i] = topology.route(a, b)[0]
    transfer = _hop_times(topology, chunk_bytes)
    routed = _routed_channels(topology, transfer) if topology.num_switches else []
    return Channels(
        num_npus=n,
        direct_src=src[chosen].astype(np.int64),
        direct_dst=dst[chosen].astype(np.int64),
        direct_link=chosen.astype(np.int64),
        direct_ns=transfer[chosen],
        routed=routed,
    )


def _hop_times(topology: Topology, chunk_bytes: int) -> np.ndarray:
    return np.array([link.transfer_ns(chunk_bytes) for link in topology.links], dtype=np.float64)


def _routed_channels(topology: Topology, transfer: np.ndarray) -> list[RoutedChannel]:
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
            route = topology.route(a, b)
            if all(topology.links[i].dst >= n for i in route[:-1]):
                channels.append(RoutedChannel(a, b, tuple(route), tuple(float(transfer[i]) for i in route)))
    return channels
