"""A minimal discrete-event core: a heap of ``(time, priority, id, callback, argument)``.

The shape is SimPy's ``Environment`` (``simpy/core.py``) without processes or generators:
callers :meth:`~EventLoop.schedule` a callback at an absolute time, :meth:`~EventLoop.step`
runs the earliest one, :meth:`~EventLoop.run` runs them all (or until a time). Events at the
same time run by ``priority`` (lower first), then in the order they were scheduled -- the
order ASTRA-sim's event queue uses too. The semantics live in small handlers around this
core (:mod:`~chakra_collectives.network.engine`), not in it.

>>> loop = EventLoop()
>>> seen = []
>>> loop.schedule(5.0, seen.append, "b")
>>> loop.schedule(5.0, seen.append, "a", priority=URGENT)
>>> loop.schedule(1.0, seen.append, "first")
>>> loop.run()
>>> seen, loop.now
(['first', 'a', 'b'], 5.0)
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import count
from typing import Any, Callable

URGENT = 0
"""Priority of events that must run before ordinary events of the same time."""
NORMAL = 1
"""Default priority."""

Time = float
"""Nanoseconds (``int`` in ASTRA-sim-compatible mode, where every time is a whole ns)."""


class EmptySchedule(Exception):
    """:meth:`EventLoop.step` was called with no event left (SimPy's name)."""


class EventLoop:
    """Callbacks ordered by ``(time, priority, insertion order)``.

    Attributes
    ----------
    now:
        The time of the event being run (or of the last one run).
    """

    __slots__ = ("now", "_queue", "_ids")

    def __init__(self, start: Time = 0) -> None:
        self.now: Time = start
        self._queue: list[tuple[Time, int, int, Callable[[Any], Any], Any]] = []
        self._ids = count()

    def __len__(self) -> int:
        """Events still scheduled."""
        return len(self._queue)

    def schedule(self, time: Time, callback: Callable[[Any], Any], argument: Any = None, *, priority: int = NORMAL) -> None:
        """Run ``callback(argument)`` at absolute ``time`` (never earlier than :attr:`now`)."""
        if time < self.now:
            raise ValueError(f"cannot schedule at {time}, before now ({self.now})")
        heappush(self._queue, (time, priority, next(self._ids), callback, argument))

    def push(self, time: Time, callback: Callable[[Any], Any], argument: Any = None) -> None:
        """:meth:`schedule` at ``NORMAL`` priority without the check (for handlers that know ``time >= now``)."""
        heappush(self._queue, (time, NORMAL, next(self._ids), callback, argument))

    def step(self) -> None:
        """Run the earliest event; :class:`EmptySchedule` when there is none."""
        try:
            time, _, _, callback, argument = heappop(self._queue)
        except IndexError:
            raise EmptySchedule() from None
        self.now = time
        callback(argument)

    def run(self, until: Time | None = None) -> None:
        """Run events until none is left, or until the next one is later than ``until``.

        >>> loop = EventLoop()
        >>> loop.schedule(3, print, "late")
        >>> loop.run(until=2)
        >>> len(loop), loop.now
        (1, 2)
        """
        queue = self._queue
        if until is None:
            while queue:
                time, _, _, callback, argument = heappop(queue)
                self.now = time
                callback(argument)
            return
        while queue and queue[0][0] <= until:
            time, _, _, callback, argument = heappop(queue)
            self.now = time
            callback(argument)
        self.now = max(self.now, until)
