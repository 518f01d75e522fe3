"""Distances over a topology's links: hops (breadth-first search) and least latency (Dijkstra).

Small graphs are searched with dense numpy arrays, larger ones with SciPy's sparse graphs; both
give the same distances (``inf`` where a node cannot be reached). The small path keeps SciPy out
of small commands: importing it costs about 0.2 s, more than a small default ``synth`` spends
on anything else.

>>> import numpy as np
>>> hop_distances(3, np.array([0, 1, 2]), np.array([1, 2, 0])).tolist()
[[0.0, 1.0, 2.0], [2.0, 0.0, 1.0], [1.0, 2.0, 0.0]]
>>> hop_distances(3, np.array([0]), np.array([1]), sources=np.array([1])).tolist()
[[inf, 0.0, inf]]
"""

from __future__ import annotations

import heapq
import math
import sys

import numpy as np

SMALL_GRAPH_NODES = 256
"""Up to this many nodes the search is dense (one matrix product per level)."""

SMALL_DIJKSTRA_WORK = 2**17
"""Sources x edges up to which :func:`least_latency` runs Dijkstra in pure Python while SciPy is
not loaded yet (a 128-NPU A100 fabric's edge splitting: about 73K in all, some milliseconds)."""


def hop_distances(num_nodes: int, src: np.ndarray, dst: np.ndarray, *, sources: np.ndarray | None = None) -> np.ndarray:
    """``[i, v]``: links crossed from ``sources[i]`` (every node when omitted) to node ``v``
    along the directed links ``src -> dst``; ``inf`` when ``v`` cannot be reached."""
    sources = np.arange(num_nodes) if sources is None else np.asarray(sources)
    if num_nodes <= SMALL_GRAPH_NODES:
        return _dense_breadth_first(num_nodes, src, dst, sources)
    from scipy.sparse import csr_matrix  # imported when a large graph needs it (start-up time)
    from scipy.sparse.csgraph import shortest_path

    graph = csr_matrix((np.ones(len(src)), (src, dst)), shape=(num_nodes, num_nodes))
    return shortest_path(graph, method="D", directed=True, unweighted=True, indices=sources)


def _dense_breadth_first(num_nodes: int, src: np.ndarray, dst: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """Level-synchronous search over a dense adjacency matrix, all sources at once."""
    adjacency = np.zeros((num_nodes, num_nodes), dtype=np.float32)
    adjacency[src, dst] = 1.0
    distances = np.full((len(sources), num_nodes), np.inf)
    frontier = np.zeros((len(sources), num_nodes), dtype=bool)
    frontier[np.arange(len(sources)), sources] = True
    level = 0
    while frontier.any():
        distances[frontier] = level
        level += 1
        frontier = (frontier.astype(np.float32) @ adjacency > 0) & np.isinf(distances)
    return distances


def least_latency(num_nodes: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, sources) -> np.ndarray:
    """``[i, v]``: the least total ``weight`` (positive) of a path from ``sources[i]`` to node ``v``
    along the directed edges ``src -> dst`` (distinct); ``inf`` when there is none. SciPy's
    Dijkstra, or the same in pure Python while SciPy is not loaded and the work is small
    (:data:`SMALL_DIJKSTRA_WORK`): with positive weights both settle every node at the least of
    ``distance[u] + weight`` over its edges, the same floating-point sums.

    >>> least_latency(3, np.array([0, 1, 0]), np.array([1, 2, 2]), np.array([1.0, 2.0, 5.0]), [0, 2]).tolist()
    [[0.0, 1.0, 3.0], [inf, inf, 0.0]]
    """
    sources = [int(s) for s in sources]
    if "scipy.sparse.csgraph" in sys.modules or len(sources) * len(src) > SMALL_DIJKSTRA_WORK:
        from scipy.sparse import csr_array
        from scipy.sparse.csgraph import dijkstra

        graph = csr_array((np.asarray(weight, dtype=np.float64), (np.asarray(src), np.asarray(dst))), shape=(num_nodes, num_nodes))
        return dijkstra(graph, directed=True, indices=sources).reshape(len(sources), num_nodes)
    return np.array(dijkstra_in_python(num_nodes, src, dst, weight, sources), dtype=np.float64).reshape(len(sources), num_nodes)


def dijkstra_in_python(num_nodes: int, src, dst, weight, sources) -> list[list[float]]:
    """:func:`least_latency` in pure Python, as lists (parallel edges allowed: the lightest
    counts): Dijkstra with a heap, cheaper than importing SciPy on small graphs.

    >>> dijkstra_in_python(3, [0, 0, 1], [1, 1, 2], [4.0, 1.0, 2.0], [0])
    [[0.0, 1.0, 3.0]]
    """
    out: list[list[tuple[int, float]]] = [[] for _ in range(num_nodes)]
    for u, v, w in zip(np.asarray(src).tolist(), np.asarray(dst).tolist(), np.asarray(weight, dtype=np.float64).tolist()):
        out[u].append((v, w))
    rows = []
    for source in sources:
        distance = [math.inf] * num_nodes
        distance[source] = 0.0
        heap = [(0.0, source)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > distance[u]:
                continue
            for v, w in out[u]:
                if d + w < distance[v]:
                    distance[v] = d + w
                    heapq.heappush(heap, (d + w, v))
        rows.append(distance)
    return rows


__all__ = ["SMALL_DIJKSTRA_WORK", "SMALL_GRAPH_NODES", "dijkstra_in_python", "hop_distances", "least_latency"]
