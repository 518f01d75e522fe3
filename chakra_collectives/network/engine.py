"""Run a :class:`~chakra_collectives.network.graph.TaskGraph` on a network model.

The event queue (ordered as :mod:`~chakra_collectives.network.events`' loop: by time, then
by the order events were scheduled) holds only two kinds of events: a message finishing one
hop, and a timed local task finishing. Everything that happens at the same instant without
taking time -- a task becoming ready, a SEND injecting its message, a zero-time task
completing, a unit being handed over -- is settled before the loop moves on, in FIFO order.
The loop is written out in one function, without a callback per event (the hot path of every
prediction); graphs of :data:`COMPILED_TASKS` tasks or more run the same loop compiled
(:mod:`~chakra_collectives.network.event_kernel`, numba, when installed): the same events in
the same order, so the same times and hops bit for bit.

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
>>> run(g, NetworkModel(t, network_model="astra-sim")).end.tolist()   # latency pipelined
[1100.0, 2100.0, 1100.0, 2100.0]
"""

from __future__ import annotations

import importlib.util
from collections import deque
from copy import copy
from dataclasses import dataclass, field
from functools import cached_property
from heapq import heappop, heappush
from types import ModuleType

import numpy as np

from chakra_collectives.network.graph import LOCAL, RECV, SEND, TaskGraph, locality_order, permuted
from chakra_collectives.network.instants import instant_times
from chakra_collectives.network.levels import HopCosts, contention_free_times
from chakra_collectives.network.model import NetworkModel


@dataclass
class Hops:
    """Every hop of every message, as parallel arrays: it crossed ``link`` from ``begin`` to
    ``end`` (ns: when the link was free again) for SEND task ``send``. In no particular order."""

    link: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    send: np.ndarray

    @classmethod
    def empty(cls) -> "Hops":
        return cls(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64))

    @classmethod
    def from_rows(cls, rows: list[tuple[int, float, float, int]]) -> "Hops":
        """From ``(link, begin, end, send)`` tuples (what the event engine records)."""
        if not rows:
            return cls.empty()
        link, begin, end, send = zip(*rows)
        return cls(np.array(link, np.int64), np.array(begin, np.float64), np.array(end, np.float64), np.array(send, np.int64))

    def __len__(self) -> int:
        return len(self.link)


@dataclass
class LinkUse:
    """What crossed each link (arrays indexed by link id)."""

    busy_ns: np.ndarray
    bytes: np.ndarray
    messages: np.ndarray
    intervals: Hops = field(default_factory=Hops.empty)
    """Every hop, when recorded (empty otherwise)."""


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
    """Simulate ``graph`` on ``model``; never hangs (tasks left waiting are reported as stuck).

    Tasks that become ready at the same instant start in the order of
    :func:`~chakra_collectives.network.graph.locality_order` (position in their NPU's list, then
    NPU), which is also the order they offer messages to a shared link.

    A graph whose messages never wait for a link (and whose tasks hold no units) is timed level
    by level instead (:mod:`~chakra_collectives.network.levels`): the same times, in numpy --
    and, with ``record_links``, the same hops.
    """
    messages = _Messages(graph, model)
    costs = HopCosts(messages.kind_of_send, messages.hop_ptr, messages.hop_link, messages.hop_busy, messages.hop_delivered)
    fast = contention_free_times(graph, costs, keep_hops=record_links)
    if fast is not None:
        hops = Hops(fast.hop_link, fast.hop_begin, fast.hop_free, fast.hop_send.astype(np.int64)) if record_links else Hops.empty()
        return Timing(start=fast.start, end=fast.end, links=messages.link_use(None, hops), stuck=np.zeros(0, dtype=np.int64))
    del costs, fast
    order = locality_order(graph)
    kernel = compiled_loop(len(graph))
    if kernel is not None:
        return _run_compiled(kernel, graph, order, model, record_links=record_links, messages=messages)
    timing = _run(permuted(graph, order), model, record_links=record_links, messages=messages.permuted(order))
    start = np.empty_like(timing.start)
    end = np.empty_like(timing.end)
    start[order] = timing.start
    end[order] = timing.end
    links = timing.links
    links.intervals.send = order[links.intervals.send].astype(np.int64)
    return Timing(start=start, end=end, links=links, stuck=np.sort(order[timing.stuck]))


def _successors(graph: TaskGraph) -> list:
    """Per task: -1 (no successor), the successor's id, or a tuple of ids (compact and slice-free)."""
    succ_ptr, succ_idx = graph.successor_csr()
    counts = np.diff(succ_ptr)
    single = np.full(len(graph), -1, dtype=np.int64)
    one = counts == 1
    single[one] = succ_idx[succ_ptr[:-1][one]]
    successors = single.tolist()
    for i in np.flatnonzero(counts > 1).tolist():
        successors[i] = tuple(succ_idx[succ_ptr[i] : succ_ptr[i + 1]].tolist())
    return successors


COMPILED_TASKS = 2**20
"""Graphs of at least this many tasks run the compiled loop (:mod:`.event_kernel`, numba, when
installed: ``pip install '.[fast]'``), smaller ones the Python loop; the times and hops are the
same either way. Importing numba and loading the compiled loop from its cache take about 0.8 CPU
s, what the compiled loop saves on about 1-1.5M tasks (ring All-Reduces timed whole in one
process, CPU: 326K tasks 0.35 -> 0.19 s, 1.3M 1.51 -> 0.81 s, 5.2M 8.5 -> 3.9 s)."""


def compiled_loop(size: int) -> ModuleType | None:
    """:mod:`.event_kernel` for graphs of ``size`` tasks from :data:`COMPILED_TASKS` on, when numba
    is installed (imported then: numba's start-up is kept off small predictions), else None."""
    if size < COMPILED_TASKS or importlib.util.find_spec("numba") is None:
        return None
    from chakra_collectives.network import event_kernel  # imported when used

    return event_kernel


def _run_compiled(kernel: ModuleType, graph: TaskGraph, order: np.ndarray, model: NetworkModel, *, record_links: bool, messages: "_Messages") -> Timing:
    """:func:`_run`'s events on ``graph`` :func:`~chakra_collectives.network.graph.permuted` by
    ``order``, run by :func:`.event_kernel.run_events` over flat arrays; the graph's successors
    are renumbered in one compiled pass (:func:`.event_kernel.renumbered_successors`) instead of
    permuting the whole graph, and the times come back in ``graph``'s numbering."""
    size = len(graph)
    integer = all(np.issubdtype(a.dtype, np.integer) for a in (graph.duration, messages.hop_busy, messages.hop_delivered))
    time_type = np.int64 if integer else np.float64
    task_id = graph.partner.dtype
    new_id = np.empty(size, dtype=task_id)
    new_id[order] = np.arange(size, dtype=task_id)
    succ_ptr = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(np.bincount(graph.dep_idx, minlength=size)[order], out=succ_ptr[1:])
    succ_idx = np.empty(int(succ_ptr[-1]), dtype=task_id)
    pending = np.empty(size, dtype=task_id)
    kernel.renumbered_successors(graph.dep_ptr, graph.dep_idx, order, new_id, succ_ptr, succ_idx, pending)
    partner = graph.partner[order]
    partner = np.where(partner >= 0, new_id[np.maximum(partner, 0)], partner)
    has_units = graph.has_units
    unit = graph.unit[order] if has_units else np.zeros(0, np.int32)
    release = graph.release[order] if has_units else np.zeros(0, np.int32)
    num_units = max(int(unit.max(initial=-1)), int(release.max(initial=-1))) + 1 if has_units else 0
    message_of = np.full(size, -1, dtype=np.int32 if len(messages.routes) < 2**31 else np.int64)
    message_of[messages.sends] = messages.kind_of_send
    message_of = message_of[order]
    room = int(np.diff(messages.hop_ptr)[messages.kind_of_send].sum()) if record_links else 0
    start = np.full(size, np.nan)
    end = np.full(size, np.nan)
    link, begin, free, send = np.empty(room, np.int64), np.empty(room, time_type), np.empty(room, time_type), np.empty(room, np.int64)
    recorded = kernel.run_events(
        graph.kind[order], np.ascontiguousarray(graph.duration[order], dtype=time_type), partner, succ_ptr, succ_idx, pending,
        unit, release, num_units, message_of, messages.hop_ptr.astype(np.int64), messages.hop_link,
        messages.hop_busy.astype(time_type), messages.hop_delivered.astype(time_type),
        np.zeros(model.num_links, dtype=time_type), start, end, link, begin, free, send,
    )
    del succ_ptr, succ_idx, pending, partner, message_of
    start[order], end[order] = start.copy(), end.copy()
    hops = Hops(link[:recorded], begin[:recorded].astype(np.float64), free[:recorded].astype(np.float64), order[send[:recorded]].astype(np.int64)) if recorded else Hops.empty()
    return Timing(start=start, end=end, links=messages.link_use(~np.isnan(start), hops), stuck=np.flatnonzero(np.isnan(end)))


def _run(graph: TaskGraph, model: NetworkModel, *, record_links: bool, messages: "_Messages | None" = None) -> Timing:
    """The event loop on ``graph`` (``messages``: its :class:`_Messages`, when known already);
    where its rules allow, instant by instant in numpy instead (:mod:`.instants`: the same times)."""
    messages = _Messages(graph, model) if messages is None else messages
    if not record_links:
        costs = HopCosts(messages.kind_of_send, messages.hop_ptr, messages.hop_link, messages.hop_busy, messages.hop_delivered)
        timed = instant_times(graph, costs, num_links=model.num_links)
        if timed is not None:
            start, end = timed
            return Timing(start=start, end=end, links=messages.link_use(~np.isnan(start), Hops.empty()), stuck=np.flatnonzero(np.isnan(end)))
    size = len(graph)
    kind = graph.kind.tolist()
    timed = np.flatnonzero((graph.kind == LOCAL) & (graph.duration != 0))
    duration = dict(zip(timed.tolist(), graph.duration[timed].tolist()))  # LOCAL tasks that take time
    has_units = graph.has_units
    unit = graph.unit.tolist() if has_units else None
    release = graph.release.tolist() if has_units else None
    partner = graph.partner.tolist()
    successors = _successors(graph)
    waits = np.diff(graph.dep_ptr)
    pending = waits.tolist()
    first_ready = np.flatnonzero(waits == 0).tolist()
    del waits
    hops_of = messages.hops_of
    del graph  # the lists above are all the run needs

    nan = float("nan")
    start = [nan] * size
    end = [nan] * size
    posted = bytearray(size)
    arrived = bytearray(size)
    granted = bytearray(size)

    link_free = [0] * model.num_links
    intervals: list[tuple[int, float, float, int]] = []
    record = intervals.append if record_links else None

    num_units = max(max(unit, default=-1), max(release, default=-1)) + 1 if has_units else 0
    unit_busy = bytearray(num_units)
    unit_wait: list[deque[int]] = [deque() for _ in range(num_units)]

    # The event queue (network.events' order: time, then the order events were scheduled):
    # one bucket per instant, ``[task, hop, task, hop, ...]`` in the order scheduled, and a
    # heap of the instants -- hop >= 0: SEND ``task``'s message finished that hop; -1: the
    # timed LOCAL ``task`` finished. Events share instants by the thousand (equal pieces on
    # equal links: a100:16's 145K hops end at 572 instants), so a bucket's events are read in
    # turn instead of popped from a heap of tuples. One loop, no callbacks (the hot path).
    buckets: dict[float, list] = {}
    instants: list[float] = []
    bucket: list = []  # the instant ``now``'s events, read up to ``position``
    position = 0
    drained = False
    ready: deque[int] = deque(first_ready)
    del first_ready
    pop_ready = ready.popleft
    push_ready = ready.append

    def complete(i: int, now) -> None:
        end[i] = now
        j = successors[i]
        if j.__class__ is int:
            if j >= 0:
                pending[j] -= 1
                if not pending[j]:
                    push_ready(j)
        else:
            for j in j:
                pending[j] -= 1
                if not pending[j]:
                    push_ready(j)
        if not has_units:
            return
        u = release[i]
        if u >= 0:
            waiting = unit_wait[u]
            if waiting:
                nxt = waiting.popleft()
                granted[nxt] = 1  # the unit passes straight to the longest waiter
                push_ready(nxt)
            else:
                unit_busy[u] = 0

    now = 0
    while True:
        # settle: start every task that became ready at ``now`` (and what those complete at once)
        while ready:
            i = pop_ready()
            if has_units:
                u = unit[i]
                if u >= 0 and not granted[i]:
                    if unit_busy[u]:
                        unit_wait[u].append(i)
                        continue
                    unit_busy[u] = 1
            start[i] = now
            k = kind[i]
            if k == SEND:
                hops = hops_of[i]
                if hops:  # offer the message to its first link
                    link, busy, delivered = hops[0]
                    begin = link_free[link]
                    if begin < now:
                        begin = now
                    link_free[link] = begin + busy
                    if record is not None:
                        record((link, begin, begin + busy, i))
                    at = begin + delivered
                    later = buckets.get(at)
                    if later is None:
                        buckets[at] = [i, 0]
                        heappush(instants, at)
                    else:
                        later += (i, 0)
                else:  # delivered at once
                    complete(i, now)
                    p = partner[i]
                    if posted[p]:
                        complete(p, now)
                    else:
                        arrived[p] = 1
            elif k == LOCAL:
                d = duration.get(i)
                if d:
                    at = now + d
                    later = buckets.get(at)
                    if later is None:
                        buckets[at] = [i, -1]
                        heappush(instants, at)
                    else:
                        later += (i, -1)
                else:
                    complete(i, now)
            elif arrived[i]:  # RECV whose message is already there
                complete(i, now)
            else:
                posted[i] = 1
        # the next event(s): hops that are not a message's last settle nothing
        while True:
            if position == len(bucket):  # the next instant's bucket
                if bucket:
                    del buckets[now]
                    bucket = []
                    position = 0
                if not instants:
                    drained = True
                    break
                now = heappop(instants)
                bucket = buckets[now]
            i = bucket[position]
            h = bucket[position + 1]
            position += 2
            if h < 0:  # a timed LOCAL task finished
                complete(i, now)
                break
            hops = hops_of[i]
            h += 1
            if h < len(hops):  # store-and-forward: offer the message to the next link
                link, busy, delivered = hops[h]
                begin = link_free[link]
                if begin < now:
                    begin = now
                link_free[link] = begin + busy
                if record is not None:
                    record((link, begin, begin + busy, i))
                at = begin + delivered
                later = buckets.get(at)
                if later is None:
                    buckets[at] = [i, h]
                    heappush(instants, at)
                else:
                    later += (i, h)
                continue
            complete(i, now)  # a SEND completes when its message has arrived
            p = partner[i]
            if posted[p]:
                complete(p, now)
            else:
                arrived[p] = 1
            break
        if drained and not ready:
            break
    # the handler refers to the lists through closure cells: empty the cell so the task lists
    # are freed now rather than at the next cyclic garbage collection
    complete = None  # type: ignore[assignment]

    end_array = np.array(end, dtype=np.float64)
    start_array = np.array(start, dtype=np.float64)
    return Timing(
        start=start_array,
        end=end_array,
        links=messages.link_use(~np.isnan(start_array), Hops.from_rows(intervals)),
        stuck=np.flatnonzero(np.isnan(end_array)),
    )


class _Messages:
    """Route and per-hop ``(busy, delivered)`` of every SEND, computed once per distinct message.

    A distinct message is a (source NPU, destination NPU, bytes) triple; a collective has few,
    so routes and hop costs are looked up from the model a few times, not once per message.
    ``kind_of_send[j]`` is the distinct message of the ``j``-th SEND; the distinct messages'
    hops are flat arrays (``hop_ptr``, ``hop_link``, ``hop_busy``, ``hop_delivered``).
    """

    def __init__(self, graph: TaskGraph, model: NetworkModel) -> None:
        self.size = len(graph)
        sends = np.flatnonzero(graph.kind == SEND)
        self.sends = sends
        dst = graph.npu[graph.partner[sends]] if len(sends) else np.zeros(0, np.int32)
        sizes, size_id = np.unique(graph.nbytes[sends], return_inverse=True)
        nodes = model.topology.num_nodes
        choices = len(graph.routes) + 1  # an explicit route, or the model's (0)
        key = ((graph.npu[sends].astype(np.int64) * nodes + dst) * len(sizes) + size_id.reshape(-1)) * choices + graph.route[sends] + 1
        keys, kind_of_send = np.unique(key, return_inverse=True)
        self.kind_of_send = kind_of_send.reshape(-1)
        route_id = keys % choices - 1
        keys = keys // choices
        unique = np.stack([keys // len(sizes) // nodes, keys // len(sizes) % nodes, sizes[keys % len(sizes)]], axis=1) if len(keys) else np.zeros((0, 3), np.int64)
        self.routes: list[tuple[int, ...]] = [
            graph.routes[r] if r >= 0 else model.route(src, dst_npu) for (src, dst_npu, _), r in zip(unique.tolist(), route_id.tolist())
        ]
        lengths = [len(path) for path in self.routes]
        self.hop_ptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        self.hop_link = np.fromiter((link for path in self.routes for link in path), dtype=np.int64, count=sum(lengths))
        self.hop_busy, self.hop_delivered = model.hop_times(self.hop_link, np.repeat(unique[:, 2], lengths))
        self.unique = unique
        self.num_links = model.num_links

    def permuted(self, order: np.ndarray) -> "_Messages":
        """The same messages for the graph :func:`~chakra_collectives.network.graph.permuted` by
        ``order`` (its task ``j`` is task ``order[j]`` here): only the SENDs' places change --
        what :meth:`__init__` would find on that graph, without routing every message again."""
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(len(order))
        moved = position[self.sends]
        by = np.argsort(moved, kind="stable")
        other = copy(self)
        other.__dict__.pop("hops_of", None)
        other.sends, other.kind_of_send = moved[by], self.kind_of_send[by]
        return other

    @cached_property
    def hops_of(self) -> list:
        """Per task: ``((link, busy, delivered), ...)`` per hop of its message (None for
        non-SENDs; Python numbers: the engine's loop is faster on them)."""
        triples = list(zip(self.hop_link.tolist(), self.hop_busy.tolist(), self.hop_delivered.tolist()))
        bounds = self.hop_ptr.tolist()
        hops = [tuple(triples[a:b]) for a, b in zip(bounds, bounds[1:])]
        hops_of: list = [None] * self.size
        for i, k in zip(self.sends.tolist(), self.kind_of_send.tolist()):
            hops_of[i] = hops[k]
        return hops_of

    def link_use(self, started: np.ndarray | None, intervals: Hops) -> LinkUse:
        """Busy time, bytes and messages per link, over the SENDs that started (``started``: per
        task, whether it did; None: all did)."""
        kinds = self.kind_of_send if started is None else self.kind_of_send[started[self.sends]]
        counts = np.bincount(kinds, minlength=len(self.routes))
        busy = np.zeros(self.num_links)
        nbytes = np.zeros(self.num_links, dtype=np.int64)
        messages = np.zeros(self.num_links, dtype=np.int64)
        per_hop = np.repeat(counts, np.diff(self.hop_ptr))
        np.add.at(busy, self.hop_link, per_hop * self.hop_busy)
        np.add.at(nbytes, self.hop_link, per_hop * np.repeat(self.unique[:, 2], np.diff(self.hop_ptr)))
        np.add.at(messages, self.hop_link, per_hop)
        return LinkUse(busy_ns=busy, bytes=nbytes, messages=messages, intervals=intervals)


__all__ = ["Hops", "LinkUse", "Timing", "run", "LOCAL", "RECV", "SEND"]
