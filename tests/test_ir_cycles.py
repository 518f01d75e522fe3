"""find_cycle agrees with networkx on random graphs, and what it returns is a cycle."""

from __future__ import annotations

import networkx as nx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.ir.cycles import find_cycle


@st.composite
def graphs(draw):
    size = draw(st.integers(1, 12))
    deps = [draw(st.lists(st.integers(-1, size - 1), max_size=4)) for _ in range(size)]
    among = draw(st.one_of(st.none(), st.sets(st.integers(0, size - 1), min_size=1)))
    return size, deps, among


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_find_cycle_matches_networkx(case):
    size, deps, among = case
    dep_ptr = np.concatenate([[0], np.cumsum([len(d) for d in deps])]).astype(np.int64)
    dep_idx = np.array([d for ds in deps for d in ds], dtype=np.int64)
    nodes = set(range(size)) if among is None else set(among)
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from((i, d) for i in nodes for d in deps[i] if d >= 0 and d in nodes)
    cycle = find_cycle(dep_ptr, dep_idx, None if among is None else np.array(sorted(among)))
    if nx.is_directed_acyclic_graph(graph):
        assert cycle is None
    else:
        assert cycle and set(cycle) <= nodes and len(set(cycle)) == len(cycle)
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            assert b in deps[a]  # a waits for b
