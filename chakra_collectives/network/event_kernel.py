"""The event engine's loop compiled (numba): the same events in the same order, over flat arrays.

:func:`~chakra_collectives.network.engine.run` gives a contended graph of
:data:`~chakra_collectives.network.engine.COMPILED_TASKS` tasks or more to :func:`run_events`
when numba is installed (``pip install '.[fast]'``), smaller ones to its Python loop: numba's
import and the loading of this compiled loop (cached on disk after its first compilation, about
10 CPU s once per time type) cost about 0.8 CPU s, what it saves on about 1-1.5M tasks.

It is the Python loop written over arrays, step for step: the ready tasks in a FIFO ring (the
order they became ready), the execution units' waiters in FIFO lists, the events in a binary
heap ordered by (time, the order they were scheduled) -- the order of the Python loop's one
bucket per instant -- and the same additions in the same order, so times, hops and the order of
same-instant offers to a link are the Python loop's bit for bit. Times are int64 when the
durations and hop costs are (ASTRA-sim mode: the Python loop's exact integers), else float64
(where Python mixes the two, the same values below 2^53 ns).

>>> kind = np.array([0, 1], dtype=np.int8)                          # a SEND and its RECV
>>> hop_ptr, hop_link = np.array([0, 1]), np.array([0])             # one message kind: one hop on link 0
>>> busy = delivered = np.array([100.0])
>>> start, end = np.full(2, np.nan), np.full(2, np.nan)
>>> recorded = run_events(kind, np.zeros(2), np.array([1, 0]), np.array([0, 0, 0]), np.zeros(0, np.int64),
...                       np.zeros(2, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32), 0,
...                       np.array([0, -1]), hop_ptr, hop_link, busy, delivered, np.zeros(1), start, end,
...                       np.zeros(1, np.int64), np.zeros(1), np.zeros(1), np.zeros(1, np.int64))
>>> recorded, start.tolist(), end.tolist()
(1, [0.0, 0.0], [100.0, 100.0])
"""

from __future__ import annotations

import numba
import numpy as np

_SEND, _LOCAL = 0, 2  # network.graph's SEND and LOCAL (RECV: any other kind, as in the Python loop)


@numba.njit(inline="always")
def _ready(task, queue, state):  # pragma: no cover - compiled
    """Append ``task`` to the FIFO ring ``queue`` (``state``: first position, length)."""
    at = state[0] + state[1]
    if at >= len(queue):
        at -= len(queue)
    queue[at] = task
    state[1] += 1


@numba.njit(inline="always")
def _complete(i, now, end, succ_ptr, succ_idx, pending, queue, state, num_units, release, wait_head, wait_tail, wait_next, granted, unit_busy):  # pragma: no cover - compiled
    """Task ``i`` ends at ``now``: its successors' counts fall (those at 0 become ready, in order),
    and the unit it releases passes to its longest waiter or becomes free."""
    end[i] = now
    for e in range(succ_ptr[i], succ_ptr[i + 1]):
        j = succ_idx[e]
        pending[j] -= 1
        if pending[j] == 0:
            _ready(j, queue, state)
    if num_units > 0:
        u = release[i]
        if u >= 0:
            waiter = wait_head[u]
            if waiter >= 0:
                wait_head[u] = wait_next[waiter]
                if wait_head[u] < 0:
                    wait_tail[u] = -1
                granted[waiter] = 1
                _ready(waiter, queue, state)
            else:
                unit_busy[u] = 0


@numba.njit(inline="always")
def _earlier(time_a, seq_a, time_b, seq_b):  # pragma: no cover - compiled
    return time_a < time_b or (time_a == time_b and seq_a < seq_b)


@numba.njit(inline="always")
def _push(heap_time, heap_seq, heap_task, heap_hop, size, time, seq, task, hop):  # pragma: no cover - compiled
    """Add an event to the heap of ``size`` events (room for it is there); the new size."""
    at = size
    while at > 0:
        parent = (at - 1) >> 1
        if not _earlier(time, seq, heap_time[parent], heap_seq[parent]):
            break
        heap_time[at], heap_seq[at], heap_task[at], heap_hop[at] = heap_time[parent], heap_seq[parent], heap_task[parent], heap_hop[parent]
        at = parent
    heap_time[at], heap_seq[at], heap_task[at], heap_hop[at] = time, seq, task, hop
    return size + 1


@numba.njit(inline="always")
def _pop(heap_time, heap_seq, heap_task, heap_hop, size):  # pragma: no cover - compiled
    """Remove the earliest event (the heap's first) of ``size``: the last one sifts down from the top."""
    size -= 1
    time, seq, task, hop = heap_time[size], heap_seq[size], heap_task[size], heap_hop[size]
    at = 0
    while True:
        child = 2 * at + 1
        if child >= size:
            break
        if child + 1 < size and _earlier(heap_time[child + 1], heap_seq[child + 1], heap_time[child], heap_seq[child]):
            child += 1
        if not _earlier(heap_time[child], heap_seq[child], time, seq):
            break
        heap_time[at], heap_seq[at], heap_task[at], heap_hop[at] = heap_time[child], heap_seq[child], heap_task[child], heap_hop[child]
        at = child
    heap_time[at], heap_seq[at], heap_task[at], heap_hop[at] = time, seq, task, hop
    return size


@numba.njit(inline="always")
def _take_link(at, task, now, link_free, hop_link, hop_busy, recording, record_link, record_begin, record_end, record_send, recorded):  # pragma: no cover - compiled
    """Hop ``at`` of ``task``'s message takes its link from ``now`` or when the link is free,
    whichever is later (recorded when asked); returns that instant and the records' count."""
    link = hop_link[at]
    begin = link_free[link]
    if begin < now:
        begin = now
    link_free[link] = begin + hop_busy[at]
    if recording:
        record_link[recorded], record_begin[recorded], record_end[recorded], record_send[recorded] = link, begin, begin + hop_busy[at], task
        recorded += 1
    return begin, recorded


@numba.njit
def _grown(heap_time, heap_seq, heap_task, heap_hop):  # pragma: no cover - compiled
    """The heap's arrays with twice the room."""
    room = 2 * len(heap_time)
    time, seq, task, hop = np.empty(room, heap_time.dtype), np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room, np.int64)
    time[: len(heap_time)] = heap_time
    seq[: len(heap_seq)] = heap_seq
    task[: len(heap_task)] = heap_task
    hop[: len(heap_hop)] = heap_hop
    return time, seq, task, hop


@numba.njit(nogil=True, cache=True)
def renumbered_successors(dep_ptr, dep_idx, order, new_id, succ_ptr, succ_idx, pending):  # pragma: no cover - compiled
    """The successors of the graph whose task ``k`` is task ``order[k]`` (``new_id``: the inverse),
    in CSR form (``succ_ptr`` given, ``succ_idx`` filled), each task's list in the order of its
    successors' new ids (then of their dependency lists) -- what
    :meth:`~.graph.TaskGraph.successor_csr` gives on :func:`~.graph.permuted` -- and ``pending``,
    each renumbered task's dependency count."""
    fill = succ_ptr[:-1].copy()
    for task in range(len(order)):
        old = order[task]
        pending[task] = dep_ptr[old + 1] - dep_ptr[old]
        for e in range(dep_ptr[old], dep_ptr[old + 1]):
            source = new_id[dep_idx[e]]
            succ_idx[fill[source]] = task
            fill[source] += 1


@numba.njit(nogil=True, cache=True)
def run_events(
    kind, duration, partner, succ_ptr, succ_idx, pending, unit, release, num_units,
    message_of, hop_ptr, hop_link, hop_busy, hop_delivered, link_free, start, end,
    record_link, record_begin, record_end, record_send,
):  # pragma: no cover - compiled
    """Run the events of a task graph; fills ``start`` and ``end`` (NaN for tasks that never
    did) and, when the ``record_*`` arrays have room (one entry per hop of every SEND), every
    hop in the order the Python loop records them; returns how many hops were recorded.

    ``succ_ptr``/``succ_idx``: the successors in CSR form (:meth:`~.graph.TaskGraph.successor_csr`);
    ``pending``: per task, how many dependencies it waits for (counted down here); ``unit`` and
    ``release``: per task (empty when ``num_units`` is 0); ``message_of``: a SEND's distinct
    message, whose hops are ``hop_ptr[m]:hop_ptr[m + 1]`` of ``hop_link``, ``hop_busy`` and
    ``hop_delivered`` (the time type of ``duration`` and ``link_free``).
    """
    size = len(kind)
    recording = len(record_link) > 0
    recorded = 0
    posted = np.zeros(size, np.uint8)
    arrived = np.zeros(size, np.uint8)
    granted = np.zeros(size if num_units > 0 else 0, np.uint8)
    wait_next = np.full(size if num_units > 0 else 0, -1, np.int64)
    wait_head = np.full(num_units, -1, np.int64)
    wait_tail = np.full(num_units, -1, np.int64)
    unit_busy = np.zeros(num_units, np.uint8)
    queue = np.empty(max(size, 1), succ_idx.dtype)
    state = np.zeros(2, np.int64)  # the ready ring's first position and length
    for i in range(size):
        if pending[i] == 0:
            _ready(i, queue, state)
    heap_time = np.empty(4096, link_free.dtype)
    heap_seq = np.empty(4096, np.int64)
    heap_task = np.empty(4096, np.int64)
    heap_hop = np.empty(4096, np.int64)
    events = 0
    scheduled = 0
    now = link_free[:0].sum()  # 0 of the time type
    while True:
        # settle: start every task that became ready at ``now`` (and what those complete at once)
        while state[1] > 0:
            i = queue[state[0]]
            state[0] += 1
            if state[0] == len(queue):
                state[0] = 0
            state[1] -= 1
            if num_units > 0:
                u = unit[i]
                if u >= 0 and granted[i] == 0:
                    if unit_busy[u] != 0:
                        wait_next[i] = -1
                        if wait_tail[u] < 0:
                            wait_head[u] = i
                        else:
                            wait_next[wait_tail[u]] = i
                        wait_tail[u] = i
                        continue
                    unit_busy[u] = 1
            start[i] = now
            k = kind[i]
            if k == _SEND:
                m = message_of[i]
                h = hop_ptr[m]
                if hop_ptr[m + 1] > h:  # offer the message to its first link
                    begin, recorded = _take_link(h, i, now, link_free, hop_link, hop_busy, recording, record_link, record_begin, record_end, record_send, recorded)
                    if events == len(heap_time):
                        heap_time, heap_seq, heap_task, heap_hop = _grown(heap_time, heap_seq, heap_task, heap_hop)
                    events = _push(heap_time, heap_seq, heap_task, heap_hop, events, begin + hop_delivered[h], scheduled, i, 0)
                    scheduled += 1
                else:  # delivered at once
                    _complete(i, now, end, succ_ptr, succ_idx, pending, queue, state, num_units, release, wait_head, wait_tail, wait_next, granted, unit_busy)
                    p = partner[i]
                    if posted[p] != 0:
                        _complete(p, now, end, succ_ptr, succ_idx, pending, queue, state, num_units, release, wait_head, wait_tail, wait_next, granted, unit_busy)
                    else:
                        arrived[p] = 1
            elif k == _LOCAL:
                d = duration[i]
                if d != 0:
                    if events == len(heap_time):
                        heap_time, heap_seq, heap_task, heap_hop = _grown(heap_time, heap_seq, heap_task, heap_hop)
                    events = _push(heap_time, heap_seq, heap_task, heap_hop, events, now + d, scheduled, i, -1)
                    scheduled += 1
                else:
                    _complete(i, now, end, succ_ptr, succ_idx, pending, queue, state, num_units, release, wait_head, wait_tail, wait_next, granted, unit_busy)
            elif arrived[i] != 0:  # RECV whose message is already there
                _complete(i, now, end, succ_ptr, succ_idx, pending, queue, state, num_units, release, wait_head, wait_tail, wait_next, granted, unit_busy)
            else:
                posted[i] = 1
        # the next event(s): hops that are not a message's last settle nothing
        drained = False
        while True:
            if events == 0:
                drained = True
                break
            now = heap_time[0]
            i = heap_task[0]
            h = heap_hop[0]
            events = _pop(heap_time, heap_seq, heap_task, heap_hop, events)
            if h < 0:  # a timed LOCAL task finished
                _complete(i, now, end, succ_ptr, succ_idx, pending, queue, state, num_units, release, wait_head, wait_tail, wait_next, granted, unit_busy)
                break
            m = message_of[i]
            h += 1
            if h < hop_ptr[m + 1] - hop_ptr[m]:  # store-and-forward: offer the message to the next link
                at = hop_ptr[m] + h
                begin, recorded = _take_link(at, i, now, link_free, hop_link, hop_busy, recording, record_link, record_begin, record_end, record_send, recorded)
                if events == len(heap_time):
                    heap_time, heap_seq, heap_task, heap_hop = _grown(heap_time, heap_seq, heap_task, heap_hop)
                events = _push(heap_time, heap_seq, heap_task, heap_hop, events, begin + hop_delivered[at], scheduled, i, h)
                scheduled += 1
                continue
            _complete(i, now, end, succ_ptr, succ_idx, pending, queue, state, num_units, release, wait_head, wait_tail, wait_next, granted, unit_busy)  # a SEND completes when its message has arrived
            p = partner[i]
            if posted[p] != 0:
                _complete(p, now, end, succ_ptr, succ_idx, pending, queue, state, num_units, release, wait_head, wait_tail, wait_next, granted, unit_busy)
            else:
                arrived[p] = 1
            break
        if drained and state[1] == 0:
            break
    return recorded


__all__ = ["renumbered_successors", "run_events"]
