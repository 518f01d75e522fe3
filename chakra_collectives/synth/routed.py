"""One routed message per chunk along the multicommodity-flow optimum's paths, for producers that
build their algorithm a message at a time (:mod:`~chakra_collectives.synth.chains`,
:mod:`~chakra_collectives.synth.flowcast`).

:func:`piece_paths` gives every unicast piece of a demand over a group's view a path of the flow
optimum (:func:`~chakra_collectives.synth.multipath.spread_paths`) as fabric node ids, whole (a
message crosses members on its way as it crosses relays: store and forward), and spreads each
pair's paths evenly over its pieces in order (:func:`interleaved`): spread_paths gives a pair's
first pieces the least loaded path so far, so that taken in order a path may carry the first
chunks and another the last, and links idle while others queue. :class:`RouteNames` collects the
SENDs that leave the direct link and names their routes on the built algorithm.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.ir.demand import demand_for
>>> from chakra_collectives.topology import mesh2d
>>> paths = piece_paths(mesh2d(2, 2), (0, 1), demand_for(Collective.ALL_TO_ALL, num_npus=2, chunks_per_npu=4), 2**20)
>>> paths[:4]                                           # 0 -> 1: over the row and round the other, in turn
[(0, 1), (0, 2, 3, 1), (0, 1), (0, 2, 3, 1)]
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from chakra_collectives.ir import CollectiveAlgorithm
from chakra_collectives.ir.demand import Demand
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.multipath import spread_paths
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.groups import group_view


def piece_paths(topology: Topology, members: tuple[int, ...], demand: Demand, chunk_bytes: int) -> list[tuple[int, ...]] | None:
    """Per unicast piece of ``demand`` (over ``members``' ranks, every piece unicast) its fabric
    path from the flow optimum, each (origin, destination) pair's paths :func:`interleaved` over
    its pieces; ``None`` when the LP is too large."""
    found = group_view(topology, members)
    view, fabric_node = found.topology, found.fabric_node
    plan = spread_paths(build_channels(view, chunk_bytes=chunk_bytes), demand, direct=False)
    if plan is None or len(plan.paths) != demand.num_pieces:
        return None
    link_src, link_dst = view.link_arrays["src"], view.link_arrays["dst"]
    routed, num_direct = plan.channels.routed, plan.channels.num_direct
    by_pair: dict[tuple[int, int], list[int]] = {}
    for piece, (a, b) in enumerate(zip(demand.origin.tolist(), demand.dest.tolist())):
        by_pair.setdefault((a, b), []).append(piece)
    paths: list[tuple[int, ...]] = [()] * demand.num_pieces
    for pieces in by_pair.values():
        found_paths = []
        for piece in pieces:
            links = [link for c in plan.paths[piece] for link in routed[c - num_direct].links]
            nodes = [int(link_src[links[0]]), *(int(link_dst[link]) for link in links)]
            found_paths.append(tuple(int(fabric_node[v]) for v in nodes))
        for piece, path in zip(pieces, interleaved(found_paths)):
            paths[piece] = path
    return paths


def interleaved(paths: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The same paths, each as often, spread evenly over the positions: position ``i`` takes the
    path furthest behind its share.

    >>> interleaved([(0, 1), (0, 1), (0, 2, 1), (0, 2, 1)])
    [(0, 1), (0, 2, 1), (0, 1), (0, 2, 1)]
    """
    counts: dict[tuple[int, ...], int] = {}
    for path in paths:
        counts[path] = counts.get(path, 0) + 1
    given = dict.fromkeys(counts, 0)
    spread = []
    for i in range(len(paths)):
        path = max(counts, key=lambda p: (counts[p] * (i + 1) / len(paths) - given[p], counts[p]))
        given[path] += 1
        spread.append(path)
    return spread


class RouteNames:
    """The SENDs of an algorithm being built that take a route other than the direct link, and
    their routes (fabric node paths)."""

    def __init__(self, members: tuple[int, ...]) -> None:
        self.members = members
        self.routes: dict[tuple[int, ...], int] = {}
        self.sends: list[tuple[int, int, int]] = []  # (rank, op, route)

    def add(self, rank: int, peer: int, op: int, path: tuple[int, ...]) -> None:
        """Rank ``rank``'s SEND ``op`` to ``peer`` goes along ``path`` (noted unless it is the direct link)."""
        if path != (self.members[rank], self.members[peer]):
            self.sends.append((rank, op, self.routes.setdefault(path, len(self.routes))))

    def named(self, algo: CollectiveAlgorithm, placement: tuple[int, ...]) -> CollectiveAlgorithm:
        """``algo`` (just built, rank by rank in op order) with its routes and ``placement``."""
        sizes = np.bincount(algo.ops.rank, minlength=len(self.members))
        offset = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        route = np.full(algo.num_ops, -1, dtype=np.int32)
        for rank, op, index in self.sends:
            route[offset[rank] + op] = index
        return replace(algo, ops=replace(algo.ops, route=route), routes=tuple(sorted(self.routes, key=self.routes.get)), placement=placement)


__all__ = ["RouteNames", "interleaved", "piece_paths"]
