"""Flowcast: a process group's All-Gather and All-Reduce as unicast messages along the
multicommodity-flow optimum's paths, every owner sending straight to every other member.

A group scattered over a torus (bench_groups' random subset of torus2d:8x8) has few member
neighbours: TACOS's matching, which relays through members, and ForestColl's trees reach 0.55-0.59
of the group's bound. Sending each chunk straight from its owner to every other member, each copy
on a path of the flow optimum of that unicast demand
(:func:`~chakra_collectives.synth.multipath.spread_paths`; relays and members on the way forward
it), spreads the traffic over the fabric's links:

* All-Gather: every chunk of every member to every other member, pipelined as the flow pipeline
  orders the pieces (:func:`~chakra_collectives.synth.flowpipe.pipelined_schedules`: each order
  tried, the fastest kept);
* All-Reduce: every member sends its value of a chunk to the chunk's owner (equal shares), which
  adds them up and sends the sum to every other member along the same kind of paths
  (:func:`~chakra_collectives.synth.routed.piece_paths`); every chunk is independent of the
  others.

Unicast copies cannot beat the flow optimum of that demand, which on a torus is ``M / 200 GB/s``
for the All-Gather, 0.875 of the group's bound ``(7/8) M / 200 GB/s`` (the bound lets relays copy).

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.verify import verify_algorithm
>>> fabric = load_topology("torus2d:4x4")
>>> gather = flowcast_all_gather(fabric, (0, 5, 10), 3 * 2**20, chunks_per_npu=2)
>>> gather.describe().split(",")[0], verify_algorithm(gather).ok
('all-gather over 3 ranks', True)
>>> verify_algorithm(flowcast_all_reduce(fabric, (0, 5, 10), 3 * 2**20, chunks_per_npu=2)).ok
True
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from chakra_collectives.flow.multicommodity import FLOW_TOLERANCE, commodity_flows
from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm
from chakra_collectives.ir.builder import AlgorithmBuilder
from chakra_collectives.ir.demand import Demand
from chakra_collectives.network.bottleneck import busiest_link
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.flowpipe import pipelined_schedules
from chakra_collectives.synth.forwarding_lowering import forwarding_algorithm, name_routes
from chakra_collectives.synth.registry import Synthesized, SynthesisOptions, Synthesizer, register
from chakra_collectives.synth.routed import RouteNames, piece_paths
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.groups import group_view


def owner_copies(n: int, chunks_per_npu: int, *, reduce: bool) -> Demand:
    """The unicast pieces: for every chunk ``c`` (owner ``c // chunks_per_npu``) and every other
    member ``x``, with ``reduce`` first ``x``'s value to the owner, then the owner's copy to ``x``
    (input slot: the chunk's place in the owner's input, ``c`` when ``reduce``; output slot ``c``).

    >>> d = owner_copies(2, 1, reduce=True)
    >>> d.origin.tolist(), d.dest.tolist(), d.in_slot.tolist()
    ([1, 0, 0, 1], [0, 1, 1, 0], [0, 0, 1, 1])
    """
    src, dst, chunk = [], [], []
    for c in range(n * chunks_per_npu):
        o = c // chunks_per_npu
        for x in range(n):
            if x != o:
                if reduce:
                    src.append(x), dst.append(o), chunk.append(c)
                src.append(o), dst.append(x), chunk.append(c)
    chunk_ids = np.array(chunk, dtype=np.int32)
    in_slot = chunk_ids if reduce else chunk_ids % chunks_per_npu
    local = [] if reduce else [(c // chunks_per_npu, c % chunks_per_npu, c) for c in range(n * chunks_per_npu)]
    return Demand(num_npus=n, origin=np.array(src, dtype=np.int32), in_slot=in_slot.astype(np.int32), dest_ptr=np.arange(len(src) + 1, dtype=np.int64),
                  dest=np.array(dst, dtype=np.int32), out_slot=chunk_ids, local=local)


def flowcast_all_gather(topology: Topology, group: tuple[int, ...] | None, size_bytes: int, *, chunks_per_npu: int = 8) -> CollectiveAlgorithm:
    """The All-Gather of the module docstring: the fastest of the flow pipeline's schedules under
    the network model; where it has none (the LP too large, or its paths cross parallel links the
    network would not take), every copy sent at once along :func:`~chakra_collectives.synth.routed.piece_paths`
    (or the network's own routes)."""
    from chakra_collectives.network import predict_time

    members = tuple(range(topology.num_npus)) if group is None else tuple(group)
    n = len(members)
    found = group_view(topology, members)
    view = found.topology
    chunks = n * chunks_per_npu
    demand = owner_copies(n, chunks_per_npu, reduce=False)
    best = None
    for schedule, channels in pipelined_schedules(build_channels(view, chunk_bytes=-(-size_bytes // chunks)), demand):
        algo = forwarding_algorithm(schedule, demand, collective=Collective.ALL_GATHER, chunk_count=chunks, size_bytes=size_bytes, name="flowcast",
                                    provenance={"synthesizer": "flowcast", "chunks_per_npu": str(chunks_per_npu)})
        algo = name_routes(algo, schedule, channels)
        time_ns = predict_time(algo, view)
        if best is None or time_ns < best[0]:
            best = (time_ns, algo)
    if best is None:
        return _owner_copies_algorithm(topology, members, group, size_bytes, chunks_per_npu, reduce=False)
    algo = best[1]
    if group is None:
        return algo
    fabric_node = found.fabric_node  # the view's routes in fabric node ids
    return replace(algo, routes=tuple(tuple(int(fabric_node[v]) for v in path) for path in algo.routes), placement=members)


def flowcast_all_reduce(topology: Topology, group: tuple[int, ...] | None, size_bytes: int, *, chunks_per_npu: int = 8) -> CollectiveAlgorithm:
    """The All-Reduce of the module docstring (the network's own routes where the LP is too large).
    Equal shares: with :func:`~chakra_collectives.synth.shares.bandwidth_shares` (the weaker
    members own more) a mesh2d:8x8 row or random group ran at half the speed (0.25 / 0.21 of the
    bound against 0.46 / 0.43 at K = 16), an owner receiving ``N - 1`` copies of each of its chunks."""
    members = tuple(range(topology.num_npus)) if group is None else tuple(group)
    return _owner_copies_algorithm(topology, members, group, size_bytes, chunks_per_npu, reduce=True)


def _owner_copies_algorithm(
    topology: Topology, members: tuple[int, ...], group: tuple[int, ...] | None, size_bytes: int, chunks_per_npu: int, *, reduce: bool
) -> CollectiveAlgorithm:
    """:func:`owner_copies` as one message each, along :func:`~chakra_collectives.synth.routed.piece_paths`
    (the network's routes where the LP is too large); with ``reduce`` the owner sums what it
    received before it sends the result back."""
    n = len(members)
    chunks = n * chunks_per_npu
    demand = owner_copies(n, chunks_per_npu, reduce=reduce)
    paths = piece_paths(topology, members, demand, -(-size_bytes // chunks))
    collective = Collective.ALL_REDUCE if reduce else Collective.ALL_GATHER
    builder = AlgorithmBuilder(collective, num_ranks=n, chunk_count=chunks, size_bytes=size_bytes, name="flowcast",
                               provenance={"synthesizer": "flowcast", "chunks_per_npu": str(chunks_per_npu), "paths": "flow" if paths else "network"})
    names = RouteNames(members)
    scratch = [0] * n

    def send(a: int, b: int, src: tuple[int, int], dst: tuple[int, int], piece: int, deps=()) -> int:
        """Piece ``piece`` of the demand: one message from ``a`` to ``b`` along its path."""
        sent, got = builder.transfer(a, b, src=src, dst=dst, count=1, send_deps=deps)
        if paths is not None:
            names.add(a, b, sent, paths[piece])
        return got

    per_chunk = (n - 1) * (2 if reduce else 1)  # the demand's pieces of a chunk: per other member, its value in (reduce), the copy out
    for c in _owners_in_turn(n, chunks_per_npu):
        o, piece = c // chunks_per_npu, c * per_chunk
        own = (Buffer.INPUT, c if reduce else c % chunks_per_npu)
        summed = builder.copy(o, src=own, dst=(Buffer.OUTPUT, c), count=1)
        out = []
        for x in range(n):
            if x == o:
                continue
            if reduce:
                slot = (Buffer.SCRATCH, scratch[o])
                scratch[o] += 1
                got = send(x, o, own, slot, piece)
                summed = builder.reduce(o, src=slot, dst=(Buffer.OUTPUT, c), count=1, deps=[got, summed])
                piece += 1
            out.append((x, piece))
            piece += 1
        for x, index in out:  # the result once complete (an All-Gather's own value at once)
            send(o, x, (Buffer.OUTPUT, c) if reduce else own, (Buffer.OUTPUT, c), index, [summed] if reduce else [])
    return names.named(builder.build(scratch_chunks=scratch if reduce else None), () if group is None else members)


def _owners_in_turn(n: int, chunks_per_npu: int) -> list[int]:
    """The chunks with their owners in turn (``owner * chunks_per_npu + j``: owner 0's first,
    owner 1's first, ...).

    >>> _owners_in_turn(3, 2)
    [0, 2, 4, 1, 3, 5]
    """
    return [o * chunks_per_npu + j for j in range(chunks_per_npu) for o in range(n)]


def _make(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Synthesized:
    from chakra_collectives.network.collective import simulate_collective

    build = flowcast_all_reduce if collective is Collective.ALL_REDUCE else flowcast_all_gather
    algo = build(topology, options.group, options.size_bytes, chunks_per_npu=options.chunks_per_npu)
    timing = simulate_collective(algo, topology)
    return Synthesized(algo, predicted_ns=timing.time_ns, bottleneck=busiest_link(timing))


def flowcast_floor_ns(topology: Topology, collective: Collective, options: SynthesisOptions, network_model: str = "default") -> float:
    """A floor on flowcast's time for ``options.group`` at any chunk count (what ``best`` skips it
    by): every copy of :func:`owner_copies` crosses a path of links on its own, so no schedule of
    them beats their multicommodity-flow optimum (bytes over bandwidth, under either network
    model); the pieces scale with the chunks, so one LP at one chunk per member serves every ``K``.
    0 without a group, or when the LP is too large.

    >>> from chakra_collectives.topology import load_topology
    >>> options = SynthesisOptions(size_bytes=64 * 2**20, group=(2, 16, 26, 31, 32, 48, 49, 56))
    >>> round(flowcast_floor_ns(load_topology("torus2d:8x8"), Collective.ALL_GATHER, options) / 1e3, 1)   # M / 200 GB/s
    312.5
    """
    if options.group is None:
        return 0.0
    n = len(options.group)
    view = group_view(topology, options.group).topology
    demand = owner_copies(n, 1, reduce=collective is Collective.ALL_REDUCE)
    need = np.zeros((n, view.num_nodes))
    np.add.at(need, (demand.origin, demand.dest), 1.0)
    solved = commodity_flows(view, np.arange(n), need, options.size_bytes / n)
    return 0.0 if solved is None else solved[0] * (1 - FLOW_TOLERANCE)


register(
    Synthesizer(
        "flowcast",
        _make,
        (Collective.ALL_GATHER, Collective.ALL_REDUCE),
        "a process group's All-Gather / All-Reduce as one message per chunk from its owner to every other member, along the flow optimum's paths",
        whole_topology=True,
        groups=True,
        fits_group=lambda topology, group: group is not None,
        floor=flowcast_floor_ns,
        switch_handling="every message along its path of the flow optimum (cc_route), members and relays forwarding",
    )
)


__all__ = ["flowcast_floor_ns", "flowcast_all_gather", "flowcast_all_reduce", "owner_copies"]
