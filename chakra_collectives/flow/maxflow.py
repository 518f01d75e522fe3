"""Max-flow and min-cut on integer capacities, exactly.

:class:`FlowNetwork` holds a directed graph with integer capacities (parallel edges are
summed). Where every number a flow can reach fits 32 bits it runs scipy's Dinic
(``scipy.sparse.csgraph.maximum_flow``, compiled); otherwise networkx's preflow-push on
Python integers -- slower, never rounded. A min cut is read from the maximum flow's residual
graph: the sink side is every node that cannot be reached from the source.

>>> net = FlowNetwork(4, src=[0, 0, 1, 2], dst=[1, 2, 3, 3], cap=[3, 2, 2, 5])
>>> net.max_flow(0, 3)
4
>>> value, sink_side = net.min_cut(0, 3)
>>> value, sink_side.tolist()
(4, [False, False, True, True])
>>> FlowNetwork(2, src=[0], dst=[1], cap=[2**40]).max_flow(0, 1) == 2**40    # networkx: exact
True
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

INT32_LIMIT = 2**31 - 1


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
    ) -> None:
        """``flow_bound``: a bound on every flow value that will be asked for (default: the sum
        of all capacities); with it and every capacity within 32 bits, scipy runs."""
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
        self.fits_int32 = largest <= INT32_LIMIT and bound <= INT32_LIMIT
        if self.fits_int32:
            from scipy.sparse import csr_array  # scipy and networkx load when a flow is built, not at start-up

            self._matrix = csr_array(
                (cap_array.astype(np.int32), (src_array, dst_array)), shape=(num_nodes, num_nodes)
            )
            self._matrix.sum_duplicates()
            self._graph = None
        else:
            import networkx as nx  # the exact fallback, beyond int32: imported when needed

            graph = nx.DiGraph()
            graph.add_nodes_from(range(num_nodes))
            for u, v, c in zip(src_array.tolist(), dst_array.tolist(), cap_array.tolist()):
                if graph.has_edge(u, v):
                    graph[u][v]["capacity"] += int(c)
                else:
                    graph.add_edge(u, v, capacity=int(c))
            self._graph = graph
            self._matrix = None

    def max_flow(self, source: int, sink: int) -> int:
        """The value of a maximum ``source`` -> ``sink`` flow."""
        if self._matrix is not None:
            from scipy.sparse.csgraph import maximum_flow

            return int(maximum_flow(self._matrix, source, sink).flow_value)
        import networkx as nx
        from networkx.algorithms.flow import preflow_push

        return int(nx.maximum_flow_value(self._graph, source, sink, flow_func=preflow_push))

    def min_cut(self, source: int, sink: int) -> tuple[int, np.ndarray]:
        """``(value, sink_side)``: a minimum cut's value and its sink side as a boolean mask.

        The sink side is the largest one: every node the source cannot reach in the residual
        graph of a maximum flow.
        """
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


__all__ = ["INT32_LIMIT", "FlowNetwork"]
