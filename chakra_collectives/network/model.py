"""The network model shared by the synthesizer's cost model and the replayer.

A topology (:class:`~chakra_collectives.topology.Topology`) is a directed multigraph of NPUs
and switches; each link has a bandwidth ``B`` (GB/s, 1 GB = 2^30 bytes) and a latency ``a``
(ns). The model, in both modes:

* a message of ``S`` bytes is sent whole over each link of its route, **store-and-forward**:
  it is offered to hop ``k+1`` when it has fully arrived over hop ``k``;
* a link carries **one message at a time**, in **FIFO order of arrival at the link**; a message
  that finds the link busy waits until it is free;
* routes are deterministic (:meth:`NetworkModel.route`), so every run is reproducible.

The two modes differ only in what one hop costs and which route is taken:

``"tacos"`` (default; TACOS's link model)
    A hop takes ``a + S/B`` ns (exact floats) and keeps the link busy for all of it, latency
    included. Routes: :meth:`Topology.route` (fewest hops, then least latency, then the links
    added first).
``"astra-sim"`` (ASTRA-sim's congestion-aware analytical network, ``congestion_aware/Link.cpp``)
    A hop delivers after ``int(a + S/B)`` ns and keeps the link busy only for ``int(S/B)``
    ns (both truncated to whole ns per hop; the latency is pipelined, so back-to-back
    messages overlap their latencies). Routes: on a ring (links ``i -> i+1``, optionally
    also ``i+1 -> i``, nothing else) the shorter way round, ties clockwise (increasing ids);
    elsewhere :meth:`Topology.route`, which is one hop on a fully-connected topology and two
    hops through the switch on a switch, as ASTRA-sim routes them. Local operations cost what
    ASTRA-sim charges for the COMP node our ET writer emits: whole microseconds
    (``round(ns / 1000) * 1000``) and 1 ns when that is 0.

Where ``"tacos"`` mode differs from ASTRA-sim, precisely:

1. no truncation: hop times are ``a + S/B`` exactly, not ``int(a + S/B)``;
2. a link stays busy for ``a + S/B`` (latency not pipelined), where ASTRA-sim frees it after
   ``int(S/B)``: with several messages queued on one link, each costs ``a`` more in tacos mode;
3. local operations take their exact duration (0 ns when none is known), where ASTRA-sim
   takes whole microseconds with a 1 ns minimum;
4. ties on a bidirectional ring of even size are routed by :meth:`Topology.route`'s rule,
   which may go anticlockwise where ASTRA-sim goes clockwise.

Events of the same time run in the order they were scheduled in both modes (ASTRA-sim's
event queue does the same), so ties between messages reaching one link at the same instant are
broken by that order. ASTRA-sim's congestion-aware backend supports one-dimensional
topologies only; this model has no such limit.

Local operations (REDUCE, COPY, opaque COMPUTE) take their explicit ``duration_ns`` when they
have one, else ``bytes / reduce_bandwidth`` when a reduce bandwidth is given, else 0 ns.
Several local operations ready at once on one NPU run in parallel by default
(``local_ops="parallel"``); ``local_ops="serial"`` runs them one at a time per NPU, in the
order they became ready -- ASTRA-sim's rule of at most one GPU COMP in flight per rank.

>>> from chakra_collectives.topology import Topology
>>> ring = Topology(8, name="ring")
>>> for i in range(8):
...     ring.add_link(i, (i + 1) % 8, 50.0, 500.0, bidirectional=True)
>>> model = NetworkModel(ring, mode="astra-sim")
>>> model.hop(0, 131072)          # (link busy, delivered after): int(2441.4), int(2941.4)
(2441, 2941)
>>> NetworkModel(ring).hop(0, 131072)[1] == 500.0 + 131072 / (50 * 2**30 / 1e9)
True
>>> [ring.links[l].dst for l in model.route(4, 0)]   # 4 hops either way: clockwise
[5, 6, 7, 0]
"""

from __future__ import annotations

import math
from enum import Enum

from chakra_collectives.errors import InputError
from chakra_collectives.topology import Topology
from chakra_collectives.units import bytes_per_ns


class Mode(str, Enum):
    """Which cost model a hop and a local operation follow (see the module docstring)."""

    TACOS = "tacos"
    ASTRA_SIM = "astra-sim"

    @classmethod
    def parse(cls, value: "str | Mode") -> "Mode":
        try:
            return cls(value)
        except ValueError:
            raise InputError(f"unknown network mode {value!r} (valid: {', '.join(m.value for m in cls)})") from None


LOCAL_OPS = ("parallel", "serial")
"""How several local operations ready at once on one NPU run (see the module docstring)."""


class NetworkModel:
    """Hop costs, routes and local-operation costs of one topology under one mode."""

    def __init__(self, topology: Topology, *, mode: "str | Mode" = Mode.TACOS, reduce_bandwidth_gbps: float | None = None) -> None:
        self.topology = topology
        self.mode = Mode.parse(mode)
        if reduce_bandwidth_gbps is not None and not reduce_bandwidth_gbps > 0:
            raise InputError(f"reduce bandwidth must be positive, got {reduce_bandwidth_gbps} GB/s")
        self.reduce_rate = None if reduce_bandwidth_gbps is None else bytes_per_ns(reduce_bandwidth_gbps)
        self.integer_time = self.mode is Mode.ASTRA_SIM
        self.link_rate = [bytes_per_ns(link.bandwidth_gbps) for link in topology.links]
        self.link_latency = [link.latency_ns for link in topology.links]
        self._ring = _ring_links(topology) if self.mode is Mode.ASTRA_SIM else None
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self._direct: dict[tuple[int, int], int] = {}
        for index, link in enumerate(topology.links):  # Topology.route's 1-hop choice: least latency, then first added
            key = (link.src, link.dst)
            best = self._direct.get(key)
            if best is None or link.latency_ns < topology.links[best].latency_ns:
                self._direct[key] = index

    # ------------------------------------------------------------------ links
    def hop(self, link: int, nbytes: float) -> tuple[float, float]:
        """``(busy, delivered)``: how long ``nbytes`` keep ``link`` busy and arrive after, in ns."""
        serialization = nbytes / self.link_rate[link]
        if self.integer_time:
            return int(serialization), int(self.link_latency[link] + serialization)
        total = self.link_latency[link] + serialization
        return total, total

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Link ids a message from NPU ``src`` to NPU ``dst`` crosses (empty when ``src == dst``)."""
        key = (src, dst)
        found = self._routes.get(key)
        if found is None:
            if src == dst:
                found = ()
            elif self._ring is not None:
                found = self._ring_route(src, dst)
            elif key in self._direct and src < self.topology.num_npus:
                found = (self._direct[key],)
            else:
                found = tuple(self.topology.route(src, dst))
            self._routes[key] = found
        return found

    def _ring_route(self, src: int, dst: int) -> tuple[int, ...]:
        clockwise, anticlockwise = self._ring  # type: ignore[misc]
        n = len(clockwise)
        distance = (dst - src) % n
        step, links = 1, clockwise
        if anticlockwise is not None and n - distance < distance:
            step, links = -1, anticlockwise
        path = []
        node = src
        while node != dst:
            path.append(links[node])
            node = (node + step) % n
        return tuple(path)

    # ------------------------------------------------------------------ local operations
    def local_ns(self, duration_ns: float, nbytes: float) -> float:
        """Time of a REDUCE / COPY / COMPUTE: its duration, else bytes / reduce bandwidth, else 0.

        >>> from chakra_collectives.topology import Topology
        >>> NetworkModel(Topology(1), mode="astra-sim").local_ns(float("nan"), 2**20)
        1
        >>> NetworkModel(Topology(1), reduce_bandwidth_gbps=1e9 / 2**30).local_ns(float("nan"), 4096)
        4096.0
        >>> NetworkModel(Topology(1), mode="astra-sim").local_ns(2441.4, 0)   # 2 us in the ET
        2000
        """
        if math.isnan(duration_ns):
            duration_ns = 0.0 if self.reduce_rate is None or nbytes <= 0 else nbytes / self.reduce_rate
        if self.integer_time:
            return max(1, round(duration_ns / 1000.0) * 1000)
        return float(duration_ns)

    def describe(self) -> str:
        return f"{self.topology.describe()}; {self.mode.value} model"


def _ring_links(topology: Topology) -> tuple[list[int], list[int] | None] | None:
    """Link ids ``i -> i+1`` (and ``i+1 -> i``) when the topology is exactly an ASTRA-sim ring."""
    n = topology.num_npus
    if topology.num_switches or n < 2:
        return None
    clockwise: dict[int, int] = {}
    anticlockwise: dict[int, int] = {}
    for index, link in enumerate(topology.links):
        if link.dst == (link.src + 1) % n and link.src not in clockwise:
            clockwise[link.src] = index
        elif link.src == (link.dst + 1) % n and link.src not in anticlockwise:
            anticlockwise[link.src] = index
        elif n == 2 and link.src != link.dst:
            continue  # two NPUs: extra parallel links do not change the route
        else:
            return None
    if len(clockwise) != n:
        return None
    if anticlockwise and len(anticlockwise) != n:
        return None
    forward = [clockwise[i] for i in range(n)]
    backward = [anticlockwise[i] for i in range(n)] if anticlockwise else None
    return forward, backward
