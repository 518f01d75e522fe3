"""Chains: a process group's All-Reduce reduced along a chain of its members and broadcast back,
every hop spread over the fabric's paths as the multicommodity-flow optimum spreads it.

A reduce-scatter + all-gather with equal shares makes every member receive ``2(N-1)/N`` of the
buffer; where members differ (a mesh row's corners have two links, the others three) the weak
ones bind and the strong ones idle (mesh2d:8x8's row, 64 MiB: 1,094 µs against the bound's 796).
A chain spares its ends: every chunk is reduced from both ends of an order of the members towards
its middle member, which then sends the sum back out, so an inner member receives two values of
each chunk (the partial sum from one side, the result from the other) and an end only one. Each
hop between neighbours in the order is a demand of the whole buffer each way; the
multicommodity-flow LP (:func:`~chakra_collectives.synth.multipath.spread_paths`) spreads those
demands over the fabric (a mesh row's hops over the row and round through the row below), and
every chunk of a hop takes one of the LP's paths, one routed message along it (relays forward,
store and forward). Every chunk is independent of the others, so the chunks pipeline along the
chain. Of a few orders (the members' own, and nearest-neighbour tours from each end, ends on the
members that can receive least) the one with the least LP time is built.

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
from chakra_collectives.flow.multicommodity import commodity_flows
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
    ingress = np.zeros(n)
    np.add.at(ingress, arrays["dst"][arrays["dst"] < n], arrays["bandwidth_gbps"][arrays["dst"] < n])
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


def chain_all_reduce(
    topology: Topology, group: tuple[int, ...] | None, size_bytes: int, *, chunks_per_npu: int = 8, order: tuple[int, ...] | None = None
) -> CollectiveAlgorithm:
    """The All-Reduce of the module docstring over ``group`` (``None``: every NPU) of ``topology``,
    ``len(group) * chunks_per_npu`` chunks, along ``order`` (ranks; ``None``: the candidate of
    :func:`chain_orders` with the least LP time); :class:`InputError` when the flow LP is too large."""
    members = tuple(range(topology.num_npus)) if group is None else tuple(group)
    n = len(members)
    if n < 2:
        raise InputError("chains needs two ranks or more")
    too_large = InputError(f"chains: the flow LP of {topology.name}'s group of {n} ranks is too large")
    if order is None:
        view = group_view(topology, members).topology
        timed = [(chain_lp_ns(view, o, size_bytes), o) for o in chain_orders(view)]
        if any(t is None for t, _ in timed):
            raise too_large
        order = min(timed, key=lambda pair: pair[0])[1]
    chunks = n * chunks_per_npu
    demand = _hop_demand(order, n, chunks)
    paths = piece_paths(topology, members, demand, -(-size_bytes // chunks))
    if paths is None:
        raise too_large
    builder = AlgorithmBuilder(Collective.ALL_REDUCE, num_ranks=n, chunk_count=chunks, size_bytes=size_bytes, name="chains",
                               provenance={"synthesizer": "chains", "chunks_per_npu": str(chunks_per_npu), "order": ",".join(map(str, order))})
    names = RouteNames(members)
    scratch = [0] * n
    root, last = len(order) // 2, len(order) - 1
    first_piece = {}
    for h, (a, b) in enumerate(zip(order, order[1:])):
        first_piece[a, b], first_piece[b, a] = 2 * h * chunks, (2 * h + 1) * chunks

    def send(a: int, b: int, c: int, src: tuple[int, int], into_output: bool, send_deps, recv_deps=()) -> tuple[int, int, tuple[int, int]]:
        """Chunk ``c`` from rank ``a`` to its neighbour ``b``: into OUTPUT ``c`` or a fresh scratch slot."""
        if into_output:
            dst = (Buffer.OUTPUT, c)
        else:
            dst = (Buffer.SCRATCH, scratch[b])
            scratch[b] += 1
        sent, got = builder.transfer(a, b, src=src, dst=dst, count=1, send_deps=send_deps, recv_deps=recv_deps)
        names.add(a, b, sent, paths[first_piece[a, b] + c])
        return sent, got, dst

    for c in range(chunks):
        # reduce from both ends towards the root: each member adds its value to what came from outside
        pending: list[list[tuple[int, tuple[int, int]]]] = [[] for _ in order]  # (receive op, scratch slot) per position
        sent_in: dict[int, int] = {}  # position -> its send of its partial towards the root
        for side, step in ((range(0, root), 1), (range(last, root, -1), -1)):
            for i in side:
                v, w = order[i], order[i + step]
                if not pending[i]:  # an end: its own value
                    sent_in[i], got, slot = send(v, w, c, (Buffer.INPUT, c), False, [])
                else:
                    sent_in[i], got, slot = send(v, w, c, (Buffer.OUTPUT, c), False, [_summed(builder, v, c, pending[i])])
                pending[i + step].append((got, slot))
        # the root sums, then the result goes back out along both sides (each member's partial sent first)
        done = _summed(builder, order[root], c, pending[root])
        for step, end in ((-1, -1), (1, last + 1)):
            held, i = done, root
            while i + step != end:
                _, held, _ = send(order[i], order[i + step], c, (Buffer.OUTPUT, c), True, [held], [sent_in[i + step]])
                i += step
    return names.named(builder.build(scratch_chunks=scratch), () if group is None else members)


def _summed(builder: AlgorithmBuilder, rank: int, c: int, received: list[tuple[int, tuple[int, int]]]) -> int:
    """``rank``'s own value of chunk ``c`` plus every partial sum it received, into OUTPUT ``c``: the last op."""
    op = builder.copy(rank, src=(Buffer.INPUT, c), dst=(Buffer.OUTPUT, c), count=1)
    for got, slot in received:
        op = builder.reduce(rank, src=slot, dst=(Buffer.OUTPUT, c), count=1, deps=[got, op])
    return op


def _make(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Synthesized:
    from chakra_collectives.network.collective import simulate_collective

    algo = chain_all_reduce(topology, options.group, options.size_bytes, chunks_per_npu=options.chunks_per_npu)
    timing = simulate_collective(algo, topology)
    return Synthesized(algo, predicted_ns=timing.time_ns, bottleneck=busiest_link(timing))


register(
    Synthesizer(
        "chains",
        _make,
        (Collective.ALL_REDUCE,),
        "a process group's All-Reduce reduced along a chain of its members and broadcast back, every hop over the flow optimum's paths",
        whole_topology=True,
        groups=True,
        candidate=False,
        switch_handling="every message along its path of the flow optimum (cc_route), members and relays forwarding",
    )
)


__all__ = ["CHAIN_ORDERS", "chain_all_reduce", "chain_lp_ns", "chain_orders"]
