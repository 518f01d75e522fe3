"""find_cycle agrees with networkx on random graphs, and what it returns is a cycle."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.ir.dag import find_cycle, longest_path, transitive_reduction


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


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.lists(st.integers(0, n - 1), max_size=3), min_size=n, max_size=n),
    st.lists(st.floats(0, 100), min_size=n, max_size=n),
)))
def test_longest_path_matches_networkx(case):
    size, deps, weights = case
    deps = [[d for d in ds if d < i] for i, ds in enumerate(deps)]  # a DAG: dependencies on earlier nodes
    dep_ptr = np.concatenate([[0], np.cumsum([len(d) for d in deps])]).astype(np.int64)
    dep_idx = np.array([d for ds in deps for d in ds], dtype=np.int64)
    finish = longest_path(dep_ptr, dep_idx, np.array(weights))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(size))
    graph.add_edges_from((d, i) for i in range(size) for d in deps[i])
    for node in range(size):
        best = max((sum(weights[v] for v in path) for source in nx.ancestors(graph, node) | {node}
                    for path in nx.all_simple_paths(graph, source, node)), default=weights[node])
        assert finish[node] == pytest.approx(max(best, weights[node]))


def test_longest_path_leaves_cycles_unfinished():
    finish = longest_path(np.array([0, 1, 2, 2]), np.array([1, 0]), np.array([1.0, 1.0, 4.0]))
    assert np.isnan(finish[:2]).all() and finish[2] == 4.0


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 14).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.lists(st.integers(0, n - 1), max_size=5), min_size=n, max_size=n))))
def test_transitive_reduction_keeps_exactly_the_edges_networkx_keeps(case):
    size, deps = case
    deps = [[d for d in ds if d < i] for i, ds in enumerate(deps)]
    dep_ptr = np.concatenate([[0], np.cumsum([len(d) for d in deps])]).astype(np.int64)
    dep_idx = np.array([d for ds in deps for d in ds], dtype=np.int64)
    keep = transitive_reduction(dep_ptr, dep_idx)
    kept = {(int(d), i) for i in range(size) for d, k in zip(dep_idx[dep_ptr[i]:dep_ptr[i + 1]], keep[dep_ptr[i]:dep_ptr[i + 1]]) if k}
    graph = nx.DiGraph()
    graph.add_nodes_from(range(size))
    graph.add_edges_from((d, i) for i in range(size) for d in deps[i])
    assert kept == set(nx.transitive_reduction(graph).edges)
    assert sum(keep) == len(kept)  # no edge twice


def test_transitive_reduction_leaves_cyclic_graphs_alone():
    assert transitive_reduction(np.array([0, 1, 2]), np.array([1, 0])) is None
