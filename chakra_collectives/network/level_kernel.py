""":func:`~chakra_collectives.network.levels.contention_free_times` compiled (numba): the same
times, each task timed once its dependencies are, in one depth-first pass over the graph.

Under the level timing's premise (no message waits for a link) a task's times follow from its
dependencies alone: it starts at the latest end among them (0 without any), a LOCAL task ends
``duration`` later, a SEND when its message has crossed its route (the first hop's delivery
added to its start, then each later hop's, in order), a RECV when it has started and its
message has arrived (its SEND's end). The numpy loop computes that for a whole topological
level at a time, with successor lists laid out first; :func:`dependency_times` walks the
dependencies instead (an explicit stack, each task's position in its dependency list kept, so
every edge is looked at once): no successor lists, no per-level temporaries. The additions are
the same in the same order, and a maximum does not depend on the order its operands come in,
so the times are the numpy loop's bit for bit (``tests/test_network_level_kernel.py``).

:func:`compiled_contention_free_times` is the whole of ``contention_free_times`` around it: the
same cases left to the event engine (tasks holding units, long routes, a task that never runs,
hops that overlap on a link), checked by the same code.

>>> from chakra_collectives.network.graph import TaskGraph, SEND, RECV, LOCAL
>>> from chakra_collectives.network.levels import HopCosts
>>> g = TaskGraph.build(kind=[LOCAL, SEND, RECV], npu=[0, 0, 1], partner=[-1, 2, 1], nbytes=[0, 8, 8],
...                     duration=[5.0, 0.0, 0.0], dep_ptr=[0, 0, 1, 1], dep_idx=[0])
>>> hops = HopCosts(kind_of_send=np.array([0]), hop_ptr=np.array([0, 1]), hop_link=np.array([0]),
...                 hop_busy=np.array([10.0]), hop_delivered=np.array([10.0]))   # one hop of 10 ns
>>> times = compiled_contention_free_times(g, hops)
>>> times.start.tolist(), times.end.tolist()
([0.0, 5.0, 0.0], [5.0, 15.0, 15.0])
"""

from __future__ import annotations

import numba
import numpy as np

from chakra_collectives.network.graph import RECV, SEND, TaskGraph
from chakra_collectives.network.levels import MAX_HOPS_PER_TASK, HopCosts, LevelTimes, _links_never_overlap, task_delays

_WAITING, _ON_STACK, _TIMED = 0, 1, 2


@numba.njit(nogil=True, cache=True)
def dependency_times(dep_ptr, dep_idx, kind, partner, delay, message_of, hop_ptr, hop_delivered, start, end, stack, cursor, state):  # pragma: no cover - compiled
    """Time every task (``start``, ``end``: zeros of the times' type on entry) from its
    dependencies and, a RECV, its SEND's end; a SEND of message kind ``message_of[task]`` adds
    ``delay`` (its first hop's delivery) and then its later hops' ``hop_delivered`` in order
    (``message_of`` empty: every route has one hop at most). Returns how many tasks were timed:
    fewer than all when some task never runs (a cycle of dependencies and messages, or a RECV
    without a SEND). ``stack``, ``cursor``, ``state``: room for the walk, one entry per task."""
    size = len(kind)
    longer = len(message_of) > 0
    timed = 0
    for root in range(size):
        if state[root] == _TIMED:
            continue
        stack[0] = root
        depth = 1
        state[root] = _ON_STACK
        cursor[root] = dep_ptr[root]
        while depth > 0:
            task = stack[depth - 1]
            own = dep_ptr[task + 1]
            last = own + 1 if kind[task] == RECV else own  # a RECV's last "dependency": its message's SEND
            at = cursor[task]
            descended = False
            while at < last:
                waits_for = dep_idx[at] if at < own else partner[task]
                if waits_for < 0:
                    return timed  # a RECV no SEND matches never runs
                seen = state[waits_for]
                if seen == _TIMED:
                    at += 1
                    continue
                if seen == _ON_STACK:
                    return timed  # a cycle: these tasks never run
                cursor[task] = at
                stack[depth] = waits_for
                depth += 1
                state[waits_for] = _ON_STACK
                cursor[waits_for] = dep_ptr[waits_for]
                descended = True
                break
            if descended:
                continue
            ready = start[task]
            for e in range(dep_ptr[task], own):
                ready = max(ready, end[dep_idx[e]])
            start[task] = ready
            if kind[task] == RECV:
                end[task] = max(ready, end[partner[task]])
            else:
                finish = ready + delay[task]
                if longer and kind[task] == SEND:
                    message = message_of[task]
                    for hop in range(hop_ptr[message] + 1, hop_ptr[message + 1]):
                        finish = finish + hop_delivered[hop]
                end[task] = finish
            state[task] = _TIMED
            timed += 1
            depth -= 1
    return timed


def compiled_contention_free_times(graph: TaskGraph, costs: HopCosts) -> LevelTimes | None:
    """:func:`~chakra_collectives.network.levels.contention_free_times` (``keep_hops=False``)
    timed by :func:`dependency_times`: the same times, ``None`` in the same cases.

    Memory: besides the graph, ``8 + 8 + 8`` bytes per task for the times and their delays,
    ``4 + 8 + 1`` for the walk (its stack, each task's place in its dependencies, its state), 4
    more (a SEND's message kind) where some route has several hops."""
    if graph.has_units:
        return None
    size = len(graph)
    kind = graph.kind
    sends = np.flatnonzero(kind == SEND)
    route_length = np.diff(costs.hop_ptr)
    if int(route_length[costs.kind_of_send].sum()) > MAX_HOPS_PER_TASK * size + 2**20:
        return None  # as contention_free_times: long routes are the event engine's
    time_type = np.result_type(graph.duration.dtype, costs.hop_delivered.dtype)
    delay, message_of = task_delays(graph, costs, sends, route_length, time_type, np.int64)
    start = np.zeros(size, dtype=time_type)
    end = np.zeros(size, dtype=time_type)
    stack = np.empty(size, dtype=graph.partner.dtype)
    cursor = np.empty(size, dtype=np.int64)
    state = np.zeros(size, dtype=np.uint8)
    timed = dependency_times(graph.dep_ptr, graph.dep_idx, kind, graph.partner, delay, message_of, costs.hop_ptr,
                             costs.hop_delivered, start, end, stack, cursor, state)
    del stack, cursor, state, delay, message_of
    if timed < size:
        return None
    start = start.astype(np.float64, copy=False)
    if not _links_never_overlap(start[sends], costs):
        return None
    empty = np.zeros(0)
    return LevelTimes(start=start, end=end.astype(np.float64, copy=False), hop_link=np.zeros(0, np.int64), hop_begin=empty,
                      hop_free=empty, hop_send=np.zeros(0, graph.partner.dtype))


__all__ = ["compiled_contention_free_times", "dependency_times"]
