"""The event engine's loop run instant by instant in numpy, for graphs whose tasks wait only for
SENDs and RECVs that wait for nothing.

The event loop (:func:`~chakra_collectives.network.engine._run`) handles one event at a time, but
the events of a pipelined schedule share instants by the hundred (equal pieces on equal links:
a100:16's ForestColl All-Gather at four pieces per tree, 130K tasks, ends its 145K hops at 572
instants). When

* only SENDs have dependencies (so RECVs are all posted at time 0, LOCAL tasks take no time and
  nothing waits for them), no task holds a unit, and
* every SEND's message crosses at least one hop, each delivered after a positive time,

what happens at one instant follows in a fixed order that numpy can lay out at once: the
instant's events are read in the order they were scheduled; a hop that is not its message's
last offers the message to its next link; a message's last hop completes its SEND and then its
RECV (posted since time 0), whose successors whose last dependency that was start at once, in
the order their counts reached zero, and offer their messages to their first links. Offers to one
link queue in that order (each begins when the link is free, and no earlier than now), and the
new events are scheduled in that order too. The times are the event loop's, operation for
operation (the same additions and maxima of the same numbers), so bit for bit; graphs outside
the conditions return ``None`` and run in the loop.

>>> from chakra_collectives.network.graph import TaskGraph, SEND, RECV
>>> # two messages on one link (the second waits), then a SEND that waits for the first RECV
>>> g = TaskGraph.build(kind=[SEND, SEND, RECV, RECV, SEND, RECV], npu=[0, 0, 1, 1, 1, 2],
...                     partner=[2, 3, 0, 1, 5, 4], nbytes=[8] * 6, duration=[0.0] * 6,
...                     dep_ptr=[0, 0, 0, 0, 0, 1, 1], dep_idx=[2])
>>> costs = HopCosts(kind_of_send=np.array([0, 0, 1]), hop_ptr=np.array([0, 1, 2]), hop_link=np.array([0, 1]),
...                  hop_busy=np.array([10.0, 5.0]), hop_delivered=np.array([10.0, 5.0]))
>>> start, end = instant_times(g, costs, num_links=2)
>>> start.tolist(), end.tolist()
([0.0, 0.0, 0.0, 0.0, 10.0, 0.0], [10.0, 20.0, 10.0, 20.0, 15.0, 15.0])
"""

from __future__ import annotations

from heapq import heappop, heappush

import numpy as np

from chakra_collectives.network.graph import LOCAL, SEND, TaskGraph
from chakra_collectives.network.levels import HopCosts


MIN_EVENTS_PER_INSTANT = 120
"""Events (hops ending) an instant must hold on average for this to beat the event loop: numpy's
calls cost about 80-110 µs an instant, the loop about 1.2 µs a task (ForestColl All-Gather,
64 MiB, CPU s: a100:16 at 4 pieces, 250 events an instant, 0.20 -> 0.14; dgx:4x8 at 8, 300 an
instant, 0.018 -> 0.013; a100:4 at 16, 70 an instant, 0.037 -> 0.063 and mi250:2 at 16, 40 an
instant, 0.038 -> 0.081, left to the loop)."""

DENSITY_CHECKS = 8
"""The average is checked after this many instants, and again at every doubling: sparse graphs
go back to the loop having spent little (the loop then starts over). A pipeline's density
shows from its first instants (events an instant over the first 8, 64 and all: a100:16 at 4
pieces 240, 254, 254; a100:4 at 16 60, 68, 70; mi250:2 at 16 31, 31, 19)."""


def instant_times(graph: TaskGraph, costs: HopCosts, *, num_links: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Every task's ``(start, end)`` as the event loop finds them (NaN: never ran), or ``None``
    when the graph is outside the conditions of the module docstring, when an offer would be
    delivered at the instant it is made, or when its instants turn out sparse
    (:data:`MIN_EVENTS_PER_INSTANT`): the loop then runs it."""
    size = len(graph)
    kind = graph.kind
    waits = np.diff(graph.dep_ptr)
    send = kind == SEND
    local = kind == LOCAL
    if graph.has_units or np.any(waits[~send]) or np.any(graph.duration[local]):
        return None
    route_length = np.diff(costs.hop_ptr)
    if np.any(route_length[costs.kind_of_send] == 0) or np.any(costs.hop_delivered <= 0):
        return None
    succ_ptr, succ_idx = graph.successor_csr()
    fan_out = np.diff(succ_ptr)
    if np.any(fan_out[local]):
        return None
    sends = np.flatnonzero(send)
    first_hop = np.zeros(size, dtype=np.int64)
    first_hop[sends] = costs.hop_ptr[costs.kind_of_send]
    last_hop = np.zeros(size, dtype=np.int64)
    last_hop[sends] = route_length[costs.kind_of_send] - 1
    partner = graph.partner.astype(np.int64)
    pending = waits.astype(np.int64)
    start = np.full(size, np.nan)
    end = np.full(size, np.nan)
    first = np.flatnonzero(waits == 0)
    start[first] = 0.0  # RECVs posted, LOCAL tasks done, SENDs offered (in task order)
    end[local] = 0.0
    link_free = np.zeros(num_links)
    buckets: dict[float, list[tuple[np.ndarray, np.ndarray]]] = {}
    instants: list[float] = []

    def offer(now: float, tasks: np.ndarray, hops: np.ndarray) -> bool:
        """Offer each message (in order) its hop ``hops`` (0 = first); schedule the hops' ends."""
        flat = first_hop[tasks] + hops
        link = costs.hop_link[flat]
        busy = costs.hop_busy[flat]
        delivered = costs.hop_delivered[flat]
        if len(link) == 1 or np.bincount(link, minlength=num_links).max() == 1:  # one offer per link
            begin = np.maximum(link_free[link], now)
            link_free[link] = begin + busy
            at = begin + delivered
        else:
            at = np.empty(len(tasks))
            order = np.argsort(link, kind="stable")
            ordered = link[order]
            new = np.ones(len(order), dtype=bool)
            new[1:] = ordered[1:] != ordered[:-1]
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order)) - np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))
            by_round = np.argsort(rank, kind="stable")
            bounds = np.searchsorted(rank[by_round], np.arange(int(rank.max()) + 2))
            for r in range(len(bounds) - 1):  # the r-th offer to each link: links distinct within a round
                these = by_round[bounds[r] : bounds[r + 1]]
                used = link[these]
                begin = np.maximum(link_free[used], now)
                link_free[used] = begin + busy[these]
                at[these] = begin + delivered[these]
        if np.any(at <= now):
            return False
        order = np.argsort(at, kind="stable")
        times = at[order]
        tasks, hops = tasks[order], hops[order]
        cut = np.flatnonzero(times[1:] != times[:-1]) + 1
        starts = [0, *cut.tolist()]
        ends = [*cut.tolist(), len(order)]
        for s, e, t in zip(starts, ends, times[starts].tolist()):
            chunk = (tasks[s:e], hops[s:e])
            later = buckets.get(t)
            if later is None:
                buckets[t] = [chunk]
                heappush(instants, t)
            else:
                later.append(chunk)
        return True

    initial = first[send[first]]
    if len(initial) and not offer(0.0, initial, np.zeros(len(initial), dtype=np.int64)):
        return None
    seen = events = 0
    check = DENSITY_CHECKS
    while instants:
        now = heappop(instants)
        chunks = buckets.pop(now)
        tasks = np.concatenate([c[0] for c in chunks]) if len(chunks) > 1 else chunks[0][0]
        hops = np.concatenate([c[1] for c in chunks]) if len(chunks) > 1 else chunks[0][1]
        seen += 1
        events += len(tasks)
        if seen == check:
            if events < MIN_EVENTS_PER_INSTANT * seen:
                return None  # sparse instants: the loop is faster
            check *= 2
        final = hops == last_hop[tasks]
        onward = np.flatnonzero(~final)
        done = np.flatnonzero(final)
        # every offer's place: (2 * event, 0) for the next hop of an event's message; (2 *
        # event + 0 or 1, 1 + its place in the list) for the successors its SEND / RECV started
        next_tasks, next_hops, place = [tasks[onward]], [hops[onward] + 1], [2 * onward]
        width = 1
        if len(done):
            sent = tasks[done]
            received = partner[sent]
            end[sent] = now
            end[received] = now
            trigger = np.empty(2 * len(done), dtype=np.int64)
            trigger[0::2], trigger[1::2] = sent, received
            count = fan_out[trigger]
            edges = int(count.sum())
            if edges:
                which = np.repeat(np.arange(len(trigger)), count)
                within = np.arange(edges) - np.repeat(np.cumsum(count) - count, count)
                waiter = succ_idx[np.repeat(succ_ptr[trigger], count) + within]
                by_waiter = np.argsort(waiter, kind="stable")
                sorted_waiter = waiter[by_waiter]
                last = np.ones(edges, dtype=bool)  # each waiter's last edge here: the one that
                last[:-1] = sorted_waiter[1:] != sorted_waiter[:-1]  # brought its count to zero
                ends = np.flatnonzero(last)
                fired = by_waiter[ends]
                distinct = sorted_waiter[ends]
                pending[distinct] -= np.diff(ends, prepend=-1)  # its edges here
                fired = np.sort(fired[pending[distinct] == 0])
                started = waiter[fired]
                start[started] = now
                width = int(within[fired].max(initial=0)) + 2
                next_tasks.append(started)
                next_hops.append(np.zeros(len(started), dtype=np.int64))
                place.append(2 * done[which[fired] // 2] + which[fired] % 2)
        key = np.concatenate([place[0] * width] + ([place[1] * width + within[fired] + 1] if len(place) > 1 else []))
        if not len(key):
            continue
        order = np.argsort(key)  # distinct keys
        if not offer(now, np.concatenate(next_tasks)[order], np.concatenate(next_hops)[order]):
            return None
    return start, end


__all__ = ["instant_times"]
