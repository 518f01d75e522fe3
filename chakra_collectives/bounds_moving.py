"""Lower bounds for collectives that only move data: all-to-all, gather, scatter, patterns, on a fabric or a group of it.

What must move is a list of chunks of ``chunk_bytes``: chunk ``c`` is held before by the NPUs
``H_c`` and must reach the NPUs ``W_c`` (those not in ``H_c``; :class:`ChunkDemand`, built by
:func:`chunk_demand` from a collective, a pattern and a group's placement). Only the demands
that exist count -- an all-to-all over a group of a fabric moves nothing between the other NPUs,
which only carry traffic:

``ingress_ns``
    per NPU, the chunks it must receive over its incoming links, and the chunks only it holds
    that others need over its outgoing ones;
``cut_ns``
    over candidate node sets ``S`` (every NPU alone and every prefix of the NPU orders of
    :func:`~chakra_collectives.bounds.fast_lower_bounds`, switches in or out): the chunks held
    only inside ``S`` and wanted outside must leave through ``B_out(S)``, those held only outside
    and wanted inside must enter through ``B_in(S)``;
``latency_ns``
    the largest least-latency path from a chunk's nearest holder to one of its targets;
``flow_ns`` (``method="exact"``, every chunk with one holder and one target, up to
:data:`EXACT_FLOW_VARIABLES` variables)
    the exact bandwidth bound: the least ``T`` for which a multicommodity flow carries every
    chunk from its holder to its target with every link carrying at most ``T x bandwidth``
    bytes (one commodity per holder, a linear program solved by HiGHS). Every schedule's
    transfers are such a flow, relays included, so ``T`` bounds any algorithm; it is at least
    every cut bound. torus2d:8x8 (64 sources x 256 links) takes about 1 s.

>>> from chakra_collectives.topology import torus2d
>>> d = chunk_demand(Collective.ALL_TO_ALL, num_ranks=16, chunk_bytes=4 * 2**20)
>>> b = moving_lower_bounds(torus2d(4, 4), d, Collective.ALL_TO_ALL, 64 * 2**20)
>>> round(b.cut_ns), round(b.flow_ns), round(b.best_ns)   # the bisection: 0.625 ms
(625000, 625000, 625000)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.bounds import MOVING, LowerBounds, _latency_graph, _Links
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.ir.demand import demand_for
from chakra_collectives.ir.pattern import ChunkPattern
from chakra_collectives.topology import Topology
from chakra_collectives.units import bytes_per_ns

EXACT_FLOW_VARIABLES = 2**17
"""Largest linear program (commodities x links) ``method="exact"`` solves for ``flow_ns``
(torus2d:8x8: 16,384 variables, about 1 s; 64-NPU fabrics stay under a few seconds)."""


@dataclass(frozen=True)
class ChunkDemand:
    """Chunks to move, in fabric NPU ids: holders ``h_npu[h_ptr[c]:h_ptr[c+1]]``, targets likewise."""

    num_npus: int
    chunk_bytes: float
    h_ptr: np.ndarray
    h_npu: np.ndarray
    t_ptr: np.ndarray
    t_npu: np.ndarray

    @property
    def num_chunks(self) -> int:
        return len(self.h_ptr) - 1


def chunk_demand(
    collective: Collective,
    *,
    num_ranks: int,
    chunk_bytes: float,
    chunks_per_npu: int = 1,
    root: int = 0,
    pattern: ChunkPattern | None = None,
    placement: tuple[int, ...] | None = None,
    num_npus: int | None = None,
) -> ChunkDemand:
    """The chunks ``collective`` over ``num_ranks`` ranks moves, rank ``r`` on NPU ``placement[r]`` (default ``r``).

    >>> d = chunk_demand(Collective.GATHER, num_ranks=3, chunk_bytes=8.0, root=1, placement=(4, 5, 6), num_npus=8)
    >>> d.h_npu.tolist(), d.t_npu.tolist()
    ([4, 6], [5, 5])
    """
    if collective not in MOVING:
        raise InputError(f"{collective.value} is not a collective that only moves data")
    placed = np.arange(num_ranks) if placement is None else np.asarray(placement, dtype=np.int64)
    if collective is Collective.PATTERN:
        if pattern is None:
            raise InputError("a pattern collective needs its pattern")
        holders = [placed[list(h)] for h in pattern.holders]
        targets = [placed[sorted(set(t) - set(h))] for h, t in zip(pattern.holders, pattern.targets)]
        keep = [i for i, t in enumerate(targets) if len(t)]
        h_ptr = np.concatenate([[0], np.cumsum([len(holders[i]) for i in keep])]).astype(np.int64)
        t_ptr = np.concatenate([[0], np.cumsum([len(targets[i]) for i in keep])]).astype(np.int64)
        h_npu = np.concatenate([holders[i] for i in keep]) if keep else np.zeros(0, np.int64)
        t_npu = np.concatenate([targets[i] for i in keep]) if keep else np.zeros(0, np.int64)
    else:
        pieces = demand_for(collective, num_npus=num_ranks, chunks_per_npu=chunks_per_npu, root=root)
        h_ptr = np.arange(pieces.num_pieces + 1, dtype=np.int64)
        h_npu = placed[pieces.origin]
        t_ptr, t_npu = pieces.dest_ptr.astype(np.int64), placed[pieces.dest]
    return ChunkDemand(int(num_npus if num_npus is not None else num_ranks), float(chunk_bytes), h_ptr, h_npu.astype(np.int64), t_ptr, t_npu.astype(np.int64))


def moving_lower_bounds(topology: Topology, demand: ChunkDemand, collective: Collective, size_bytes: int, *, method: str = "exact") -> LowerBounds:
    """Ingress, cut, latency and (exact) flow bounds of ``demand`` on ``topology`` (see the module docstring)."""
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
    latency = _latency(topology, demand)
    flow = None
    if method == "exact":
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


def _latency(topology: Topology, demand: ChunkDemand) -> float:
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


def flow_bound(topology: Topology, demand: ChunkDemand) -> float | None:
    """The exact bandwidth bound (ns) of a unicast demand by a multicommodity-flow LP, or ``None``
    (a chunk with several holders or targets, or more than :data:`EXACT_FLOW_VARIABLES` variables)."""
    if np.any(np.diff(demand.h_ptr) != 1) or np.any(np.diff(demand.t_ptr) != 1):
        return None
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    arrays = topology.link_arrays
    src, dst = arrays["src"].astype(np.int64), arrays["dst"].astype(np.int64)
    num_links, nodes = len(src), topology.num_nodes
    sources, source_index = np.unique(demand.h_npu, return_inverse=True)
    k = len(sources)
    if k * num_links > EXACT_FLOW_VARIABLES:
        return None
    # demand in chunks: commodity s must deliver need[s, v] chunks to node v
    need = np.zeros((k, nodes))
    np.add.at(need, (source_index, demand.t_npu), 1.0)
    commodity = np.repeat(np.arange(k), num_links)
    link = np.tile(np.arange(num_links), k)
    column = commodity * num_links + link
    # conservation at every node but the commodity's source: in - out = need
    rows = np.concatenate([commodity * nodes + dst[link], commodity * nodes + src[link]])
    values = np.concatenate([np.ones(len(column)), -np.ones(len(column))])
    columns = np.concatenate([column, column])
    equality = coo_matrix((values, (rows, columns)), shape=(k * nodes, k * num_links + 1)).tocsr()
    keep = np.ones(k * nodes, dtype=bool)
    keep[np.arange(k) * nodes + sources] = False
    a_eq, b_eq = equality[keep], need.reshape(-1)[keep]
    # capacity: chunks over a link <= T x its rate in chunks per ns
    rate = bytes_per_ns(arrays["bandwidth_gbps"].astype(np.float64)) / demand.chunk_bytes
    capacity = coo_matrix((np.ones(len(column)), (link, column)), shape=(num_links, k * num_links + 1))
    time_column = coo_matrix((-rate, (np.arange(num_links), np.full(num_links, k * num_links))), shape=(num_links, k * num_links + 1))
    a_ub = (capacity + time_column).tocsr()
    cost = np.zeros(k * num_links + 1)
    cost[-1] = 1.0
    result = linprog(cost, A_ub=a_ub, b_ub=np.zeros(num_links), A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if result.status != 0:
        return None
    return float(result.x[-1]) * (1 - FLOW_TOLERANCE)


FLOW_TOLERANCE = 1e-7
"""The LP's optimum is lowered by this fraction: HiGHS's tolerances must not lift it above the true bound."""
