"""A minimal discrete-event core: a heap of ``(time, id, callback, argument)``.

The shape is SimPy's ``Environment`` (``simpy/core.py``) without processes or generators:
callers :meth:`~EventLoop.push` a callback at an absolute time and :meth:`~EventLoop.run` runs
them all in time order. Events at the same time run in the order they were scheduled -- the
order ASTRA-sim's event queue uses too. The semantics live in small handlers around this core
(:mod:`~chakra_collectives.network.engine`), not in it.

>>> loop = EventLoop()
>>> seen = []
>>> loop.push(5.0, seen.append, "b")
>>> loop.push(1.0, seen.append, "first")
>>> loop.push(5.0, lambda x: seen.append(x), "c")
>>> loop.run()
>>> seen, loop.now
(['first', 'b', 'c'], 5.0)
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import count
from typing import Any, Callable

Time = float
"""Nanoseconds (``int`` in ASTRA-sim-compatible mode, where every time is a whole ns)."""


class EventLoop:
    """Callbacks ordered by ``(time, insertion order)``.

    Attributes
    ----------
    now:
        The time of the event being run (or of the last one run).
    """

    __slots__ = ("now", "_queue", "_ids")

    def __init__(self, start: Time = 0) -> None:
        self.now: Time = start
        self._queue: list[tuple[Time, int, Callable[[Any], Any], Any]] = []
        self._ids = count()

    def push(self, time: Time, callback: Callable[[Any], Any], argument: Any = None) -> None:
        """Run ``callback(argument)`` at absolute ``time`` (the caller knows ``time >= now``)."""
        heappush(self._queue, (time, next(self._ids), callback, argument))

    def run(self) -> None:
        """Run events in time order until none is left (callbacks may push more)."""
        queue = self._queue
        while queue:
            time, _, callback, argument = heappop(queue)
            self.now = time
            callback(argument)
