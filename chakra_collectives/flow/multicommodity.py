"""The exact bandwidth bound of a unicast demand: a multicommodity-flow linear program.

The least ``T`` for which a flow carries every chunk from its holder to its target with every
link carrying at most ``T x bandwidth`` bytes: one commodity per holder (a single-source flow to
many sinks decomposes into paths, so grouping by source is exact), solved by HiGHS (scipy). Every
schedule's transfers are such a flow, store-and-forward relays included, so ``T`` bounds the time
of any algorithm; it is at least every cut bound.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.ir.demand import chunk_demand
>>> from chakra_collectives.topology import ring
>>> d = chunk_demand(Collective.ALL_TO_ALL, num_ranks=4, chunk_bytes=2**30 / 1e9)   # 1 ns per chunk and link
>>> round(flow_bound(ring(4, bandwidth_gbps=1.0), d), 6)   # 16 chunk-hops over 8 links
2.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chakra_collectives.ir.demand import ChunkDemand
from chakra_collectives.topology import Topology
from chakra_collectives.units import bytes_per_ns

EXACT_FLOW_VARIABLES = 2**17
"""Largest linear program (commodities x links) :func:`flow_bound` solves: every suite fabric up to
64 NPUs (CPU seconds measured for an all-to-all: switch:64 and dgx:4x8 under 0.1, torus2d:8x8
2.3, hypercube:4x4x4 6.6, torus3d:4x4x4 8.1 with 24,576 variables); a 256-NPU torus (393,216)
is past it and gets the cut bound only."""

FLOW_TOLERANCE = 1e-7
"""The LP's optimum is lowered by this fraction: HiGHS's tolerances must not lift it above the true bound."""


def flow_bound(topology: Topology, demand: ChunkDemand) -> float | None:
    """The exact bandwidth bound (ns) of a unicast demand by a multicommodity-flow LP, or ``None``
    (a chunk with several holders or targets, or more than :data:`EXACT_FLOW_VARIABLES` variables)."""
    if np.any(np.diff(demand.h_ptr) != 1) or np.any(np.diff(demand.t_ptr) != 1):
        return None
    sources, source_index = np.unique(demand.h_npu, return_inverse=True)
    need = np.zeros((len(sources), topology.num_nodes))
    np.add.at(need, (source_index, demand.t_npu), 1.0)
    solved = commodity_flows(topology, sources, need, demand.chunk_bytes)
    return None if solved is None else solved[0] * (1 - FLOW_TOLERANCE)


def commodity_flows(
    topology: Topology,
    sources: np.ndarray,
    need: np.ndarray,
    chunk_bytes: float,
    *,
    fewest_hops: bool = False,
    hold_ns: np.ndarray | None = None,
    unusable_ns: np.ndarray | None = None,
) -> tuple[float, np.ndarray] | None:
    """The multicommodity-flow LP's optimum: the least ``T`` (ns) and, per commodity, the chunks it
    sends over each link (``(commodities, links)``), when commodity ``i`` starts at node
    ``sources[i]`` and must deliver ``need[i, v]`` chunks of ``chunk_bytes`` to node ``v``;
    ``None`` past :data:`EXACT_FLOW_VARIABLES` variables or when some node cannot be reached.
    ``fewest_hops``: of the flows that reach ``T`` (within :data:`FLOW_TOLERANCE`), one that crosses
    the fewest links in all (a second LP), so that no chunk goes further than the bound needs.
    For planning rather than bounding: ``hold_ns`` (per link) is how long a chunk holds it
    (default ``chunk_bytes`` over its bandwidth; with the latency, a message per chunk), and
    ``unusable_ns`` (per link) the part of ``T`` it cannot carry anything (the fill before the
    first chunk can reach it, the drain after): link ``l`` carries at most ``(T - unusable_ns[l]) / hold_ns[l]`` chunks.

    >>> from chakra_collectives.topology import ring
    >>> t, flows = commodity_flows(ring(4, bandwidth_gbps=1.0), np.array([0]), np.array([[0.0, 0.0, 2.0, 0.0]]), 2**30 / 1e9)
    >>> round(t, 6), round(float(flows.sum()), 6)   # 2 chunks, 2 hops away: one each way round
    (1.0, 4.0)
    """
    from scipy.sparse import coo_matrix

    arrays = topology.link_arrays
    src, dst = arrays["src"].astype(np.int64), arrays["dst"].astype(np.int64)
    num_links, nodes = len(src), topology.num_nodes
    k = len(sources)
    if k * num_links > EXACT_FLOW_VARIABLES:
        return None
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
    rate = bytes_per_ns(arrays["bandwidth_gbps"].astype(np.float64)) / chunk_bytes if hold_ns is None else 1.0 / np.asarray(hold_ns, dtype=np.float64)
    b_ub = np.zeros(num_links) if unusable_ns is None else -rate * np.asarray(unusable_ns, dtype=np.float64)
    capacity = coo_matrix((np.ones(len(column)), (link, column)), shape=(num_links, k * num_links + 1))
    time_column = coo_matrix((-rate, (np.arange(num_links), np.full(num_links, k * num_links))), shape=(num_links, k * num_links + 1))
    solved = least_time_flows((capacity + time_column).tocsr(), b_ub, a_eq, b_eq, fewest_hops=fewest_hops)
    return None if solved is None else (solved[0], solved[1].reshape(k, num_links))


def least_time_flows(a_ub: Any, b_ub: np.ndarray, a_eq: Any, b_eq: np.ndarray, *, fewest_hops: bool = False) -> tuple[float, np.ndarray] | None:
    """Solve a flow LP whose last variable is the time ``T`` (minimised) and the others are flows
    (``A_ub x <= b_ub``, ``A_eq x = b_eq``, all at least 0): ``(T, flows)``, or ``None`` when it has
    no solution. ``fewest_hops``: then, of the flows within :data:`FLOW_TOLERANCE` of ``T``, one
    with the least total (the fewest link crossings).

    >>> from scipy.sparse import csr_matrix
    >>> # one unit over either of two links, each carrying at most T: T = 0.5
    >>> T, flows = least_time_flows(csr_matrix([[1.0, 0, -1], [0, 1.0, -1]]), np.zeros(2), csr_matrix([[1.0, 1.0, 0]]), np.ones(1))
    >>> round(T, 6), np.round(flows, 6).tolist()
    (0.5, [0.5, 0.5])
    """
    from scipy.optimize import linprog

    num_vars = a_ub.shape[1]
    cost = np.zeros(num_vars)
    cost[-1] = 1.0
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if result.status != 0:
        return None
    best = float(result.x[-1])
    if fewest_hops:
        cost = np.ones(num_vars)
        cost[-1] = 0.0
        bounds = [(0, None)] * (num_vars - 1) + [(0, best * (1 + FLOW_TOLERANCE))]
        shorter = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs")
        if shorter.status == 0:
            result = shorter
    return best, result.x[:-1]
