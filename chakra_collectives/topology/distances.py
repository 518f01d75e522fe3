"""Hop distances over a topology's links: breadth-first search.

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

import numpy as np

SMALL_GRAPH_NODES = 256
"""Up to this many nodes the search is dense (one matrix product per level)."""


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


__all__ = ["SMALL_GRAPH_NODES", "hop_distances"]
