"""BFB schedules: exact LP optima, chunk rounding, lowering that verifies, expansions built from their base."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.bounds import lower_bounds
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.synth.bfb import bfb, bfb_problem, solve_bfb, topology_distances
from chakra_collectives.synth.bfb_expansions import derived_solution
from chakra_collectives.topology import Topology, load_topology
from chakra_collectives.units import bytes_per_ns
from chakra_collectives.verify import verify_algorithm

COLLECTIVES = ["all-gather", "reduce-scatter", "all-reduce"]


@pytest.mark.parametrize("spec", ["hypercube:4", "kautz:2,3", "totientperms:16,degree=4", "hetero-mesh2d:3x3", "line(kautz:2,2)", "genkautz:10,degree=3"])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_every_bfb_result_verifies(spec, collective):
    result = bfb(load_topology(spec), collective, 3 * 2**20)
    report = verify_algorithm(result.algorithm)
    assert report.ok, report
    assert result.algorithm.collective is Collective.parse(collective)


@pytest.mark.parametrize("dimension", [3, 4, 5, 6])
def test_binary_hypercube_steps_are_binomial(dimension):
    """At step t, C(d, t) shards reach each NPU over its d links: C(d, t)/d per link, exactly."""
    solution = solve_bfb(bfb_problem(load_topology(f"hypercube:{dimension}")))
    assert solution.step_loads == [Fraction(comb(dimension, t), dimension) for t in range(1, dimension + 1)]


@pytest.mark.parametrize("spec, degree", [("fully-connected:9", 8), ("hypercube:6", 6), ("torus2d:8x8", 4), ("circulant:31,strides=1,5", 4), ("hypercube:4x4", 6)])
def test_bandwidth_optimal_where_every_step_can_balance(spec, degree):
    """sum_t U_t = (N - 1) / degree: every shard arrives over the d links in perfectly balanced steps."""
    topo = load_topology(spec)
    solution = solve_bfb(bfb_problem(topo))
    assert solution.bandwidth_shards == Fraction(topo.num_npus - 1, degree)


@pytest.mark.parametrize("spec", ["hypercube:5,lat=0", "torus2d:4x4,lat=0", "kautz:2,3,lat=0", "hetero-mesh2d:3x3,x_lat=0,y_lat=0", "totientperms:20,degree=3,lat=0"])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_model_time_is_the_chunked_bandwidth_term_without_latency(spec, collective):
    """With zero latency, the lowered algorithm takes exactly sum_t (chunked U_t) x shard / bandwidth."""
    topo = load_topology(spec)
    size = 64 * 2**20
    result = bfb(topo, collective, size)
    chunk_bytes = result.algorithm.chunk_bytes()
    shards = result.chunked_bandwidth_shards
    b_max = max(l.bandwidth_gbps for l in topo.links)
    expected = float(shards) * chunk_bytes * result.all_gather.chunks_per_npu / bytes_per_ns(b_max)
    assert predict_time(result.algorithm, topo) == pytest.approx(expected, rel=1e-9)


def test_bandwidth_term_is_never_below_the_cut_bound():
    for spec in ["kautz:2,3", "genkautz:20,degree=4", "totientperms:24,degree=4", "torus2d:3x5"]:
        topo = load_topology(spec)
        result = bfb(topo, "all-gather", 2**30)
        assert result.bandwidth_ns(2**30, chunked=False) >= lower_bounds(topo, Collective.ALL_GATHER, 2**30).cut_ns * (1 - 1e-12)


def test_chunk_rounding_cost():
    """hypercube:3 needs 3 chunks per NPU for its 1/3 step; with 1 the last step moves a whole shard."""
    topo = load_topology("hypercube:3")
    exact = bfb(topo, "all-gather", 2**20)
    rounded = bfb(topo, "all-gather", 2**20, chunks_per_npu=1)
    assert exact.all_gather.chunks_per_npu == 3 and exact.all_gather.rounding_cost == 0
    assert rounded.all_gather.chunk_step_loads == [1, 1, 1]
    assert rounded.all_gather.rounding_cost == Fraction(3, Fraction(7, 3)) - 1
    assert verify_algorithm(rounded.algorithm).ok


def test_switches_and_disconnected_networks_are_refused():
    with pytest.raises(InputError, match="direct-connect topologies; switch:4 has 1 switch"):
        bfb(load_topology("switch:4"), "all-gather", 1024)
    one_way = Topology(3, name="one-way")
    one_way.add_link(0, 1, 50, 500)
    one_way.add_link(1, 2, 50, 500)
    with pytest.raises(InputError, match="one-way: NPU 1 cannot reach NPU 0"):
        bfb(one_way, "all-gather", 1024)
    with pytest.raises(InputError, match="BFB schedules all-gather, reduce-scatter, all-reduce, not all-to-all"):
        bfb(load_topology("ring:4"), "all-to-all", 1024)


@st.composite
def strongly_connected(draw):
    """A ring (so every NPU reaches every other) plus random extra links, random bandwidths."""
    n = draw(st.integers(3, 9))
    order = draw(st.permutations(range(n)))
    pairs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    pairs |= {(a, b) for a, b in extra if a != b}
    topo = Topology(n, name="random")
    for a, b in sorted(pairs):
        topo.add_link(a, b, draw(st.sampled_from([25.0, 50.0, 100.0])), 500.0)
    return topo


@settings(max_examples=25, deadline=None)
@given(strongly_connected(), st.sampled_from(COLLECTIVES))
def test_random_strongly_connected_topologies(topo, collective):
    result = bfb(topo, collective, 2**20, chunks_per_npu=None)
    assert verify_algorithm(result.algorithm).ok
    # each step's optimum is at least the step's average: NPU v's shards at distance t over its in-links
    problem = bfb_problem(topo)
    solution = solve_bfb(problem)
    b_max = max(problem.bandwidth)
    for v in range(topo.num_npus):
        into = sum(b for b, d in zip(problem.bandwidth, problem.dst) if d == v) / b_max
        for t, load in enumerate(solution.step_loads, start=1):
            assert load >= Fraction(int((problem.distance[:, v] == t).sum())) / into


EXPANSIONS = [
    "line(kautz:2,2)", "line(line(fully-connected:4))", "line(torus2d:3x3)", "line(hetero-mesh2d:3x3)",
    "line(circulant:7,strides=1,3,bidirectional=false)", "ring:4 x kautz:2,2", "hetero-mesh2d:2x2 x kautz:2,2",
    "line(kautz:2,2) x ring:3,bidirectional=false", "degree(torus2d:3x3,2)", "degree(kautz:2,2,3)",
    "degree(hetero-mesh2d:2x3,2)", "degree(ring:3 x ring:4,2)", "line(degree(ring:4,2))", "(line(kautz:2,2)) x degree(ring:3,2)",
]


@pytest.mark.parametrize("spec", EXPANSIONS)
def test_expansion_programs_from_the_base_equal_solving_directly(spec):
    """Every (NPU, step) optimum built from the bases' programs equals the one solved on the expansion's own distances,
    and every message of the derived schedule leaves an NPU that holds its chunks (one hop nearer their owner)."""
    topo = load_topology(spec)
    derived = derived_solution(topo)
    direct = solve_bfb(bfb_problem(topo, distance=topology_distances(topo)))
    assert derived is not None and derived.step_loads == direct.step_loads
    loads = lambda solution: {(v, t): solution.solutions[key].load for v, t, key, *_ in solution.cells}  # noqa: E731
    assert loads(derived) == loads(direct)
    result = bfb(topo, "all-reduce", 2**20)
    assert verify_algorithm(result.algorithm).ok
    schedule, hops = result.all_gather.schedule, topology_distances(topo)
    owner = schedule.chunk // schedule.chunks_per_npu
    assert (hops[owner, schedule.src] + 1 == hops[owner, schedule.dst]).all()


@settings(max_examples=15, deadline=None)
@given(strongly_connected(), strongly_connected(), st.sampled_from(["line", "product", "degree"]))
def test_expansions_of_random_bases_derive_the_direct_optima(first, second, kind):
    from chakra_collectives.topology.expansions import cartesian, degree_expand, line_graph

    topo = {"line": lambda: line_graph(first), "product": lambda: cartesian(first, second), "degree": lambda: degree_expand(first, 2)}[kind]()
    derived = derived_solution(topo)
    direct = solve_bfb(bfb_problem(topo, distance=topology_distances(topo)))
    assert derived.step_loads == direct.step_loads
    assert {(v, t): derived.solutions[k].load for v, t, k, *_ in derived.cells} == {(v, t): direct.solutions[k].load for v, t, k, *_ in direct.cells}


def test_bfb_is_registered_for_synth_best_and_replay(tmp_path):
    from chakra_collectives.converters.chakra_et import single_collective_workload
    from chakra_collectives.replay import replay
    from chakra_collectives.synth import applicable, synthesize

    torus = load_topology("torus2d:4x4")
    assert "bfb" in applicable(Collective.ALL_REDUCE, 16, torus)
    assert "bfb" not in applicable(Collective.ALL_REDUCE, 16, load_topology("switch:16"))
    made = synthesize(torus, "all-reduce", "16MiB", algorithm="bfb")
    assert made.algorithm_name == "bfb" and made.efficiency > 0.9 and verify_algorithm(made.algorithm).ok
    single_collective_workload(tmp_path / "w", "all-reduce", 16, 2**24)
    replayed = replay(tmp_path / "w", torus, default_algorithm="bfb")
    assert replayed.collectives[0].algorithm == "bfb (built-in)"
    # the call is the algorithm scaled to the call's size: the same time as synthesizing it at that size
    assert replayed.total_ns == pytest.approx(made.predicted_ns, rel=1e-6)
