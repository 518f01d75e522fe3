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

``"default"`` (TACOS's link model; ``"tacos"`` is its old name)
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

Where the default model differs from ASTRA-sim, precisely:

1. no truncation: hop times are ``a + S/B`` exactly, not ``int(a + S/B)``;
2. a link stays busy for ``a + S/B`` (latency not pipelined), where ASTRA-sim frees it after
   ``int(S/B)``: with several messages queued on one link, each costs ``a`` more in the default model;
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
>>> model = NetworkModel(ring, network_model="astra-sim")
>>> [a.tolist() for a in model.hop_times([0], [131072])]   # (link busy, delivered): int(2441.4), int(2941.4)
[[2441], [2941]]
>>> float(NetworkModel(ring).hop_ns([0], 131072)[0]) == 500.0 + 131072 / (50 * 2**30 / 1e9)
True
>>> [ring.links[l].dst for l in model.route(4, 0)]   # 4 hops either way: clockwise
[5, 6, 7, 0]

The model owns the topology's links as arrays (:attr:`NetworkModel.link_latency`,
:attr:`NetworkModel.link_rate`, ...) and the one hop cost, :meth:`NetworkModel.hop_ns`; the
TACOS matcher's channels, ``best``'s pruning bound, the event engine and the lowering of
algorithms and workloads to tasks all take their costs from it.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from chakra_collectives.deprecation import renamed_keyword
from chakra_collectives.errors import InputError
from chakra_collectives.topology import Topology
from chakra_collectives.units import bytes_per_ns


class Mode(str, Enum):
    """Which cost model a hop and a local operation follow (see the module docstring).

    ``default`` is the model TACOS plans with (``tacos``, its old name, is still accepted);
    ``astra-sim`` is ASTRA-sim's congestion-aware analytical network.

    >>> Mode.parse("tacos") is Mode.parse("default") is Mode.TACOS
    True
    """

    DEFAULT = "default"
    ASTRA_SIM = "astra-sim"
    TACOS = "default"  # the old name of DEFAULT (an alias: the same member)

    @classmethod
    def parse(cls, value: "str | Mode") -> "Mode":
        try:
            return cls("default" if value == "tacos" else value)
        except ValueError:
            raise InputError(f"unknown network model {value!r} (valid: default, astra-sim)") from None


LOCAL_OPS = ("parallel", "serial")
"""How several local operations ready at once on one NPU run (see the module docstring)."""


class NetworkModel:
    """Hop costs, routes and local-operation costs of one topology under one mode.

    Raises :class:`~chakra_collectives.errors.InputError` for a topology whose NPUs do not
    all reach each other, an unknown mode or a non-positive reduce bandwidth.

    Attributes
    ----------
    link_src, link_dst:
        int64, per link of the topology.
    link_latency:
        float64 ns, per link.
    link_rate:
        float64 bytes/ns, per link (bandwidth in GB/s, 1 GB = 2^30 bytes).
    """

    @renamed_keyword("mode", "network_model")
    def __init__(self, topology: Topology, *, network_model: "str | Mode" = Mode.TACOS, reduce_bandwidth_gbps: float | None = None) -> None:
        self.topology = topology.validate()
        self.mode = Mode.parse(network_model)
        """The network model (``network_model=``)."""
        if reduce_bandwidth_gbps is not None and not reduce_bandwidth_gbps > 0:
            raise InputError(f"reduce bandwidth must be positive, got {reduce_bandwidth_gbps} GB/s")
        self.reduce_bandwidth_gbps = reduce_bandwidth_gbps
        self.integer_time = self.mode is Mode.ASTRA_SIM
        arrays = topology.link_arrays
        self.link_src: np.ndarray = arrays["src"]
        self.link_dst: np.ndarray = arrays["dst"]
        self.link_latency: np.ndarray = arrays["latency_ns"].astype(np.float64)
        self.link_rate: np.ndarray = bytes_per_ns(arrays["bandwidth_gbps"].astype(np.float64))
        self._ring = _ring_links(topology) if self.mode is Mode.ASTRA_SIM else None
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self._direct: dict[tuple[int, int], int] = {}
        for index, link in enumerate(topology.links):  # Topology.route's 1-hop choice: least latency, then first added
            key = (link.src, link.dst)
            best = self._direct.get(key)
            if best is None or link.latency_ns < topology.links[best].latency_ns:
                self._direct[key] = index

    @property
    def num_links(self) -> int:
        return len(self.link_latency)

    # ------------------------------------------------------------------ links
    def hop_ns(self, links: "np.ndarray | list[int]", nbytes: "np.ndarray | float", messages: "np.ndarray | int" = 1) -> np.ndarray:
        """The hop cost: ``messages x latency + nbytes / bandwidth`` for each of ``links`` (ns).

        For one message (``messages=1``) it is the time ``nbytes`` take to cross the link alone
        and, in tacos mode, how long they hold it -- what the TACOS matcher plans with. For
        several messages of ``nbytes`` in total it is how long they hold the link one after
        the other in tacos mode (``best``'s lower bound). Exact floats, as tacos mode times
        every hop; :meth:`hop_times` gives a mode's truncated times.

        >>> from chakra_collectives.topology import ring
        >>> model = NetworkModel(ring(4))                    # 50 GB/s, 500 ns
        >>> model.hop_ns([0, 1], 2**20).round(1).tolist()
        [20031.2, 20031.2]
        >>> float(model.hop_ns([0], 2 * 2**20, messages=2)[0]) == 2 * float(model.hop_ns([0], 2**20)[0])
        True
        """
        links = np.asarray(links)
        return messages * self.link_latency[links] + nbytes / self.link_rate[links]

    def hop_times(self, links: "np.ndarray | list[int]", nbytes: "np.ndarray | list[int]") -> tuple[np.ndarray, np.ndarray]:
        """``(busy, delivered)`` per hop: how long a message of ``nbytes`` keeps each link busy
        and arrives after, in ns, under the mode (astra-sim: both truncated to whole ns, the
        link busy for the serialization only)."""
        links = np.asarray(links, dtype=np.int64)
        nbytes = np.asarray(nbytes)
        if self.integer_time:
            serialization = nbytes / self.link_rate[links]
            return serialization.astype(np.int64), (self.link_latency[links] + serialization).astype(np.int64)
        delivered = self.hop_ns(links, nbytes)
        return delivered, delivered

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

    def routes_from(self, src: int, dsts: "list[int]") -> list[tuple[int, ...]]:
        """:meth:`route` from ``src`` to each of ``dsts``; the ones not known yet searched
        together, only as far as they lie (:meth:`~chakra_collectives.topology.Topology.routes_from`).

        >>> from chakra_collectives.topology import load_topology
        >>> model = NetworkModel(load_topology("mesh2d:4x4"))
        >>> model.routes_from(3, [4, 7, 3]) == [NetworkModel(load_topology("mesh2d:4x4")).route(3, d) for d in (4, 7, 3)]
        True
        """
        unknown = [dst for dst in dsts if (src, dst) not in self._routes and dst != src and self._ring is None and (src, dst) not in self._direct]
        if unknown:
            for dst, links in zip(unknown, self.topology.routes_from(src, unknown)):
                self._routes[src, dst] = tuple(links)
        return [self.route(src, dst) for dst in dsts]

    def path_links(self, path: "tuple[int, ...] | list[int]") -> tuple[int, ...]:
        """Link ids of an explicit node path (a message's route as an algorithm names it): for
        each hop the link :meth:`route` would take between those nodes (least latency, then the
        one added first). :class:`InputError` when two consecutive nodes have no link.

        >>> from chakra_collectives.topology import switch
        >>> NetworkModel(switch(3)).path_links((0, 3, 2))
        (0, 5)
        """
        links = []
        for a, b in zip(path, path[1:]):
            link = self._direct.get((int(a), int(b)))
            if link is None:
                raise InputError(f"{self.topology.name}: a route crosses {a} -> {b}, which has no link")
            links.append(link)
        return tuple(links)

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
    def local_ns(self, duration_ns: np.ndarray) -> np.ndarray:
        """What local work of these durations costs (ns): unknown (NaN) is 0 ns; in astra-sim
        mode whole microseconds with a 1 ns minimum, as ASTRA-sim charges a COMP node.

        Durations come from :meth:`~chakra_collectives.ir.CollectiveAlgorithm.local_durations`
        (with this model's reduce bandwidth) or from a workload's COMP nodes.

        >>> from chakra_collectives.topology import Topology
        >>> NetworkModel(Topology(1), network_model="astra-sim").local_ns(np.array([float("nan"), 2441.4, 0.0])).tolist()
        [1, 2000, 1]
        >>> NetworkModel(Topology(1)).local_ns(np.array([float("nan"), 2441.4])).tolist()
        [0.0, 2441.4]
        """
        duration = np.nan_to_num(np.asarray(duration_ns, dtype=np.float64), nan=0.0)
        if self.integer_time:
            return np.maximum(1, np.round(duration / 1000.0) * 1000).astype(np.int64)
        return duration

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
