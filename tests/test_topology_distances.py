"""Hop distances: the dense search (small graphs) agrees with SciPy's sparse one (large graphs);
least latency: the pure-Python Dijkstra gives SciPy's distances bit for bit."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from chakra_collectives.topology import load_topology
from chakra_collectives.topology.distances import SMALL_GRAPH_NODES, hop_distances


def scipy_hops(num_nodes, src, dst, sources):
    graph = csr_matrix((np.ones(len(src)), (src, dst)), shape=(num_nodes, num_nodes))
    return shortest_path(graph, method="D", directed=True, unweighted=True, indices=sources)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=4 * n),
    st.lists(st.integers(0, n - 1), min_size=1, max_size=5),
)))
def test_the_dense_search_gives_scipys_distances_on_random_directed_graphs(case):
    n, links, sources = case
    src = np.array([u for u, _ in links], dtype=np.int64)
    dst = np.array([v for _, v in links], dtype=np.int64)
    assert np.array_equal(hop_distances(n, src, dst, sources=np.array(sources)), scipy_hops(n, src, dst, sources))


def test_a_fabric_past_the_dense_limit_takes_the_sparse_path_with_the_same_answer():
    topology = load_topology("mesh2d:20x20")
    assert topology.num_nodes > SMALL_GRAPH_NODES
    arrays = topology.link_arrays
    hops = hop_distances(topology.num_nodes, arrays["src"], arrays["dst"], sources=np.array([0, 399]))
    assert hops[0, 399] == hops[1, 0] == 38  # corner to corner of a 20x20 mesh
    assert np.array_equal(hops, scipy_hops(topology.num_nodes, arrays["src"], arrays["dst"], [0, 399]))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(
    st.just(n),
    st.dictionaries(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), st.sampled_from([0.5, 250.0, 500.0, 1e3 / 3, 1e-9]), max_size=4 * n),
    st.lists(st.integers(0, n - 1), min_size=1, max_size=5),
)))
def test_least_latency_in_python_gives_scipys_dijkstra_bit_for_bit(case):
    """Edge splitting compares these distances (ties included), so the pure-Python search must
    give SciPy's floating-point sums exactly, not approximately."""
    import sys

    from scipy.sparse.csgraph import dijkstra

    from chakra_collectives.topology.distances import least_latency

    n, edges, sources = case
    src = np.array([u for u, _ in edges], dtype=np.int64)
    dst = np.array([v for _, v in edges], dtype=np.int64)
    weight = np.array(list(edges.values()), dtype=np.float64) + 1e-9
    expected = dijkstra(csr_matrix((weight, (src, dst)), shape=(n, n)), directed=True, indices=sources)
    loaded = sys.modules.pop("scipy.sparse.csgraph")
    try:
        found = least_latency(n, src, dst, weight, sources)
        assert "scipy.sparse.csgraph" not in sys.modules  # the pure-Python search ran
    finally:
        sys.modules["scipy.sparse.csgraph"] = loaded
    assert np.array_equal(found, expected)
    assert np.array_equal(least_latency(n, src, dst, weight, sources), expected)  # SciPy loaded: SciPy's
