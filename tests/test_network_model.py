"""The shared network model: ASTRA-sim's measured values, closed forms, an independent oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, OpKind
from chakra_collectives.network import NetworkModel, predict_time, simulate_collective
from chakra_collectives.synth.baselines import ring
from chakra_collectives.topology import Topology
from chakra_collectives.units import bytes_per_ns

from network_helpers import (
    ONE_BYTE_PER_NS,
    fully_connected,
    line_topology,
    ring_all_reduce_without_reductions,
    ring_topology,
    switch_topology,
)

pytestmark = pytest.mark.usefixtures("event_loop")  # every test with the Python and the compiled event loop

MIB = 2**20


def astra_step(n: int, size: int, bandwidth: float = 50.0, latency: float = 500.0) -> int:
    """docs/et-conventions.md: one ring step is int(latency + (S/N) / (bw * 1.073741824))."""
    return int(latency + (size / n) / (bandwidth * 1.073741824))


# ---------------------------------------------------------------------------- ASTRA-sim, measured
@pytest.mark.interop
def test_astra_sim_custom_all_reduce_to_the_nanosecond(astra_custom_allreduce):
    algo = read_algorithm(astra_custom_allreduce)
    assert predict_time(algo, ring_topology(8), network_model="astra-sim") == 90_174  # 14 x 2,941 + 7 x 7,000


@pytest.mark.interop
def test_astra_sim_custom_all_reduce_without_its_comp_nodes(astra_custom_allreduce):
    algo = read_algorithm(astra_custom_allreduce)
    stripped = _without_compute(algo)
    assert (stripped.ops.kind == OpKind.COMPUTE).sum() == 0
    assert predict_time(stripped, ring_topology(8), network_model="astra-sim") == 41_174


@pytest.mark.parametrize(("n", "expected"), [(8, 41_174), (64, 101_430)])
def test_astra_sim_ring_steps_measured(n, expected):
    algo = ring_all_reduce_without_reductions(n, MIB)
    assert predict_time(algo, ring_topology(n), network_model="astra-sim") == expected


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 12),
    share=st.integers(1, 2**20 // 12),
    bandwidth=st.sampled_from([25.0, 50.0, 100.0, 200.0, 400.0]),
    latency=st.sampled_from([0.0, 1.0, 500.0, 936.25]),
)
def test_astra_sim_ring_formula(n, share, bandwidth, latency):
    size = share * n
    algo = ring_all_reduce_without_reductions(n, size)
    got = predict_time(algo, ring_topology(n, bandwidth, latency), network_model="astra-sim")
    assert got == 2 * (n - 1) * astra_step(n, size, bandwidth, latency)


def test_astra_sim_charges_one_ns_per_zero_time_reduction():
    # our ring all-reduce puts N-1 reductions on each rank's critical path; ASTRA-sim charges 1 ns for each
    n = 8
    algo = ring(Collective.ALL_REDUCE, n, size_bytes=MIB)
    assert predict_time(algo, ring_topology(n), network_model="astra-sim") == 2 * (n - 1) * astra_step(n, MIB) + (n - 1)


def _without_compute(algo):
    """Drop COMPUTE ops, wiring their dependents to their dependencies (same rank)."""
    ops = algo.ops
    keep = ops.kind != OpKind.COMPUTE
    rows = []
    new_index = np.cumsum(keep) - 1

    def resolve(i):
        if keep[i]:
            return [int(i)]
        return [d for dep in ops.deps_of(i) for d in resolve(int(dep))]

    for i in np.flatnonzero(keep):
        op = ops.op(int(i))
        first = int(np.searchsorted(ops.rank, op.rank))
        first_new = int(new_index[first]) if keep[first] else int(new_index[first]) + 1
        deps = sorted({int(new_index[d]) - first_new for dep in ops.deps_of(int(i)) for d in resolve(int(dep))})
        rows.append(dict(rank=op.rank, kind=op.kind, peer=op.peer, tag=op.tag, nbytes=op.nbytes, deps=deps))
    from chakra_collectives.ir import OpTable
    from dataclasses import replace

    return replace(algo, ops=OpTable.from_rows(rows))


# ---------------------------------------------------------------------------- closed forms (tacos mode)
@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_ring_all_reduce_on_a_ring_closed_form(n):
    alpha, size = 500.0, 2**20 * n
    topo = ring_topology(n, ONE_BYTE_PER_NS * 64, alpha, bidirectional=False)
    got = predict_time(ring(Collective.ALL_REDUCE, n, size_bytes=size), topo)
    assert got == 2 * (n - 1) * (alpha + size / n / 64)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 10), size=st.integers(1, 2**26), bw=st.floats(1.0, 900.0), alpha=st.floats(0.0, 5000.0))
def test_ring_all_gather_closed_form_any_numbers(n, size, bw, alpha):
    topo = ring_topology(n, bw, alpha)
    algo = ring(Collective.ALL_GATHER, n, size_bytes=size)
    chunk = -(-size // n)
    assert predict_time(algo, topo) == pytest.approx((n - 1) * (alpha + chunk / bytes_per_ns(bw)), rel=1e-12)


def test_store_and_forward_and_tacos_link_occupancy():
    # two messages 0 -> 2 over a line 0-1-2, both injected at t = 0: FIFO per link, per hop
    topo = line_topology(3, ONE_BYTE_PER_NS, 100.0)
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=3, chunk_count=2, size_bytes=2000)
    b.transfer(0, 2, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1)
    b.transfer(0, 2, src=(Buffer.INPUT, 1), dst=(Buffer.OUTPUT, 1), count=1)
    algo = b.build(input_chunks=[2, 0, 0], output_chunks=[0, 0, 2], scratch_chunks=[0, 0, 0])
    tacos = simulate_collective(algo, topo)
    # hop = 100 + 1000 ns; second message waits one hop on the first link, then follows
    assert sorted(tacos.end_ns.tolist()) == [2200.0, 2200.0, 3300.0, 3300.0]
    astra = simulate_collective(algo, topo, network_model="astra-sim")
    # ASTRA-sim frees a link after S/B = 1000 ns: the second message starts hop 1 at 1000
    assert sorted(astra.end_ns.tolist()) == [2200.0, 2200.0, 3200.0, 3200.0]
    assert tacos.links.bytes.sum() == 4 * 1000 and tacos.links.messages.sum() == 4


@pytest.mark.parametrize("mode", ["tacos", "astra-sim"])
def test_fifo_queue_on_one_link(mode):
    k, size, alpha = 5, 3000, 250.0
    topo = Topology(2)
    topo.add_link(0, 1, ONE_BYTE_PER_NS, alpha, bidirectional=True)
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=k, size_bytes=k * size)
    for c in range(k):
        b.transfer(0, 1, src=(Buffer.INPUT, c), dst=(Buffer.OUTPUT, c), count=1)
    algo = b.build(input_chunks=[k, 0], output_chunks=[0, k], scratch_chunks=[0, 0])
    timing = simulate_collective(algo, topo, network_model=mode)
    sends = timing.end_ns[algo.ops.kind == OpKind.SEND]
    if mode == "tacos":
        assert sends.tolist() == [(c + 1) * (alpha + size) for c in range(k)]
    else:
        assert sends.tolist() == [alpha + (c + 1) * size for c in range(k)]


def test_astra_sim_routes_ring_ties_clockwise_and_switch_through_the_hub():
    topo = ring_topology(6)
    model = NetworkModel(topo, network_model="astra-sim")
    for src in range(6):
        hops = [topo.links[l].dst for l in model.route(src, (src + 3) % 6)]
        assert hops == [(src + k) % 6 for k in (1, 2, 3)]
        assert [topo.links[l].dst for l in model.route(src, (src - 2) % 6)] == [(src - 1) % 6, (src - 2) % 6]
    star = switch_topology(4)
    assert [star.links[l].dst for l in NetworkModel(star, network_model="astra-sim").route(1, 3)] == [4, 3]
    assert len(NetworkModel(fully_connected(5), network_model="astra-sim").route(4, 0)) == 1


def test_reduce_bandwidth_and_serial_local_ops():
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=1, chunk_count=2, size_bytes=8192)
    b.reduce(0, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1)
    b.reduce(0, src=(Buffer.INPUT, 1), dst=(Buffer.OUTPUT, 1), count=1)
    algo = b.build(input_chunks=[2], output_chunks=[2], scratch_chunks=[0])
    topo = Topology(1)
    assert predict_time(algo, topo) == 0.0
    assert predict_time(algo, topo, reduce_bandwidth_gbps=ONE_BYTE_PER_NS) == 4096.0
    serial = simulate_collective(algo, topo, reduce_bandwidth_gbps=ONE_BYTE_PER_NS, local_ops="serial")
    assert serial.time_ns == 8192.0 and sorted(serial.start_ns.tolist()) == [0.0, 4096.0]


# ---------------------------------------------------------------------------- an independent oracle
@st.composite
def uncontended_algorithms(draw):
    """Random programs on a fully-connected topology, each ordered pair of ranks used once."""
    n = draw(st.integers(2, 5))
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=n, chunk_count=1, size_bytes=1000)
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1]), unique=True, max_size=10))
    for src, dst in pairs:
        send_deps = draw(st.lists(st.integers(0, max(0, b.num_ops(src) - 1)), max_size=2)) if b.num_ops(src) else []
        recv_deps = draw(st.lists(st.integers(0, max(0, b.num_ops(dst) - 1)), max_size=2)) if b.num_ops(dst) else []
        b.transfer(src, dst, src=(Buffer.INPUT, 0), dst=(Buffer.SCRATCH, 0), count=1, send_deps=send_deps, recv_deps=recv_deps)
        if draw(st.booleans()):
            rank = draw(st.sampled_from([src, dst]))
            b.reduce(rank, src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=1,
                     deps=[b.num_ops(rank) - 1], duration_ns=float(draw(st.integers(0, 3000))))
    for r in range(n):
        if b.num_ops(r) == 0:
            b.reduce(r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1, duration_ns=5.0)
    return b.build(input_chunks=[1] * n, output_chunks=[1] * n, scratch_chunks=[1] * n)


def _longest_path_times(algo, hop_ns):
    """Earliest completion of every op by fixed-point relaxation (no contention); None if cyclic."""
    from chakra_collectives.ir.matching import match_messages

    ops, partner = algo.ops, match_messages(algo).partner
    end = [None] * len(ops)
    changed = True
    while changed:
        changed = False
        for i in range(len(ops)):
            if end[i] is not None:
                continue
            deps = [end[d] for d in ops.deps_of(i)]
            if any(d is None for d in deps):
                continue
            ready = max(deps, default=0.0)
            kind = OpKind(int(ops.kind[i]))
            if kind is OpKind.SEND:
                end[i] = ready + hop_ns
            elif kind is OpKind.RECV:
                s = int(partner[i])
                sent = end[s]
                if sent is None:
                    continue
                end[i] = max(ready, sent)
            else:
                end[i] = ready + float(ops.duration_ns[i])
            changed = True
    return None if any(e is None for e in end) else end


@settings(max_examples=80, deadline=None)
@given(algo=uncontended_algorithms())
def test_engine_equals_longest_path_without_contention(algo):
    topo = fully_connected(algo.num_ranks, ONE_BYTE_PER_NS, 300.0)
    expected = _longest_path_times(algo, 300.0 + 1000.0)
    if expected is None:
        with pytest.raises(AlgorithmError, match="deadlock"):
            simulate_collective(algo, topo)
        return
    timing = simulate_collective(algo, topo)
    assert timing.end_ns.tolist() == expected


# ---------------------------------------------------------------------------- errors
def test_unmatched_send_and_small_topology_and_bad_mode():
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=1, size_bytes=64)
    b.send(0, 1, tag=0, src=(Buffer.INPUT, 0), count=1)
    b.reduce(1, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1)
    lonely = b.build(input_chunks=[1, 1], output_chunks=[1, 1], scratch_chunks=[0, 0])
    with pytest.raises(AlgorithmError, match="no matching RECV"):
        predict_time(lonely, fully_connected(2))
    with pytest.raises(InputError, match="too few"):
        predict_time(ring(Collective.ALL_GATHER, 4, size_bytes=MIB), fully_connected(3))
    with pytest.raises(InputError, match="unknown network mode"):
        predict_time(ring(Collective.ALL_GATHER, 2, size_bytes=MIB), fully_connected(2), network_model="ns3")
    with pytest.raises(InputError, match="reduce bandwidth"):
        predict_time(ring(Collective.ALL_GATHER, 2, size_bytes=MIB), fully_connected(2), reduce_bandwidth_gbps=0)


def test_deadlock_is_reported_not_hung():
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=1, size_bytes=64)
    r0 = b.recv(0, 1, tag=0, dst=(Buffer.OUTPUT, 0), count=1)
    b.send(0, 1, tag=0, src=(Buffer.INPUT, 0), count=1, deps=[r0])
    r1 = b.recv(1, 0, tag=0, dst=(Buffer.OUTPUT, 0), count=1)
    b.send(1, 0, tag=0, src=(Buffer.INPUT, 0), count=1, deps=[r1])
    algo = b.build(input_chunks=[1, 1], output_chunks=[1, 1], scratch_chunks=[0, 0])
    with pytest.raises(AlgorithmError, match=r"deadlock: 4 of 4 operations never complete .*rank 0 node 0 RECV"):
        predict_time(algo, fully_connected(2))


def test_placement_moves_ranks_to_other_npus():
    topo = line_topology(4, ONE_BYTE_PER_NS, 0.0)
    algo = ring(Collective.ALL_GATHER, 2, size_bytes=2000)
    near = simulate_collective(algo, topo, placement=[0, 1]).time_ns
    far = simulate_collective(algo, topo, placement=[0, 3]).time_ns
    assert (near, far) == (1000.0, 3000.0)
    assert math.isfinite(near)


def test_the_old_mode_keyword_still_works_for_one_release_and_warns():
    """``network_model=`` everywhere; ``mode=`` gives the same result with a DeprecationWarning."""
    from chakra_collectives.synth.best import baseline_bound_ns

    algo, topo = ring(Collective.ALL_GATHER, 4, size_bytes=MIB), ring_topology(4)
    with pytest.warns(DeprecationWarning, match="mode is deprecated; use network_model"):
        old = predict_time(algo, topo, mode="astra-sim")
    assert old == predict_time(algo, topo, network_model="astra-sim") != predict_time(algo, topo)
    with pytest.warns(DeprecationWarning):
        assert NetworkModel(topo, mode="astra-sim").mode == NetworkModel(topo, network_model="astra-sim").mode
    with pytest.warns(DeprecationWarning):
        bound = baseline_bound_ns("ring", topo, Collective.ALL_GATHER, MIB, 1, mode="astra-sim")
    assert bound == baseline_bound_ns("ring", topo, Collective.ALL_GATHER, MIB, 1, network_model="astra-sim") > 0
    with pytest.raises(TypeError, match="not both"):
        predict_time(algo, topo, mode="astra-sim", network_model="default")


def test_messages_reaching_a_link_at_one_instant_take_it_in_the_order_they_were_scheduled():
    """NPUs 0 and 1 send to NPU 2 through a switch; their first hops end at the same instant
    (1,000 bytes + 100 ns, 500 bytes + 600 ns), so both offer the switch's link to NPU 2 at
    1,100 ns. NPU 0's message was scheduled first (its SEND started first) and goes first:
    1,100 + 1,100 = 2,200 ns, then NPU 1's waits and ends at 2,200 + 600 = 2,800 ns (the other
    order would end them at 2,800 and 1,700)."""
    from chakra_collectives.network.engine import run
    from chakra_collectives.network.graph import RECV, SEND, TaskGraph

    t = Topology(3, num_switches=1)
    t.add_link(0, 3, ONE_BYTE_PER_NS, 100.0)
    t.add_link(1, 3, ONE_BYTE_PER_NS, 600.0)
    t.add_link(3, 2, ONE_BYTE_PER_NS, 100.0)
    for a, b in ((2, 3), (3, 0), (3, 1)):  # the way back (unused)
        t.add_link(a, b, ONE_BYTE_PER_NS, 100.0)
    graph = TaskGraph.build(kind=[SEND, SEND, RECV, RECV], npu=[0, 1, 2, 2], partner=[2, 3, 0, 1], nbytes=[1000, 500, 1000, 500],
                            duration=[0.0] * 4, dep_ptr=[0] * 5, dep_idx=[])
    assert run(graph, NetworkModel(t)).end.tolist() == [2200.0, 2800.0, 2200.0, 2800.0]
