"""ASTRA-sim's system layer for one rank (``Sys.cc``, ``StreamBaseline``, ``DataSet``, queues).

How a native collective of ``S`` bytes runs (``Sys::generate_collective``):

1. **Splits.** It is cut into chunks of ``S // preferred-dataset-splits`` bytes (at least one
   byte per NPU of the machine, except all-gather); each chunk becomes a *stream* that runs the
   collective's *phases* one after the other, on its own.
2. **Phases.** One phase per network dimension that has more than one NPU and takes part
   (``involved_dim``), in ascending order (all-gather: descending), each with that dimension's
   algorithm; a phase's output size is the next one's input (a ring reduce-scatter divides by
   the dimension's size, an all-gather multiplies). An all-reduce under ``baseline`` is an
   all-reduce in every dimension; under ``localBWAware`` it reduce-scatters up to the last
   dimension, all-reduces there and all-gathers back down.
3. **Queues.** Each dimension has a queue (``--num-queues-per-dim``, default 1); a stream
   waits in the queue of its current phase, and at most ``active-chunks-per-dimension`` streams
   of a queue run at once. Waiting streams are ordered by priority: each collective gets the
   next value of a counter that goes down under ``FIFO`` (later collectives queue behind) and
   up under ``LIFO`` (later collectives overtake the ones that have not started).
4. A collective is finished when all its streams are.

Custom collectives (``*-implementation-custom``) skip all of this: one stream, one phase
(:class:`~chakra_collectives.astra_system.custom.CustomCollective`) on queue 0, at the size its
files were written for.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from chakra_collectives.astra_system.logical import ANTICLOCKWISE, CLOCKWISE, DoubleBinaryTree, RingView
from chakra_collectives.astra_system.native import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    INIT,
    READY,
    RECEIVED,
    REDUCE_SCATTER,
    Direct,
    DoubleBinaryTreeAllReduce,
    HalvingDoubling,
    Ring,
)
from chakra_collectives.converters.astra_sim.system import SystemConfig, direct_window
from chakra_collectives.errors import InputError


COLLECTIVE_TAG = 500_000_000
"""ASTRA-sim's tag offset for messages of native collectives (workload and custom ones: 0)."""


def native_tag(tag: int) -> int:
    return tag % COLLECTIVE_TAG


def collective_tag(tag: int) -> int:
    return tag % COLLECTIVE_TAG + COLLECTIVE_TAG


class Group:
    """A communicator group as one rank sees it (``CommunicatorGroup``)."""

    def __init__(self, group_id: int, members: list[int], rank: int) -> None:
        self.id = group_id
        self.members = list(members)
        ordered = sorted(members)
        self.position = ordered.index(rank) if rank in ordered else -1
        self.next_stream = group_id * 1_000_000
        self.plans: dict[str, tuple] = {}


class DataSet:
    """The streams of one collective; tells its owner when the last one finished."""

    __slots__ = ("total", "finished", "on_done")

    def __init__(self, total: int) -> None:
        self.total = total
        self.finished = 0
        self.on_done: Callable[[], Any] | None = None

    def stream_finished(self) -> None:
        self.finished += 1
        if self.finished == self.total and self.on_done is not None:
            self.on_done()


class Stream:
    """One chunk of a collective going through its phases (``StreamBaseline``)."""

    __slots__ = ("system", "id", "dataset", "phases", "priority", "queue", "phase_queue", "algorithm", "initialized")

    def __init__(self, system: "RankSystem", stream_id: int, dataset: DataSet, phases: list, priority: int) -> None:
        self.system = system
        self.id = stream_id
        self.dataset = dataset
        self.phases = phases  # [(queue, algorithm), ...] still to run
        self.priority = priority
        self.queue = -1
        self.phase_queue = -1
        self.algorithm: Any = None
        self.initialized = False
        for _, algorithm in phases:
            algorithm.stream = self

    # -- what algorithms call
    def send(self, dst: int, nbytes: int) -> None:
        system = self.system
        system.kernel.send(system.rank, dst, nbytes, collective_tag(self.id), None)

    def recv(self, src: int, nbytes: int) -> None:
        system = self.system
        system.kernel.recv(system.rank, src, nbytes, collective_tag(self.id), self.received)

    def received(self) -> None:
        self.algorithm.run(RECEIVED)

    def endpoint(self, nbytes: int, reduce: bool) -> None:
        """A message's trip through the endpoint (``PacketBundle`` via ``MemBus``): 10 ns on a
        group's local ring, ``endpoint-delay`` elsewhere, then the reduction's memory time."""
        system = self.system
        delay = 10 if self.algorithm.local else system.config.endpoint_delay
        system.kernel.after(system.rank, delay, self._through_endpoint, nbytes, reduce)

    def _through_endpoint(self, nbytes: int, reduce: bool) -> None:
        if reduce:
            system = self.system
            system.kernel.after(system.rank, system.config.reduction_ns(nbytes), self._ready)
        else:
            self.algorithm.run(READY)

    def _ready(self) -> None:
        self.algorithm.run(READY)

    def done(self) -> None:
        self.system.proceed(self)


class QueueLevel:
    """One dimension's queues and the three ways ASTRA-sim hands them out (``QueueLevelHandler``)."""

    def __init__(self, queues: list[int]) -> None:
        self.queues = queues
        self.allocator = 0
        self.first = 0
        self.last = len(queues) // 2

    def next(self) -> tuple[int, int]:
        n = len(self.queues)
        direction = ANTICLOCKWISE if n > 1 and self.allocator >= n // 2 else CLOCKWISE
        queue = self.queues[self.allocator]
        self.allocator = (self.allocator + 1) % n
        return queue, direction

    def next_first(self) -> tuple[int, int]:
        queue = self.queues[self.first]
        self.first += 1
        if self.first >= len(self.queues) // 2:
            self.first = 0
        return queue, CLOCKWISE

    def next_last(self) -> tuple[int, int]:
        queue = self.queues[self.last]
        self.last += 1
        if self.last >= len(self.queues):
            self.last = len(self.queues) // 2
        return queue, ANTICLOCKWISE


class LogicalTopology:
    """Per dimension, the ring (or pair of trees) a rank's native algorithms run on."""

    def __init__(self, rank: int, dims: list[int], implementations: tuple[str, ...]) -> None:
        if len(implementations) > len(dims):
            raise InputError(f"{len(implementations)} algorithms for a network of {len(dims)} dimensions (ASTRA-sim asserts)")
        self.views: list[Any] = []
        stride = 1
        last = len(implementations) - 1
        for d, name in enumerate(implementations):
            if name.startswith("one"):
                total = math.prod(dims)
                self.views.append(RingView.of_dimension(rank, total, 1))
                break
            if name == "doubleBinaryTree":
                size = dims[d]
                start = rank % stride if d == last else (rank - rank % (stride * size)) + rank % stride
                self.views.append(DoubleBinaryTree(size, start, stride))
            else:
                self.views.append(RingView.of_dimension(rank, dims[d], stride))
            stride *= dims[d]

    def dimensions(self) -> int:
        return len(self.views)

    def nodes(self, dim: int) -> int:
        return self.views[dim].nodes

    def view(self, dim: int) -> Any:
        view = self.views[dim]
        return view.next_tree() if isinstance(view, DoubleBinaryTree) else view


class RankSystem:
    """One rank's system layer: generates collectives into streams and schedules them."""

    def __init__(self, rank: int, kernel: Any, config: SystemConfig, dims: list[int], *, queues_per_dim: int = 1, custom: Any = None) -> None:
        self.rank = rank
        self.kernel = kernel
        self.config = config
        self.dims = dims
        self.total_nodes = math.prod(dims)
        self.custom = custom  # callable(collective, rank, position, group) -> CustomCollective
        self.levels = [QueueLevel(list(range(d * queues_per_dim, (d + 1) * queues_per_dim))) for d in range(len(dims))]
        self.active: dict[int, list[Stream]] = {q: [] for q in range(len(dims) * queues_per_dim)}
        self.running: dict[int, int] = dict.fromkeys(self.active, 0)
        self.threshold = math.ceil(config.active_chunks / queues_per_dim)
        self.priority_counter = 0
        self.next_stream = 0
        self.topologies = {c: LogicalTopology(rank, dims, config.implementations(c)) for c in (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL)}

    # ------------------------------------------------------------------ generating
    def generate(self, collective: str, size: int, involved: list[bool] | None, group: Group | None, priority: int, label: str) -> DataSet:
        """Cut a collective into streams and queue them (``Sys::generate_collective``)."""
        config = self.config
        if group is None:
            topology = self.topologies[collective]
            custom = config.custom.get(collective)
            implementations: tuple[str, ...] = () if custom else config.implementations(collective)
            involved_dims = involved if involved is not None else [True] * 4
        else:
            topology, implementations, involved_dims, custom = self._plan(collective, group)
        if custom is None and not implementations:
            raise InputError(f"{label}: the system configuration has no {collective}-implementation (ASTRA-sim throws: no collective implementation found)")
        pri = self._priority(priority)
        if custom is not None:
            dataset = DataSet(1)
            position = self.rank if group is None else group.position
            algorithm = self.custom(collective, self.rank, position, group, size, label)
            self._start(Stream(self, self._stream_id(group), dataset, [(0, algorithm)], pri))
            return dataset
        chunk = size // config.splits
        if collective != ALL_GATHER and self.total_nodes > chunk:
            chunk = self.total_nodes
            size = config.splits * chunk
        if chunk == 0:
            raise InputError(f"{label}: {size} bytes cut into {config.splits} splits leaves empty chunks (ASTRA-sim never finishes)")
        dataset = DataSet(math.ceil(size / chunk) if chunk else 0)
        count = 0
        while size > 0:
            count += 1
            dims = list(range(topology.dimensions()))
            if collective == ALL_GATHER:
                dims.reverse()
            size = 0 if chunk > size else size - chunk
            phases = self._phases(collective, topology, implementations, involved_dims, dims, chunk)
            if not phases:
                raise InputError(f"{label}: no dimension takes part in this {collective} (ASTRA-sim never finishes it)")
            self._start(Stream(self, self._stream_id(group), dataset, phases, pri))
        dataset.total = count
        return dataset

    def _plan(self, collective: str, group: Group) -> tuple:
        plan = group.plans.get(collective)
        if plan is None:
            custom = self.config.custom.get(collective)
            implementations = () if custom else self.config.implementations(collective)
            if len(group.members) == self.total_nodes:
                plan = (self.topologies[collective], implementations, [True] * 10, custom)
            else:
                if len(implementations) > 1:
                    implementations = ("ring",)
                topology = _GroupTopology(RingView(tuple(group.members), self.rank, local=True))
                plan = (topology, implementations, [True], custom)
            group.plans[collective] = plan
        return plan

    def _phases(self, collective: str, topology: Any, implementations: tuple[str, ...], involved: list[bool], dims: list[int], chunk: int) -> list:
        phases = []
        remain = chunk

        def active(d: int) -> bool:
            return topology.nodes(dims[d]) != 1 and involved[dims[d]]

        def add(kind: str, d: int, queue_direction: tuple[int, int]) -> None:
            nonlocal remain
            queue, direction = queue_direction
            algorithm = self._algorithm(kind, topology.view(dims[d]), remain, direction, implementations[dims[d]])
            phases.append((queue, algorithm))
            remain = algorithm.final_size

        levels = self.levels
        if collective != ALL_REDUCE or self.config.optimization == "baseline":
            for d in range(len(dims)):
                if active(d):
                    add(collective, d, levels[dims[d]].next())
            return phases
        last_active = 0
        for d in range(len(dims)):
            if active(d):
                last_active = d
        d = 0
        while d < last_active:
            if active(d):
                add(REDUCE_SCATTER, d, levels[dims[d]].next_first())
            d += 1
        while d > 0 and not active(d):
            d -= 1
        if active(d):
            add(ALL_REDUCE, d, levels[dims[d]].next_first())
        d -= 1
        while d >= 0:
            if active(d):
                add(ALL_GATHER, d, levels[dims[d]].next_last())
            d -= 1
        return phases

    def _algorithm(self, collective: str, view: Any, size: int, direction: int, name: str) -> Any:
        if name in ("ring", "oneRing"):
            return Ring(collective, self.rank, view, size, direction)
        if name.startswith("direct") or name.startswith("oneDirect"):
            return Direct(collective, direct_window(name), self.rank, view, size, direction)
        if name in ("halvingDoubling", "oneHalvingDoubling"):
            return HalvingDoubling(collective, self.rank, view, size)
        return DoubleBinaryTreeAllReduce(self.rank, view, size)

    def _priority(self, explicit: int) -> int:
        policy = self.config.policy
        if policy == "EXPLICIT":
            return explicit
        value = self.priority_counter
        self.priority_counter += 1 if policy == "LIFO" else -1
        return value

    def _stream_id(self, group: Group | None) -> int:
        if group is None:
            stream_id = self.next_stream
            self.next_stream += 1
        else:
            stream_id = group.next_stream
            group.next_stream += 1
        return stream_id

    # ------------------------------------------------------------------ scheduling
    def _start(self, stream: Stream) -> None:
        """``insert_into_ready_list``: the scheduler moves it on to its first phase at once."""
        self.proceed(stream)

    def proceed(self, stream: Stream) -> None:
        """A stream finished a phase (or starts): next phase, or done (``proceed_to_next_vnet_baseline``)."""
        previous = stream.queue
        if not stream.phases:
            stream.dataset.stream_finished()
        if stream.queue >= 0:
            self.active[stream.phase_queue].remove(stream)
        if not stream.phases:
            if previous >= 0:
                self._removed(previous)
            return
        queue, algorithm = stream.phases.pop(0)
        queue = abs(queue)
        stream.queue = stream.phase_queue = queue
        stream.algorithm = algorithm
        stream.initialized = False
        self._insert(self.active[queue], stream)
        if previous >= 0:
            self._removed(previous)
        self._added(queue)

    def _insert(self, waiting: list[Stream], stream: Stream) -> None:
        i = 0
        while i < len(waiting) and (waiting[i].initialized or waiting[i].priority >= stream.priority):
            i += 1
        waiting.insert(i, stream)

    def _added(self, queue: int) -> None:
        waiting = self.active[queue]
        i = self.running[queue]
        while i < len(waiting) and self.running[queue] < self.threshold:
            stream = waiting[i]
            stream.initialized = True
            stream.algorithm.run(INIT)
            self.running[queue] += 1
            i += 1

    def _removed(self, queue: int) -> None:
        self.running[queue] -= 1
        self._added(queue)


class _GroupTopology:
    """A process group smaller than the machine: one local ring of its members."""

    def __init__(self, ring: RingView) -> None:
        self.ring = ring

    def dimensions(self) -> int:
        return 1

    def nodes(self, dim: int) -> int:
        return self.ring.nodes

    def view(self, dim: int) -> RingView:
        return self.ring
