"""Max-flow and min-cut on integer capacities, exactly.

:class:`FlowNetwork` holds a directed graph with integer capacities (parallel edges are
summed). Small networks (at most :data:`SMALL_EDGES` edges) run Dinic's algorithm in pure
Python (:class:`SmallFlow`; a value asked alone, push-relabel: :meth:`SmallFlow.flow_value`):
importing scipy would cost more than their flows (about 0.15 s of a 64-NPU ``synth``). Larger ones, where every number a flow can reach fits 32 bits, run
scipy's Dinic (``scipy.sparse.csgraph.maximum_flow``, compiled); otherwise networkx's
preflow-push on Python integers -- slower, never rounded. A min cut is read from the maximum flow's residual
graph: the sink side is every node that cannot be reached from the source.

>>> net = FlowNetwork(4, src=[0, 0, 1, 2], dst=[1, 2, 3, 3], cap=[3, 2, 2, 5])
>>> net.max_flow(0, 3)
4
>>> value, sink_side = net.min_cut(0, 3)
>>> value, sink_side.tolist()
(4, [False, False, True, True])
>>> FlowNetwork(2, src=[0], dst=[1], cap=[2**40]).max_flow(0, 1) == 2**40    # Python integers: exact
True
"""

from __future__ import annotations

import sys
from typing import Sequence

import numpy as np

INT32_LIMIT = 2**31 - 1

SMALL_EDGES = 512
"""Networks of at most this many distinct edges run :class:`SmallFlow` (no scipy, no networkx)."""

ONE_SINK_PYTHON_EDGES = 2**16
"""Edges that flows to a single sink may run through in pure Python, summed over the process,
while scipy is not loaded (:func:`small_edges_for`)."""

ONE_SINK_PYTHON_NODES = 512
"""Nodes up to which a one-sink flow may run in pure Python (:func:`small_edges_for`): Dinic's
phases grow with the network's depth (a ring of 1,024 NPUs: 0.6 s in Python, 0.13 s at 512)."""


class _PythonFlows:
    spent = 0
    """Edges of the one-sink flows :func:`small_edges_for` sent to pure Python so far."""


def small_edges_for(sinks: int, nodes: int, edges: int, default: int | None = None) -> int | None:
    """The ``small_edges`` of a :class:`FlowNetwork` on ``nodes`` nodes and ``edges`` edges whose
    flows go to ``sinks`` sinks: ``default``, except while scipy is not loaded, for one sink on at
    most :data:`ONE_SINK_PYTHON_NODES` nodes, as long as such flows have run through at most
    :data:`ONE_SINK_PYTHON_EDGES` edges in all: then pure Python.

    A fabric whose NPUs all look alike runs a few flows to one sink (a100:16's All-Gather by
    ForestColl and its cut bound: 8 flows on about 4,000 edges, some 0.05 s in all), less than
    importing scipy (about 0.25 s, half of such a ``synth``); many sinks or many flows pay for
    the import with scipy's batched calls. The values are exact either way (only the time
    differs), and so is a min cut's sink side (see :meth:`FlowNetwork.min_cut`).
    """
    if sinks == 1 and nodes <= ONE_SINK_PYTHON_NODES and "scipy.sparse.csgraph" not in sys.modules and _PythonFlows.spent + edges <= ONE_SINK_PYTHON_EDGES:
        _PythonFlows.spent += edges
        return edges
    return default


class SmallFlow:
    """Dinic's max-flow in pure Python on Python integers, for small networks (exact for any size).

    Edges are stored in pairs (edge ``2i`` and its residual twin ``2i + 1``) with their
    endpoints, parallel edges summed beforehand.

    >>> SmallFlow(3, {(0, 1): 2, (1, 2): 1, (0, 2): 1}).max_flow(0, 2)[0]
    2
    """

    def __init__(self, num_nodes: int, capacity: dict[tuple[int, int], int]) -> None:
        self.num_nodes = num_nodes
        self.tail: list[int] = []
        self.head: list[int] = []
        self.capacity: list[int] = []
        self.edges_of: list[list[int]] = [[] for _ in range(num_nodes)]
        for (u, v), c in capacity.items():
            self.edges_of[u].append(len(self.head))
            self.tail.append(u)
            self.head.append(v)
            self.capacity.append(int(c))
            self.edges_of[v].append(len(self.head))
            self.tail.append(v)
            self.head.append(u)
            self.capacity.append(0)

    @classmethod
    def from_arrays(cls, num_nodes: int, tail: np.ndarray, head: np.ndarray, capacity: np.ndarray) -> "SmallFlow":
        """The same as ``SmallFlow(num_nodes, dict(zip(zip(tail, head), capacity)))`` for distinct
        edges in that order, laid out by numpy (a100:16's flow tests: 24,000 edges, about 20 -> 5 ms).

        >>> a = SmallFlow.from_arrays(3, np.array([1, 0, 0]), np.array([2, 1, 2]), np.array([1, 2, 1]))
        >>> b = SmallFlow(3, {(1, 2): 1, (0, 1): 2, (0, 2): 1})
        >>> (a.tail, a.head, a.capacity, a.edges_of) == (b.tail, b.head, b.capacity, b.edges_of)
        True
        """
        flow = cls(num_nodes, {})
        twin_tail = np.empty(2 * len(tail), dtype=np.int64)
        twin_tail[0::2], twin_tail[1::2] = tail, head
        twin_head = np.empty_like(twin_tail)
        twin_head[0::2], twin_head[1::2] = head, tail
        flow.tail, flow.head = twin_tail.tolist(), twin_head.tolist()
        flow.capacity = [0] * len(flow.tail)
        flow.capacity[0::2] = capacity.tolist()
        # each node's edges (both directions) in ascending id, as the constructor appends them
        ids = np.argsort(twin_tail, kind="stable")
        ends = np.cumsum(np.bincount(twin_tail, minlength=num_nodes)).tolist()
        ids_list = ids.tolist()
        flow.edges_of = [ids_list[begin:end] for begin, end in zip([0] + ends[:-1], ends)]
        return flow

    def max_flow(self, source: int, sink: int) -> tuple[int, list[int]]:
        """``(value, residual)``: a maximum flow's value and every edge's residual capacity."""
        residual = list(self.capacity)
        value = 0
        while True:
            level = self._levels(source, residual)
            if level[sink] < 0:
                return value, residual
            cursor = [0] * self.num_nodes
            while True:
                pushed = self._augment(source, sink, level, cursor, residual)
                if not pushed:
                    break
                value += pushed

    def flow_value(self, source: int, sink: int) -> int:
        """A maximum flow's value alone, by push-relabel: every edge out of ``source`` saturated,
        each node's excess pushed downhill from its distance to ``sink`` (first in, first out),
        and a node with excess but no edge downhill lifted above its lowest residual neighbour;
        excess lifted to ``num_nodes`` cannot reach the sink and stays (what reaches the sink is
        then a maximum flow's value: the first phase of Goldberg and Tarjan's algorithm), and so
        is every node above a height that no node holds any more (the gap rule). Where
        every NPU feeds the sink (a cut bound's flows) the excess flows down in about one sweep,
        where :meth:`max_flow`'s Dinic takes a phase per hop of the farthest NPU, each over every
        edge.

        >>> small = SmallFlow(5, {(0, 1): 3, (0, 2): 2, (1, 3): 2, (2, 3): 5, (1, 2): 4, (4, 3): 9})
        >>> small.flow_value(0, 3), small.max_flow(0, 3)[0], small.flow_value(4, 0)
        (5, 5, 0)
        """
        n = self.num_nodes
        head, edges_of = self.head, self.edges_of
        residual = list(self.capacity)
        height = [n] * n  # n: cannot reach the sink
        height[sink] = 0
        frontier = [sink]
        while frontier:  # the distance to the sink along edges with capacity: a valid labelling
            following = []
            for v in frontier:
                above = height[v] + 1
                for e in edges_of[v]:  # e leaves v; its twin e ^ 1 enters v
                    u = head[e]
                    if height[u] == n and u != sink and residual[e ^ 1] > 0:
                        height[u] = above
                        following.append(u)
            frontier = following
        height[source] = n
        at_height = [0] * (2 * n + 1)  # nodes below n at each height (the gap rule)
        for h in height:
            at_height[h] += 1
        excess = [0] * n
        active: list[int] = []
        for e in edges_of[source]:
            if residual[e] > 0:
                v = head[e]
                if not excess[v] and v != sink:
                    active.append(v)
                excess[v] += residual[e]
                residual[e ^ 1] += residual[e]
                residual[e] = 0
        at = 0
        while at < len(active):  # first in, first out
            u = active[at]
            at += 1
            left = excess[u]
            while left and height[u] < n:
                downhill = height[u] - 1
                lowest = 2 * n
                for e in edges_of[u]:
                    room = residual[e]
                    if room:
                        v = head[e]
                        if height[v] == downhill:
                            moved = left if left < room else room
                            residual[e] = room - moved
                            residual[e ^ 1] += moved
                            if not excess[v] and v != sink and v != source:
                                active.append(v)
                            excess[v] += moved
                            left -= moved
                            if not left:
                                break
                        elif height[v] < lowest:
                            lowest = height[v]
                else:  # excess left and nothing downhill: lift u above its lowest residual neighbour
                    was = height[u]
                    height[u] = lowest + 1 if lowest < n else n
                    at_height[was] -= 1
                    at_height[height[u]] += 1
                    if not at_height[was]:  # a gap: nothing above it reaches the sink
                        for v in range(n):
                            if was < height[v] < n:
                                at_height[height[v]] -= 1
                                height[v] = n
                                at_height[n] += 1
            excess[u] = left
        return excess[sink]

    def reachable(self, source: int, residual: list[int]) -> list[bool]:
        """Nodes ``source`` reaches through edges with residual capacity."""
        return [depth >= 0 for depth in self._levels(source, residual)]

    def _levels(self, source: int, residual: list[int]) -> list[int]:
        level = [-1] * self.num_nodes
        level[source] = 0
        frontier = [source]
        while frontier:
            following = []
            for u in frontier:
                for e in self.edges_of[u]:
                    v = self.head[e]
                    if residual[e] > 0 and level[v] < 0:
                        level[v] = level[u] + 1
                        following.append(v)
            frontier = following
        return level

    def _augment(self, source: int, sink: int, level: list[int], cursor: list[int], residual: list[int]) -> int:
        """One augmenting path along increasing levels (depth-first, iterative); its flow (0: none left)."""
        head, edges_of = self.head, self.edges_of
        path: list[int] = []
        u = source
        while True:
            if u == sink:
                pushed = min(residual[e] for e in path)
                for e in path:
                    residual[e] -= pushed
                    residual[e ^ 1] += pushed
                return pushed
            edges = edges_of[u]
            while cursor[u] < len(edges):
                e = edges[cursor[u]]
                if residual[e] > 0 and level[head[e]] == level[u] + 1:
                    break
                cursor[u] += 1
            else:  # dead end: never enter u again in this phase, step back
                level[u] = -1
                if not path:
                    return 0
                e = path.pop()
                u = head[e ^ 1]
                cursor[u] += 1
                continue
            path.append(e)
            u = head[e]


class FlowNetwork:
    """A directed graph with integer capacities on nodes ``0 .. num_nodes-1``."""

    def __init__(
        self,
        num_nodes: int,
        *,
        src: Sequence[int] | np.ndarray,
        dst: Sequence[int] | np.ndarray,
        cap: Sequence[int] | np.ndarray,
        flow_bound: int | None = None,
        small_edges: int | None = None,
    ) -> None:
        """``flow_bound``: a bound on every flow value that will be asked for (default: the sum
        of all capacities); with it and every capacity within 32 bits, scipy runs.
        ``small_edges``: networks of at most this many edges run in pure Python
        (default :data:`SMALL_EDGES`; a caller that runs many flows once scipy is loaded asks for fewer)."""
        self.num_nodes = num_nodes
        src_array = np.asarray(src, dtype=np.int64)
        dst_array = np.asarray(dst, dtype=np.int64)
        cap_array = np.asarray(cap)
        if cap_array.dtype != object and len(cap_array) and cap_array.dtype.kind not in "iu":
            raise TypeError("capacities must be integers")
        if cap_array.dtype == object:
            values = cap_array.tolist()
            largest, total = max(values, default=0), sum(values)
        else:
            largest = int(cap_array.max()) if len(cap_array) else 0
            total = int(cap_array.sum(dtype=np.int64)) if len(cap_array) else 0
        bound = total if flow_bound is None else min(total, int(flow_bound))
        self.flow_bound = bound
        """No flow asked of this network is larger (the sum of all capacities, or the caller's bound)."""
        self.fits_int32 = largest <= INT32_LIMIT and bound <= INT32_LIMIT
        self.fits_int64 = total < 2**62
        """Whether every sum of capacities fits ``int64`` (then :meth:`distinct_edges` may be asked)."""
        self._src, self._dst, self._cap = src_array, dst_array, cap_array
        self._built_matrix = self._built_graph = self._built_small = None
        self._distinct: tuple[np.ndarray, np.ndarray] | None = None
        self._ends: tuple[np.ndarray, np.ndarray]
        """Tails and heads of :meth:`distinct_edges`, with it."""
        self.backend: str
        """Which max-flow runs: ``python`` (small networks), ``scipy`` or ``networkx`` (beyond 32 bits)."""
        if len(src_array) <= (SMALL_EDGES if small_edges is None else small_edges):
            self.backend = "python"
        elif self.fits_int32:
            self.backend = "scipy"
        else:
            self.backend = "networkx"

    # the backends' structures are built when first needed (max_flows builds its own for scipy)
    @property
    def _small(self) -> SmallFlow | None:
        if self.backend != "python":
            return None
        if self._built_small is None and self._cap.dtype != object and self.fits_int64:
            # parallel edges summed, the distinct edges in the order they first appear
            keys, capacity = self.distinct_edges()
            first = np.unique(self._src * self.num_nodes + self._dst, return_index=True)[1]  # per key, ascending as ``keys``
            order = np.argsort(first)
            tail, head = self._ends
            self._built_small = SmallFlow.from_arrays(self.num_nodes, tail[order], head[order], capacity[order])
        elif self._built_small is None:
            summed: dict[tuple[int, int], int] = {}
            for u, v, c in zip(self._src.tolist(), self._dst.tolist(), self._cap.tolist()):
                summed[u, v] = summed.get((u, v), 0) + int(c)
            self._built_small = SmallFlow(self.num_nodes, summed)
        return self._built_small

    @property
    def _matrix(self):
        if self.backend != "scipy":
            return None
        if self._built_matrix is None:
            from scipy.sparse import csr_array  # scipy and networkx load when a flow is run, not at start-up

            _, cap = self.distinct_edges()
            self._built_matrix = _csr(csr_array, self.num_nodes, *self._ends, cap)
        return self._built_matrix

    @property
    def _graph(self):
        if self.backend != "networkx":
            return None
        if self._built_graph is None:
            import networkx as nx  # the exact fallback, beyond int32: imported when needed

            graph = nx.DiGraph()
            graph.add_nodes_from(range(self.num_nodes))
            for u, v, c in zip(self._src.tolist(), self._dst.tolist(), self._cap.tolist()):
                if graph.has_edge(u, v):
                    graph[u][v]["capacity"] += int(c)
                else:
                    graph.add_edge(u, v, capacity=int(c))
            self._built_graph = graph
        return self._built_graph

    def distinct_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, capacities)``: every distinct edge ``u -> v`` as ``u * num_nodes + v``, ascending,
        with the capacities of its parallel edges summed (int64: only where :attr:`fits_int64`)."""
        if self._distinct is None:
            keys = self._src * self.num_nodes + self._dst
            order = np.argsort(keys)
            keys = keys[order]
            cap = self._cap[order].astype(np.int64)
            if len(keys) and bool((keys[1:] == keys[:-1]).any()):
                first = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
                keys, cap = keys[first], np.add.reduceat(cap, first)
            self._distinct = keys, cap
            self._ends = keys // self.num_nodes, keys % self.num_nodes
        return self._distinct

    def max_flow(self, source: int, sink: int) -> int:
        """The value of a maximum ``source`` -> ``sink`` flow."""
        if self._small is not None:
            return self._small.max_flow(source, sink)[0]
        if self._matrix is not None:
            from scipy.sparse.csgraph import maximum_flow

            return int(maximum_flow(self._matrix, source, sink).flow_value)
        import networkx as nx
        from networkx.algorithms.flow import preflow_push

        return int(nx.maximum_flow_value(self._graph, source, sink, flow_func=preflow_push))

    def edge_flows(self, source: int, sink: int) -> tuple[int, np.ndarray | None]:
        """``(value, flows)``: a maximum flow's value and what it routes over each edge given to
        the constructor, in that order (parallel edges each report their sum's flow); ``None``
        beyond 64 bits. Which maximum flow (there are often many) depends on the backend: a
        caller that needs the same flows every time fixes it with ``small_edges``.

        >>> FlowNetwork(4, src=[0, 0, 1, 2], dst=[1, 2, 3, 3], cap=[3, 2, 2, 5]).edge_flows(0, 3)[1].tolist()
        [2, 2, 2, 2]
        """
        if self._small is not None:
            value, residual = self._small.max_flow(source, sink)
            small = self._small
            used = {(u, v): c - r for u, v, c, r in zip(small.tail[::2], small.head[::2], small.capacity[::2], residual[::2])}
            flows = [used[u, v] for u, v in zip(self._src.tolist(), self._dst.tolist())]
            return value, (None if self._cap.dtype == object else np.asarray(flows, dtype=np.int64))
        if self._matrix is not None:
            from scipy.sparse.csgraph import maximum_flow

            result = maximum_flow(self._matrix, source, sink)
            flows = np.asarray(result.flow.tocsr()[self._src, self._dst]).ravel().astype(np.int64)
            return int(result.flow_value), np.maximum(flows, 0)
        import networkx as nx
        from networkx.algorithms.flow import preflow_push

        value, routed = nx.maximum_flow(self._graph, source, sink, flow_func=preflow_push)
        if self._cap.dtype == object:
            return int(value), None
        return int(value), np.array([routed[u][v] for u, v in zip(self._src.tolist(), self._dst.tolist())], dtype=np.int64)

    def source_side(self, source: int, flow: np.ndarray) -> np.ndarray:
        """The nodes ``source`` reaches in the residual graph of ``flow`` (a net flow on each of
        :meth:`distinct_edges`, as :func:`max_flows` gives one), as a boolean mask: of a maximum
        flow to some sink, the source side of a minimum cut for that sink.

        >>> net = FlowNetwork(4, src=[0, 0, 1, 2], dst=[1, 2, 3, 3], cap=[3, 2, 2, 5])
        >>> net.source_side(0, np.array([2, 2, 2, 2])).tolist()      # 0->1 has 1 unit left
        [True, True, False, False]
        """
        _, capacity = self.distinct_edges()
        tails, heads = self._ends
        room, used = capacity > flow, flow > 0
        tail = np.concatenate([tails[room], heads[used]])  # edges with room, and back along used ones
        head = np.concatenate([heads[room], tails[used]])
        reached = np.zeros(self.num_nodes, dtype=bool)
        reached[source] = True
        while True:
            new = head[reached[tail] & ~reached[head]]
            if not len(new):
                return reached
            reached[new] = True

    def min_cut(self, source: int, sink: int) -> tuple[int, np.ndarray]:
        """``(value, sink_side)``: a minimum cut's value and its sink side as a boolean mask.

        The sink side is the largest one: every node the source cannot reach in the residual
        graph of a maximum flow.
        """
        if self._small is not None:
            value, residual = self._small.max_flow(source, sink)
            return value, ~np.array(self._small.reachable(source, residual), dtype=bool)
        if self._matrix is not None:
            from scipy.sparse.csgraph import breadth_first_order, maximum_flow

            result = maximum_flow(self._matrix, source, sink)
            residual = self._matrix - result.flow
            residual.data[residual.data < 0] = 0
            residual.eliminate_zeros()
            reached = breadth_first_order(residual, source, directed=True, return_predecessors=False)
            sink_side = np.ones(self.num_nodes, dtype=bool)
            sink_side[reached] = False
            return int(result.flow_value), sink_side
        import networkx as nx
        from networkx.algorithms.flow import preflow_push

        value, (_, sink_nodes) = nx.minimum_cut(self._graph, source, sink, flow_func=preflow_push)
        sink_side = np.zeros(self.num_nodes, dtype=bool)
        sink_side[list(sink_nodes)] = True
        return int(value), sink_side


def _csr(csr_array, num_nodes: int, rows: np.ndarray, cols: np.ndarray, data: np.ndarray):
    """A canonical CSR matrix (rows ascending, columns ascending within a row, no duplicates) of
    int32 capacities from entries already in that order."""
    indptr = np.zeros(num_nodes + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
    matrix = csr_array((data.astype(np.int32), cols.astype(np.int32), indptr), shape=(num_nodes, num_nodes))
    matrix.has_canonical_format = True
    return matrix


def max_flows(problems: Sequence[tuple[FlowNetwork, int, int]], *, with_flows: bool = False) -> list[tuple[int, np.ndarray | None]]:
    """Maximum flows of several ``(network, source, sink)`` problems: per problem its value and,
    with ``with_flows``, a maximum flow as the positive net flow on each of
    :meth:`FlowNetwork.distinct_edges` (``None`` beyond 64 bits).

    The problems on scipy's backend are solved in one call, as one network: their disjoint
    union, a super source feeding each problem's source and each sink feeding a super sink
    (both by the problem's flow bound, which no flow of it can exceed). A maximum flow of the
    union is a maximum flow of every problem (their values add up, and none can gain), so what
    enters the super sink from each sink is that problem's value. One call costs scipy's
    overhead (about 0.2 ms of CPU, more than a 300-edge flow) once instead of once per problem.

    >>> net = FlowNetwork(4, src=[0, 0, 1, 2], dst=[1, 2, 3, 3], cap=[3, 2, 2, 5], small_edges=0)
    >>> [value for value, _ in max_flows([(net, 0, 3), (net, 0, 2), (net, 1, 3)])]
    [4, 2, 2]
    >>> value, flow = max_flows([(net, 0, 3)], with_flows=True)[0]
    >>> net.distinct_edges()[0].tolist(), flow.tolist()           # 0->1, 0->2, 1->3, 2->3
    ([1, 2, 7, 11], [2, 2, 2, 2])
    """
    results: list[tuple[int, np.ndarray | None] | None] = [None] * len(problems)
    together: list[int] = []
    for i, (network, source, sink) in enumerate(problems):
        if network.backend == "scipy":
            together.append(i)
        elif network.backend == "python" and not with_flows:
            results[i] = (network._small.flow_value(source, sink), None)
        elif network.backend == "python":  # the value alone by push-relabel (SmallFlow.flow_value), a flow by Dinic
            value, residual = network._small.max_flow(source, sink)
            small = network._small
            keys = np.asarray(small.tail[::2], dtype=np.int64) * network.num_nodes + np.asarray(small.head[::2], dtype=np.int64)
            used = np.asarray(small.capacity[::2], dtype=np.int64) - np.asarray(residual[::2], dtype=np.int64)
            net = dict(zip(keys.tolist(), used.tolist()))
            back = [net.get((k % network.num_nodes) * network.num_nodes + k // network.num_nodes, 0) for k in keys.tolist()]
            results[i] = (value, np.maximum(used - np.asarray(back, dtype=np.int64), 0)[np.argsort(keys, kind="stable")])
        else:
            results[i] = (network.max_flow(source, sink), None)
    while together:  # as many as keep every number of the union within 32 bits
        group, bound = [], 0
        while together and (not group or bound + problems[together[0]][0].flow_bound <= INT32_LIMIT):
            bound += problems[together[0]][0].flow_bound
            group.append(together.pop(0))
        for i, found in zip(group, _solve_together([problems[i] for i in group], with_flows)):
            results[i] = found
    return results


def _solve_together(problems: list[tuple[FlowNetwork, int, int]], with_flows: bool) -> list[tuple[int, np.ndarray | None]]:
    """:func:`max_flows` of scipy-backend problems, in one call (see there)."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import maximum_flow

    sizes = [network.num_nodes for network, _, _ in problems]
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    super_source, super_sink = int(offsets[-1]), int(offsets[-1]) + 1
    size = super_sink + 1
    rows, cols, caps = [], [], []
    ends = np.zeros(len(problems), dtype=np.int64)
    for i, (network, source, sink) in enumerate(problems):
        keys, cap = network.distinct_edges()
        tails, heads = network._ends
        offset = int(offsets[i])
        last = int(np.searchsorted(keys, (sink + 1) * network.num_nodes))  # the sink's edge to the super sink ends its row
        rows += [tails[:last] + offset, [sink + offset], tails[last:] + offset]
        cols += [heads[:last] + offset, [super_sink], heads[last:] + offset]
        caps += [cap[:last], [network.flow_bound], cap[last:]]
        ends[i] = (sink + offset) * size + super_sink
    rows.append(np.full(len(problems), super_source, dtype=np.int64))
    cols.append(np.asarray([source for _, source, _ in problems], dtype=np.int64) + offsets[:-1])
    caps.append(np.asarray([network.flow_bound for network, _, _ in problems], dtype=np.int64))
    matrix = _csr(csr_array, size, np.concatenate(rows), np.concatenate(cols), np.concatenate(caps))
    result = maximum_flow(matrix, super_source, super_sink)
    flow = result.flow
    flow_keys = np.repeat(np.arange(size, dtype=np.int64), np.diff(flow.indptr)) * size + flow.indices
    values = flow.data[np.searchsorted(flow_keys, ends)].tolist()
    found = []
    for i, (network, _, _) in enumerate(problems):
        routed = None
        if with_flows:
            tails, heads = network._ends
            global_keys = (tails + offsets[i]) * size + heads + offsets[i]
            routed = np.maximum(flow.data[np.searchsorted(flow_keys, global_keys)], 0).astype(np.int64)
        found.append((int(values[i]), routed))
    return found


__all__ = ["INT32_LIMIT", "ONE_SINK_PYTHON_EDGES", "ONE_SINK_PYTHON_NODES", "SMALL_EDGES", "FlowNetwork", "SmallFlow", "max_flows", "small_edges_for"]
