"""Dependency graphs stored as CSR (node ``i`` waits for ``dep_idx[dep_ptr[i]:dep_ptr[i+1]]``).

* :func:`find_cycle` -- a node on a cycle, or behind one, can never run: the replayer names the
  cycle when a workload deadlocks, and the workload reader uses it to tell call-tree
  ``ctrl_deps`` (which older Chakra converters wrote and which close cycles with the data
  dependencies) from real orderings;
* :func:`longest_path` -- when each node finishes if it starts as soon as its dependencies
  have finished and takes its weight: the critical path of a workload's compute.

>>> import numpy as np
>>> dep_ptr, dep_idx = np.array([0, 1, 2, 3, 4]), np.array([1, 2, 0, 0])  # 0 -> 1 -> 2 -> 0; 3 -> 0
>>> find_cycle(dep_ptr, dep_idx)
[0, 1, 2]
>>> find_cycle(np.array([0, 0, 1]), np.array([0])) is None
True
>>> find_cycle(np.array([0, 1]), np.array([0]))  # a node waiting for itself
[0]
>>> longest_path(np.array([0, 0, 1, 2, 4]), np.array([0, 0, 1, 2]), np.array([5.0, 1, 2, 3])).tolist()
[5.0, 6.0, 7.0, 10.0]
"""

from __future__ import annotations

import numpy as np


def find_cycle(dep_ptr: np.ndarray, dep_idx: np.ndarray, among: np.ndarray | None = None) -> list[int] | None:
    """One cycle as ``[a, b, ..., z]`` (a waits for b, ..., z waits for a), or ``None`` if acyclic.

    ``among`` (node indices) restricts the search to the subgraph they induce, e.g. the nodes
    a replay left stuck. Negative entries of ``dep_idx`` (absent nodes) are ignored. Strongly
    connected components (scipy) find where the cycles are; a walk inside one names a cycle.
    """
    size = len(dep_ptr) - 1
    inside = np.zeros(size, dtype=bool)
    inside[np.arange(size) if among is None else np.asarray(among, dtype=np.int64)] = True
    owner = np.repeat(np.arange(size), np.diff(dep_ptr))
    keep = (dep_idx >= 0) & inside[owner]
    keep[keep] = inside[dep_idx[keep]]
    waiter, waited = owner[keep], dep_idx[keep]
    if not len(waiter) or not np.any(waited >= waiter):
        return None  # every dependency points to an earlier node: acyclic
    loops = waiter[waiter == waited]
    if len(loops):
        return [int(loops[0])]
    from scipy.sparse import csr_matrix  # only when a dependency points forward (scipy takes ~0.3 s to import)
    from scipy.sparse.csgraph import connected_components

    graph = csr_matrix((np.ones(len(waiter), dtype=np.int8), (waiter, waited)), shape=(size, size))
    _, labels = connected_components(graph, directed=True, connection="strong")
    sizes = np.bincount(labels)
    cyclic = np.flatnonzero(sizes > 1)
    if not len(cyclic):
        return None
    member = labels == cyclic[0]
    path: list[int] = []
    seen: dict[int, int] = {}
    node = int(np.argmax(member))
    while node not in seen:  # inside a strongly connected component every node waits for another member
        seen[node] = len(path)
        path.append(node)
        deps = dep_idx[dep_ptr[node] : dep_ptr[node + 1]]
        node = int(next(d for d in deps.tolist() if d >= 0 and member[d]))
    return path[seen[node] :]


def longest_path(dep_ptr: np.ndarray, dep_idx: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``finish[i] = weight[i] + max(finish[d] for d in deps(i))`` (0 without deps), in topological
    levels with numpy; nodes on or behind a cycle get NaN. Negative ``dep_idx`` are ignored."""
    size = len(dep_ptr) - 1
    owner = np.repeat(np.arange(size), np.diff(dep_ptr))
    valid = dep_idx >= 0
    waiter, waited = owner[valid], dep_idx[valid]
    pending = np.bincount(waiter, minlength=size)
    order = np.argsort(waited, kind="stable")
    successors = waiter[order]
    succ_ptr = np.concatenate([[0], np.cumsum(np.bincount(waited, minlength=size))])
    start = np.zeros(size)
    finish = np.full(size, np.nan)
    stamp = np.zeros(size, dtype=np.int64)
    frontier = np.flatnonzero(pending == 0)
    while len(frontier):
        finish[frontier] = start[frontier] + weight[frontier]
        lengths = succ_ptr[frontier + 1] - succ_ptr[frontier]
        if not lengths.sum():
            break
        firsts = np.repeat(succ_ptr[frontier] - np.cumsum(lengths) + lengths, lengths)
        edges = firsts + np.arange(int(lengths.sum()))
        targets = successors[edges]
        np.maximum.at(start, targets, np.repeat(finish[frontier], lengths))
        np.subtract.at(pending, targets, 1)
        ready = targets[pending[targets] == 0]
        stamp[ready] = np.arange(len(ready))  # a node reached by several edges is kept once (no sort)
        frontier = ready[stamp[ready] == np.arange(len(ready))]
    return finish


REDUCTION_MAX_NODES = 16384
""":func:`transitive_reduction` keeps one bit per (node, ancestor): n^2/8 bytes, 32 MiB here."""


def transitive_reduction(dep_ptr: np.ndarray, dep_idx: np.ndarray) -> np.ndarray | None:
    """Which dependencies to keep so that no node waits for a dependency another of its
    dependencies already waits for (directly or not), and no dependency twice: the same
    readiness for every node, with the fewest edges. ``None`` when the graph has a cycle or
    more than :data:`REDUCTION_MAX_NODES` nodes (nothing is dropped then).

    >>> keep = transitive_reduction(np.array([0, 0, 1, 3]), np.array([0, 1, 0]))  # 2 waits for 1 and 0; 1 for 0
    >>> keep.tolist()
    [True, True, False]
    """
    size = len(dep_ptr) - 1
    if size == 0 or size > REDUCTION_MAX_NODES or np.any(dep_idx < 0):
        return None
    order = topological_order(dep_ptr, dep_idx)
    if order is None:
        return None
    words = (size + 63) // 64
    owner = np.repeat(np.arange(size), np.diff(dep_ptr))
    word, bit = dep_idx >> 6, (dep_idx & 63).astype(np.uint64)
    one = np.uint64(1)
    direct = np.zeros((size, words), dtype=np.uint64)
    np.bitwise_or.at(direct, (owner, word), one << bit)
    _, first = np.unique(owner * size + dep_idx, return_index=True)
    keep = np.zeros(len(dep_idx), dtype=bool)
    keep[first] = True  # a dependency listed twice is kept once
    ancestors = np.zeros((size, words), dtype=np.uint64)
    for node in order:
        lo, hi = dep_ptr[node], dep_ptr[node + 1]
        if lo == hi:
            continue
        reach = np.bitwise_or.reduce(ancestors[dep_idx[lo:hi]], axis=0)
        keep[lo:hi] &= ((reach[word[lo:hi]] >> bit[lo:hi]) & one) == 0
        ancestors[node] = reach | direct[node]
    return keep


def topological_order(dep_ptr: np.ndarray, dep_idx: np.ndarray) -> list[int] | range | None:
    """Nodes in an order where every node comes after its dependencies (``None``: a cycle).

    >>> list(topological_order(np.array([0, 1, 1]), np.array([1])))
    [1, 0]
    """
    size = len(dep_ptr) - 1
    owner = np.repeat(np.arange(size), np.diff(dep_ptr))
    if np.all(dep_idx < owner):
        return range(size)  # the file order already is one
    pending = np.diff(dep_ptr).tolist()
    by_dep = np.argsort(dep_idx, kind="stable")
    waiters = owner[by_dep].tolist()
    first = np.concatenate([[0], np.cumsum(np.bincount(dep_idx, minlength=size))]).tolist()
    order = [i for i in range(size) if pending[i] == 0]
    for node in order:  # grows while it is walked (Kahn)
        for waiter in waiters[first[node] : first[node + 1]]:
            pending[waiter] -= 1
            if pending[waiter] == 0:
                order.append(waiter)
    return order if len(order) == size else None
