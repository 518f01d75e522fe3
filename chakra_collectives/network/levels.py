"""The engine's fast path: a task graph whose messages never wait for a link, timed level by level.

When no message ever finds its link busy, every task's times follow from its dependencies
alone: a task starts when the last of its dependencies ends; a SEND's message crosses its
route hop after hop (each hop ``delivered`` after it begins: store-and-forward), and the SEND
ends on arrival; a RECV ends when it has started and its message has arrived; a LOCAL task
ends ``duration`` after it starts. :func:`contention_free_times` computes exactly that, for
all tasks of one topological level at once (numpy), and then checks the premise: on every
link, each hop begins no earlier than the previous one stops occupying it. If so the result is
what the event engine computes -- same floating-point operations in the same order -- and
:func:`~chakra_collectives.network.engine.run` uses it; otherwise (contention, or execution
units) the event engine runs.

Collective algorithms made for their network (TACOS's schedules, rings on rings) are
contention-free by construction: 5.2M tasks take seconds instead of a minute.

>>> from chakra_collectives.network.graph import TaskGraph, SEND, RECV, LOCAL
>>> g = TaskGraph.build(kind=[LOCAL, SEND, RECV], npu=[0, 0, 1], partner=[-1, 2, 1], nbytes=[0, 8, 8],
...                     duration=[5.0, 0.0, 0.0], dep_ptr=[0, 0, 1, 1], dep_idx=[0])
>>> hops = HopCosts(kind_of_send=np.array([0]), hop_ptr=np.array([0, 1]), hop_link=np.array([0]),
...                 hop_busy=np.array([10.0]), hop_delivered=np.array([10.0]))   # one hop of 10 ns
>>> times = contention_free_times(g, hops)
>>> times.start.tolist(), times.end.tolist()
([0.0, 5.0, 0.0], [5.0, 15.0, 15.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives import progress
from chakra_collectives.network.graph import LOCAL, RECV, SEND, TaskGraph, task_id_type


MAX_HOPS_PER_TASK = 4
"""The fast path lays every hop of every message out flat for its final check (about 30 bytes
each); beyond this many hops per task on average it leaves the graph to the event engine."""


@dataclass
class HopCosts:
    """The hops of every SEND (in task order): SEND ``j`` sends distinct message
    ``kind_of_send[j]``, whose hops are ``hop_ptr[k]:hop_ptr[k+1]`` of the flat arrays."""

    kind_of_send: np.ndarray
    hop_ptr: np.ndarray
    hop_link: np.ndarray
    hop_busy: np.ndarray
    hop_delivered: np.ndarray


@dataclass
class LevelTimes:
    start: np.ndarray
    end: np.ndarray
    hop_link: np.ndarray
    """Every hop of every SEND (with ``keep_hops``; else empty): its link, when it began, when the
    link was free again, the SEND."""
    hop_begin: np.ndarray
    hop_free: np.ndarray
    hop_send: np.ndarray


EARLY_CHECKS = (1 / 1024, 1 / 16, 1 / 4)
"""Shares of the tasks after which the hops timed so far are checked for overlap: a graph whose
messages contend (a ring whose neighbours are hops apart, two collectives at once) is left to
the event engine early instead of after timing every task (for 1/1024 + 1/16 + 1/4 of a final
check). The first comes as soon as the successors are laid out: a data-parallel step's ring
all-reduces on genkautz:1024,degree=4 (10.5M tasks) contend from their first calls, seen there
instead of at 1/16 of the levels (the attempt 6.0 -> 4.7 s CPU at load 10)."""
EDGE_BLOCK = 2**20
"""Edges whose successor lists are laid out at once, and hops checked at once: the temporaries
(sort indices of 8 bytes each) are kept to a block, not one per edge of the whole graph."""


def contention_free_times(graph: TaskGraph, costs: HopCosts, *, keep_hops: bool = True) -> LevelTimes | None:
    """Every task's ``(start, end)`` assuming no message waits for a link; ``None`` when that
    assumption fails (some hop would begin before its link is free), when tasks hold units, or
    when some task never runs (a deadlock: the event engine reports it). ``keep_hops``: return
    every hop too (for link traces).

    Memory: besides the graph, ``8 + 4 + 4 + 4 + 8 + 8 + 8`` bytes per task (successor index,
    successor count, pending count, a stamp, the delay a task adds to its start, two times; 4 more,
    a SEND's message kind, where some route has several hops) and 5 per edge (4 more while the successor lists are laid out: each edge's task); hops are looked up through their message's kind
    while timing, checked one block of links at a time, and laid out flat only with ``keep_hops``.
    """
    if graph.has_units:
        return None
    size = len(graph)
    task_id = task_id_type(size)  # task ids and counts in 4 bytes where they fit (43M tasks at 16K NPUs)
    kind = graph.kind
    sends = np.flatnonzero(kind == SEND).astype(task_id)
    route_length = np.diff(costs.hop_ptr)
    total_hops = int(route_length[costs.kind_of_send].sum())
    if total_hops > MAX_HOPS_PER_TASK * size + 2**20:
        return None  # long routes (all-pairs over a ring): the event engine shares them, this would not
    pending = np.diff(graph.dep_ptr).astype(task_id)
    pending[kind == RECV] += 1  # a RECV also waits for its SEND (its message)
    frontier = np.flatnonzero(pending == 0).astype(task_id)
    if _first_sends_collide(frontier[kind[frontier] == SEND], sends, costs):
        return None  # known before the successors are laid out (a forest's trees share links at once)
    succ_ptr, succ, is_message = _successors(graph, task_id)
    time_type = np.result_type(graph.duration.dtype, costs.hop_delivered.dtype)
    end = np.full(size, -np.inf)  # -inf until timed; a RECV's message arrival, until the RECV itself ends
    ready_at = np.zeros(size, dtype=time_type)  # the latest end among the dependencies: a task's start once it runs
    partner = graph.partner
    stamp = np.zeros(size, dtype=task_id)
    # what a task adds to its start, in one lookup: a LOCAL task its duration, a SEND its first
    # hop's delivery (then, on longer routes, the next hops' in order: _later_hops)
    delay, message_of = task_delays(graph, costs, sends, route_length, time_type,
                                    np.int32 if len(route_length) < 2**31 else np.int64)
    longer = len(message_of) > 0  # some route has several hops (an empty graph times nothing)
    fan_out = np.diff(succ_ptr).astype(np.intp)  # np.repeat's own count type: no conversion per level
    one = pending.dtype.type(1)
    done = 0
    checkpoints = [size * share for share in EARLY_CHECKS]
    with progress.task("time level by level", total=size, unit="tasks") as timed:
        while len(frontier):
            done += len(frontier)
            timed.update(done)
            if checkpoints and done >= checkpoints[0]:
                del checkpoints[0]
                if not _links_never_overlap_so_far(end, ready_at, sends, costs):
                    return None
            finish = ready_at[frontier] + delay[frontier]
            if longer:
                is_send = kind[frontier] == SEND
                if is_send.any():
                    finish[is_send] = _later_hops(message_of[frontier[is_send]], finish[is_send], costs)
            # a RECV (no delay) is posted at its start, done when its message has arrived too; the others' end is -inf
            np.maximum(finish, end[frontier], out=finish, casting="unsafe")  # in the times' own type: no float temporary cast back
            end[frontier] = finish
            fan = fan_out[frontier]
            total = int(fan.sum())
            if total == 0:
                break
            edge = np.arange(total)
            at = np.repeat(succ_ptr[frontier] - (np.cumsum(fan) - fan), fan) + edge
            targets = succ[at]
            values = np.repeat(finish, fan)
            message = is_message[at]
            if message.any():  # the message edge: an arrival, not a dependency
                end[targets[message]] = values[message]
                values = np.where(message, time_type.type(0), values)
            stamp[targets] = edge
            if (stamp[targets] == edge).all():  # no task reached twice in this level: plain indexing does
                ready_at[targets] = np.maximum(ready_at[targets], values)
                pending[targets] -= 1
                frontier = targets[pending[targets] == 0]
                continue
            np.maximum.at(ready_at, targets, values)
            np.subtract.at(pending, targets, one)  # 1 of pending's own type: numpy's fast path (a Python 1 casts, ~15x slower)
            ready = targets[pending[targets] == 0]
            stamp[ready] = np.arange(len(ready))  # a task reached by several edges is kept once
            frontier = ready[stamp[ready] == np.arange(len(ready))]
    if done < size:
        return None
    del succ, succ_ptr, pending, stamp
    start = ready_at.astype(np.float64, copy=False)
    del ready_at
    # the premise: on every link, hops in time order never overlap
    send_start = start[sends]
    if not _links_never_overlap(send_start, costs):
        return None
    if keep_hops:
        hop_link, hop_begin, hop_free, hop_send = _hops(send_start, sends, costs)
    else:
        hop_link, hop_send = np.zeros(0, np.int64), np.zeros(0, task_id)
        hop_begin, hop_free = np.zeros(0), np.zeros(0)
    return LevelTimes(start=start, end=end, hop_link=hop_link, hop_begin=hop_begin, hop_free=hop_free, hop_send=hop_send)


def _first_sends_collide(first: np.ndarray, sends: np.ndarray, costs: HopCosts) -> bool:
    """Whether two hops of the SENDs ``first`` (all starting at time 0, so their hops' times are
    final if the premise holds) overlap on a link: a message then waits, the premise fails, and
    the rest need not be timed. A forest's trees share links from the first instant (mesh2d:8x8
    ForestColl, 1,160 first SENDs on 224 links); a ring whose neighbours are hops apart meets
    itself on the second hop (genkautz:1024,degree=4: 1,024 first SENDs, 5 hops apart at most).

    >>> hops = HopCosts(kind_of_send=np.array([0, 1]), hop_ptr=np.array([0, 1, 3]), hop_link=np.array([3, 4, 3]),
    ...                 hop_busy=np.array([10.0, 10.0, 10.0]), hop_delivered=np.array([10.0, 10.0, 10.0]))
    >>> _first_sends_collide(np.array([0, 1]), np.array([0, 1]), hops)   # link 3: 0-10 ns, then 10-20 ns
    False
    >>> hops.hop_delivered[1] = 5.0                                       # now 5-15 ns: overlaps
    >>> _first_sends_collide(np.array([0, 1]), np.array([0, 1]), hops), _first_sends_collide(np.array([1]), np.array([0, 1]), hops)
    (True, False)
    """
    message = costs.kind_of_send[np.searchsorted(sends, first)]
    hop = costs.hop_ptr[message[costs.hop_ptr[message + 1] > costs.hop_ptr[message]]]
    links = np.sort(costs.hop_link[hop[costs.hop_busy[hop] > 0]])
    if np.any(links[1:] == links[:-1]):
        return True  # two first hops at once (a forest): found by one sort
    first_costs = HopCosts(message, costs.hop_ptr, costs.hop_link, costs.hop_busy, costs.hop_delivered)
    return not _links_never_overlap(np.zeros(len(message)), first_costs)


def _successors(graph: TaskGraph, task_id: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(succ_ptr, succ, message)``: the tasks that wait for each task -- its dependants, then (a
    SEND) its RECV -- laid out a block of :data:`EDGE_BLOCK` edges' sources at a time; per edge,
    whether it is the message's (its end is the arrival, not a dependency: a RECV that also
    depends on its own SEND waits for the SEND's end, as in the event engine)."""
    size = len(graph)
    recvs = np.flatnonzero(graph.kind == RECV).astype(task_id)
    senders = graph.partner[recvs]
    fan_out = np.bincount(graph.dep_idx, minlength=size).astype(task_id)
    fan_out += np.bincount(senders, minlength=size).astype(task_id)
    edges = int(fan_out.sum(dtype=np.int64))
    succ_ptr = np.zeros(size + 1, dtype=task_id if edges < 2**31 else np.int64)
    np.cumsum(fan_out, out=succ_ptr[1:])
    del fan_out
    succ = np.empty(int(succ_ptr[-1]), dtype=task_id)
    message = np.empty(len(succ), dtype=bool)
    owner = np.repeat(np.arange(size, dtype=task_id), np.diff(graph.dep_ptr))  # each edge's task: 4 bytes an edge, no search per block
    first = 0
    while first < size:  # sources first .. last - 1: about EDGE_BLOCK edges
        last = max(int(np.searchsorted(succ_ptr, succ_ptr[first] + EDGE_BLOCK, side="right")) - 1, first + 1)
        last = min(last, size)
        at = np.flatnonzero((graph.dep_idx >= first) & (graph.dep_idx < last))
        owners = owner[at]
        mine = (senders >= first) & (senders < last)
        source = np.concatenate([graph.dep_idx[at], senders[mine]])
        target = np.concatenate([owners, recvs[mine]])
        by_source = np.argsort(source, kind="stable")
        succ[succ_ptr[first] : succ_ptr[last]] = target[by_source]
        message[succ_ptr[first] : succ_ptr[last]] = by_source >= len(at)
        first = last
    return succ_ptr, succ, message


def _hops(send_start: np.ndarray, sends: np.ndarray, costs: HopCosts) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every hop of every SEND, flat: its link, when it begins (the SEND's start, then each
    previous hop's arrival, added in order), when its link is free again, the SEND."""
    lengths = np.diff(costs.hop_ptr)[costs.kind_of_send]
    first_hop = np.cumsum(lengths) - lengths
    hop_of = np.repeat(costs.hop_ptr[costs.kind_of_send] - first_hop, lengths) + np.arange(int(lengths.sum()))
    hop_link = costs.hop_link[hop_of]
    begins = _hop_begins(send_start, lengths, first_hop, costs.hop_delivered[hop_of])
    free = begins + costs.hop_busy[hop_of]
    return hop_link, begins, free, np.repeat(sends, lengths)


def _links_never_overlap(send_start: np.ndarray, costs: HopCosts) -> bool:
    """Whether on every link each hop begins no earlier than the previous one (in time order)
    stops occupying it. Checked one block of links (about :data:`EDGE_BLOCK` hops) at a time,
    each block's hops computed afresh from their SENDs' starts, as :func:`_hops` computes them."""
    kinds = costs.kind_of_send
    if len(kinds) == 0:
        return True
    route_length = np.diff(costs.hop_ptr)
    per_kind = np.bincount(kinds, minlength=len(route_length))
    per_link = np.bincount(costs.hop_link, weights=np.repeat(per_kind, route_length)).astype(np.int64)
    bounds = np.cumsum(per_link)
    longest = int(route_length.max(initial=0))
    first = 0
    while first < len(per_link):
        base = bounds[first - 1] if first else 0
        last = max(int(np.searchsorted(bounds, base + EDGE_BLOCK, side="right")), first + 1)
        links, begins, frees = [], [], []
        for lo in range(0, len(kinds), EDGE_BLOCK):  # the SENDs a block at a time
            kind = kinds[lo : lo + EDGE_BLOCK]
            lengths, first_hop = route_length[kind], costs.hop_ptr[kind]
            for h in range(longest):
                on = np.flatnonzero(lengths > h)
                link = costs.hop_link[first_hop[on] + h]
                mine = (link >= first) & (link < last)
                on, link = on[mine], link[mine]
                begin = send_start[lo + on]
                for previous in range(h):  # each previous hop's arrival, added in order
                    begin = begin + costs.hop_delivered[first_hop[on] + previous]
                links.append(link)
                begins.append(begin)
                frees.append(begin + costs.hop_busy[first_hop[on] + h])
        link, begin, free = np.concatenate(links), np.concatenate(begins), np.concatenate(frees)
        order = np.lexsort((begin, link))
        link, begin, free = link[order], begin[order], free[order]
        same = link[1:] == link[:-1]
        if np.any(same & (begin[1:] < free[:-1])):
            return False
        # two hops beginning at one instant, one of them holding the link: which waits is the event order's (a
        # message of no bytes beside one of some), not a time this check can give
        if np.any(same & (begin[1:] == begin[:-1]) & ((free[1:] > begin[1:]) | (free[:-1] > begin[:-1]))):
            return False
        first = last
    return True


def _links_never_overlap_so_far(end: np.ndarray, ready_at: np.ndarray, sends: np.ndarray, costs: HopCosts) -> bool:
    """:func:`_links_never_overlap` over the SENDs timed so far (their times are final): two
    of their hops that overlap on a link overlap among all hops too."""
    timed = np.flatnonzero(end[sends] > -np.inf)
    so_far = HopCosts(costs.kind_of_send[timed], costs.hop_ptr, costs.hop_link, costs.hop_busy, costs.hop_delivered)
    return _links_never_overlap(ready_at[sends[timed]].astype(np.float64, copy=False), so_far)


def _hop_begins(send_start: np.ndarray, lengths: np.ndarray, first_hop: np.ndarray, delivered: np.ndarray) -> np.ndarray:
    """When each hop begins: the SEND's start, then each previous hop's arrival (added in order)."""
    total = len(delivered)
    begins = np.empty(total, dtype=np.float64)
    if total == 0:
        return begins
    position = np.arange(total) - np.repeat(first_hop, lengths)
    routed = lengths > 0
    begins[first_hop[routed]] = send_start[routed]
    for h in range(1, int(lengths.max())):  # routes are short: one pass per hop index
        at = np.flatnonzero(position == h)
        begins[at] = begins[at - 1] + delivered[at - 1]
    return begins


def _later_hops(message: np.ndarray, arrival: np.ndarray, costs: HopCosts) -> np.ndarray:
    """Arrival of messages of kinds ``message`` whose first hop arrives at ``arrival``: the
    second, third... hop's delivery added in hop order (``begin + d1 + d2 + ...``)."""
    arrival = arrival.copy()
    first = costs.hop_ptr[message]
    hops = costs.hop_ptr[message + 1] - first
    for h in range(1, int(hops.max(initial=0))):
        more = hops > h
        arrival[more] = arrival[more] + costs.hop_delivered[first[more] + h]
    return arrival


__all__ = ["HopCosts", "LevelTimes", "contention_free_times"]


def task_delays(graph: TaskGraph, costs: HopCosts, sends: np.ndarray, route_length: np.ndarray, time_type,
                message_type) -> tuple[np.ndarray, np.ndarray]:
    """What each task adds to its start, and each SEND's message kind where routes are longer.

    A LOCAL task adds its duration, a SEND its first hop's delivery; ``message_of`` (empty when
    every route has at most one hop) names a SEND's message kind, for its later hops.
    """
    size = len(graph)
    kind = graph.kind
    delay = np.zeros(size, dtype=time_type)
    local = kind == LOCAL
    delay[local] = graph.duration[local]
    del local
    routed = route_length[costs.kind_of_send] > 0
    delay[sends[routed]] = costs.hop_delivered[costs.hop_ptr[costs.kind_of_send[routed]]]
    del routed
    longer = int(route_length.max(initial=0)) > 1
    message_of = np.full(size if longer else 0, -1, dtype=message_type)
    if longer:
        message_of[sends] = costs.kind_of_send
    return delay, message_of
