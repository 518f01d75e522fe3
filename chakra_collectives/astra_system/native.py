"""ASTRA-sim's native collective algorithms, one phase of one stream each (``collective_algorithm/``).

Every algorithm is a small state machine driven by three events of its stream:

* ``INIT`` -- the stream starts this phase (``StreamInit``);
* ``RECEIVED`` -- a message it posted a receive for has arrived;
* ``READY`` -- a message came back from the endpoint (``General``): after ``endpoint-delay``
  ns (10 ns on a process group's local ring), plus ``3 * int(S / local-mem-bw)`` ns when the
  received data is reduced first.

**ring** (``Ring.cc``): ``N-1`` steps (all-reduce ``2(N-1)``, all-to-all ``N(N-1)/2``) to the
next rank of the ring. A "packet" enters the endpoint at the start and after every receive; when
it comes back, the next message goes out. Messages are ``S/N`` bytes (all-gather: ``S``, the
per-rank input, so its output is ``N*S``); received data is reduced in reduce-scatter and in the
first ``N-1`` steps of all-reduce. Per step: network + endpoint (+ reduction).

**direct** (``AllToAll.cc``): like ring, but up to ``window`` (default ``N-1``) messages in
flight, each to the next peer in turn; an all-reduce first reduce-scatters to all peers at once,
waits for all ``N-1`` pieces, then all-gathers.

**halvingDoubling** (``HalvingDoubling.cc``): ``log2 N`` steps at doubling distances with
halving sizes (all-reduce: back again); the direction alternates with the rank's position.

**doubleBinaryTree** (``DoubleBinaryTreeAllReduce.cc``): reduce to the root of a binary tree
and broadcast back, whole buffer per message; consecutive streams use the two trees in turn.

An algorithm talks to its stream's rank through four calls: ``send(dst, bytes)``,
``recv(src, bytes)`` (its arrival comes back as ``RECEIVED``), ``endpoint(bytes, reduce)``
(comes back as ``READY``) and ``done()``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from chakra_collectives.astra_system.logical import CLOCKWISE, BinaryTree, RingView
from chakra_collectives.errors import InputError


INIT, RECEIVED, READY = "init", "received", "ready"
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL = "all-reduce", "all-gather", "reduce-scatter", "all-to-all"


class Algorithm:
    """What every phase has: sizes in and out, the collective it runs, and its stream."""

    collective: str
    data_size: int
    final_size: int
    stream: Any = None
    local = False
    """Whether it runs on a process group's local ring (10 ns endpoint trips)."""

    def run(self, event: str) -> None:  # pragma: no cover - every algorithm overrides it
        raise NotImplementedError


class Ring(Algorithm):
    """The ring algorithm (also the base of :class:`Direct`)."""

    def __init__(self, collective: str, rank: int, ring: RingView, data_size: int, direction: int = CLOCKWISE) -> None:
        n = ring.nodes
        self.collective, self.rank, self.ring, self.n = collective, rank, ring, n
        self.local = ring.local
        self.data_size = data_size
        self.direction = direction
        self.receiver = ring.receiver(rank, direction)
        self.sender = ring.sender(rank, direction)
        self.parallel = 1
        self.received = 0
        self.free = 0
        self.zero = 0
        self.nonzero = 0
        self.toggle = False
        self.remained = 1
        self.packets: deque[tuple[int, int]] = deque()
        if collective == ALL_REDUCE:
            self.steps = 2 * (n - 1)
        elif collective == ALL_TO_ALL:
            self.steps = (n - 1) * n // 2
        else:
            self.steps = n - 1
        if collective == ALL_REDUCE:
            self.final_size, self.msg_size = data_size, data_size // n
        elif collective == ALL_GATHER:
            self.final_size, self.msg_size = data_size * n, data_size
        elif collective == REDUCE_SCATTER:
            self.final_size, self.msg_size = data_size // n, data_size // n
        elif collective == ALL_TO_ALL:
            self.final_size, self.msg_size = data_size, data_size // n
        else:
            raise InputError(f"ASTRA-sim's native algorithms do not run {collective}")

    def nonzero_packets(self) -> int:
        return (self.n - 1) * self.parallel

    def run(self, event: str) -> None:
        if event == READY:
            self.free += 1
            self.ready()
            self.finished()
        elif event == RECEIVED:
            self.received += 1
            self.insert_packet()
        else:
            for _ in range(self.parallel):
                self.insert_packet()

    def insert_packet(self) -> None:
        if self.zero == 0 and self.nonzero == 0:
            self.zero = self.parallel
            self.nonzero = self.nonzero_packets()
            self.toggle = not self.toggle
        if self.zero > 0:
            self.packets.append((self.sender, self.receiver))
            self.release(False)
            self.zero -= 1
        elif self.nonzero > 0:
            self.packets.append((self.sender, self.receiver))
            reduce = self.collective == REDUCE_SCATTER or (self.collective == ALL_REDUCE and self.toggle)
            self.release(reduce)
            self.nonzero -= 1
        else:
            raise AssertionError("ASTRA-sim: should not inject nothing")

    def release(self, reduce: bool) -> None:
        self.stream.endpoint(self.msg_size, reduce)

    def ready(self) -> bool:
        if not self.packets or self.steps == 0 or self.free == 0:
            return False
        src, dst = self.packets[0]
        self.stream.send(dst, self.msg_size)
        self.stream.recv(src, self.msg_size)
        if self.remained > 0:
            self.remained -= 1
        if self.remained == 0 and self.steps > 0:
            self.steps -= 1
            if self.steps > 0:
                self.remained = 1
        self.packets.popleft()
        self.free -= 1
        return True

    def finished(self) -> bool:
        if self.steps == 0 and self.free == self.parallel:
            self.packets.clear()
            self.stream.done()
            return True
        return False


class Direct(Ring):
    """ASTRA-sim's ``direct`` (class ``AllToAll``): up to ``window`` peers at once."""

    def __init__(self, collective: str, window: int, rank: int, ring: RingView, data_size: int, direction: int = CLOCKWISE) -> None:
        super().__init__(collective, rank, ring, data_size, direction)
        self.middle = self.n - 1
        self.parallel = self.n - 1 if window == -1 else min(window, self.n - 1)
        if collective == ALL_TO_ALL:
            self.steps = self.n - 1

    def nonzero_packets(self) -> int:
        return (self.n - 1) * self.parallel if self.ring.local else self.parallel

    def run(self, event: str) -> None:
        if event == READY:
            self.free += 1
            if self.collective == ALL_REDUCE and self.steps <= self.middle:
                if self.received < self.middle:
                    return
                for _ in range(self.parallel):
                    self.ready()
            else:
                self.ready()
            self.finished()
        else:
            super().run(event)

    def release(self, reduce: bool) -> None:
        super().release(reduce)
        ring, rank = self.ring, self.rank
        self.receiver = ring.receiver(self.receiver, self.direction)
        if self.receiver == rank:
            self.receiver = ring.receiver(self.receiver, self.direction)
        self.sender = ring.sender(self.sender, self.direction)
        if self.sender == rank:
            self.sender = ring.sender(self.sender, self.direction)


class HalvingDoubling(Algorithm):
    """Recursive halving (reduce-scatter) and doubling (all-gather), ``log2 N`` steps each."""

    def __init__(self, collective: str, rank: int, ring: RingView, data_size: int) -> None:
        n = ring.nodes
        self.collective, self.rank, self.ring, self.n = collective, rank, ring, n
        self.local = ring.local
        self.data_size = data_size
        self.parallel = 1
        self.received = 0
        self.free = 0
        self.zero = 0
        self.nonzero = 0
        self.toggle = False
        self.remained = 1
        self.packets: deque[tuple[int, int, int]] = deque()
        log = math.log2(n)
        self.steps = int(2 * log) if collective == ALL_REDUCE else int(log)
        if collective == ALL_REDUCE:
            self.final_size, self.msg_size, self.offset, self.multiplier = data_size, data_size // 2, 1, 2.0
        elif collective == ALL_GATHER:
            self.final_size, self.msg_size, self.offset, self.multiplier = data_size * n, data_size, n // 2, 0.5
        elif collective == REDUCE_SCATTER:
            self.final_size, self.msg_size, self.offset, self.multiplier = data_size // n, data_size // 2, 1, 2.0
        else:
            raise InputError(f"ASTRA-sim's halvingDoubling does not run {collective} (it exits)")
        self._aim()

    def _aim(self) -> None:
        if self.offset == 0:
            direction = CLOCKWISE
        else:
            direction = CLOCKWISE if (self.ring.index // self.offset) % 2 == 0 else -CLOCKWISE
        peer = self.rank
        for _ in range(self.offset):
            peer = self.ring.receiver(peer, direction)
        self.peer = peer

    def run(self, event: str) -> None:
        if event == READY:
            self.free += 1
            self.ready()
            self.finished()
        elif event == RECEIVED:
            self.received += 1
            self.insert_packet()
        else:
            for _ in range(self.parallel):
                self.insert_packet()

    def insert_packet(self) -> None:
        if self.zero == 0 and self.nonzero == 0:
            self.zero = self.parallel
            self.nonzero = int(math.log2(self.n) - 1 * self.parallel)
            self.toggle = not self.toggle
        if self.zero > 0:
            reduce = False
            self.zero -= 1
        elif self.nonzero > 0:
            reduce = self.collective == REDUCE_SCATTER or (self.collective == ALL_REDUCE and self.toggle)
            self.nonzero -= 1
        else:
            raise AssertionError("ASTRA-sim: should not inject nothing")
        self.packets.append((self.peer, self.peer, self.msg_size))
        self.stream.endpoint(self.msg_size, reduce)
        self.offset = int(self.offset * self.multiplier)
        self.msg_size = int(self.msg_size / self.multiplier)
        if self.offset == self.n and self.collective == ALL_REDUCE:
            self.multiplier = 0.5
            self.offset = int(self.offset * self.multiplier)
            self.msg_size = int(self.msg_size / self.multiplier)
        self._aim()

    def ready(self) -> bool:
        if not self.packets or self.steps == 0 or self.free == 0:
            return False
        src, dst, size = self.packets[0]
        self.stream.send(dst, size)
        self.stream.recv(src, size)
        if self.remained > 0:
            self.remained -= 1
        if self.remained == 0 and self.steps > 0:
            self.steps -= 1
            if self.steps > 0:
                self.remained = 1
        self.packets.popleft()
        self.free -= 1
        return True

    def finished(self) -> bool:
        if self.steps == 0 and self.free == self.parallel:
            self.packets.clear()
            self.stream.done()
            return True
        return False


class DoubleBinaryTreeAllReduce(Algorithm):
    """Reduce up one binary tree and broadcast down it (always an all-reduce, whole buffer)."""

    def __init__(self, rank: int, tree: BinaryTree, data_size: int) -> None:
        self.collective = ALL_REDUCE
        self.rank = rank
        self.data_size = self.final_size = data_size
        self.parent = tree.parent(rank)
        self.left, self.right = tree.children(rank)
        self.kind = tree.kind(rank)
        self.state = "begin"
        self.reductions = 0

    def run(self, event: str) -> None:  # noqa: C901 - one branch per state, as ASTRA-sim's
        s, kind, size, stream = self.state, self.kind, self.data_size, self.stream
        if kind == "leaf":
            if s == "begin":
                stream.endpoint(size, False)
                self.state = "to-parent"
            elif s == "to-parent":
                stream.send(self.parent, size)
                stream.recv(self.parent, size)
                self.state = "from-parent"
            elif s == "from-parent":
                stream.endpoint(size, False)
                self.state = "end"
            elif s == "end":
                stream.done()
            return
        if kind == "intermediate":
            if s == "begin":
                self.state = "two-children"
                stream.recv(self.left, size)
                stream.recv(self.right, size)
            elif s == "two-children" and event == RECEIVED:
                stream.endpoint(size, True)
                self.state = "one-child"
            elif s == "one-child" and event == RECEIVED:
                stream.endpoint(size, True)
                self.state = "to-parent"
            elif self.reductions < 1 and event == READY:
                self.reductions += 1
            elif s == "to-parent":
                self.state = "from-parent"
                stream.send(self.parent, size)
                stream.recv(self.parent, size)
            elif s == "from-parent" and event == RECEIVED:
                stream.endpoint(size, True)
                self.state = "to-children"
            elif s == "to-children":
                stream.send(self.left, size)
                stream.send(self.right, size)
                stream.done()
            return
        only = self.left if self.left >= 0 else self.right
        if s == "begin":
            self.state = "one-child"
            stream.recv(only, size)
        elif s == "one-child":
            stream.endpoint(size, True)
            self.state = "to-children"
        elif s == "to-children":
            stream.send(only, size)
            stream.done()
