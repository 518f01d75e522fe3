"""Chains: a process group's All-Reduce reduced along a chain of its members and broadcast back,
every hop spread over the fabric's paths as the multicommodity-flow optimum spreads it.

A reduce-scatter + all-gather with equal shares makes every member receive ``2(N-1)/N`` of the
buffer; where members differ (a mesh row's corners have two links, the others three) the weak
ones bind and the strong ones idle (mesh2d:8x8's row, 64 MiB: 1,094 µs against the bound's 796).
A chain spares its ends: every chunk is reduced from both ends of an order of the members towards
a root member, which then sends the sum back out, so an inner member receives two values of
each chunk (the partial sum from one side, the result from the other) and an end only one,
whichever member is the root. Each hop between neighbours in the order is a demand of the whole
buffer each way; the multicommodity-flow LP
(:func:`~chakra_collectives.synth.multipath.spread_paths`) spreads those demands over the fabric
(a mesh row's hops over the row and round through the row below). Of a few orders (the members'
own, and nearest-neighbour tours from each end, ends on the members that can receive least) the
one with the least LP time is built.

The chunks go in **blocks** of consecutive chunks (:func:`block_sizes`: small ones to fill and
drain the chain, up to ``block_bytes`` between), each hop of a block split over the hop's paths
in proportion to the flow (one routed message per path, relays store and forward), each range
sent on as soon as the ranges it overlaps are summed. Each block has its root (``roots``:
the middle member, or the ends in turn, or ends and middles in turn): every block crosses every
hop once each way whatever its root, so the loads stay the LP's, but a chain's fill differs --
with the root in the middle the links towards the ends carry only results, idle until the
first block has gone to the middle and back; with roots at the ends they carry other blocks'
partial sums from the start.

On a mesh row the chain's inner members receive ``2M`` over three links, the corners ``M`` over
two: ``2M / 150 GB/s`` = 833 µs at 64 MiB, 0.955 of the bound.

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.verify import verify_algorithm
>>> algo = chain_all_reduce(load_topology("mesh2d:4x4"), (0, 1, 2, 3), 2**20, chunks_per_npu=2)
>>> algo.describe(), verify_algorithm(algo).ok
('all-reduce over 4 ranks, 8 chunks, 136 ops (chains)', True)
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.flow.multicommodity import FLOW_TOLERANCE, commodity_flows
from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm
from chakra_collectives.ir.builder import AlgorithmBuilder
from chakra_collectives.ir.demand import Demand
from chakra_collectives.network.bottleneck import busiest_link
from chakra_collectives.synth.registry import Synthesized, SynthesisOptions, Synthesizer, register
from chakra_collectives.synth.routed import RouteNames, piece_paths
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.groups import group_view

CHAIN_ORDERS = 4
"""How many candidate orders :func:`chain_orders` gives (the members' own order first)."""


def chain_orders(view: Topology, limit: int = CHAIN_ORDERS) -> list[tuple[int, ...]]:
    """Candidate chains of a group's view (members ``0 .. n-1``): the members' own order, then
    nearest-neighbour tours (hops counted over the fabric) from each of the members that can
    receive least, up to ``limit`` distinct orders.

    >>> from chakra_collectives.topology import mesh2d
    >>> from chakra_collectives.topology.groups import group_view
    >>> chain_orders(group_view(mesh2d(3, 3), (4, 0, 8)).topology)   # the centre in the middle
    [(0, 1, 2), (1, 0, 2)]
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    n = view.num_npus
    arrays = view.link_arrays
    graph = coo_matrix((np.ones(len(arrays["src"])), (arrays["src"], arrays["dst"])), shape=(view.num_nodes, view.num_nodes)).tocsr()
    hops = shortest_path(graph, indices=np.arange(n), unweighted=True)[:, :n]
    ingress = member_ingress(view)
    orders = [tuple(range(n))]
    for start in sorted(range(n), key=lambda v: (ingress[v], v)):
        tour = [start]
        while len(tour) < n:
            tour.append(min((v for v in range(n) if v not in tour), key=lambda v: (hops[tour[-1], v], ingress[v], v)))
        for order in (tuple(tour), tuple(reversed(tour))):
            if order in orders or tuple(reversed(order)) in orders:
                break
        else:
            orders.append(tuple(tour))
        if len(orders) >= limit:
            break
    return orders


def member_ingress(view: Topology) -> np.ndarray:
    """Each member's summed bandwidth in (GB/s) on a group's view (members ``0 .. n-1``)."""
    arrays = view.link_arrays
    into = arrays["dst"] < view.num_npus
    ingress = np.zeros(view.num_npus)
    np.add.at(ingress, arrays["dst"][into], arrays["bandwidth_gbps"][into])
    return ingress


def unequal_members(topology: Topology, group: tuple[int, ...] | None) -> bool:
    """Whether ``group``'s members differ in bandwidth in (what ``best`` tries chains for): where
    every member has the same ``b``, a chain's inner members receive ``2M`` over ``b``, at most
    ``(N-1)/N`` of the group's bound, which a reduce-scatter + all-gather with equal shares may
    reach; where they differ, equal shares are held to the weakest and a chain's ends spare it.

    >>> from chakra_collectives.topology import load_topology
    >>> unequal_members(load_topology("mesh2d:8x8"), tuple(range(8))), unequal_members(load_topology("torus2d:8x8"), tuple(range(8)))
    (True, False)
    """
    if group is None:
        return False
    ingress = member_ingress(group_view(topology, group).topology)
    return bool(np.ptp(ingress) > 1e-9 * ingress.max())


def _hop_demand(order: tuple[int, ...], n: int, chunks: int) -> Demand:
    """One unicast piece per chunk and direction of every hop of ``order`` (piece ids: hop ``h``
    forward ``2 h chunks + c``, backward ``(2 h + 1) chunks + c``)."""
    src, dst = [], []
    for a, b in zip(order, order[1:]):
        src += [a, b]
        dst += [b, a]
    origin = np.repeat(np.array(src, dtype=np.int32), chunks)
    dest = np.repeat(np.array(dst, dtype=np.int32), chunks)
    slot = np.tile(np.arange(chunks, dtype=np.int32), len(src))
    return Demand(num_npus=n, origin=origin, in_slot=slot, dest_ptr=np.arange(len(origin) + 1, dtype=np.int64), dest=dest, out_slot=slot, local=[])


def chain_lp_ns(view: Topology, order: tuple[int, ...], size_bytes: int) -> float | None:
    """The multicommodity-flow LP's least time (ns) for ``order``'s hops: the whole buffer each
    way between neighbours; ``None`` when the LP is too large."""
    n = view.num_npus
    need = np.zeros((n, view.num_nodes))
    for a, b in zip(order, order[1:]):
        need[a, b] = need[b, a] = 1.0
    solved = commodity_flows(view, np.arange(n), need, float(size_bytes))
    return None if solved is None else solved[0]


BLOCK_BYTES = 2**20
"""The largest block of consecutive chunks one hop of the chain moves as a unit (its messages,
one per path of the hop, carry the block's share of each path): large enough that a 0.5 µs link
latency costs under 3%, small enough that the pipeline's fill stays short."""

ROOTS = {
    "middle": lambda n: [n // 2],
    "ends": lambda n: [0, n - 1],
    "ends+middle": lambda n: [0, n - 1, n // 2 - 1, n // 2] if n > 2 else [0, n - 1],
}
"""Root patterns: the positions in the order that the blocks take as root, in turn."""

VARIANTS = (("middle", 0), ("ends", 0), ("ends+middle", 0), ("ends", BLOCK_BYTES))
"""``(roots, block_bytes)`` the producer builds at each ``K``, keeping the fastest (``0``: blocks
of one chunk)."""

SHARE_PIECES = 64
"""Pieces per hop and direction in the flow LP whose paths give each hop's shares of its paths."""


def block_sizes(chunks: int, top: int) -> list[int]:
    """Blocks of consecutive chunks covering ``chunks``: 1, 2, 4, ... up to ``top`` (a power of
    two), as many of ``top`` as fit, the remainder, then down again -- small blocks fill and drain
    the chain, large ones carry its steady state with few messages.

    >>> block_sizes(40, 8)
    [1, 2, 4, 8, 8, 8, 2, 4, 2, 1]
    >>> block_sizes(5, 8)
    [1, 1, 1, 1, 1]
    """
    ramp = []
    while (1 << len(ramp)) < top:
        ramp.append(1 << len(ramp))
    middle = chunks - 2 * sum(ramp)
    if middle < 0:
        return [1] * chunks
    steady = [top] * (middle // top) + ([middle % top] if middle % top else [])
    return ramp + steady + ramp[::-1]


class _PathShares:
    """Each hop's paths with their shares of the flow; blocks split over them chunk by chunk (each
    chunk to the path furthest behind its share, the shorter one on a tie), in contiguous ranges."""

    def __init__(self, paths: list[tuple[int, ...]]) -> None:
        self.share: dict[tuple[int, ...], float] = {}
        for path in paths:
            self.share[path] = self.share.get(path, 0.0) + 1.0 / len(paths)
        self.given = dict.fromkeys(self.share, 0)
        self.sent = 0

    def split(self, size: int) -> list[tuple[int, int, tuple[int, ...]]]:
        """``(offset, count, path)`` ranges of a block of ``size`` chunks, shortest path first."""
        counts = dict.fromkeys(self.share, 0)
        for _ in range(size):
            self.sent += 1
            path = max(self.share, key=lambda p: (self.share[p] * self.sent - self.given[p], -len(p)))
            self.given[path] += 1
            counts[path] += 1
        ranges, offset = [], 0
        for path in sorted(counts, key=len):
            if counts[path]:
                ranges.append((offset, counts[path], path))
                offset += counts[path]
        return ranges


def _overlapping(ranges: list[tuple[int, int, int]], offset: int, count: int) -> list[int]:
    """The ops of the ``(offset, count, op)`` ranges that overlap ``[offset, offset + count)``."""
    return [op for start, size, op in ranges if start < offset + count and offset < start + size]


def hop_paths(topology: Topology, members: tuple[int, ...], order: tuple[int, ...], size_bytes: int) -> list[tuple[int, ...]] | None:
    """:data:`SHARE_PIECES` fabric paths per hop of ``order`` and direction (forward hop ``h`` at
    ``2 h SHARE_PIECES``, backward after it) from the flow optimum; ``None`` when the LP is too large."""
    return piece_paths(topology, members, _hop_demand(order, len(members), SHARE_PIECES), -(-size_bytes // SHARE_PIECES))


def best_order(topology: Topology, members: tuple[int, ...], size_bytes: int) -> tuple[float, tuple[int, ...]] | None:
    """The least LP time (ns) over :func:`chain_orders` and its order; ``None`` when an LP is too large."""
    view = group_view(topology, members).topology
    timed = [(chain_lp_ns(view, o, size_bytes), o) for o in chain_orders(view)]
    if any(t is None for t, _ in timed):
        return None
    return min(timed, key=lambda pair: pair[0])


def chain_all_reduce(
    topology: Topology, group: tuple[int, ...] | None, size_bytes: int, *, chunks_per_npu: int = 8, order: tuple[int, ...] | None = None,
    roots: str = "middle", block_bytes: int = BLOCK_BYTES, paths: list[tuple[int, ...]] | None = None,
) -> CollectiveAlgorithm:
    """The All-Reduce of the module docstring over ``group`` (``None``: every NPU) of ``topology``,
    ``len(group) * chunks_per_npu`` chunks moved in :func:`block_sizes` blocks of at most
    ``block_bytes`` (one chunk when smaller), the blocks' roots by the pattern ``roots`` of
    :data:`ROOTS`, along ``order`` (ranks; ``None``: the candidate of :func:`chain_orders` with
    the least LP time); ``paths``: :func:`hop_paths` for that order, when known;
    :class:`InputError` when the flow LP is too large."""
    members = tuple(range(topology.num_npus)) if group is None else tuple(group)
    n = len(members)
    if n < 2:
        raise InputError("chains needs two ranks or more")
    too_large = InputError(f"chains: the flow LP of {topology.name}'s group of {n} ranks is too large")
    if order is None:
        found = best_order(topology, members, size_bytes)
        if found is None:
            raise too_large
        order = found[1]
    chunks = n * chunks_per_npu
    paths = hop_paths(topology, members, order, size_bytes) if paths is None else paths
    if paths is None:
        raise too_large
    shares = {}
    for h, (a, b) in enumerate(zip(order, order[1:])):
        shares[a, b] = _PathShares(paths[2 * h * SHARE_PIECES: (2 * h + 1) * SHARE_PIECES])
        shares[b, a] = _PathShares(paths[(2 * h + 1) * SHARE_PIECES: (2 * h + 2) * SHARE_PIECES])
    chunk_bytes = -(-size_bytes // chunks)
    top = 1 << max(0, (block_bytes // chunk_bytes).bit_length() - 1)
    pattern = ROOTS[roots](n)
    builder = AlgorithmBuilder(Collective.ALL_REDUCE, num_ranks=n, chunk_count=chunks, size_bytes=size_bytes, name="chains",
                               provenance={"synthesizer": "chains", "chunks_per_npu": str(chunks_per_npu), "order": ",".join(map(str, order)),
                                           "block_chunks": str(top), "roots": roots})
    names = RouteNames(members)
    scratch = [0] * n
    last, first = len(order) - 1, 0
    for b, size in enumerate(block_sizes(chunks, top)):
        root = pattern[b % len(pattern)]
        # reduce from both ends towards the root: each member adds what came from outside to its
        # value, a range at a time, and sends each range on once the ranges it overlaps are summed
        received: list[list[tuple[int, int, int, int]]] = [[] for _ in order]  # (receive op, scratch slot, offset, count)
        sent_in: dict[int, list[tuple[int, int, int]]] = {}  # position -> its sends of its partial sum
        for side, step in ((range(0, root), 1), (range(last, root, -1), -1)):
            for i in side:
                v, w = order[i], order[i + step]
                ready = _summed(builder, v, first, size, received[i], chained=False) if received[i] else None
                sent_in[i] = []
                for offset, count, path in shares[v, w].split(size):
                    slot = scratch[w]
                    scratch[w] += count
                    sent, got = builder.transfer(v, w, src=(Buffer.INPUT if ready is None else Buffer.OUTPUT, first + offset), dst=(Buffer.SCRATCH, slot),
                                                 count=count, send_deps=[] if ready is None else _overlapping(ready, offset, count))
                    names.add(v, w, sent, path)
                    sent_in[i].append((offset, count, sent))
                    received[i + step].append((got, slot, offset, count))
        # the root sums, then the result goes back out along both sides, a range once the ranges
        # it overlaps have arrived (into OUTPUT once the member's own partial sum has left it)
        done = _summed(builder, order[root], first, size, received[root], chained=True)
        for step, end in ((-1, -1), (1, last + 1)):
            held, i = done, root
            while i + step != end:
                v, w = order[i], order[i + step]
                arrived = []
                for offset, count, path in shares[v, w].split(size):
                    sent, got = builder.transfer(v, w, src=(Buffer.OUTPUT, first + offset), dst=(Buffer.OUTPUT, first + offset), count=count,
                                                 send_deps=_overlapping(held, offset, count), recv_deps=_overlapping(sent_in[i + step], offset, count))
                    names.add(v, w, sent, path)
                    arrived.append((offset, count, got))
                held, i = arrived, i + step
        first += size
    return names.named(builder.build(scratch_chunks=scratch), () if group is None else members)


def _summed(builder: AlgorithmBuilder, rank: int, first: int, size: int, received: list[tuple[int, int, int, int]], *, chained: bool) -> list[tuple[int, int, int]]:
    """``rank``'s own value of the block of ``size`` chunks at ``first`` plus the partial sums it
    received, into OUTPUT: ``(offset, count, op)`` ranges, each summed once its op is done (the
    root's received ranges overlap, so its reductions are chained: one range, the whole block)."""
    op = builder.copy(rank, src=(Buffer.INPUT, first), dst=(Buffer.OUTPUT, first), count=size)
    if chained:
        for got, slot, offset, count in received:
            op = builder.reduce(rank, src=(Buffer.SCRATCH, slot), dst=(Buffer.OUTPUT, first + offset), count=count, deps=[got, op])
        return [(0, size, op)]
    return [(offset, count, builder.reduce(rank, src=(Buffer.SCRATCH, slot), dst=(Buffer.OUTPUT, first + offset), count=count, deps=[got, op]))
            for got, slot, offset, count in received]


def _make(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Synthesized:
    """Every :data:`VARIANTS` at ``options.chunks_per_npu`` on one order and one set of paths; the fastest."""
    from chakra_collectives.network.collective import simulate_collective

    members = tuple(range(topology.num_npus)) if options.group is None else tuple(options.group)
    found = best_order(topology, members, options.size_bytes) if len(members) > 1 else None
    paths = None if found is None else hop_paths(topology, members, found[1], options.size_bytes)
    chunk_bytes = -(-options.size_bytes // (len(members) * options.chunks_per_npu))
    kept = None
    for roots, block_bytes in VARIANTS:
        if block_bytes and block_bytes < 2 * chunk_bytes:  # blocks of one chunk: built already
            continue
        algo = chain_all_reduce(topology, options.group, options.size_bytes, chunks_per_npu=options.chunks_per_npu, order=None if found is None else found[1],
                                roots=roots, block_bytes=block_bytes, paths=paths)
        timing = simulate_collective(algo, topology)
        if kept is None or timing.time_ns < kept[1].time_ns:
            kept = (algo, timing)
    algo, timing = kept
    return Synthesized(algo, predicted_ns=timing.time_ns, bottleneck=busiest_link(timing))


def chains_floor_ns(topology: Topology, collective: Collective, options: SynthesisOptions, network_model: str = "default") -> float:
    """A floor on chains' time for ``options.group`` at any chunk count (what ``best`` skips it by):
    every variant moves the whole buffer each way over every hop of the order it takes, the one
    with the least multicommodity-flow time, so none beats that LP's optimum. 0 without a group,
    or when an LP is too large.

    >>> from chakra_collectives.topology import load_topology
    >>> options = SynthesisOptions(size_bytes=64 * 2**20, group=tuple(range(8)))
    >>> round(chains_floor_ns(load_topology("mesh2d:8x8"), Collective.ALL_REDUCE, options) / 1e3, 1)   # 2M / 150 GB/s
    833.3
    """
    if options.group is None:
        return 0.0
    found = best_order(topology, tuple(options.group), options.size_bytes)
    return 0.0 if found is None else found[0] * (1 - FLOW_TOLERANCE)


register(
    Synthesizer(
        "chains",
        _make,
        (Collective.ALL_REDUCE,),
        "a process group's All-Reduce reduced along a chain of its members and broadcast back, every hop over the flow optimum's paths",
        whole_topology=True,
        groups=True,
        fits_group=unequal_members,
        floor=chains_floor_ns,
        switch_handling="every message along its path of the flow optimum (cc_route), members and relays forwarding",
    )
)


__all__ = ["BLOCK_BYTES", "CHAIN_ORDERS", "ROOTS", "SHARE_PIECES", "VARIANTS", "best_order", "block_sizes", "chain_all_reduce", "chain_lp_ns", "chain_orders", "chains_floor_ns", "hop_paths", "member_ingress", "unequal_members"]
