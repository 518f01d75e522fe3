"""Lower bounds on the time of a collective on a topology, and how far an algorithm is from them.

For an All-Gather of ``M`` bytes over ``N`` NPUs, each NPU owning ``M/N`` (``M`` is the
collective's size as everywhere in chakra-collectives: the bytes of the larger per-rank buffer),
with link bandwidths ``b`` in bytes/ns and latencies ``a`` in ns:

``ingress_ns``
    ``max over NPUs v of ((N-1)/N * M) / B_in(v)``: every NPU must receive everyone else's
    share through its incoming links.
``cut_ns`` (ForestColl's cut bound; exact)
    ``max over node sets S (switches allowed) that contain an NPU and leave out at least one
    NPU of (M/N) * |S ∩ NPUs| / B_out(S)``: the shares owned inside ``S`` must all leave it
    through the links out of ``S``. With ``S = V - {v}`` this is the ingress bound, so
    ``cut_ns >= ingress_ns``. It is :func:`chakra_collectives.flow.max_cut_ratio`, the same
    exact computation ForestColl's synthesizer uses for its optimum: Dinkelbach's parametric
    search over integer max-flows, one per sink NPU (one per symmetry class of NPUs) per round.
``latency_ns``
    ``max over ordered NPU pairs (u, v) of the least total latency of a path u -> v``: the
    output of every NPU depends on every other NPU's input.

Reduce-Scatter is the time-reverse of All-Gather: its bounds are All-Gather's on the topology
with every link reversed (``B_in`` becomes ``B_out``: egress bound).

All-Reduce (reductions at NPUs, no compression across positions) has bounds that hold on every
topology: per position, combining ``N`` values and handing the result to ``N-1`` others takes
at least ``2(N-1)`` transfers (Patarasuk and Yuan), so ``2(N-1) M`` bytes leave NPUs:
``ingress_ns = max(2(N-1) M / min(sum of NPU B_out, sum of NPU B_in), M / min over NPUs of
min(B_in, B_out))`` (every NPU sends and receives one value per position); and ``M`` bytes cross
every cut separating NPUs, ``cut_ns = M / (min over such cuts of B_out(S))`` (``2(N-1)``
max-flows). Over ``k`` islands (disjoint node sets that each hold an NPU and together hold all,
the servers of ``dgx:4x8``: :func:`multiway_cut_bound`) the same count holds with the islands as
the NPUs -- the islands' combined values take ``2(k-1)`` transfers between islands per position
(one-way gossip among ``k`` parties needs ``2k-2`` calls: up to the first call after which one
party knows everything, each of the other ``k-1`` has sent one; after it, each of them must
receive one) -- and every such transfer enters an island through its links in and leaves one
through its links out (messages go point to point; a relay does not copy them), so ``cut_ns`` is
also at least ``2(k-1) M / min(sum over islands of B_in, of B_out)``: on ``dgx:4x8``, and over a
group with members in four of its servers, ``1.5 M`` over a server's NICs, not ``M``. On any
topology whose NPUs all have the same bandwidth (rings, tori, hypercubes,
switches, fully-connected) the first is ``2(N-1)/N * M / B``: **twice the All-Gather ingress
bound**, as docs/bounds.md states. Doubling per-NPU or cut bounds is *not* valid in general: on
heterogeneous topologies an algorithm can spare a weak NPU (one value in, one out) while the
strong ones do the rest, and TACOS does (``tests/test_bounds.py`` keeps such a case). The
latency bound of All-Reduce is the one-way ``latency_ns`` (a direct algorithm crosses the
network once).

Collectives that only move data (:data:`MOVING`: All-to-All, gather, scatter, a pattern) are
bounded by their demands (:func:`moving_lower_bounds`): each NPU's chunks in and out over its
links, the chunks that must cross each candidate set of the fast method (below; on meshes and
tori they include the bisections) both ways, the least latency from a chunk's holder to its
targets, and, with ``method="exact"``, the exact multicommodity-flow bound (``flow_ns``).

**Methods.** ``method="exact"`` (the default) computes all of the above. ``method="fast"``
computes bounds that are just as valid but may be weaker, in time linear in the links
(:func:`fast_lower_bounds`): the cut bounds over a family of candidate sets -- every
``V - {v}`` (the ingress bound) and every prefix of the NPUs in a few orders (their ids, whose
prefixes are the planar cuts of meshes and tori; breadth-first from NPU 0 and from the NPU
farthest from it), with the switches inside the set or outside -- and the latency bound from
a double sweep (the farthest NPU from NPU 0, then the farthest from that one). On the suite's
meshes, tori, rings and switches they equal the exact bounds (``tests/test_bounds.py``).

``best_ns = max(ingress_ns, cut_ns, latency_ns)``, and
``efficiency(predicted) = best_ns / predicted`` (1.0 = provably optimal). The bounds hold
for both network modes in :mod:`~chakra_collectives.network` up to ASTRA-sim's truncation of
each hop to whole nanoseconds (which can undercut them by less than 1 ns per hop).

>>> from chakra_collectives.topology import Topology
>>> from chakra_collectives.ir import Collective
>>> ring = Topology(4)
>>> for i in range(4):
...     ring.add_link(i, (i + 1) % 4, 1e9 / 2**30, 10.0)   # 1 byte/ns, one way
>>> b = lower_bounds(ring, Collective.ALL_GATHER, 4000)
>>> b.ingress_ns, b.cut_ns, b.latency_ns, b.best_ns
(3000.0, 3000.0, 30.0, 3000.0)
>>> lower_bounds(ring, Collective.ALL_REDUCE, 4000).best_ns
6000.0
>>> round(b.efficiency(3030.0), 4)
0.9901
>>> a2a = lower_bounds(ring, Collective.ALL_TO_ALL, 4000)   # {0, 1} sends 4000 bytes over 1 -> 2
>>> a2a.ingress_ns, a2a.cut_ns, round(a2a.flow_ns)          # the flow: 6 of 12 pieces go 2-3 hops
(3000.0, 4000.0, 6000)
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Iterable

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.flow import CapacityGraph, FlowNetwork, max_cut_ratio
from chakra_collectives.flow.cut_ratio import default_sinks
from chakra_collectives.flow.global_cut import global_min_cut
from chakra_collectives.ir import Collective
from chakra_collectives.ir.pattern import ChunkPattern
from chakra_collectives.topology import Topology
from chakra_collectives.topology.distances import SMALL_DIJKSTRA_WORK, dijkstra_in_python
from chakra_collectives.topology.groups import group_view
from chakra_collectives.topology.tiers import bandwidth_tiers, island_bandwidths
from chakra_collectives.units import bytes_per_ns, parse_size

if TYPE_CHECKING:  # the moving collectives' demand is imported where they are bounded
    from chakra_collectives.ir.demand import ChunkDemand

SUPPORTED = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)
MOVING = (Collective.ALL_TO_ALL, Collective.GATHER, Collective.SCATTER, Collective.PATTERN)
"""Collectives that only move data: :func:`lower_bounds` bounds them with
:func:`moving_lower_bounds` (their demands, and an exact flow bound)."""
METHODS = ("exact", "fast")
"""How :func:`lower_bounds` computes (see the module docstring)."""


@dataclass(frozen=True)
class LowerBounds:
    """Lower bounds (ns) on any algorithm for ``collective`` of ``size_bytes`` on a topology."""

    collective: Collective
    size_bytes: int
    ingress_ns: float
    cut_ns: float
    latency_ns: float
    cut_nodes: tuple[int, ...] = ()
    """The set S achieving the All-Gather cut bound (the bottleneck; empty when N = 1)."""
    reduce_scatter_all_gather_ns: float | None = None
    """All-Reduce only: the bound (docs/bounds.md) for algorithms that reduce-scatter and then
    all-gather (Reduce-Scatter's bound plus All-Gather's). TACOS and every baseline are such
    algorithms; it is *not* a bound for every All-Reduce (see the module docstring)."""
    method: str = "exact"
    """``"exact"``, or ``"fast"``: valid bounds that may be weaker than the exact ones."""
    flow_ns: float | None = None
    """Collectives that only move data, ``"exact"``: the multicommodity-flow bound
    (:func:`chakra_collectives.flow.multicommodity.flow_bound`; ``None`` when not computed)."""

    @property
    def best_ns(self) -> float:
        """The strongest bound: ``max(ingress_ns, cut_ns, latency_ns, flow_ns)``."""
        return max(self.ingress_ns, self.cut_ns, self.latency_ns, self.flow_ns or 0.0)

    def efficiency(self, predicted_ns: float) -> float:
        """``best_ns / predicted_ns``: 1.0 means the algorithm provably cannot be beaten."""
        if predicted_ns <= 0:
            return 1.0 if self.best_ns == 0 else math.inf
        return self.best_ns / predicted_ns

    def reduce_scatter_all_gather_efficiency(self, predicted_ns: float) -> float | None:
        """All-Reduce only: ``reduce_scatter_all_gather_ns / predicted_ns`` (the reduce-scatter + all-gather efficiency (docs/bounds.md))."""
        if self.reduce_scatter_all_gather_ns is None:
            return None
        return self.reduce_scatter_all_gather_ns / predicted_ns if predicted_ns > 0 else math.inf

    def as_dict(self) -> dict[str, object]:
        document: dict[str, object] = {
            "collective": self.collective.value,
            "size_bytes": self.size_bytes,
            "ingress_ns": self.ingress_ns,
            "cut_ns": self.cut_ns,
            "latency_ns": self.latency_ns,
            "best_ns": self.best_ns,
            "cut_nodes": list(self.cut_nodes),
            "method": self.method,
        }
        if self.reduce_scatter_all_gather_ns is not None:
            document["reduce_scatter_all_gather_ns"] = self.reduce_scatter_all_gather_ns
        if self.flow_ns is not None:
            document["flow_ns"] = self.flow_ns
        return document


def lower_bounds(
    topology: Topology,
    collective: Collective | str,
    size_bytes: int | str,
    *,
    sinks: Iterable[int] | None = None,
    method: str = "exact",
    root: int = 0,
    pattern: ChunkPattern | None = None,
) -> LowerBounds:
    """Ingress, cut and latency bounds of ``collective`` of ``size_bytes`` on ``topology``.

    ``sinks`` limits the NPUs tried as the one a cut set leaves out (default:
    :func:`~chakra_collectives.flow.cut_ratio.default_sinks` -- one per symmetry class of
    NPUs when the builder knows the classes, ``[0]`` when ``topology.uniform``, else all; each
    is exact). Any subset still gives a valid, possibly weaker, bound.

    ``collective`` and ``size_bytes`` take what :func:`~chakra_collectives.synth.synthesize`
    takes: ``"all-reduce"`` or a :class:`Collective`, ``"12MiB"`` or bytes.

    ``method="fast"`` gives valid bounds that may be weaker (:func:`fast_lower_bounds`).

    :data:`MOVING` collectives (``root``: of gather and scatter; ``pattern``: a pattern's) are
    bounded by their demands (:func:`moving_lower_bounds`), over every NPU.

    Raises :class:`InputError` for other collectives, a non-positive size, an unknown method,
    or a topology in which some NPU cannot reach another.
    """
    if method not in METHODS:
        raise InputError(f"unknown bounds method {method!r} (valid: {', '.join(METHODS)})")
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    size_bytes = parse_size(size_bytes) if isinstance(size_bytes, str) else size_bytes
    if collective in MOVING:
        from chakra_collectives.ir.demand import chunk_demand

        if size_bytes <= 0:
            raise InputError(f"collective size must be positive, got {size_bytes}")
        n = topology.num_npus
        chunks = pattern.chunk_count if collective is Collective.PATTERN and pattern is not None else n
        demand = chunk_demand(collective, num_ranks=n, chunk_bytes=size_bytes / chunks, root=root, pattern=pattern)
        return moving_lower_bounds(topology, demand, collective, size_bytes, method=method)
    if collective not in SUPPORTED:
        raise InputError(
            f"lower bounds are defined for {', '.join(c.value for c in SUPPORTED)}, not {collective.value}"
        )
    if size_bytes <= 0:
        raise InputError(f"collective size must be positive, got {size_bytes}")
    topology.validate()
    n = topology.num_npus
    if n == 1:
        return LowerBounds(collective, size_bytes, 0.0, 0.0, 0.0, method=method)
    if method == "fast":
        return fast_lower_bounds(topology, collective, size_bytes)
    if sinks is None:
        sinks = default_sinks(topology)
    sink_list = sorted(set(sinks))
    if not sink_list or sink_list[0] < 0 or sink_list[-1] >= n:
        raise InputError(f"sinks must name NPUs 0..{n - 1}")
    share = size_bytes / n
    # the latency bound last: it runs scipy's Dijkstra if the cut bounds' flows loaded scipy
    if collective is Collective.ALL_REDUCE:
        ingress, cut, cut_set = _all_reduce_bounds(topology, size_bytes)
        phases = sum(max(_phase_bounds(topology, share, reverse=reverse, sinks=sink_list)[:2]) for reverse in (True, False))
        return LowerBounds(collective, size_bytes, ingress, cut, _latency_bound(topology), cut_set, reduce_scatter_all_gather_ns=phases)
    ingress, cut, cut_set = _phase_bounds(topology, share, reverse=collective is Collective.REDUCE_SCATTER, sinks=sink_list)
    return LowerBounds(collective, size_bytes, ingress, cut, _latency_bound(topology), cut_set)


# ---------------------------------------------------------------------------- one phase
def _phase_bounds(topology: Topology, share: float, *, reverse: bool, sinks: list[int]) -> tuple[float, float, tuple[int, ...]]:
    """``(ingress_ns, cut_ns, cut set)`` of an All-Gather (of the reversed topology when ``reverse``)."""
    n = topology.num_npus
    capacity, scale = _integer_bandwidths(topology, reverse=reverse)
    into = [0] * topology.num_nodes
    for (_, v), b in capacity.items():
        into[v] += b
    v_best = min(range(n), key=lambda v: (Fraction(into[v]) / (n - 1), v))
    ingress_ns = share * (n - 1) / bytes_per_ns(float(Fraction(into[v_best], scale)))
    cut = max_cut_ratio(topology, reverse=reverse, sinks=sinks)
    return ingress_ns, max(cut.time_ns(share), ingress_ns), cut.cut_nodes


def _integer_bandwidths(topology: Topology, *, reverse: bool) -> tuple[dict[tuple[int, int], int], int]:
    """Bandwidth of each node pair (parallel links summed) as integers, and their common scale."""
    graph = CapacityGraph.from_topology(topology, reverse=reverse)
    pairs = zip(graph.src.tolist(), graph.dst.tolist(), graph.cap.tolist())
    return {(u, v): c for u, v, c in pairs}, graph.scale


# ---------------------------------------------------------------------------- all-reduce
def _all_reduce_bounds(topology: Topology, size_bytes: int) -> tuple[float, float, tuple[int, ...]]:
    """``(ingress_ns, cut_ns, cut set)`` of an All-Reduce (see the module docstring)."""
    n = topology.num_npus
    capacity, scale = _integer_bandwidths(topology, reverse=False)
    into = [0] * topology.num_nodes
    out = [0] * topology.num_nodes
    for (u, v), b in capacity.items():
        out[u] += b
        into[v] += b

    def ns(nbytes: float, scaled_bandwidth: int) -> float:
        return nbytes / bytes_per_ns(float(Fraction(scaled_bandwidth, scale)))

    aggregate = ns(2 * (n - 1) * size_bytes, min(sum(out[:n]), sum(into[:n])))
    per_npu = ns(size_bytes, min(min(into[v], out[v]) for v in range(n)))
    weakest, weakest_set = _weakest_npu_cut(topology, capacity)
    ingress_ns = max(aggregate, per_npu)
    cut_ns, cut_set = ns(size_bytes, weakest), tuple(sorted(weakest_set))
    multiway_ns, multiway_set = multiway_cut_bound(topology, size_bytes)
    if multiway_ns > cut_ns:
        cut_ns, cut_set = multiway_ns, multiway_set
    return ingress_ns, max(cut_ns, ingress_ns), cut_set


def multiway_cut_bound(topology: Topology, size_bytes: int) -> tuple[float, tuple[int, ...]]:
    """An All-Reduce bound over the fabric's islands (:func:`~chakra_collectives.topology.tiers.bandwidth_tiers`)
    and the island that gives it (the nodes of its least bandwidth in); ``(0.0, ())`` without islands.

    For ``k`` disjoint node sets (islands) that each hold an NPU and together hold all, every
    position takes at least ``2(k-1)`` transfers between islands (the module docstring), each
    entering one island from outside it and leaving one: ``2(k-1) M / min(sum of B_in, sum of
    B_out)`` over the islands. On ``dgx:4x8`` (servers of 200 GB/s of NICs each way) that is
    ``1.5 M / 200 GB/s``, where a cut alone gives ``M / 200 GB/s``.

    >>> from chakra_collectives.topology import load_topology
    >>> ns, island = multiway_cut_bound(load_topology("dgx:4x8"), 64 * 2**20)
    >>> round(ns / 1e3, 2), island                      # 1.5 x 64 MiB / 200 GB/s
    (468.75, (0, 1, 2, 3, 4, 5, 6, 7))
    """
    best, best_set = 0.0, ()
    for labels in bandwidth_tiers(topology):
        into, out = island_bandwidths(topology, labels)
        rate = min(float(into.sum()), float(out.sum()))
        if rate <= 0:
            continue
        found = 2 * (len(into) - 1) * size_bytes / bytes_per_ns(rate)
        if found > best:
            weakest = int(np.argmin(np.minimum(into, out)))
            best, best_set = found, tuple(np.flatnonzero(labels == weakest).tolist())
    return best, best_set


def _weakest_npu_cut(topology: Topology, capacity: dict[tuple[int, int], int]) -> tuple[int, frozenset[int]]:
    """``min over node sets S separating two NPUs of B_out(S)`` and such a set.

    Every such cut separates NPU 0 from some NPU ``t``, one way or the other: the least of
    ``2(N-1)`` max-flows in general, of ``N-1`` when every NPU looks alike (``uniform``) or
    every link has an equal reverse (the two ways then weigh the same). Without switches and
    with equal reverses every cut separates NPUs, so it is one Stoer-Wagner global min cut
    (:func:`~chakra_collectives.flow.global_cut.global_min_cut`) -- and none on a ``uniform``
    such network whose NPU pairs all have one bandwidth: a connected vertex-transitive graph's
    edge connectivity is its degree (Mader, 1971), so the weakest cut leaves one NPU.

    >>> from chakra_collectives.topology import load_topology
    >>> ring = load_topology("ring:6")
    >>> _weakest_npu_cut(ring, _integer_bandwidths(ring, reverse=False)[0])   # two links of 50 GB/s
    (100, frozenset({0}))
    """
    n = topology.num_npus
    symmetric = all(capacity.get((v, u)) == b for (u, v), b in capacity.items())
    if symmetric and topology.num_switches == 0:
        if topology.uniform and len(set(capacity.values())) == 1:
            return sum(b for (u, _), b in capacity.items() if u == 0), frozenset({0})
        return global_min_cut(n, {(u, v): b for (u, v), b in capacity.items() if u < v})
    network = FlowNetwork(
        topology.num_nodes, src=[u for u, _ in capacity], dst=[v for _, v in capacity], cap=list(capacity.values())
    )
    pairs = [(0, t) for t in range(1, n)]
    if not (topology.uniform or symmetric):
        pairs += [(t, 0) for t in range(1, n)]
    weakest, weakest_pair = None, pairs[0]
    for source, sink in pairs:
        value = network.max_flow(source, sink)
        if weakest is None or value < weakest:
            weakest, weakest_pair = value, (source, sink)
    _, sink_side = network.min_cut(*weakest_pair)
    return weakest, frozenset(np.flatnonzero(~sink_side).tolist())


# ---------------------------------------------------------------------------- latency
def _latency_graph(topology: Topology):
    """Least latency of each node pair with a link (parallel links: the fastest), as a sparse matrix."""
    from scipy.sparse import csr_matrix  # imported when used (start-up time)

    arrays = topology.link_arrays
    src, dst, latency = arrays["src"], arrays["dst"], arrays["latency_ns"].astype(np.float64)
    order = np.lexsort((latency, dst, src))
    src, dst, latency = src[order], dst[order], latency[order]
    first = np.ones(len(src), dtype=bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    nodes = topology.num_nodes
    return csr_matrix((latency[first], (src[first], dst[first])), shape=(nodes, nodes))


def _latency_bound(topology: Topology) -> float:
    """Longest least-latency path between two NPUs (ns): Dijkstra from every NPU of
    :func:`latency_sources`, in pure Python while scipy is not loaded and the work is small
    (:data:`~chakra_collectives.topology.distances.SMALL_DIJKSTRA_WORK`; importing scipy costs
    0.15-0.3 s), else scipy's, in batches."""
    n = topology.num_npus
    sources = latency_sources(topology)
    if "scipy.sparse.csgraph" not in sys.modules and len(sources) * len(topology.links) <= SMALL_DIJKSTRA_WORK:
        return _farthest(topology, sources)
    from scipy.sparse.csgraph import dijkstra

    graph = _latency_graph(topology)
    worst = 0.0
    batch = max(1, 2**24 // max(topology.num_nodes, 1))  # 128 MiB of distances at a time
    for first in range(0, len(sources), batch):
        distances = dijkstra(graph, indices=list(sources[first : first + batch]))[:, :n]
        worst = max(worst, float(distances.max()))
    return worst


def latency_sources(topology: Topology) -> list[int]:
    """The NPUs whose least latencies to the others hold the longest one: NPU 0 when every NPU
    looks alike, one per symmetry class when the symmetries also keep every link's latency (an
    automorphism maps each least-latency path onto one as long, so all NPUs of a class are as far
    from their farthest), else every NPU.

    >>> from chakra_collectives.topology import load_topology
    >>> latency_sources(load_topology("torus2d:4x4")), latency_sources(load_topology("mesh2d:4x4"))
    ([0], [0, 1, 4, 5])
    """
    if topology.uniform:
        return [0]
    symmetry = topology.symmetry
    if symmetry is not None and _keeps_latencies(topology, symmetry.generators):
        return list(symmetry.npu_orbits()[0])
    return list(range(topology.num_npus))


def _keeps_latencies(topology: Topology, generators: Iterable[np.ndarray]) -> bool:
    """Whether every node permutation of ``generators`` maps the links onto links of the same
    latencies (as a multiset of ``(source, destination, latency)``)."""
    arrays = topology.link_arrays
    src, dst, latency = arrays["src"].astype(np.int64), arrays["dst"].astype(np.int64), arrays["latency_ns"]
    nodes = topology.num_nodes

    def ordered(pair: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.lexsort((latency, pair))
        return pair[order], latency[order]

    links, latencies = ordered(src * nodes + dst)
    for generator in generators:
        moved, moved_latencies = ordered(generator[src] * nodes + generator[dst])
        if not (np.array_equal(links, moved) and np.array_equal(latencies, moved_latencies)):
            return False
    return True


def _farthest(topology: Topology, sources: Iterable[int]) -> float:
    """The least latency from ``sources`` to the farthest NPU (ns): Dijkstra in Python."""
    arrays = topology.link_arrays
    rows = dijkstra_in_python(topology.num_nodes, arrays["src"], arrays["dst"], arrays["latency_ns"], list(sources))
    return max((max(row[: topology.num_npus]) for row in rows), default=0.0)


def _latency_sweep(topology: Topology) -> float:
    """A lower bound on :func:`_latency_bound`: the farthest NPU from NPU 0 (both ways), then the
    farthest from it (double sweep; exact on rings, meshes and tori)."""
    from scipy.sparse.csgraph import dijkstra

    graph = _latency_graph(topology)
    n = topology.num_npus
    forward = dijkstra(graph, indices=[0])[0, :n]
    backward = dijkstra(graph.T.tocsr(), indices=[0])[0, :n]
    far = int(np.argmax(forward))
    again = dijkstra(graph, indices=[far])[0, :n]
    return float(max(forward.max(), backward.max(), again.max()))


# ---------------------------------------------------------------------------- fast
def fast_lower_bounds(topology: Topology, collective: Collective, size_bytes: int) -> LowerBounds:
    """Valid bounds in time linear in the links (see the module docstring): never above
    :func:`lower_bounds`'s exact ones, equal on the suite's regular topologies.

    >>> from chakra_collectives.topology import mesh2d
    >>> fast = fast_lower_bounds(mesh2d(4, 4), Collective.ALL_GATHER, 2**20)
    >>> exact = lower_bounds(mesh2d(4, 4), Collective.ALL_GATHER, 2**20)
    >>> (fast.cut_ns, fast.latency_ns) == (exact.cut_ns, exact.latency_ns), fast.method
    (True, 'fast')
    """
    n = topology.num_npus
    links = _Links(topology)
    latency = _latency_sweep(topology)
    if collective is Collective.ALL_REDUCE:
        ingress, cut, cut_set = links.all_reduce(size_bytes)
        phases = sum(max(links.phase(size_bytes / n, reverse=reverse)[:2]) for reverse in (True, False))
        return LowerBounds(collective, size_bytes, ingress, cut, latency, cut_set, reduce_scatter_all_gather_ns=phases, method="fast")
    ingress, cut, cut_set = links.phase(size_bytes / n, reverse=collective is Collective.REDUCE_SCATTER)
    return LowerBounds(collective, size_bytes, ingress, cut, latency, cut_set, method="fast")


class _Links:
    """Link arrays and the candidate cut sets of :func:`fast_lower_bounds`."""

    def __init__(self, topology: Topology) -> None:
        arrays = topology.link_arrays
        self.topology = topology
        self.n, self.nodes = topology.num_npus, topology.num_nodes
        self.src, self.dst = arrays["src"].astype(np.int64), arrays["dst"].astype(np.int64)
        self.gbps = arrays["bandwidth_gbps"].astype(np.float64)
        self.orders = self._orders()

    def _orders(self) -> list[np.ndarray]:
        """NPU orders whose prefixes are the candidate sets: ids, and breadth-first (by hops)
        from NPU 0 and from the NPU farthest from it."""
        from scipy.sparse import csr_matrix  # imported when used (start-up time)
        from scipy.sparse.csgraph import dijkstra

        hops = csr_matrix((np.ones(len(self.src)), (self.src, self.dst)), shape=(self.nodes, self.nodes))
        first = dijkstra(hops, indices=[0], unweighted=True)[0, : self.n]
        far = int(np.argmax(first))
        second = dijkstra(hops, indices=[far], unweighted=True)[0, : self.n]
        ids = np.arange(self.n)
        return [ids, np.argsort(first, kind="stable"), np.argsort(second, kind="stable")]

    def _prefix_rates(self, order: np.ndarray, switches_in: bool, reverse: bool) -> np.ndarray:
        """``B_out`` (GB/s) of the sets ``order[:i]`` (+ every switch when ``switches_in``),
        ``i = 1 .. N-1`` (links reversed when ``reverse``)."""
        n = self.n
        position = np.full(self.nodes, -1 if switches_in else n, dtype=np.int64)
        position[order] = np.arange(n)
        src, dst = (self.dst, self.src) if reverse else (self.src, self.dst)
        # link u -> v leaves the set order[:i] (i = 1 .. N-1) when position[u] < i <= position[v]
        low = np.maximum(position[src] + 1, 1)
        high = np.minimum(position[dst], n - 1)
        crossing = low <= high
        delta = np.zeros(n + 1)
        np.add.at(delta, low[crossing], self.gbps[crossing])
        np.add.at(delta, high[crossing] + 1, -self.gbps[crossing])
        return np.cumsum(delta)[1:n]

    def _candidates(self, reverse: bool):
        """Every candidate ``(sizes, B_out, order, switches_in)``."""
        sizes = np.arange(1, self.n)
        for order in self.orders:
            for switches_in in ((False, True) if self.topology.num_switches else (False,)):
                yield sizes, self._prefix_rates(order, switches_in, reverse), order, switches_in

    def _set(self, order: np.ndarray, size: int, switches_in: bool) -> tuple[int, ...]:
        members = order[:size].tolist() + (list(range(self.n, self.nodes)) if switches_in else [])
        return tuple(sorted(members))

    def phase(self, share: float, *, reverse: bool) -> tuple[float, float, tuple[int, ...]]:
        """``(ingress_ns, cut_ns, cut set)`` of an All-Gather (Reduce-Scatter when ``reverse``)."""
        n = self.n
        into = np.bincount(self.src if reverse else self.dst, weights=self.gbps, minlength=self.nodes)[:n]
        v = int(np.argmin(into))
        ingress = share * (n - 1) / bytes_per_ns(float(into[v]))
        best, best_set = ingress, tuple(u for u in range(self.nodes) if u != v)
        for sizes, rates, order, switches_in in self._candidates(reverse):
            times = np.where(rates > 0, share * sizes / bytes_per_ns(np.where(rates > 0, rates, 1.0)), np.inf)
            i = int(np.argmax(times))
            if times[i] > best:
                best, best_set = float(times[i]), self._set(order, int(sizes[i]), switches_in)
        return ingress, best, best_set

    def all_reduce(self, size_bytes: int) -> tuple[float, float, tuple[int, ...]]:
        """``(ingress_ns, cut_ns, cut set)`` of an All-Reduce: the exact ingress bounds, and the
        cut bound over the candidate sets and their complements."""
        n = self.n
        out = np.bincount(self.src, weights=self.gbps, minlength=self.nodes)[:n]
        into = np.bincount(self.dst, weights=self.gbps, minlength=self.nodes)[:n]
        aggregate = 2 * (n - 1) * size_bytes / bytes_per_ns(float(min(out.sum(), into.sum())))
        per_npu = size_bytes / bytes_per_ns(float(np.minimum(into, out).min()))
        ingress = max(aggregate, per_npu)
        v = int(np.argmin(np.minimum(into, out)))
        weakest, weakest_set = float(min(into[v], out[v])), (v,) if out[v] <= into[v] else tuple(u for u in range(self.nodes) if u != v)
        for reverse in (False, True):  # B_in of a set is B_out of its complement
            for sizes, rates, order, switches_in in self._candidates(reverse):
                i = int(np.argmin(rates))
                if rates[i] < weakest:
                    members = self._set(order, int(sizes[i]), switches_in)
                    weakest, weakest_set = float(rates[i]), members if not reverse else tuple(u for u in range(self.nodes) if u not in set(members))
        cut = size_bytes / bytes_per_ns(weakest)
        multiway, multiway_set = multiway_cut_bound(self.topology, size_bytes)
        if multiway > cut:
            cut, weakest_set = multiway, multiway_set
        return ingress, max(cut, ingress), weakest_set


def concurrent_bound_ns(
    topology: Topology, collective: Collective, size_bytes: int, groups: "Iterable[tuple[int, ...]]",
) -> tuple[float, tuple[int, ...]]:
    """A lower bound (ns) on running ``collective`` of ``size_bytes`` over every group of
    ``groups`` (disjoint tuples of fabric NPUs) at the same time, and the node set that gives it.

    For a set ``S`` of nodes, every group with members on both sides must move data across the
    cut, and the groups share its links: an All-Gather (or Reduce-Scatter) of group ``g`` needs
    the ``|g ∩ S|`` shares owned inside to leave ``S`` and the others to enter it, an All-Reduce
    ``M`` bytes each way (no group combines another's data). So the time is at least
    ``sum over split groups of demand / B_out(S)`` (and likewise into ``S``). The sets tried are
    the candidates of :func:`fast_lower_bounds` (prefixes of the NPUs in a few orders, switches
    in or out); the bound is also at least each group's own exact bound alone.

    Four columns of a 4x4 torus, all-gathering at once: alone, a column's member also receives
    through its two row links (relays forward), which halves its bound against its ring's (the
    group bound of :func:`~chakra_collectives.synth.group_bounds`); together, three shares of
    every column must enter the bottom row, and only its 8 vertical links lead into it: twice
    one column's bound alone -- its ring's.

    >>> from chakra_collectives.topology import torus2d
    >>> from chakra_collectives.topology.groups import group_view
    >>> columns = [(c, c + 4, c + 8, c + 12) for c in range(4)]
    >>> together, _ = concurrent_bound_ns(torus2d(4, 4), Collective.ALL_GATHER, 2**20, columns)
    >>> alone = lower_bounds(group_view(torus2d(4, 4), columns[0]).topology, Collective.ALL_GATHER, 2**20).best_ns
    >>> round(together / alone, 6)
    2.0
    """
    groups = [tuple(g) for g in groups]
    links = _Links(topology)
    best, best_set = 0.0, ()
    for g in groups:
        view = group_view(topology, g)
        alone = lower_bounds(view.topology, collective, size_bytes)
        if alone.best_ns > best:
            best, best_set = alone.best_ns, tuple(sorted(int(view.fabric_node[v]) for v in alone.cut_nodes))
    sizes = np.arange(1, links.n)
    every = collective is Collective.ALL_REDUCE
    for order in links.orders:
        position = np.empty(links.n, dtype=np.int64)
        position[order] = np.arange(links.n)
        counts = [(np.searchsorted(np.sort(position[list(g)]), sizes), len(g)) for g in groups]  # members among order[:i]
        out_need = sum(np.where((k > 0) & (k < m), size_bytes if every else size_bytes / m * k, 0.0) for k, m in counts)
        in_need = sum(np.where((k > 0) & (k < m), size_bytes if every else size_bytes / m * (m - k), 0.0) for k, m in counts)
        for switches_in in ((False, True) if topology.num_switches else (False,)):
            for reverse, need in ((False, out_need), (True, in_need)):  # B_in of the set: the reversed links' B_out
                rates = links._prefix_rates(order, switches_in, reverse)
                times = np.where(rates > 0, need / bytes_per_ns(np.where(rates > 0, rates, 1.0)), np.where(need > 0, np.inf, 0.0))
                i = int(np.argmax(times))
                if times[i] > best:
                    best, best_set = float(times[i]), links._set(order, int(sizes[i]), switches_in)
    return best, best_set


# ---------------------------------------------------------------------------- moving collectives
def moving_lower_bounds(topology: Topology, demand: ChunkDemand, collective: Collective, size_bytes: int, *, method: str = "exact") -> LowerBounds:
    """Bounds of a collective that only moves data (``demand``: :func:`~chakra_collectives.ir.demand.chunk_demand`,
    in fabric NPU ids, so a group's demand counts only the pairs that exist) on ``topology``:

    ``ingress_ns``
        per NPU, the chunks it must receive over its incoming links, and the chunks only it
        holds that others need over its outgoing ones;
    ``cut_ns``
        over the candidate sets of :func:`fast_lower_bounds` (every NPU alone, every prefix of
        the NPU orders, switches in or out): chunks held only inside a set and wanted outside
        must leave through ``B_out``, chunks held only outside and wanted inside enter through ``B_in``;
    ``latency_ns``
        the largest least-latency path from a chunk's nearest holder to one of its targets;
    ``flow_ns`` (``method="exact"``)
        the exact bandwidth bound (:func:`~chakra_collectives.flow.multicommodity.flow_bound`:
        unicast demands of up to 2^17 commodity-link variables; ``None`` otherwise).

    >>> from chakra_collectives.topology import torus2d
    >>> from chakra_collectives.ir.demand import chunk_demand
    >>> d = chunk_demand(Collective.ALL_TO_ALL, num_ranks=16, chunk_bytes=4 * 2**20)
    >>> b = moving_lower_bounds(torus2d(4, 4), d, Collective.ALL_TO_ALL, 64 * 2**20)
    >>> round(b.cut_ns), round(b.flow_ns), round(b.best_ns)   # the bisection: 0.625 ms
    (625000, 625000, 625000)
    """
    topology.validate()
    if demand.num_chunks == 0:
        return LowerBounds(collective, size_bytes, 0.0, 0.0, 0.0, method=method)
    n = topology.num_npus
    links = _Links(topology)
    into = np.bincount(links.dst, weights=links.gbps, minlength=links.nodes)[:n]
    out = np.bincount(links.src, weights=links.gbps, minlength=links.nodes)[:n]
    received = np.bincount(demand.t_npu, minlength=n)
    single = np.diff(demand.h_ptr) == 1
    sent = np.bincount(demand.h_npu[demand.h_ptr[:-1][single]], minlength=n)
    cb = demand.chunk_bytes
    per_npu = np.maximum(
        np.where(received > 0, received * cb / bytes_per_ns(np.maximum(into, 1e-300)), 0.0),
        np.where(sent > 0, sent * cb / bytes_per_ns(np.maximum(out, 1e-300)), 0.0),
    )
    v = int(np.argmax(per_npu))
    ingress = float(per_npu[v])
    cut, cut_set = ingress, (v,)
    for order in links.orders:
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        h_pos, t_pos = position[demand.h_npu], position[demand.t_npu]
        starts_h, starts_t = demand.h_ptr[:-1], demand.t_ptr[:-1]
        # S_i = order[:i]: chunks held only inside and wanted outside leave it for i in (max H, max W]
        leave = _crossings(np.maximum.reduceat(h_pos, starts_h), np.maximum.reduceat(t_pos, starts_t), n)
        # held only outside and wanted inside enter it for i in (min W, min H]
        enter = _crossings(np.minimum.reduceat(t_pos, starts_t), np.minimum.reduceat(h_pos, starts_h), n)
        for switches_in in ((False, True) if topology.num_switches else (False,)):
            for counts, reverse in ((leave, False), (enter, True)):
                rates = links._prefix_rates(order, switches_in, reverse)
                times = np.where((rates > 0) & (counts > 0), counts * cb / bytes_per_ns(np.where(rates > 0, rates, 1.0)), 0.0)
                i = int(np.argmax(times))
                if times[i] > cut:
                    cut, cut_set = float(times[i]), links._set(order, i + 1, switches_in)
    latency = _demand_latency(topology, demand)
    flow = None
    if method == "exact":
        from chakra_collectives.flow.multicommodity import flow_bound  # scipy's LP, imported when used

        flow = flow_bound(topology, demand)
    return LowerBounds(collective, size_bytes, ingress, cut, latency, cut_set, method=method, flow_ns=flow)


def _crossings(low: np.ndarray, high: np.ndarray, n: int) -> np.ndarray:
    """How many chunks cross the prefix set of size ``i`` (``i = 1 .. n-1``): ``low < i <= high``."""
    lo, hi = np.maximum(low + 1, 1), np.minimum(high, n - 1)
    keep = lo <= hi
    delta = np.zeros(n + 1)
    np.add.at(delta, lo[keep], 1.0)
    np.add.at(delta, hi[keep] + 1, -1.0)
    return np.cumsum(delta)[1:n]


def _demand_latency(topology: Topology, demand: ChunkDemand) -> float:
    """The largest least latency from a chunk's nearest holder to one of its targets."""
    from scipy.sparse.csgraph import dijkstra

    sources = np.unique(demand.h_npu)
    row_of = np.full(topology.num_npus, -1, dtype=np.int64)
    row_of[sources] = np.arange(len(sources))
    graph = _latency_graph(topology)
    distance = dijkstra(graph, indices=sources)[:, : topology.num_npus]
    chunk_of_target = np.repeat(np.arange(demand.num_chunks), np.diff(demand.t_ptr))
    single = np.diff(demand.h_ptr) == 1
    worst = 0.0
    simple = single[chunk_of_target]
    if simple.any():
        holder = demand.h_npu[demand.h_ptr[chunk_of_target[simple]]]
        worst = float(distance[row_of[holder], demand.t_npu[simple]].max())
    for c in np.flatnonzero(~single).tolist():
        rows = row_of[demand.h_npu[demand.h_ptr[c] : demand.h_ptr[c + 1]]]
        targets = demand.t_npu[demand.t_ptr[c] : demand.t_ptr[c + 1]]
        worst = max(worst, float(distance[np.ix_(rows, targets)].min(axis=0).max()))
    return worst


def store_and_forward_floor_ns(demand_bytes: float, classes: Iterable[tuple[float, float]]) -> float:
    """The least time ``T`` any schedule needs, under the default network model, to push
    ``demand_bytes`` through links each entered from a switch: ``classes`` are ``(total
    bandwidth GB/s, latency ns)`` of each class of such "downlinks", where every message on a
    downlink has just crossed an "uplink" of the same bandwidth and latency that carries
    nothing else (a switch joining like links, or a NIC behind one).

    ``T >= B + sum_c w_c (sqrt(2 a_c T) - a_c)``, ``B = demand / total bandwidth`` (the cut
    bound when the classes are the links of the binding cut), ``w_c`` each class's share of
    the bandwidth (proof: docs/bounds.md, "Store-and-forward through a switch"). A downlink
    can only start a message its uplink has finished, and a link holds each message for its
    latency too, so at every instant the downlinks still owe what the uplinks have not
    finished: their messages' latencies and the part-sent message on each uplink, on average
    at least half a message. Not valid for ``astra-sim`` (latency pipelined).

    >>> round(store_and_forward_floor_ns(3 * 2**30, [(32 * 25.0, 1000.0)]) / 1e3, 1)   # dgx:4x8, 1 GiB All-Gather
    3836.6
    >>> round(3750 / 3836.6, 4)             # the most of the optimal algbw any schedule realises
    0.9774
    """
    classes = list(classes)
    total = sum(gbps for gbps, _ in classes)
    bandwidth_ns = demand_bytes / bytes_per_ns(total)

    def short(t: float) -> float:
        """How far ``t`` is below the right-hand side (positive: infeasible)."""
        fill = sum(gbps / total * max(math.sqrt(2.0 * latency * t) - latency, 0.0) for gbps, latency in classes)
        return bandwidth_ns + fill - t

    low, high = bandwidth_ns, 2.0 * bandwidth_ns + 2.0 * sum(latency for _, latency in classes) + 1.0
    while high - low > 1e-6 * high:  # the right-hand side grows as sqrt(t): one crossing
        middle = (low + high) / 2
        low, high = (middle, high) if short(middle) > 0 else (low, middle)
    return low  # below the least feasible time: still a bound


__all__ = ["LowerBounds", "METHODS", "MOVING", "concurrent_bound_ns", "fast_lower_bounds", "latency_sources", "lower_bounds", "moving_lower_bounds", "multiway_cut_bound", "store_and_forward_floor_ns"]
