"""The exact cut ratio (one definition for the cut bound and ForestColl's optimum)."""

from __future__ import annotations

from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from networkx.algorithms.flow import preflow_push

from chakra_collectives.flow import FlowNetwork, max_cut_ratio, maxflow
from chakra_collectives.flow.capacity import CapacityGraph, exact_bandwidth
from chakra_collectives.topology import Topology, load_topology
from chakra_collectives.topology.symmetry import check_symmetry

SUITE = [
    "ring:8", "ring:64", "mesh2d:4x4", "mesh2d:8x8", "mesh2d:16x16", "torus2d:8x8", "torus3d:4x4x4",
    "torus3d:8x8x8", "hypercube:4x4x4", "hetero-mesh2d:8x8", "switch:64", "dgx:4x8", "a100:4", "mi250:2",
]


def networkx_ratio(topology: Topology, *, reverse: bool = False) -> Fraction:
    """An independent oracle, what bounds.py computed before the flow package: Dinkelbach with
    networkx, every NPU a sink (NPU 0 alone on topologies marked uniform)."""
    n = topology.num_npus
    bandwidth: dict[tuple[int, int], Fraction] = {}
    for link in topology.links:
        key = (link.dst, link.src) if reverse else (link.src, link.dst)
        bandwidth[key] = bandwidth.get(key, Fraction(0)) + Fraction(link.bandwidth_gbps)
    into = {v: sum(b for (_, w), b in bandwidth.items() if w == v) for v in range(n)}
    ratio = max(Fraction(n - 1) / into[v] for v in range(n))
    while True:
        graph = nx.DiGraph()
        for (u, v), b in bandwidth.items():
            graph.add_edge(u, v, capacity=b * ratio.numerator * 1)
        for v in range(n):
            graph.add_edge("s", v, capacity=Fraction(ratio.denominator))
        # scale to integers for preflow-push
        scale = 1
        for _, _, data in graph.edges(data=True):
            scale = scale * data["capacity"].denominator // __import__("math").gcd(scale, data["capacity"].denominator)
        for _, _, data in graph.edges(data=True):
            data["capacity"] = int(data["capacity"] * scale)
        worst = None
        for t in [0] if topology.uniform else range(n):
            value, (_, sink_side) = nx.minimum_cut(graph, "s", t, flow_func=preflow_push)
            if value < ratio.denominator * n * scale and (worst is None or value < worst[0]):
                worst = (value, sink_side)
        if worst is None:
            return ratio
        sink_side = worst[1]
        inside = n - sum(1 for v in range(n) if v in sink_side)
        out = sum(b for (u, v), b in bandwidth.items() if u not in sink_side and v in sink_side)
        ratio = Fraction(inside) / out


@pytest.mark.parametrize("spec", SUITE)
def test_cut_ratio_equals_an_independent_oracle_on_the_suite(spec):
    topology = load_topology(spec)
    for reverse in (False, True):
        found = max_cut_ratio(topology, reverse=reverse)
        assert found.ratio == networkx_ratio(topology, reverse=reverse)
        # the reported set achieves it
        assert Fraction(found.demand) / found.bandwidth_gbps == found.ratio
        s = set(found.cut_nodes)
        leaving = [(l.dst, l.src) if reverse else (l.src, l.dst) for l in topology.links]
        out = sum(exact_bandwidth(l.bandwidth_gbps) for l, (a, b) in zip(topology.links, leaving) if a in s and b not in s)
        assert out == found.bandwidth_gbps
        assert found.demand == sum(1 for v in s if v < topology.num_npus) < topology.num_npus


@pytest.mark.parametrize(
    ("spec", "algbw"),
    [("a100:1", "342.857"), ("a100:2", "346.667"), ("mi250:1", "342.857"), ("mi250:2", "354.133")],
)
def test_optimal_algorithm_bandwidth_equals_forestcolls_figures(spec, algbw):
    # ForestColl's README prints N * k / U = N / ratio for these platforms
    topology = load_topology(spec)
    assert f"{float(topology.num_npus / max_cut_ratio(topology).ratio):.3f}" == algbw


@pytest.mark.parametrize("spec", SUITE + ["a100:1", "a100:3", "mi250:1", "ring:4,bidirectional=false", "mesh2d:3x4", "torus2d:2x3", "dgx:1x8"])
def test_builder_symmetries_are_free_automorphism_groups(spec):
    topology = load_topology(spec)
    check_symmetry(topology)
    if topology.symmetry is not None:
        assert topology.num_npus % topology.symmetry.order == 0


def test_a_wrong_symmetry_is_caught():
    topology = load_topology("mesh2d:4x4")
    from chakra_collectives.topology.symmetry import NpuSymmetry

    topology.symmetry = NpuSymmetry.from_generators(16, [[(i + 1) % 16 for i in range(16)]])  # not an automorphism
    with pytest.raises(ValueError, match="maps link"):
        check_symmetry(topology)


def test_symmetry_classes_give_the_same_ratio_as_every_sink():
    for spec in ("mesh2d:8x8", "hetero-mesh2d:4x6", "mi250:2", "a100:3"):
        topology = load_topology(spec)
        assert max_cut_ratio(topology).ratio == max_cut_ratio(topology, sinks=range(topology.num_npus)).ratio


@pytest.mark.parametrize("small_edges", [maxflow.SMALL_EDGES, 0])
def test_flow_network_falls_back_to_exact_integers_beyond_32_bits(monkeypatch, small_edges):
    monkeypatch.setattr(maxflow, "SMALL_EDGES", small_edges)  # 0: scipy, then networkx
    small = FlowNetwork(3, src=[0, 1, 0], dst=[1, 2, 2], cap=[5, 3, 1])
    big = FlowNetwork(3, src=[0, 1, 0], dst=[1, 2, 2], cap=[5 * 2**40, 3 * 2**40, 2**40])
    assert small.fits_int32 and not big.fits_int32
    assert big.backend == ("python" if small_edges else "networkx")
    assert big.max_flow(0, 2) == 2**40 * small.max_flow(0, 2)
    assert big.min_cut(0, 2)[1].tolist() == small.min_cut(0, 2)[1].tolist()


def test_awkward_bandwidths_stay_exact():
    topology = Topology(3, name="awkward")
    topology.add_link(0, 1, 100 / 3, 0.0, bidirectional=True)
    topology.add_link(1, 2, 0.1, 0.0, bidirectional=True)
    topology.add_link(2, 0, 1e9 / 2**30, 0.0, bidirectional=True)
    graph = CapacityGraph.from_topology(topology)
    assert {graph.gbps(c) for c in graph.cap.tolist()} == {Fraction(100, 3), Fraction(1, 10), Fraction(10**9, 2**30)}
    # the ingress of NPU 1 (0.1 + 100/3) beats every other cut here
    assert max_cut_ratio(topology).ratio == Fraction(2) / (Fraction(1, 10) + Fraction(10**9, 2**30))


def test_pure_python_flows_match_scipy_on_random_networks(monkeypatch):
    rng = np.random.default_rng(7)
    for _ in range(200):
        n, m = int(rng.integers(2, 12)), int(rng.integers(1, 40))
        src = rng.integers(0, n, m)
        dst, cap = (src + rng.integers(1, n, m)) % n, rng.integers(0, 20, m)  # parallel edges, no loops
        python = FlowNetwork(n, src=src, dst=dst, cap=cap)
        monkeypatch.setattr(maxflow, "SMALL_EDGES", 0)
        compiled = FlowNetwork(n, src=src, dst=dst, cap=cap)
        monkeypatch.undo()
        assert (python.backend, compiled.backend) == ("python", "scipy")
        value, side = python.min_cut(0, n - 1)
        assert python.max_flow(0, n - 1) == value == compiled.max_flow(0, n - 1)
        assert side.tolist() == compiled.min_cut(0, n - 1)[1].tolist()


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_residual_source_side_of_a_maximum_flow_is_a_minimum_cut(data):
    """FlowNetwork.source_side of the flow max_flows returns (both backends): the source in,
    the sink out, and the capacity leaving it equal to networkx's maximum flow value."""
    n = data.draw(st.integers(2, 9))
    edges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, n - 1), st.integers(0, 9)), min_size=1, max_size=40))
    src = np.array([u for u, _, _ in edges])
    dst, cap = (src + np.array([d for _, d, _ in edges])) % n, np.array([c for _, _, c in edges])
    sink = data.draw(st.integers(1, n - 1))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for u, v, c in zip(src.tolist(), dst.tolist(), cap.tolist()):
        graph.add_edge(u, v, capacity=graph.get_edge_data(u, v, {"capacity": 0})["capacity"] + c)
    expected = nx.maximum_flow_value(graph, 0, sink, flow_func=preflow_push)
    for small_edges in (0, 10**6):  # scipy, then pure Python
        network = FlowNetwork(n, src=src, dst=dst, cap=cap, small_edges=small_edges)
        [(value, flow)] = maxflow.max_flows([(network, 0, sink)], with_flows=True)
        side = network.source_side(0, flow)
        leaving = sum(c for u, v, c in zip(src.tolist(), dst.tolist(), cap.tolist()) if side[u] and not side[v])
        assert value == expected == leaving and side[0] and not side[sink]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_push_relabel_values_are_maximum_flows(data):
    """max_flows without flows on the pure-Python backend (SmallFlow.flow_value, push-relabel)
    gives networkx's maximum flow value, from any source to any sink: parallel edges, zero
    capacities, nodes that cannot reach the sink, capacities beyond 64 bits."""
    n = data.draw(st.integers(2, 10))
    edges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, n - 1), st.sampled_from([0, 1, 2, 3, 7, 10, 2**70])), min_size=1, max_size=45))
    src = np.array([u for u, _, _ in edges])
    dst = (src + np.array([d for _, d, _ in edges])) % n
    cap = [c for _, _, c in edges]
    source, sink = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for u, v, c in zip(src.tolist(), dst.tolist(), cap):
        graph.add_edge(u, v, capacity=graph.get_edge_data(u, v, {"capacity": 0})["capacity"] + c)
    network = FlowNetwork(n, src=src, dst=dst, cap=np.array(cap, dtype=object), small_edges=10**6)
    [(value, flow)] = maxflow.max_flows([(network, source, sink)])
    assert network.backend == "python" and flow is None
    assert value == nx.maximum_flow_value(graph, source, sink, flow_func=preflow_push) == network.max_flow(source, sink)


def test_flows_solved_together_are_each_problems_maximum_flow():
    """max_flows runs many problems as one network (their disjoint union): each value must be
    the problem's own max-flow, and each returned flow a valid flow of that value."""
    rng = np.random.default_rng(11)
    problems, arrays = [], []
    for _ in range(40):
        n, m = int(rng.integers(3, 12)), int(rng.integers(600, 900))  # > SMALL_EDGES: scipy
        src = rng.integers(0, n, m)
        dst, cap = (src + rng.integers(1, n, m)) % n, rng.integers(0, 30, m)
        problems.append((FlowNetwork(n, src=src, dst=dst, cap=cap), 0, int(rng.integers(1, n))))
        arrays.append((n, src, dst, cap))
    python = [(FlowNetwork(n, src=src, dst=dst, cap=cap, small_edges=10**6), 0, t) for (n, src, dst, cap), (_, _, t) in zip(arrays[:5], problems)]
    for (network, source, sink), (value, flow) in zip(problems + python, maxflow.max_flows(problems + python, with_flows=True)):
        assert value == network.max_flow(source, sink)
        keys, cap = network.distinct_edges()
        tails, heads = keys // network.num_nodes, keys % network.num_nodes
        assert (flow >= 0).all() and (flow <= cap).all()
        balance = np.bincount(heads, flow, network.num_nodes) - np.bincount(tails, flow, network.num_nodes)
        assert balance[sink] == value == -balance[source]
        assert not np.delete(balance, [source, sink]).any()
    assert {p[0].backend for p in problems} == {"scipy"} and python[0][0].backend == "python"
