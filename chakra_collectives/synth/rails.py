"""Rails: an All-Reduce (and its All-Gather half, :func:`rails_all_gather`) between islands over
every NIC of each island (DGX-like clusters).

On a fabric of islands (:func:`~chakra_collectives.topology.tiers.bandwidth_tiers`: servers
whose GPUs are joined by fast links, every GPU with its own slow NIC to one cluster switch) an
All-Reduce must move every position ``2(k-1)`` times between its ``k`` islands
(:func:`~chakra_collectives.bounds.multiway_cut_bound`). A process group with few members per
server reaches the other servers only through the non-members' NICs, and a greedy matcher
spreads chunks unevenly over them and sends some twice into one server. Rails plan it outright:

* each member owns consecutive chunks, the islands' parts in proportion to their NIC bandwidth
  (:func:`~chakra_collectives.synth.shares.island_shares`);
* reduce-scatter: for a chunk owned in island ``q``, the members of every other island send their
  values to one *collector* there (chosen round robin), which reduces them and sends the island's
  partial sum to the owner -- the only transfer between the two islands for that chunk -- over
  rail ``r`` (chunk index modulo the rails): collector, the island's ``r``-th NIC's GPU, the
  switch, the owner's island's ``r``-th NIC's GPU, owner; the owner's island mates send to it
  directly;
* all-gather: the owner sends the result back the same way, the collectors passing it on to
  their island mates.

Transfers inside an island take the least loaded of the direct link and the two-hop paths
through each other GPU of the island; a collector serves every rail in turn. Every message
carries one chunk, every chunk is independent of the others, so the chunks pipeline through the
four store-and-forward hops of a rail.

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.verify import verify_algorithm
>>> algo = rails_all_reduce(load_topology("dgx:2x4"), (0, 4), 2**20, chunks_per_npu=4)
>>> algo.describe(), len(algo.routes), verify_algorithm(algo).ok
('all-reduce over 2 ranks, 8 chunks, 56 ops (rails)', 8, True)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm
from chakra_collectives.ir.builder import AlgorithmBuilder
from chakra_collectives.network.bottleneck import busiest_link
from chakra_collectives.synth.registry import Synthesized, SynthesisOptions, Synthesizer, register
from chakra_collectives.synth.routed import RouteNames
from chakra_collectives.synth.shares import island_shares, owner_starts
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.groups import group_view
from chakra_collectives.topology.tiers import bandwidth_tiers


@dataclass(frozen=True)
class Islands:
    """A fabric's islands as a group sees them (fabric node ids throughout)."""

    island: np.ndarray
    """The island of each member (rank order)."""
    members: list[list[int]]
    """Each island's ranks."""
    ports: list[list[int]]
    """Each island's GPUs with a NIC to the switch, in id order (rail ``r``: the ``r``-th)."""
    switch: int
    """The switch every NIC leads to."""
    paths: dict[tuple[int, int], list[tuple[int, ...]]]
    """Inside an island, every path from one GPU to another: direct, then through each other GPU."""

    @property
    def rails(self) -> int:
        return min(len(p) for p in self.ports)


def find_islands(topology: Topology, group: tuple[int, ...]) -> Islands | None:
    """The islands of ``topology`` that hold ``group``'s members when they are DGX-like: at least
    two islands hold members, every GPU of an island links to every other (both ways) and its
    NIC GPUs link both ways to one switch outside every island; ``None`` otherwise.

    >>> from chakra_collectives.topology import load_topology
    >>> found = find_islands(load_topology("dgx:4x8"), (0, 8, 9))
    >>> found.members, found.rails, found.switch
    ([[0], [1, 2]], 8, 32)
    >>> find_islands(load_topology("mesh2d:4x4"), (0, 1)) is None
    True
    """
    tiers = bandwidth_tiers(topology)
    if not tiers:
        return None
    labels = tiers[0]  # the coarsest islands
    held = labels[list(group)]
    if len(set(held.tolist())) < 2 or (labels[: topology.num_npus] < 0).any():
        return None
    pairs = {(link.src, link.dst) for link in topology.links}
    outside: dict[int, set[int]] = defaultdict(set)
    for link in topology.links:
        if labels[link.src] >= 0 and labels[link.src] != labels[link.dst]:
            outside[link.src].add(link.dst)
    switches = set().union(*outside.values()) if outside else set()
    if len(switches) != 1:
        return None
    (switch,) = switches
    if labels[switch] >= 0:
        return None
    order = {island: i for i, island in enumerate(dict.fromkeys(held.tolist()))}
    members: list[list[int]] = [[] for _ in order]
    for rank, island in enumerate(held.tolist()):
        members[order[island]].append(rank)
    ports: list[list[int]] = []
    paths: dict[tuple[int, int], list[tuple[int, ...]]] = {}
    for island in order:
        gpus = np.flatnonzero(labels == island).tolist()
        if any((a, b) not in pairs for a in gpus for b in gpus if a != b):
            return None
        nics = [g for g in gpus if (g, switch) in pairs and (switch, g) in pairs]
        if not nics:
            return None
        ports.append(nics)
        for a in gpus:
            for b in gpus:
                if a != b:
                    paths[a, b] = [(a, b), *((a, x, b) for x in gpus if x not in (a, b))]
    return Islands(np.array([order[i] for i in held.tolist()]), members, ports, switch, paths)


class RailPaths:
    """The paths of one algorithm's messages (fabric node ids), with the chunks each link has been
    given so far: inside an island the least loaded of the direct link and the two-hop paths
    through each other GPU, between islands rail ``r``."""

    def __init__(self, found: Islands, members: tuple[int, ...]) -> None:
        self.found = found
        self.members = members
        self.load: dict[tuple[int, int], int] = defaultdict(int)

    def _carry(self, path: tuple[int, ...]) -> tuple[int, ...]:
        for hop in zip(path, path[1:]):
            self.load[hop] += 1
        return path

    def local(self, a: int, b: int) -> tuple[int, ...]:
        """Ranks ``a`` to ``b`` of one island: the path whose busiest link has carried the fewest chunks so far."""
        options = self.found.paths[self.members[a], self.members[b]]
        return self._carry(min(options, key=lambda path: (max(self.load[hop] for hop in zip(path, path[1:])), len(path))))

    def free_rail(self, u: int, p: int, turn: int) -> int:
        """The rail from island ``u`` to island ``p`` whose NICs (out of ``u``, into ``p``) have
        carried the fewest chunks so far; of equals, the first from ``turn`` (modulo the rails) on."""
        found = self.found
        rails = found.rails
        return min(((turn + i) % rails for i in range(rails)),
                   key=lambda r: max(self.load[found.ports[u][r], found.switch], self.load[found.switch, found.ports[p][r]]))

    def rail(self, a: int, b: int, r: int) -> tuple[int, ...]:
        """Ranks ``a`` to ``b`` of two islands over rail ``r``: ``a``, its island's ``r``-th NIC's GPU,
        the switch, the other island's ``r``-th NIC's GPU, ``b`` (a GPU named once)."""
        found = self.found
        ia, ib = int(found.island[a]), int(found.island[b])
        path = [self.members[a], found.ports[ia][r], found.switch, found.ports[ib][r], self.members[b]]
        return self._carry(tuple(node for i, node in enumerate(path) if i == 0 or node != path[i - 1]))


def _islands_of(topology: Topology, group: tuple[int, ...] | None) -> tuple[tuple[int, ...], Islands]:
    members = tuple(range(topology.num_npus)) if group is None else tuple(group)
    found = find_islands(topology, members)
    if found is None:
        raise InputError(f"rails needs a fabric of islands (servers of GPUs linked to each other, a NIC each to one switch) with members in two or more; {topology.name} has none for these ranks")
    return members, found


def rails_all_gather(
    topology: Topology, group: tuple[int, ...] | None, size_bytes: int, *, chunks_per_npu: int = 8, relay_slack: int | None = None
) -> CollectiveAlgorithm:
    """The All-Gather half of :func:`rails_all_reduce` over ``group`` (``None``: every NPU):
    every member's ``chunks_per_npu`` chunks in turn, each from its owner to its island mates and,
    over rail ``r`` (the chunk's index plus the owner's, modulo the rails), to one collector in every
    other island (round robin), which passes it on to its island mates. Each island receives every
    chunk it lacks once, over its NICs side by side.

    >>> from chakra_collectives.topology import load_topology
    >>> from chakra_collectives.verify import verify_algorithm
    >>> algo = rails_all_gather(load_topology("dgx:2x4"), (0, 1, 4), 3 * 2**20, chunks_per_npu=2)
    >>> algo.describe(), verify_algorithm(algo).ok
    ('all-gather over 3 ranks, 6 chunks, 30 ops (rails)', True)
    """
    members, found = _islands_of(topology, group)
    n, k = len(members), chunks_per_npu
    builder = AlgorithmBuilder(Collective.ALL_GATHER, num_ranks=n, chunk_count=n * k, size_bytes=size_bytes, name="rails",
                               provenance={"synthesizer": "rails", "chunks_per_npu": str(k), "rails": str(found.rails)})
    names = RouteNames(members)
    ways = RailPaths(found, members)

    def send(a: int, b: int, src: tuple[int, int], c: int, path: tuple[int, ...], deps=()) -> int:
        sent, got = builder.transfer(a, b, src=src, dst=(Buffer.OUTPUT, c), count=1, send_deps=deps)
        names.add(a, b, sent, path)
        return got

    sent_out = [0] * len(found.members)  # chunks each island has sent to another
    for index in range(k):  # every owner's chunks side by side
        for o in range(n):
            c, q = o * k + index, int(found.island[o])
            own = (Buffer.INPUT, index)
            builder.copy(o, src=own, dst=(Buffer.OUTPUT, c), count=1)
            for a in found.members[q]:
                if a != o:
                    send(o, a, own, c, ways.local(o, a))
            holder = {q: (o, None)}  # island -> (rank holding chunk c, its receive)
            for step in range(1, len(found.members)):
                p = (q + step) % len(found.members)
                mates = found.members[p]
                # the owner's island, unless it has sent relay_slack chunks more than one that holds chunk c
                least = min(holder, key=lambda u: (sent_out[u], u != q))
                u = q if relay_slack is None or sent_out[q] <= sent_out[least] + relay_slack else least
                sender, got_there = holder[u]
                col = mates[(index // found.rails + o) % len(mates)]
                r = ways.free_rail(u, p, index + o)
                got = send(sender, col, own if sender == o else (Buffer.OUTPUT, c), c, ways.rail(sender, col, r), [] if got_there is None else [got_there])
                sent_out[u] += 1
                holder[p] = (col, got)
                for a in mates:
                    if a != col:
                        send(col, a, (Buffer.OUTPUT, c), c, ways.local(col, a), [got])
    return names.named(builder.build(), () if group is None else members)


def rails_all_reduce(topology: Topology, group: tuple[int, ...] | None, size_bytes: int, *, chunks_per_npu: int = 8, depth: int = 0) -> CollectiveAlgorithm:
    """The All-Reduce of the module docstring over ``group`` (``None``: every NPU) of
    ``topology``, ``chunks_per_npu`` chunks per member on average, at most ``depth`` of a member's
    own values on their way to its mates (0: no limit);
    :class:`InputError` where the fabric has no DGX-like islands holding the group
    (:func:`find_islands`)."""
    members, found = _islands_of(topology, group)
    n = len(members)
    chunks = n * chunks_per_npu
    view = group_view(topology, members).topology
    shares = next((s for s in island_shares(view)), np.full(n, 1.0 / n))
    start = owner_starts(shares, chunks)
    owner = np.repeat(np.arange(n), np.diff(start))
    builder = AlgorithmBuilder(Collective.ALL_REDUCE, num_ranks=n, chunk_count=chunks, size_bytes=size_bytes, name="rails",
                               provenance={"synthesizer": "rails", "chunks_per_npu": str(chunks_per_npu), "rails": str(found.rails),
                                           "owner_chunks": ",".join(map(str, np.diff(start).tolist()))})
    names = RouteNames(members)
    scratch = [0] * n
    ways = RailPaths(found, members)
    local, rail = ways.local, ways.rail

    def send(a: int, b: int, src: tuple[int, int], dst_buf: Buffer, c: int, path: tuple[int, ...], send_deps, recv_deps=()) -> tuple[int, int, tuple[int, int]]:
        """A one-chunk message from rank ``a`` to ``b`` along the fabric ``path``; into a fresh
        scratch slot when ``dst_buf`` is SCRATCH, else into chunk ``c`` of the output."""
        if dst_buf is Buffer.SCRATCH:
            dst = (Buffer.SCRATCH, scratch[b])
            scratch[b] += 1
        else:
            dst = (Buffer.OUTPUT, c)
        sent, got = builder.transfer(a, b, src=src, dst=dst, count=1, send_deps=send_deps, recv_deps=recv_deps)
        names.add(a, b, sent, path)
        return sent, got, dst

    paced: list[list[int]] = [[] for _ in range(n)]  # each rank's sends of its own values to island mates

    def pace(a: int) -> list[int]:
        """A rank's send of its own value to an island mate waits for its ``depth``-th such send
        before: the mates' links are not flooded ahead of the rails' messages (0: no wait)."""
        return [paced[a][-depth]] if depth and len(paced[a]) >= depth else []
    # the owners' chunks taken in turn, in proportion to how many each owns, so that every island
    # receives at every moment
    owned = np.diff(start)
    order = sorted(range(chunks), key=lambda c: ((c - start[owner[c]] + 0.5) / owned[owner[c]], owner[c]))
    for c in order:
        o = int(owner[c])
        index = int(c - start[o])
        q = int(found.island[o])
        r = (index + o) % found.rails  # each owner over every rail in turn, owners side by side on different ones
        collectors = {}
        # reduce-scatter: every island's members into its collector, the collector to the owner over rail r
        partials: list[tuple[int, int]] = []  # (sender rank, its op)
        for p, mates in enumerate(found.members):
            if p == q:
                continue
            col = mates[(index // found.rails + o) % len(mates)]  # every collector on every rail in turn
            collectors[p] = col
            deps = [builder.copy(col, src=(Buffer.INPUT, c), dst=(Buffer.OUTPUT, c), count=1)]
            for a in mates:
                if a != col:
                    sent, got, slot = send(a, col, (Buffer.INPUT, c), Buffer.SCRATCH, c, local(a, col), pace(a))
                    paced[a].append(sent)
                    deps.append(builder.reduce(col, src=slot, dst=(Buffer.OUTPUT, c), count=1, deps=[got, deps[-1]]))
            partials.append((col, deps[-1]))
        last = builder.copy(o, src=(Buffer.INPUT, c), dst=(Buffer.OUTPUT, c), count=1)
        partials.extend((a, -1) for a in found.members[q] if a != o)
        sent_partial = {}
        for a, after in partials:
            path = rail(a, o, r) if found.island[a] != q else local(a, o)
            src = (Buffer.OUTPUT, c) if after >= 0 else (Buffer.INPUT, c)
            sent_partial[a], got, slot = send(a, o, src, Buffer.SCRATCH, c, path, [after] if after >= 0 else pace(a))
            if after < 0:
                paced[a].append(sent_partial[a])
            last = builder.reduce(o, src=slot, dst=(Buffer.OUTPUT, c), count=1, deps=[got, last])
        # all-gather: the owner to its island mates and the collectors, the collectors to theirs
        for a in found.members[q]:
            if a != o:
                send(o, a, (Buffer.OUTPUT, c), Buffer.OUTPUT, c, local(o, a), [last], [sent_partial[a]])
        for p, col in collectors.items():
            _, got, _ = send(o, col, (Buffer.OUTPUT, c), Buffer.OUTPUT, c, rail(o, col, r), [last], [sent_partial[col]])  # after its partial left
            for a in found.members[p]:
                if a != col:
                    send(col, a, (Buffer.OUTPUT, c), Buffer.OUTPUT, c, local(col, a), [got])
    return names.named(builder.build(scratch_chunks=scratch), () if group is None else members)




RAIL_DEPTHS = (0, 16)
"""How many of its own values a member may have on their way to island mates before it sends
the next (:func:`rails_all_reduce`'s ``depth``; 0: no limit); the producer keeps the faster.
One member per server needs none; with two or three, 16 keeps the mates' links from flooding
ahead of the rails (dgx:4x8's strided group, 64 MiB, K = 32: 688.6 -> 611.6 us; 4 and 8 were
slower, 24-48 no faster). Messages of several chunks in the middle of each owner's run (one
chunk first and last, up to 2, 4 or 8 between, at 2-4 times the chunks) gained at most 1% on
dgx:4x8's groups and were never kept at the chunk counts ``synthesize`` tries."""


RELAY_SLACKS = (None, 0)
""":func:`rails_all_gather`'s ``relay_slack`` values the producer tries, keeping the faster: every
chunk straight from its owner's server to every other (``None``), or relayed by a server that has
sent fewer chunks out than the owner's (0). Servers with equal shares of the members want the
first, unequal ones the second (dgx:4x8, 64 MiB, K = 64: column 0.808 / 0.590, random 0.620 /
0.796 of the group's bound; 2, 4 and 8 were never the faster)."""


def _make(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Synthesized:
    from chakra_collectives.network.collective import simulate_collective

    if collective is Collective.ALL_GATHER:
        variants = {slack: partial(rails_all_gather, relay_slack=slack) for slack in RELAY_SLACKS}
    else:
        variants = {depth: partial(rails_all_reduce, depth=depth) for depth in RAIL_DEPTHS}
    best = None
    for variant, build in variants.items():
        algo = build(topology, options.group, options.size_bytes, chunks_per_npu=options.chunks_per_npu)
        timing = simulate_collective(algo, topology)
        if best is None or timing.time_ns < best[1]:
            best = (algo, timing.time_ns, busiest_link(timing), variant)
    algo, predicted, limit, variant = best
    key = "relay_slack" if collective is Collective.ALL_GATHER else "depth"
    algo = replace(algo, provenance={**algo.provenance, key: str(variant)})
    return Synthesized(algo, predicted_ns=predicted, bottleneck=limit, details={key: variant})


def _fits_group(topology: Topology, group: tuple[int, ...] | None) -> bool:
    """``best`` tries rails for process groups with members in two islands or more: over a whole
    DGX fabric, where every GPU reduces, ForestColl's trees are faster (dgx:4x8, 64 MiB: 533
    against 870 us; its All-Gather, where every GPU owns a share, has the same reason)."""
    return group is not None and find_islands(topology, group) is not None


register(
    Synthesizer(
        "rails",
        _make,
        (Collective.ALL_GATHER, Collective.ALL_REDUCE),
        "All-Gather / All-Reduce between the servers of a DGX-like fabric over every NIC (pieces in turn on every rail, partial sums combined in each server)",
        whole_topology=True,
        groups=True,
        fits=lambda topology: bool(bandwidth_tiers(topology)),
        fits_group=_fits_group,
        switch_handling="every message on its rail: a server's GPU, its NIC, the switch, the other server's GPU (cc_route)",
    )
)


__all__ = ["RAIL_DEPTHS", "Islands", "RailPaths", "find_islands", "rails_all_gather", "rails_all_reduce"]
