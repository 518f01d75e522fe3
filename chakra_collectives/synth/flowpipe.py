"""A pipelined schedule along the multicommodity-flow optimum's paths: every piece one message per hop.

:func:`~chakra_collectives.synth.multipath.spread_paths` gives every unicast piece of a demand a
path of the flow optimum (a pair's pieces split over its paths in proportion to their flows).
The forwarding matcher then plans when each piece leaves; here instead nothing is planned but
the order the pieces leave their origins in: every piece goes as one message per hop, as soon as
it has arrived (store-and-forward, members relay like any other NPU), and every link serves its
messages first come, first served -- the network model's own queueing. With pieces small
enough the busiest link of the flow optimum is busy from start to end, and the time is the
flow bound plus a latency per message and the fill of the last pieces' paths.

The origins' order decides the rest. :data:`ORDERS` are tried and the fastest kept (each is
one event-driven run, :func:`pipeline_demand`, timed as the network model times it):
the pieces of every path spread evenly over the sending time (so that a relay's links see each
path's flow at its rate), the longer paths' a little earlier or not, or paced -- each piece
leaving only when it is due, so that the switches' queues serve the pieces in the order
planned (a paced piece waits for a message that reached its origin: the model has no clock).

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.ir.demand import demand_for
>>> from chakra_collectives.synth.channels import build_channels
>>> from chakra_collectives.synth.multipath import spread_paths
>>> from chakra_collectives.topology import mesh2d
>>> from chakra_collectives.topology.groups import group_view
>>> view = group_view(mesh2d(2, 2), (0, 1)).topology
>>> demand = demand_for(Collective.ALL_TO_ALL, num_npus=2, chunks_per_npu=4)
>>> plan = spread_paths(build_channels(view, chunk_bytes=2**20), demand, direct=False)
>>> f = pipeline_demand(plan.channels, demand, plan.paths)
>>> sorted(len(plan.channels.routed[-1 - c].links) for c in f.channel.tolist())   # half over the row, half round the other
[1, 1, 1, 1, 3, 3, 3, 3]
>>> int(f.entry_delivered.sum())
8
>>> paced = pipeline_demand(plan.channels, demand, plan.paths, "paced")
>>> [(int(paced.src[m]), int(paced.src[w])) for m, w in enumerate(paced.after.tolist()) if w >= 0]   # leaves once a message reached its origin
[(0, 1), (1, 0)]
>>> paced.time_ns == f.time_ns
True
"""

from __future__ import annotations

import bisect
import heapq
from typing import Iterator, Mapping

import numpy as np

from chakra_collectives.ir.demand import Demand
from chakra_collectives.synth.channels import Channels
from chakra_collectives.synth.forwarding import Forwarding
from chakra_collectives.synth.multipath import spread_paths

ORDERS = ("spread", "spread-farthest", "paced")
"""How the origins order their pieces: by position in their path's share (piece ``i`` of ``n``
at ``(i + 1/2) / n``), or by that position less the rest of the path's time over the busiest
origin link's (long paths a little earlier); or **paced**: each piece is due at its destination
at its position times the busiest origin link's work and leaves its trip time before, in order
of departure. The network model has no clock -- an operation waits
only for others -- so a paced piece waits for the last message that reached its origin by its
departure (when none has, it leaves at once): a first run with the departures as planned finds
those messages, the second run is the schedule (:attr:`~chakra_collectives.synth.forwarding.Forwarding.after`).
Pacing keeps the switches' first come, first served queues in the order planned: a piece that
leaves early overtakes later-due ones on their shared links (64 MiB, against the better of the
first two: torus2d:8x8 random group 410.6 -> 376.8 µs, mesh2d:8x8 strided 615.9 -> 581.3 µs).
(Farthest first, what the matcher does, was slower on every suite group: 513-1138 µs against
382-801 µs for the better of the first two; leaving half the trip time before, or a window of
0.7-1.2 times the busiest link's work, did not beat it on the suite groups.)"""


def pipeline_demand(channels: Channels, demand: Demand, paths: dict[int, list[int]], order: str = "spread-farthest") -> Forwarding:
    """Every piece of ``demand`` along its routed channels in ``paths`` (ids ``num_direct + j``),
    one message per piece and channel, links first come first served; ``order``: one of
    :data:`ORDERS`. (Merging a path's pieces into larger messages, small ones first and last,
    was slower on every suite group: a large message holds every queue it crosses.)

    Raises
    ------
    ValueError
        A piece without a path, a path over a direct channel, or an unknown ``order``.
    """
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r} (valid: {', '.join(ORDERS)})")
    if len(paths) != demand.num_pieces:
        raise ValueError("every piece needs a path")
    base = channels.num_direct
    if any(c < base for path in paths.values() for c in path):
        raise ValueError("pipelined paths use routed channels only")
    links_of = [channels.routed[j].links for j in range(len(channels.routed))]
    # each piece's place among the pieces of its path, in [0, 1)
    by_path: dict[tuple[int, ...], list[int]] = {}
    for piece in range(demand.num_pieces):
        by_path.setdefault(tuple(paths[piece]), []).append(piece)
    position = np.zeros(demand.num_pieces)
    for pieces in by_path.values():
        position[pieces] = (np.arange(len(pieces)) + 0.5) / len(pieces)
    latency = channels.link_latency.tolist()
    serial = (channels.chunk_bytes / channels.link_rate).tolist()
    hop = [a + b for a, b in zip(latency, serial)]
    hops_of = [[link for c in paths[piece] for link in links_of[c - base]] for piece in range(demand.num_pieces)]
    # the hop after which a piece reaches a member: the end of channel ``position`` of its path
    reached = []
    for piece in range(demand.num_pieces):
        ends = np.cumsum([len(links_of[c - base]) for c in paths[piece]]) - 1
        reached.append({h: position for position, h in enumerate(ends.tolist())})
    remaining = np.array([sum(hop[link] for link in hops) for hops in hops_of])
    first_hop = np.array([hop[hops[0]] for hops in hops_of])
    busiest = max(float(np.bincount([hops[0] for hops in hops_of], weights=first_hop).max()), 1e-9)
    after: list[tuple[int, int] | None] | None = None
    if order == "paced":
        release = np.maximum(0.0, position * busiest - (remaining - first_hop))
        start_order = np.lexsort((np.arange(len(position)), -remaining, release))
        _, _, arrivals = _run(hops_of, hop, start_order, reached, release=release)
        after = _waits(arrivals, release, demand, channels, paths)
    else:
        start_order = _origin_order(position, remaining, first_hop, busiest, order)
    begin, end, _ = _run(hops_of, hop, start_order, reached, after=after)
    return _as_forwarding(channels, demand, paths, begin, end, after)


def _run(
    hops_of: list[list[int]], hop: list[float], start_order: np.ndarray, reached: list[dict[int, int]], *,
    release: np.ndarray | None = None, after: list[tuple[int, int] | None] | None = None,
) -> tuple[list[list[float]], list[list[float]], list[tuple[float, int, int]]]:
    """Every hop in time order, each link serving its messages in order of arrival (ties: in
    ``start_order``): when each hop of each piece begins and ends, and every (time, piece,
    channel position) at which a piece reached a member. A piece leaves its origin at
    ``release`` (default 0), or once the message ``after[piece]`` (piece, channel position) has
    arrived. (Every wait ends: a piece waits for a message that reached its origin, in the
    planned run, before it left, so waits follow that run's time and cannot close a cycle.)"""
    free = [0.0] * len(hop)
    begin: list[list[float]] = [[] for _ in hops_of]
    end: list[list[float]] = [[] for _ in hops_of]
    arrivals: list[tuple[float, int, int]] = []
    waiting: dict[tuple[int, int], list[int]] = {}
    events = []
    for seq, piece in enumerate(start_order.tolist()):
        gate = None if after is None else after[piece]
        if gate is None:
            events.append((0.0 if release is None else float(release[piece]), seq, piece, 0))
        else:
            waiting.setdefault(gate, []).append(piece)
    sequence = len(events) + sum(len(w) for w in waiting.values())
    heapq.heapify(events)
    while events:
        t, _, piece, h = heapq.heappop(events)
        link = hops_of[piece][h]
        b = t if t > free[link] else free[link]
        e = b + hop[link]
        free[link] = e
        begin[piece].append(b)
        end[piece].append(e)
        position = reached[piece].get(h)
        if position is not None:
            arrivals.append((e, piece, position))
            for paced in waiting.pop((piece, position), ()):
                heapq.heappush(events, (e, sequence, paced, 0))
                sequence += 1
        if h + 1 < len(hops_of[piece]):
            heapq.heappush(events, (e, sequence, piece, h + 1))
            sequence += 1
    return begin, end, arrivals


def _waits(
    arrivals: list[tuple[float, int, int]], release: np.ndarray, demand: Demand, channels: Channels, paths: dict[int, list[int]]
) -> list[tuple[int, int] | None]:
    """For each piece due to leave after 0, the last message (piece, channel position) that
    reached its origin by then in ``arrivals``; ``None`` for the others."""
    base = channels.num_direct
    at: dict[int, list[tuple[float, int, int]]] = {}
    for t, piece, position in sorted(arrivals):
        at.setdefault(channels.routed[paths[piece][position] - base].dst, []).append((t, piece, position))
    times = {member: [t for t, _, _ in found] for member, found in at.items()}
    waits: list[tuple[int, int] | None] = [None] * len(release)
    for piece, (origin, leave) in enumerate(zip(demand.origin.tolist(), release.tolist())):
        i = bisect.bisect_right(times.get(origin, []), leave) - 1
        if leave > 0 and i >= 0:
            waits[piece] = at[origin][i][1:]
    return waits


def pipelined_schedules(
    channels: Channels, demand: Demand, flows: Mapping[int, np.ndarray] | None = None, *, timed: bool = True
) -> Iterator[tuple[Forwarding, Channels]]:
    """:func:`pipeline_demand`'s schedules of ``demand`` (every piece unicast) along the flow
    optimum's paths on ``channels``, each with the channels it runs over: ``flows``' paths (default:
    the bandwidth LP's, :func:`~chakra_collectives.synth.multipath.demand_flows`) and, with
    ``timed``, the paths of the LP that keeps each link's fill and drain free, each in every
    order of :data:`ORDERS`. Paths over a link the network would not take between its nodes
    (:func:`routes_as_named`) are left out."""
    plans = [spread_paths(channels, demand, flows, direct=False)]
    if timed:
        plans.append(spread_paths(channels, demand, direct=False, timed=True))
    for plan in plans:
        if plan is None or len(plan.paths) != demand.num_pieces or not routes_as_named(plan.channels, plan.paths):
            continue
        for order in ORDERS:
            yield pipeline_demand(plan.channels, demand, plan.paths, order), plan.channels


def routes_as_named(channels: Channels, paths: dict[int, list[int]]) -> bool:
    """Whether every routed channel that ``paths`` use crosses the links its node path names: a SEND
    names its route by its nodes, and the network takes, between two nodes, the link it would
    route over (:meth:`~chakra_collectives.network.model.NetworkModel.path_links`) -- of two
    parallel links, one.

    >>> from dataclasses import replace
    >>> from chakra_collectives.synth.channels import RoutedChannel, build_channels
    >>> from chakra_collectives.topology import Topology
    >>> t = Topology(2)
    >>> t.add_link(0, 1, 50.0, 500.0); t.add_link(0, 1, 50.0, 500.0); t.add_link(1, 0, 50.0, 500.0)
    >>> channels = build_channels(t, chunk_bytes=1)
    >>> two = replace(channels, routed=[RoutedChannel(0, 1, (0,)), RoutedChannel(0, 1, (1,))])
    >>> n = two.num_direct                        # routed channel j is channel n + j
    >>> routes_as_named(two, {0: [n], 1: [n]}), routes_as_named(two, {0: [n], 1: [n + 1]})
    (True, False)
    """
    used = {c - channels.num_direct for path in paths.values() for c in path if c >= channels.num_direct}
    routes = channels.routing().paths
    return all(channels.model.path_links(routes[j]) == tuple(channels.routed[j].links) for j in used)


def _origin_order(position: np.ndarray, remaining: np.ndarray, first_hop: np.ndarray, busiest: float, order: str) -> np.ndarray:
    """The order pieces are offered to their first links (``spread`` or ``spread-farthest``, see :data:`ORDERS`)."""
    if order == "spread-farthest":
        position = position - (remaining - first_hop) / busiest
    return np.lexsort((np.arange(len(position)), -remaining, position))


def _as_forwarding(
    channels: Channels, demand: Demand, paths: dict[int, list[int]], begin: list[list[float]], end: list[list[float]], after: list[tuple[int, int] | None] | None
) -> Forwarding:
    """The messages (one per piece and channel of its path) in start order (``after``: the message
    each piece waits for before it leaves its origin, see :func:`_run`)."""
    base = channels.num_direct
    target = demand.dest[demand.dest_ptr[:-1]]
    rows = []  # (start, end, src, dst, channel, piece, position on the path)
    for piece in range(demand.num_pieces):
        first = 0
        for position, c in enumerate(paths[piece]):
            channel = channels.routed[c - base]
            last = first + len(channel.links) - 1
            rows.append((begin[piece][first], end[piece][last], channel.src, channel.dst, -1 - (c - base), piece, position))
            first = last + 1
    rows.sort(key=lambda row: (row[0], row[5], row[6]))
    message_of = {(row[5], row[6]): i for i, row in enumerate(rows)}
    columns = [np.array(column) for column in zip(*rows)] if rows else [np.zeros(0)] * 7
    piece, dst = columns[5].astype(np.int64), columns[3].astype(np.int64)
    return Forwarding(
        num_npus=channels.num_npus,
        src=columns[2].astype(np.int64),
        dst=dst,
        channel=columns[4].astype(np.int64),
        start=columns[0].astype(np.float64),
        end=columns[1].astype(np.float64),
        entry_ptr=np.arange(len(rows) + 1, dtype=np.int64),
        entry_piece=piece,
        entry_via=np.array([message_of[row[5], row[6] - 1] if row[6] else -1 for row in rows], dtype=np.int64),
        entry_delivered=target[piece] == dst,
        after=None if after is None else np.array([message_of[after[row[5]]] if row[6] == 0 and after[row[5]] else -1 for row in rows], dtype=np.int64),
    )


__all__ = ["ORDERS", "pipeline_demand", "pipelined_schedules", "routes_as_named"]
