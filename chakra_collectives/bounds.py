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
max-flows). On any topology whose NPUs all have the same bandwidth (rings, tori, hypercubes,
switches, fully-connected) the first is ``2(N-1)/N * M / B``: **twice the All-Gather ingress
bound**, as docs/bounds.md states. Doubling per-NPU or cut bounds is *not* valid in general: on
heterogeneous topologies an algorithm can spare a weak NPU (one value in, one out) while the
strong ones do the rest, and TACOS does (``tests/test_bounds.py`` keeps such a case). The
latency bound of All-Reduce is the one-way ``latency_ns`` (a direct algorithm crosses the
network once).

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

import networkx as nx
import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.flow import CapacityGraph, FlowNetwork, max_cut_ratio
from chakra_collectives.flow.cut_ratio import default_sinks
from chakra_collectives.ir import Collective
from chakra_collectives.topology import Topology
from chakra_collectives.units import bytes_per_ns, parse_size

SUPPORTED = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)


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

    @property
    def best_ns(self) -> float:
        """The strongest bound: ``max(ingress_ns, cut_ns, latency_ns)``."""
        return max(self.ingress_ns, self.cut_ns, self.latency_ns)

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
        }
        if self.reduce_scatter_all_gather_ns is not None:
            document["reduce_scatter_all_gather_ns"] = self.reduce_scatter_all_gather_ns
        return document


def lower_bounds(
    topology: Topology,
    collective: Collective | str,
    size_bytes: int | str,
    *,
    sinks: Iterable[int] | None = None,
) -> LowerBounds:
    """Ingress, cut and latency bounds of ``collective`` of ``size_bytes`` on ``topology``.

    ``sinks`` limits the NPUs tried as the one a cut set leaves out (default:
    :func:`~chakra_collectives.flow.cut_ratio.default_sinks` -- one per symmetry class of
    NPUs when the builder knows the classes, ``[0]`` when ``topology.uniform``, else all; each
    is exact). Any subset still gives a valid, possibly weaker, bound.

    ``collective`` and ``size_bytes`` take what :func:`~chakra_collectives.synth.synthesize`
    takes: ``"all-reduce"`` or a :class:`Collective`, ``"12MiB"`` or bytes.

    Raises :class:`InputError` for other collectives, a non-positive size, or a topology in
    which some NPU cannot reach another.
    """
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    size_bytes = parse_size(size_bytes) if isinstance(size_bytes, str) else size_bytes
    if collective not in SUPPORTED:
        raise InputError(
            f"lower bounds are defined for {', '.join(c.value for c in SUPPORTED)}, not {collective.value}"
        )
    if size_bytes <= 0:
        raise InputError(f"collective size must be positive, got {size_bytes}")
    topology.validate()
    n = topology.num_npus
    if n == 1:
        return LowerBounds(collective, size_bytes, 0.0, 0.0, 0.0)
    if sinks is None:
        sinks = default_sinks(topology)
    sink_list = sorted(set(sinks))
    if not sink_list or sink_list[0] < 0 or sink_list[-1] >= n:
        raise InputError(f"sinks must name NPUs 0..{n - 1}")
    share = size_bytes / n
    latency = _latency_bound(topology)
    if collective is Collective.ALL_REDUCE:
        ingress, cut, cut_set = _all_reduce_bounds(topology, size_bytes)
        phases = sum(max(_phase_bounds(topology, share, reverse=reverse, sinks=sink_list)[:2]) for reverse in (True, False))
        return LowerBounds(collective, size_bytes, ingress, cut, latency, cut_set, reduce_scatter_all_gather_ns=phases)
    ingress, cut, cut_set = _phase_bounds(topology, share, reverse=collective is Collective.REDUCE_SCATTER, sinks=sink_list)
    return LowerBounds(collective, size_bytes, ingress, cut, latency, cut_set)


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
    cut_ns = max(ns(size_bytes, weakest), ingress_ns)
    return ingress_ns, cut_ns, tuple(sorted(weakest_set))


def _weakest_npu_cut(topology: Topology, capacity: dict[tuple[int, int], int]) -> tuple[int, frozenset[int]]:
    """``min over node sets S separating two NPUs of B_out(S)`` and such a set.

    Every such cut separates NPU 0 from some NPU ``t``, one way or the other: ``2(N-1)``
    max-flows in general, ``N-1`` when every NPU looks alike (``uniform``), and one
    Stoer-Wagner global min cut when every link has an equal reverse and there are no switches
    (then every cut separates NPUs and both directions weigh the same).
    """
    n = topology.num_npus
    symmetric = all(capacity.get((v, u)) == b for (u, v), b in capacity.items())
    if symmetric and topology.num_switches == 0:
        undirected = nx.Graph()
        undirected.add_nodes_from(range(n))
        undirected.add_weighted_edges_from((u, v, b) for (u, v), b in capacity.items() if u < v)
        value, (side, _) = nx.stoer_wagner(undirected)
        return value, frozenset(side)
    network = FlowNetwork(
        topology.num_nodes, src=[u for u, _ in capacity], dst=[v for _, v in capacity], cap=list(capacity.values())
    )
    pairs = [(0, t) for t in range(1, n)]
    if not topology.uniform:
        pairs += [(t, 0) for t in range(1, n)]
    weakest, weakest_pair = None, pairs[0]
    for source, sink in pairs:
        value = network.max_flow(source, sink)
        if weakest is None or value < weakest:
            weakest, weakest_pair = value, (source, sink)
    _, sink_side = network.min_cut(*weakest_pair)
    return weakest, frozenset(np.flatnonzero(~sink_side).tolist())


# ---------------------------------------------------------------------------- latency
def _latency_bound(topology: Topology) -> float:
    """Longest least-latency path between two NPUs (ns)."""
    graph = nx.DiGraph()
    for link in topology.links:
        current = graph.get_edge_data(link.src, link.dst)
        if current is None or link.latency_ns < current["latency"]:
            graph.add_edge(link.src, link.dst, latency=link.latency_ns)
    worst = 0.0
    for npu in range(topology.num_npus):
        lengths = nx.single_source_dijkstra_path_length(graph, npu, weight="latency")
        worst = max(worst, max(lengths.get(v, math.inf) for v in range(topology.num_npus)))
    return float(worst)


__all__ = ["LowerBounds", "lower_bounds"]
