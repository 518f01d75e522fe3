"""ASTRA-sim's two analytical network backends, as message movers for :class:`~.kernel.Kernel`.

``aware`` (``AstraSim_Analytical_Congestion_Aware``, one dimension only)
    Each message crosses the links of its route whole, store-and-forward. A link serves one
    message at a time in FIFO order: sending takes ``int(latency + S/B)`` ns to arrive and keeps
    the link busy for ``int(S/B)`` ns; a message offered to a busy link waits in the link's
    queue until a "link free" event. Routes and hop costs are the network model's
    (:class:`~chakra_collectives.network.model.NetworkModel`, ``astra-sim`` mode): the shorter
    way round a ring (ties clockwise), one hop on a fully-connected network, two through a
    switch. The arrival event of a hop is scheduled before its link-free event, as in
    ``Link::schedule_chunk_transmission``.
``unaware`` (``AstraSim_Analytical_Congestion_Unaware``, any number of dimensions)
    No links and no queues: a message from ``src`` to ``dst`` arrives after
    ``int(hops * latency + S/B)`` ns, where the dimension is the *first* one (lowest index, NPU
    ids numbered with dimension 0 fastest) in which the two NPUs differ, and ``hops`` counts
    only that dimension: a ring's shorter distance, 1 on a fully-connected dimension, 2 on a
    switch. Messages never wait for one another, so shared links cost nothing.

>>> from chakra_collectives.converters.astra_sim import AnalyticalNetwork, Dimension
>>> net = AnalyticalNetwork((Dimension("Ring", 4, 50.0, 500.0), Dimension("Switch", 2, 25.0, 700.0)))
>>> UnawareBackend(net).delay(0, 2, 131072)        # dimension 0: 2 hops of 500 ns + 2441.4 ns
3441
>>> UnawareBackend(net).delay(1, 6, 131072)        # dims 0 and 1 differ: dimension 0 (ring) counts, 1 hop
2941
>>> UnawareBackend(net).delay(0, 4, 131072)        # switch: 2 x 700 ns + 4882.8 ns
6282
"""

from __future__ import annotations

from collections import deque
from typing import Any

from chakra_collectives.converters.astra_sim import AnalyticalNetwork
from chakra_collectives.errors import InputError
from chakra_collectives.network.model import NetworkModel
from chakra_collectives.topology.loaders import network_topology
from chakra_collectives.units import bytes_per_ns


BACKENDS = ("aware", "unaware")


class AwareBackend:
    """The congestion-aware backend: per-link FIFO queues, store-and-forward (one dimension)."""

    name = "aware"

    def __init__(self, network: AnalyticalNetwork) -> None:
        if len(network.dimensions) != 1:
            raise InputError(
                f"the congestion-aware backend takes one dimension; this network has {len(network.dimensions)} "
                "(ASTRA-sim exits: 'only support 1-dim topology'); use the unaware backend"
            )
        dim = network.dimensions[0]
        if dim.kind == "Ring" and dim.npus == 2:
            raise InputError("ASTRA-sim's congestion-aware backend aborts on a Ring of 2 NPUs (it links the pair twice); write FullyConnected 2, which has the same links")
        self.network = network
        self.model = NetworkModel(network_topology(network), network_model="astra-sim")
        links = len(self.model.topology.links)
        self.busy = bytearray(links)
        self.waiting: list[deque] = [deque() for _ in range(links)]
        self.kernel: Any = None
        self._routes: dict[tuple[int, int, int], tuple[tuple[int, int, int], ...]] = {}

    def path(self, src: int, dst: int, nbytes: int) -> tuple[tuple[int, int, int], ...]:
        """``(link, delivered, busy)`` per hop."""
        key = (src, dst, nbytes)
        path = self._routes.get(key)
        if path is None:
            links = list(self.model.route(src, dst))
            busy, delivered = self.model.hop_times(links, [nbytes] * len(links))
            path = self._routes[key] = tuple(zip(links, (int(d) for d in delivered), (int(b) for b in busy)))
        return path

    def transmit(self, src: int, dst: int, nbytes: int, key: tuple) -> None:
        self._offer([self.path(src, dst, nbytes), 0, key])

    def _offer(self, message: list) -> None:
        link = message[0][message[1]][0]
        if self.busy[link]:
            self.waiting[link].append(message)
        else:
            self._start(message)

    def _start(self, message: list) -> None:
        link, delivered, busy = message[0][message[1]]
        self.busy[link] = 1
        now = self.kernel.now
        self.kernel.schedule(now + delivered, self._hop_done, message)
        self.kernel.schedule(now + busy, self._link_free, link)

    def _hop_done(self, message: list) -> None:
        message[1] += 1
        if message[1] == len(message[0]):
            self.kernel.arrived(message[2])
        else:
            self._offer(message)

    def _link_free(self, link: int) -> None:
        self.busy[link] = 0
        if self.waiting[link]:
            self._start(self.waiting[link].popleft())


class UnawareBackend:
    """The congestion-unaware backend: a closed-form delay per message, no contention."""

    name = "unaware"

    def __init__(self, network: AnalyticalNetwork) -> None:
        self.network = network
        self.sizes = [d.npus for d in network.dimensions]
        self.rates = [bytes_per_ns(d.bandwidth_gbps) for d in network.dimensions]
        self.kernel: Any = None

    def delay(self, src: int, dst: int, nbytes: int) -> int:
        """``int(hops * latency + S/B)`` in the first dimension where ``src`` and ``dst`` differ."""
        for index, dim in enumerate(self.network.dimensions):
            size = self.sizes[index]
            a, b = src % size, dst % size
            if a != b:
                if dim.kind == "Ring":
                    forward = (b - a) % size
                    hops = min(forward, size - forward)
                elif dim.kind == "FullyConnected":
                    hops = 1
                else:
                    hops = 2
                return int(hops * dim.latency_ns + nbytes / self.rates[index])
            src //= size
            dst //= size
        raise InputError(f"a message from an NPU to itself ({src}); ASTRA-sim exits on it")

    def transmit(self, src: int, dst: int, nbytes: int, key: tuple) -> None:
        kernel = self.kernel
        kernel.schedule(kernel.now + self.delay(src, dst, nbytes), kernel.arrived, key)


def make_backend(name: str, network: AnalyticalNetwork) -> AwareBackend | UnawareBackend:
    if name == "aware":
        return AwareBackend(network)
    if name == "unaware":
        return UnawareBackend(network)
    raise InputError(f"unknown ASTRA-sim backend {name!r} (valid: {', '.join(BACKENDS)})")
