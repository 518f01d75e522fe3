"""Lower bounds: closed forms, a brute-force oracle for the cut bound, never above a real algorithm."""

from __future__ import annotations

import itertools
from math import gcd

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_collectives import bounds as bounds_module
from chakra_collectives.bounds import _integer_bandwidths, _weakest_npu_cut, lower_bounds, multiway_cut_bound
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.synth.baselines import bidirectional_ring, direct, recursive_halving_doubling, ring
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import Topology, load_topology
from chakra_collectives.topology.distances import dijkstra_in_python
from chakra_collectives.units import bytes_per_ns
from chakra_collectives.verify import verify_algorithm

from network_helpers import fully_connected, random_topology, ring_topology, switch_topology

MIB = 2**20


def brute_force_cut(topo: Topology, size: int, *, reverse: bool = False) -> float:
    n, nodes = topo.num_npus, range(topo.num_nodes)
    best = 0.0
    for r in range(1, topo.num_nodes):
        for subset in itertools.combinations(nodes, r):
            s = set(subset)
            if all(v in s for v in range(n)) or not any(v < n for v in s):
                continue
            out = sum(
                bytes_per_ns(l.bandwidth_gbps)
                for l in topo.links
                if ((l.dst in s and l.src not in s) if reverse else (l.src in s and l.dst not in s))
            )
            best = max(best, size / n * sum(1 for v in s if v < n) / out)
    return best


def brute_force_all_reduce_cut(topo: Topology, size: int) -> float:
    n, best = topo.num_npus, 0.0
    for r in range(1, topo.num_nodes):
        for subset in itertools.combinations(range(topo.num_nodes), r):
            s = set(subset)
            if all(v in s for v in range(n)) or not any(v < n for v in s):
                continue
            out = sum(bytes_per_ns(l.bandwidth_gbps) for l in topo.links if l.src in s and l.dst not in s)
            best = max(best, size / out)
    return best


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_cut_bound_equals_brute_force(data):
    # symmetric networks take one max-flow per NPU for the All-Reduce cut, not two
    symmetric = data.draw(st.booleans())
    topo = random_topology(data.draw, st, max_npus=5, max_switches=0 if symmetric else 2, symmetric=symmetric)
    size = data.draw(st.integers(1, 2**30))
    ag = lower_bounds(topo, Collective.ALL_GATHER, size)
    rs = lower_bounds(topo, Collective.REDUCE_SCATTER, size)
    ar = lower_bounds(topo, Collective.ALL_REDUCE, size)
    assert ag.cut_ns == pytest.approx(brute_force_cut(topo, size), rel=1e-12)
    assert rs.cut_ns == pytest.approx(brute_force_cut(topo, size, reverse=True), rel=1e-12)
    # all-reduce: M over the weakest NPU-separating cut (brute force over the same sets), or the islands' bound
    islands, _ = multiway_cut_bound(topo, size)
    assert ar.cut_ns == pytest.approx(max(brute_force_all_reduce_cut(topo, size), islands, ar.ingress_ns), rel=1e-12)
    assert ag.cut_ns >= ag.ingress_ns * (1 - 1e-12)
    s = set(ag.cut_nodes)  # the reported set really achieves the bound
    assert any(v < topo.num_npus for v in s) and not all(v in s for v in range(topo.num_npus))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    collective=st.sampled_from([Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE]),
    symmetric=st.booleans(),
)
def test_bounds_never_exceed_a_verified_algorithm(data, collective, symmetric):
    topo = random_topology(data.draw, st, max_npus=6, max_switches=2, symmetric=symmetric)
    n = topo.num_npus
    size = n * data.draw(st.integers(1, 2**22))
    k = data.draw(st.integers(1, 2))
    algorithms = [
        ring(collective, n, size_bytes=size, chunks_per_npu=k),
        bidirectional_ring(collective, n, size_bytes=size, chunks_per_npu=k),
        direct(collective, n, size_bytes=size, chunks_per_npu=k),
        tacos(topo, collective, size, chunks_per_npu=k).algorithm,
    ]
    if n & (n - 1) == 0:
        algorithms.append(recursive_halving_doubling(collective, n, size_bytes=size, chunks_per_npu=k))
    bounds = lower_bounds(topo, collective, size)
    for algo in algorithms:
        assert verify_algorithm(algo).ok
        predicted = predict_time(algo, topo, reduce_bandwidth_gbps=data.draw(st.sampled_from([None, 100.0])))
        assert bounds.best_ns <= predicted * (1 + 1e-12), (algo.name, bounds, predicted)
        assert 0 < bounds.efficiency(predicted) <= 1 + 1e-12


@pytest.mark.parametrize("n", [2, 4, 7])
def test_closed_forms(n):
    m = n * MIB
    b = bytes_per_ns(50.0)
    bi = lower_bounds(ring_topology(n, 50.0, 500.0), Collective.ALL_GATHER, m)
    assert bi.ingress_ns == pytest.approx((n - 1) / n * m / (2 * b if n > 2 else 2 * b))
    uni = lower_bounds(ring_topology(n, 50.0, 500.0, bidirectional=False), Collective.ALL_GATHER, m)
    assert uni.best_ns == pytest.approx((n - 1) / n * m / b)
    assert uni.latency_ns == (n - 1) * 500.0
    ar = lower_bounds(ring_topology(n, 50.0, 500.0, bidirectional=False), Collective.ALL_REDUCE, m)
    assert ar.best_ns == pytest.approx(2 * (n - 1) / n * m / b)  # Patarasuk & Yuan
    fc = lower_bounds(fully_connected(n, 50.0, 500.0), Collective.ALL_GATHER, m)
    assert fc.best_ns == pytest.approx(m / n / b) and fc.latency_ns == 500.0


def test_switch_cut_is_the_switch_uplink():
    # 4 NPUs on one switch, NPU 0's uplink is slow: data owned by 1,2,3 and the switch must reach 0
    topo = Topology(4, num_switches=1)
    for v in range(4):
        topo.add_link(v, 4, 100.0, 0.0)
        topo.add_link(4, v, 25.0 if v == 0 else 100.0, 0.0)
    bounds = lower_bounds(topo, Collective.ALL_GATHER, 4 * MIB)
    assert bounds.cut_ns == pytest.approx(3 * MIB / bytes_per_ns(25.0))
    assert bounds.latency_ns == 0.0


def test_one_sink_is_exact_on_a_symmetric_ring_and_valid_elsewhere():
    topo = ring_topology(8, 50.0, 100.0)
    assert lower_bounds(topo, Collective.ALL_GATHER, 64 * MIB, sinks=[0]).cut_ns == lower_bounds(topo, Collective.ALL_GATHER, 64 * MIB).cut_ns
    star = switch_topology(5)
    assert lower_bounds(star, Collective.ALL_GATHER, MIB, sinks=[3]).cut_ns <= lower_bounds(star, Collective.ALL_GATHER, MIB).cut_ns


def test_bad_input():
    with pytest.raises(InputError, match="not broadcast"):  # all-to-all, gather, scatter, patterns: tests/test_tacos_patterns.py
        lower_bounds(ring_topology(4), Collective.BROADCAST, MIB)
    with pytest.raises(InputError, match="needs its pattern"):
        lower_bounds(ring_topology(4), Collective.PATTERN, MIB)
    with pytest.raises(InputError, match="positive"):
        lower_bounds(ring_topology(4), Collective.ALL_GATHER, 0)
    one_way = Topology(3)
    one_way.add_link(0, 1, 50.0, 0.0)
    one_way.add_link(1, 2, 50.0, 0.0)
    with pytest.raises(InputError, match="cannot reach"):
        lower_bounds(one_way, Collective.ALL_GATHER, MIB)
    assert lower_bounds(Topology(1), Collective.ALL_REDUCE, MIB).best_ns == 0.0


def test_doubling_the_all_gather_bound_is_not_an_all_reduce_bound_on_heterogeneous_topologies():
    """Found by the property test: TACOS's all-reduce spares the weak NPU 3 (12.5 GB/s in and out)."""
    topo = Topology(4)
    for a, b, bw in [(0, 3, 12.5), (3, 2, 12.5), (2, 1, 12.5), (1, 0, 25.0), (0, 1, 12.5), (0, 2, 12.5)]:
        topo.add_link(a, b, bw, 0.0)
    size = 4
    algo = tacos(topo, Collective.ALL_REDUCE, size).algorithm
    assert verify_algorithm(algo).ok
    predicted = predict_time(algo, topo)
    doubled = lower_bounds(topo, Collective.ALL_GATHER, size).ingress_ns + lower_bounds(topo, Collective.REDUCE_SCATTER, size).ingress_ns
    assert predicted < doubled
    assert lower_bounds(topo, Collective.ALL_REDUCE, size).best_ns <= predicted


@pytest.mark.parametrize(
    "spec", ["ring:6", "ring:5,bidirectional=false", "torus2d:3x4", "torus3d:2x3x3", "hypercube:3x3", "fully-connected:5", "switch:6", "dgx:3x2"]
)
def test_builders_that_claim_uniform_npus_get_the_same_bounds_from_one_npu(spec):
    from chakra_collectives.topology import load_topology

    topology = load_topology(spec)
    assert topology.uniform
    for collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE):
        quick = lower_bounds(topology, collective, 2**20)  # uniform: one sink, fewer min cuts
        topology.uniform = False
        every = lower_bounds(topology, collective, 2**20)  # every sink, every min cut
        topology.uniform = True
        assert (quick.ingress_ns, quick.cut_ns, quick.latency_ns) == pytest.approx((every.ingress_ns, every.cut_ns, every.latency_ns))
        assert quick.reduce_scatter_all_gather_ns == pytest.approx(every.reduce_scatter_all_gather_ns)


def _stoer_wagner(topology) -> int:
    """networkx's global minimum cut of a symmetric, switch-free topology (pair bandwidths summed, as integers)."""
    import networkx as nx

    capacity, _ = _integer_bandwidths(topology, reverse=False)
    graph = nx.Graph()
    graph.add_nodes_from(range(topology.num_npus))
    graph.add_weighted_edges_from((u, v, b) for (u, v), b in capacity.items() if u < v)
    return nx.stoer_wagner(graph)[0]


def _out_of(topology, nodes) -> int:
    capacity, _ = _integer_bandwidths(topology, reverse=False)
    return sum(b for (u, v), b in capacity.items() if u in nodes and v not in nodes)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_weakest_npu_cut_equals_stoer_wagner_on_symmetric_networks(data):
    # random symmetric networks (one max-flow per NPU), and circulants that claim uniform NPUs
    # with one bandwidth (Mader's theorem: the weakest cut leaves one NPU)
    if data.draw(st.booleans()):
        topology = random_topology(data.draw, st, max_npus=8, max_switches=0, symmetric=True)
    else:
        from chakra_collectives.topology.families import circulant

        n = data.draw(st.integers(3, 12))
        strides = data.draw(st.lists(st.sampled_from([s for s in range(1, n // 2 + 1) if gcd(s, n) == 1]), min_size=1, max_size=3, unique=True))
        topology = circulant(n, strides=strides)
        assert topology.uniform
    capacity, _ = _integer_bandwidths(topology, reverse=False)
    value, nodes = _weakest_npu_cut(topology, capacity)
    assert value == _stoer_wagner(topology)
    assert _out_of(topology, nodes) == value and 0 < len(nodes) < topology.num_npus  # the set achieves it


def test_meshes_are_not_uniform_and_adding_a_link_clears_the_claim():
    from chakra_collectives.topology import load_topology

    assert not load_topology("mesh2d:3x3").uniform
    torus = load_topology("torus2d:3x3")
    torus.add_link(0, 4, 50.0, 500.0)
    assert not torus.uniform


def test_all_reduce_reports_the_reduce_scatter_all_gather_bound_beside_the_universal_one():
    from chakra_collectives.topology import load_topology

    mesh = load_topology("mesh2d:4x4")
    ar = lower_bounds(mesh, Collective.ALL_REDUCE, 2**24)
    rs = lower_bounds(mesh, Collective.REDUCE_SCATTER, 2**24)
    ag = lower_bounds(mesh, Collective.ALL_GATHER, 2**24)
    assert ar.reduce_scatter_all_gather_ns == pytest.approx(max(rs.ingress_ns, rs.cut_ns) + max(ag.ingress_ns, ag.cut_ns))
    # corners have two links: an algorithm that spares them can beat twice the All-Gather bound
    assert ar.best_ns < ar.reduce_scatter_all_gather_ns
    assert lower_bounds(mesh, Collective.ALL_GATHER, 2**24).reduce_scatter_all_gather_ns is None


# ---------------------------------------------------------------------------- fast bounds
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), collective=st.sampled_from(["all-gather", "reduce-scatter", "all-reduce"]))
def test_fast_bounds_never_exceed_the_exact_ones(data, collective):
    topo = random_topology(data.draw, st, max_npus=6, max_switches=2)
    exact = lower_bounds(topo, Collective.parse(collective), 6 * MIB)
    fast = lower_bounds(topo, Collective.parse(collective), 6 * MIB, method="fast")
    assert fast.method == "fast" and exact.method == "exact"
    assert fast.ingress_ns == pytest.approx(exact.ingress_ns)
    for name in ("cut_ns", "latency_ns", "best_ns"):
        assert getattr(fast, name) <= getattr(exact, name) * (1 + 1e-12)
    if exact.reduce_scatter_all_gather_ns is not None:
        assert fast.reduce_scatter_all_gather_ns <= exact.reduce_scatter_all_gather_ns * (1 + 1e-12)


@pytest.mark.parametrize(
    "spec", ["ring:8", "mesh2d:4x4", "mesh2d:8x8", "torus2d:8x8", "torus3d:4x4x4", "hypercube:4x4x4", "hetero-mesh2d:8x8", "switch:16", "dgx:4x8"]
)
@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
def test_fast_bounds_equal_the_exact_ones_on_regular_topologies(spec, collective):
    from chakra_collectives.topology import load_topology

    topo = load_topology(spec)
    exact = lower_bounds(topo, collective, 64 * MIB)
    fast = lower_bounds(topo, collective, 64 * MIB, method="fast")
    assert (fast.ingress_ns, fast.cut_ns, fast.latency_ns) == (exact.ingress_ns, exact.cut_ns, exact.latency_ns)
    assert fast.reduce_scatter_all_gather_ns == exact.reduce_scatter_all_gather_ns


def test_unknown_bounds_method_is_refused():
    with pytest.raises(InputError, match="unknown bounds method"):
        lower_bounds(ring_topology(4), Collective.ALL_GATHER, MIB, method="guess")


@pytest.mark.parametrize("spec", ["mesh2d:8x8", "hetero-mesh2d:4x6", "mi250:2", "dgx:2x2", "switch:8"])
def test_small_latency_bound_in_python_equals_scipy(monkeypatch, spec):
    topology = load_topology(spec)
    python = lower_bounds(topology, Collective.ALL_GATHER, 2**20).latency_ns
    monkeypatch.setattr(bounds_module, "SMALL_DIJKSTRA_WORK", 0)  # scipy's Dijkstra
    assert python == lower_bounds(topology, Collective.ALL_GATHER, 2**20).latency_ns > 0


@pytest.mark.parametrize("spec", ["mesh2d:8x8", "mesh2d:3x5", "hetero-mesh2d:8x8", "mi250:2", "torus3d:4x4x4", "dgx:2x4"])
def test_latency_bound_from_one_npu_per_class_is_every_npus(spec):
    """The farthest NPU from one NPU of each symmetry class is as far as from every NPU's."""
    topology = load_topology(spec)
    every = max(max(row[: topology.num_npus]) for row in dijkstra_in_python(
        topology.num_nodes, topology.link_arrays["src"], topology.link_arrays["dst"], topology.link_arrays["latency_ns"], range(topology.num_npus)))
    assert lower_bounds(topology, Collective.ALL_GATHER, 2**20).latency_ns == every > 0


def test_latency_sources_are_every_npu_when_the_symmetries_change_a_latency():
    """A mesh whose flips keep bandwidths but not the latencies of the links out of NPU 15 (a
    corner, in NPU 0's class): every NPU is a source, and the bound is 15's way out to NPU 0."""
    mesh = load_topology("mesh2d:4x4")
    slow = Topology(16)
    for link in mesh.links:
        slow.add_link(link.src, link.dst, link.bandwidth_gbps, 5000.0 if link.src == 15 else link.latency_ns)
    slow.symmetry = mesh.symmetry  # still an automorphism by bandwidth
    assert bounds_module.latency_sources(mesh) == [0, 1, 4, 5] and bounds_module.latency_sources(slow) == list(range(16))
    assert lower_bounds(slow, Collective.ALL_GATHER, 2**20).latency_ns == 5000.0 + 5 * mesh.links[0].latency_ns


def brute_force_all_to_all_cut(topo: Topology, size: int) -> float:
    """max over node sets S of s (N - s) / N * size / min(B_out(S), B_in(S)) (s: NPUs in S)."""
    n, best = topo.num_npus, 0.0
    for r in range(1, topo.num_nodes):
        for subset in itertools.combinations(range(topo.num_nodes), r):
            s = set(subset)
            inside = sum(1 for v in s if v < n)
            if inside in (0, n):
                continue
            out = sum(bytes_per_ns(l.bandwidth_gbps) for l in topo.links if l.src in s and l.dst not in s)
            into = sum(bytes_per_ns(l.bandwidth_gbps) for l in topo.links if l.dst in s and l.src not in s)
            best = max(best, inside * (n - inside) / n * size / min(out, into))
    return best


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), method=st.sampled_from(["exact", "fast"]))
def test_all_to_all_bounds_are_valid_cuts_below_a_verified_algorithm(data, method):
    topo = random_topology(data.draw, st, max_npus=6, max_switches=2)
    n = topo.num_npus
    size = n * data.draw(st.integers(1, 2**22))
    bounds = lower_bounds(topo, Collective.ALL_TO_ALL, size, method=method)
    assert bounds.method == method
    assert bounds.cut_ns <= brute_force_all_to_all_cut(topo, size) * (1 + 1e-12)
    assert bounds.cut_ns >= bounds.ingress_ns * (1 - 1e-12)
    for k in (1, 2):
        algo = direct(Collective.ALL_TO_ALL, n, size_bytes=size, chunks_per_npu=k)
        assert verify_algorithm(algo).ok
        assert bounds.best_ns <= predict_time(algo, topo) * (1 + 1e-12)


def test_all_to_all_bounds_on_regular_topologies():
    """switch:8: each NPU receives 7/8 of 64 MiB through its 50 GB/s port; mesh2d:4x4: the
    bisection (2 rows | 2 rows, 4 links of 50 GB/s each way) carries 8 x 8 / 16 x 64 MiB."""
    size = 64 * MIB
    star = lower_bounds(load_topology("switch:8"), Collective.ALL_TO_ALL, size)
    assert star.ingress_ns == pytest.approx(7 / 8 * size / bytes_per_ns(50.0))
    mesh = load_topology("mesh2d:4x4")
    bounds = lower_bounds(mesh, Collective.ALL_TO_ALL, size)
    assert bounds.cut_ns == pytest.approx(4 * size / bytes_per_ns(200.0))
    assert bounds.cut_ns == pytest.approx(brute_force_all_to_all_cut(mesh, size))
    assert bounds.latency_ns == lower_bounds(mesh, Collective.ALL_GATHER, size).latency_ns


@pytest.mark.parametrize(
    ("spec", "demand", "classes"),
    [
        # each server receives the other server's 4 shares of 128 MiB, only over its GPUs' NIC downlinks
        ("dgx:2x4", 2 * 4 * 2**27, [(8 * 25.0, 1000.0)]),
        # each GPU receives 15 shares of 64 MiB, over its NVSwitch downlink and its NIC's
        ("a100:2", 16 * 15 * 2**26, [(16 * 300.0, 250.0), (16 * 25.0, 500.0)]),
    ],
)
def test_store_and_forward_floor_holds_for_every_producer(spec, demand, classes):
    """The floor (docs/bounds.md) is a theorem about the default network model: no schedule of
    any producer, at any piece count, predicts below it. Its bandwidth term is the cut bound
    (these links are the binding cut's), and it lies above it by the switches' fill."""
    from chakra_collectives.synth.forestcoll import forestcoll

    topology = load_topology(spec)
    n, size = topology.num_npus, 2**30
    cut_ns = lower_bounds(topology, Collective.ALL_GATHER, size).cut_ns
    assert cut_ns == pytest.approx(demand / bytes_per_ns(sum(gbps for gbps, _ in classes)), rel=1e-12)
    floor = bounds_module.store_and_forward_floor_ns(demand, classes)
    assert cut_ns * 1.005 < floor < cut_ns * 1.03
    schedules = [forestcoll(topology, Collective.ALL_GATHER, size, trees_per_npu=1, chunks_per_tree=p).algorithm for p in (8, 32, 128)]
    schedules += [forestcoll(topology, Collective.ALL_GATHER, size).algorithm, tacos(topology, Collective.ALL_GATHER, size, chunks_per_npu=4).algorithm]
    schedules += [bidirectional_ring(Collective.ALL_GATHER, n, size_bytes=size)]
    for algorithm in schedules:
        assert predict_time(algorithm, topology) >= floor


@pytest.mark.parametrize(
    ("spec", "demand", "classes"),
    [
        # summed over the 16 GCD pairs: 30 shares of 2 MiB into each, over its 2 NIC downlinks
        # and 300 GB/s of direct links (no switch feeds them: a class without fill)
        ("mi250:2", 16 * 30 * 2**21, [(32 * 16.0, 1000.0), (16 * 300.0, 0.0)]),
        # summed over the 4 servers: 48 shares of 1 MiB into each, over its 16 NIC downlinks
        ("mi250:4", 4 * 48 * 2**20, [(64 * 16.0, 1000.0)]),
    ],
)
def test_store_and_forward_floor_of_mi250(spec, demand, classes):
    """mi250's floors (docs/bounds.md) at 64 MiB: the classes are the binding cut's links (their
    bandwidth term is the cut bound), a class of direct links adds no fill, and ForestColl's
    schedules at several tree and piece counts and the ring predict above the floor."""
    from chakra_collectives.synth.forestcoll import forestcoll

    topology = load_topology(spec)
    n, size = topology.num_npus, 2**26
    cut_ns = lower_bounds(topology, Collective.ALL_GATHER, size).cut_ns
    assert cut_ns == pytest.approx(demand / bytes_per_ns(sum(gbps for gbps, _ in classes)), rel=1e-12)
    floor = bounds_module.store_and_forward_floor_ns(demand, classes)
    switched = [c for c in classes if c[1] > 0]
    assert cut_ns * 1.005 < floor
    if len(switched) < len(classes):  # the direct links dilute the fill by their share of the bandwidth
        alone = bounds_module.store_and_forward_floor_ns(demand, switched) - demand / bytes_per_ns(sum(g for g, _ in switched))
        assert floor - cut_ns < alone * sum(g for g, _ in switched) / sum(g for g, _ in classes) * 1.01
    if n > 32:
        return  # mi250:4: ForestColl's schedules take minutes to predict
    schedules = [forestcoll(topology, Collective.ALL_GATHER, size, trees_per_npu=k, chunks_per_tree=p).algorithm for k, p in ((1, 8), (1, 32), (3, 16))]
    schedules += [bidirectional_ring(Collective.ALL_GATHER, n, size_bytes=size)]
    for algorithm in schedules:
        assert predict_time(algorithm, topology) >= floor


def islands_fabric(sizes: list[int], fast: list[float], nic: list[float]) -> Topology:
    """Islands of ``sizes`` NPUs, fully connected inside at ``fast[i]`` GB/s, every NPU with a NIC
    of ``nic[i]`` GB/s each way to one switch (slower than every island's links)."""
    topo = Topology(sum(sizes), num_switches=1)
    switch, first = topo.num_npus, 0
    for size, inside, outside in zip(sizes, fast, nic):
        for a in range(first, first + size):
            for b in range(first, first + size):
                if a != b:
                    topo.add_link(a, b, inside, 100.0)
            topo.add_link(a, switch, outside, 1000.0, bidirectional=True)
        first += size
    return topo


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_islands_bound_holds_for_verified_all_reduces_and_counts_2k_minus_2_crossings(data):
    k = data.draw(st.integers(2, 4))
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=k, max_size=k))
    fast = data.draw(st.lists(st.sampled_from([100.0, 200.0]), min_size=k, max_size=k))
    nic = data.draw(st.lists(st.sampled_from([12.5, 25.0, 50.0]), min_size=k, max_size=k))
    topo = islands_fabric(sizes, fast, nic)
    n = topo.num_npus
    size = n * data.draw(st.integers(1, 2**20))
    # every position enters islands 2(k-1) times, through the islands' NICs: sizes[i] * nic[i] in, the same out
    nics = sum(s * b for s, b in zip(sizes, nic))
    bound = lower_bounds(topo, Collective.ALL_REDUCE, size)
    assert bound.cut_ns >= 2 * (k - 1) * size / bytes_per_ns(nics) * (1 - 1e-12)
    chunks = data.draw(st.integers(1, 2))
    algorithms = [
        ring(Collective.ALL_REDUCE, n, size_bytes=size, chunks_per_npu=chunks),
        direct(Collective.ALL_REDUCE, n, size_bytes=size, chunks_per_npu=chunks),
        tacos(topo, Collective.ALL_REDUCE, size, chunks_per_npu=chunks).algorithm,
    ]
    for algo in algorithms:
        assert verify_algorithm(algo).ok
        assert bound.best_ns <= predict_time(algo, topo) * (1 + 1e-12), algo.name


def test_a_dgx_group_with_a_member_per_server_is_bound_by_its_servers_nics_one_and_a_half_times():
    from chakra_collectives.synth import group_bounds

    fabric = load_topology("dgx:4x8")
    size = 64 * MIB
    servers = bytes_per_ns(8 * 25.0)  # a server's 8 NICs, each way
    for group in [(0, 8, 16, 24), (1, 5, 9, 13, 17, 21, 25, 29)]:
        for method in ("exact", "fast"):
            bound = group_bounds(fabric, Collective.ALL_REDUCE, size, group, method=method)
            # four islands: 2 x 3 crossings of M over four servers' NICs; a cut alone says M / servers
            assert bound.best_ns == pytest.approx(1.5 * size / servers)
            assert set(bound.cut_nodes) in [set(range(first, first + 8)) for first in range(0, 32, 8)]  # a server
        # reduce-scatter + all-gather with a server's share reduced in it reaches it: the bound is tight for that family
        assert group_bounds(fabric, Collective.ALL_REDUCE, size, group).reduce_scatter_all_gather_ns == pytest.approx(1.5 * size / servers)
    row = group_bounds(fabric, Collective.ALL_REDUCE, size, tuple(range(8)))  # one server: no islands between members
    assert row.cut_ns < 1.5 * size / servers
