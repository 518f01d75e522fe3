"""Run a :class:`~chakra_collectives.network.graph.TaskGraph` on a network model.

The event loop (:mod:`~chakra_collectives.network.events`) holds only two kinds of events:
a message finishing one hop, and a timed local task finishing. Everything that happens at the
same instant without taking time -- a task becoming ready, a SEND injecting its message, a
zero-time task completing, a unit being handed over -- is settled by :func:`run`'s handlers
before the loop moves on, in FIFO order.

Links need no events of their own: a link serves messages in FIFO order of arrival, and
messages reach it in time order (events run in time order), so a message offered at ``t``
starts at ``max(t, free)`` where ``free`` is when the link's previous message stops occupying
it -- exactly the queueing discipline, with one event per hop.

>>> from chakra_collectives.topology import Topology
>>> from chakra_collectives.network.graph import TaskGraph, SEND, RECV, LOCAL
>>> from chakra_collectives.network.model import NetworkModel
>>> one_byte_per_ns = 1e9 / 2**30          # GB/s
>>> t = Topology(2)
>>> t.add_link(0, 1, one_byte_per_ns, 100.0, bidirectional=True)
>>> # two 1000-byte messages queue on link 0 -> 1: each holds it for 100 + 1000 ns
>>> g = TaskGraph.build(kind=[SEND, SEND, RECV, RECV], npu=[0, 0, 1, 1], partner=[2, 3, 0, 1],
...                     nbytes=[1000] * 4, duration=[0.0] * 4, dep_ptr=[0, 0, 0, 0, 0], dep_idx=[])
>>> run(g, NetworkModel(t)).end.tolist()
[1100.0, 2200.0, 1100.0, 2200.0]
>>> run(g, NetworkModel(t, mode="astra-sim")).end.tolist()   # latency pipelined
[1100.0, 2100.0, 1100.0, 2100.0]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from chakra_collectives.network.events import EventLoop
from chakra_collectives.network.graph import LOCAL, RECV, SEND, TaskGraph
from chakra_collectives.network.model import NetworkModel


@dataclass
class LinkUse:
    """What crossed each link (arrays indexed by link id)."""

    busy_ns: np.ndarray
    bytes: np.ndarray
    messages: np.ndarray
    intervals: list[tuple[int, float, float, int]] = field(default_factory=list)
    """``(link, start, end, send_task)`` of every hop, when recorded."""


@dataclass
class Timing:
    """When every task started and ended (ns; NaN when it never did)."""

    start: np.ndarray
    """When the task's dependencies were done and it held its unit (a RECV: when it was posted)."""
    end: np.ndarray
    links: LinkUse
    stuck: np.ndarray
    """Tasks that never completed (empty when the graph ran to completion)."""

    @property
    def makespan(self) -> float:
        """Time the last task ended (0 for an empty graph)."""
        done = self.end[~np.isnan(self.end)]
        return float(done.max()) if len(done) else 0.0

    @property
    def finished(self) -> bool:
        return len(self.stuck) == 0


def run(graph: TaskGraph, model: NetworkModel, *, record_links: bool = False) -> Timing:
    """Simulate ``graph`` on ``model``; never hangs (tasks left waiting are reported as stuck)."""
    size = len(graph)
    kind = graph.kind.tolist()
    npu = graph.npu.tolist()
    partner = graph.partner.tolist()
    nbytes = graph.nbytes.tolist()
    duration = graph.duration.tolist()
    unit = graph.unit.tolist()
    release = graph.release.tolist()
    succ_ptr_array, succ_array = graph.successor_csr()
    succ_ptr = succ_ptr_array.tolist()
    succ = succ_array.tolist()
    pending = np.diff(graph.dep_ptr).tolist()

    nan = float("nan")
    start = [nan] * size
    end = [nan] * size
    posted = bytearray(size)
    arrived = bytearray(size)
    granted = bytearray(size)
    hop_of = [0] * size
    route_of: list[tuple[int, ...] | None] = [None] * size

    num_links = len(model.topology.links)
    link_free = [0] * num_links
    link_busy = [0] * num_links
    link_bytes = [0] * num_links
    link_messages = [0] * num_links
    intervals: list[tuple[int, float, float, int]] = []
    record = intervals.append if record_links else None
    hop_cost = model.hop
    route = model.route

    num_units = max(max(unit, default=-1), max(release, default=-1)) + 1
    unit_busy = bytearray(num_units)
    unit_wait: list[deque[int]] = [deque() for _ in range(num_units)]

    loop = EventLoop()
    schedule = loop.schedule
    ready: deque[int] = deque(i for i in range(size) if pending[i] == 0)
    pop_ready = ready.popleft
    push_ready = ready.append

    def complete(i: int, now) -> None:
        end[i] = now
        for j in succ[succ_ptr[i] : succ_ptr[i + 1]]:
            pending[j] -= 1
            if not pending[j]:
                push_ready(j)
        u = release[i]
        if u >= 0:
            waiting = unit_wait[u]
            if waiting:
                nxt = waiting.popleft()
                granted[nxt] = 1  # the unit passes straight to the longest waiter
                push_ready(nxt)
            else:
                unit_busy[u] = 0

    def transmit(i: int, link: int, now) -> None:
        begin = link_free[link]
        if begin < now:
            begin = now
        busy, delivered = hop_cost(link, nbytes[i])
        link_free[link] = begin + busy
        link_busy[link] += busy
        link_bytes[link] += nbytes[i]
        link_messages[link] += 1
        if record is not None:
            record((link, begin, begin + busy, i))
        schedule(begin + delivered, hop_done, i)

    def deliver(i: int, now) -> None:
        complete(i, now)  # a SEND completes when its message has arrived
        p = partner[i]
        if posted[p]:
            complete(p, now)
        else:
            arrived[p] = 1

    def settle(now) -> None:
        """Start every task that became ready at ``now`` (and what those complete at once)."""
        while ready:
            i = pop_ready()
            u = unit[i]
            if u >= 0 and not granted[i]:
                if unit_busy[u]:
                    unit_wait[u].append(i)
                    continue
                unit_busy[u] = 1
            start[i] = now
            k = kind[i]
            if k == LOCAL:
                d = duration[i]
                if d:
                    schedule(now + d, local_done, i)
                else:
                    complete(i, now)
            elif k == SEND:
                path = route(npu[i], npu[partner[i]])
                if path:
                    route_of[i] = path
                    transmit(i, path[0], now)
                else:
                    deliver(i, now)
            elif arrived[i]:  # RECV whose message is already there
                complete(i, now)
            else:
                posted[i] = 1

    def hop_done(i: int) -> None:
        now = loop.now
        path = route_of[i]
        h = hop_of[i] + 1
        if h < len(path):  # store-and-forward: offer the message to the next link
            hop_of[i] = h
            transmit(i, path[h], now)
            return
        deliver(i, now)
        settle(now)

    def local_done(i: int) -> None:
        now = loop.now
        complete(i, now)
        settle(now)

    settle(0)
    loop.run()

    end_array = np.array(end, dtype=np.float64)
    return Timing(
        start=np.array(start, dtype=np.float64),
        end=end_array,
        links=LinkUse(
            busy_ns=np.array(link_busy, dtype=np.float64),
            bytes=np.array(link_bytes, dtype=np.int64),
            messages=np.array(link_messages, dtype=np.int64),
            intervals=intervals,
        ),
        stuck=np.flatnonzero(np.isnan(end_array)),
    )


__all__ = ["LinkUse", "Timing", "run", "LOCAL", "RECV", "SEND"]
