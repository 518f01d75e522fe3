"""The event core ASTRA-sim's system layer runs on, with its ordering rules.

Three mechanisms decide in which order things happen at one instant, and all three matter
when messages meet on a link (the first to arrive is served first):

* the **network event queue** (``EventQueue`` of the analytical backends): events run by time,
  and events of one time in the order they were scheduled -- also those scheduled while that
  time is being processed (here: :class:`~chakra_collectives.network.events.EventLoop`);
* each rank's **timer buckets** (``Sys::try_register_event``): a rank keeps one list of
  callbacks per time; only the first callback of a time schedules a network event, and when
  it fires the whole list runs, in registration order. So two timers of one rank at one time
  run together, before network events scheduled between their registrations;
* **send/receive matching** (``CommonNetworkApi``): the k-th send and the k-th receive of one
  ``(tag, src, dst, bytes)`` pair match. When a message arrives, the sender's and (if posted)
  the receiver's callbacks run at once; a receive posted after its message arrived runs its
  callback through a network event at the current time.

ASTRA-sim's event queue asserts that the first event it processes lies after time 0: a
collective that would put an event at time 0 (``endpoint-delay: 0`` with a collective issued at
the start) aborts the real simulator; :class:`Kernel` raises :class:`AstraSimAbort` then.

>>> k = Kernel(num_ranks=1)
>>> seen = []
>>> k.after(0, 5, seen.append, "timer 1")
>>> k.loop.push(5, seen.append, "network event")
>>> k.after(0, 5, seen.append, "timer 2")      # joins timer 1's bucket: runs before the network event
>>> k.run()
>>> seen
['timer 1', 'timer 2', 'network event']
"""

from __future__ import annotations

from typing import Any, Callable

from chakra_collectives.errors import ChakraCollError
from chakra_collectives.network.events import EventLoop


class AstraSimAbort(ChakraCollError):
    """The configuration makes the real ASTRA-sim abort; the message says why."""


class _Match:
    """One message's matching entry: who waits for it, and whether it has arrived."""

    __slots__ = ("on_sent", "on_received", "has_send", "has_recv", "arrived")

    def __init__(self) -> None:
        self.on_sent: Callable[[], Any] | None = None
        self.on_received: Callable[[], Any] | None = None
        self.has_send = False
        self.has_recv = False
        self.arrived = False


class Kernel:
    """Network event queue, per-rank timer buckets and send/receive matching.

    A backend (:mod:`~chakra_collectives.astra_system.backends`) moves messages; it calls
    :meth:`arrived` with the message's key when the last byte reached the destination.
    """

    def __init__(self, num_ranks: int, backend: Any = None) -> None:
        self.loop = EventLoop()
        self.timers: list[dict[int, list]] = [{} for _ in range(num_ranks)]
        self.matches: dict[tuple, _Match] = {}
        self.send_seq: dict[tuple, int] = {}
        self.recv_seq: dict[tuple, int] = {}
        self.backend = backend
        self.started = False
        self.events = 0
        """Network events scheduled so far (the simulation's size)."""

    @property
    def now(self) -> int:
        return self.loop.now

    # ----------------------------------------------------------------- timers
    def after(self, rank: int, delay: int, callback: Callable, *args: Any) -> None:
        """Run ``callback(*args)`` on ``rank`` after ``delay`` ns (``Sys::try_register_event``)."""
        when = self.loop.now + delay
        buckets = self.timers[rank]
        bucket = buckets.get(when)
        if bucket is None:
            bucket = buckets[when] = []
            self.schedule(when, self._fire, rank)
        bucket.append((callback, args))

    def _fire(self, rank: int) -> None:
        buckets = self.timers[rank]
        now = self.loop.now
        bucket = buckets[now]
        i = 0
        while i < len(bucket):  # callbacks registered for now while running join this list
            callback, args = bucket[i]
            callback(*args)
            i += 1
        del buckets[now]

    def schedule(self, when: int, callback: Callable, argument: Any = None) -> None:
        """A network event at absolute time ``when``."""
        if not self.started and when <= 0:
            raise AstraSimAbort(
                "ASTRA-sim aborts here: an event falls at time 0 (its event queue asserts the first event is later); "
                "typically endpoint-delay 0 with a native collective issued at the start -- use endpoint-delay >= 1"
            )
        self.events += 1
        self.loop.push(when, callback, argument)

    def run(self) -> None:
        self.started = True
        self.loop.run()

    # ----------------------------------------------------------------- messages
    def send(self, src: int, dst: int, nbytes: int, tag: int, on_sent: Callable[[], Any] | None) -> None:
        """``sim_send``: register the sender's callback and hand the message to the backend."""
        pair = (tag, src, dst, nbytes)
        seq = self.send_seq.get(pair, 0)
        self.send_seq[pair] = seq + 1
        key = pair + (seq,)
        match = self.matches.get(key)
        if match is None:
            match = self.matches[key] = _Match()
        match.on_sent = on_sent
        match.has_send = True
        self.backend.transmit(src, dst, nbytes, key)

    def recv(self, dst: int, src: int, nbytes: int, tag: int, on_received: Callable[[], Any]) -> None:
        """``sim_recv``: run ``on_received`` when the matching message has arrived."""
        pair = (tag, src, dst, nbytes)
        seq = self.recv_seq.get(pair, 0)
        self.recv_seq[pair] = seq + 1
        key = pair + (seq,)
        match = self.matches.get(key)
        if match is None:
            match = self.matches[key] = _Match()
        elif match.arrived:
            del self.matches[key]
            self.schedule(self.loop.now, _call, on_received)
            return
        match.on_received = on_received
        match.has_recv = True

    def arrived(self, key: tuple) -> None:
        """The backend delivered message ``key``: run the sender's and the receiver's callbacks."""
        match = self.matches[key]
        if match.has_send and match.has_recv:
            if match.on_sent is not None:
                match.on_sent()
            match.on_received()  # type: ignore[misc]
            del self.matches[key]
            return
        if match.on_sent is not None:
            match.on_sent()
        match.arrived = True

    def pending_messages(self) -> int:
        """Receives still waiting and messages nobody received (a hang when the run is over)."""
        return len(self.matches)


def _call(callback: Callable[[], Any]) -> None:
    callback()
