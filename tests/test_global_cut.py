"""The global minimum cut (Stoer-Wagner in pure Python) against networkx's, an independent oracle."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.flow.global_cut import global_min_cut

edges = st.dictionaries(st.tuples(st.integers(0, 11), st.integers(0, 11)).filter(lambda e: e[0] < e[1]), st.integers(1, 9), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 12), edges)
def test_the_lightest_cut_is_networkx_stoer_wagner_and_really_that_light(num_nodes: int, weights: dict[tuple[int, int], int]) -> None:
    weights = {(u, v): w for (u, v), w in weights.items() if v < num_nodes}
    graph = nx.Graph()
    graph.add_nodes_from(range(num_nodes))
    graph.add_weighted_edges_from((u, v, w) for (u, v), w in weights.items())
    expected = nx.stoer_wagner(graph)[0] if nx.is_connected(graph) else 0  # networkx refuses a disconnected graph
    value, side = global_min_cut(num_nodes, weights)
    assert value == expected
    assert 0 < len(side) < num_nodes
    assert sum(w for (u, v), w in weights.items() if (u in side) != (v in side)) == value


def test_a_dumbbell_is_cut_at_its_bar_not_at_its_lightest_node() -> None:
    """Two 4-cliques of weight-5 edges joined by one edge of 3: every node has at least 15."""
    weights = {(u, v): 5 for block in (range(4), range(4, 8)) for u in block for v in block if u < v}
    weights[(3, 4)] = 3
    value, side = global_min_cut(8, weights)
    assert (value, side in (frozenset(range(4)), frozenset(range(4, 8)))) == (3, True)
