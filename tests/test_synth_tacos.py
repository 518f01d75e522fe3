"""TACOS: every synthesized algorithm verifies, and the network model agrees with the matcher."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, OpKind
from chakra_collectives.network import predict_time
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.matcher import match_all_gather
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import Topology, load_topology
from chakra_collectives.verify import verify_algorithm

AG, RS, AR = Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE
DIRECT = ["ring:4", "ring:5,bidirectional=false", "mesh2d:3x2", "torus2d:3x3", "hypercube:3", "fully-connected:4", "hetero-mesh2d:3x2"]
SWITCHED = ["switch:5", "dgx:2x3"]


@pytest.mark.parametrize("spec", DIRECT + SWITCHED)
@pytest.mark.parametrize("collective", [AG, RS, AR])
@pytest.mark.parametrize("k", [1, 2])
def test_every_synthesized_algorithm_verifies(spec, collective, k):
    topo = load_topology(spec)
    result = tacos(topo, collective, 3 * 2**20 + 1, chunks_per_npu=k, seed=k)
    report = verify_algorithm(result.algorithm)
    assert report.ok, report.checks
    n = topo.num_npus
    sends = result.algorithm.ops.kind == OpKind.SEND
    # every (NPU, chunk) pair is served exactly once: N-1 receptions per chunk in each phase
    assert int(sends.sum()) == (2 if collective is AR else 1) * n * k * (n - 1)


@pytest.mark.parametrize("spec", DIRECT)
@pytest.mark.parametrize("collective", [AG, RS])
def test_model_replays_the_schedule_exactly_on_direct_links(spec, collective):
    topo = load_topology(spec)
    for seed in range(3):
        result = tacos(topo, collective, 2**20, chunks_per_npu=2, seed=seed)
        assert predict_time(result.algorithm, topo) == pytest.approx(result.schedule_ns, rel=1e-12)


@pytest.mark.parametrize("spec", DIRECT)
def test_all_reduce_never_exceeds_its_two_phases(spec):
    # the All-Gather phase may start per chunk as soon as it is reduced: never later than planned
    topo = load_topology(spec)
    for seed in range(3):
        result = tacos(topo, AR, 2**20, chunks_per_npu=2, seed=seed)
        assert result.schedule_ns == pytest.approx(sum(p.time_ns for p in result.phases))
        assert predict_time(result.algorithm, topo) <= result.schedule_ns * (1 + 1e-12)


@pytest.mark.parametrize("spec", SWITCHED + ["switch:8", "dgx:2x4"])
def test_model_replays_all_gather_through_switches(spec):
    topo = load_topology(spec)
    for seed in range(3):
        result = tacos(topo, AG, 2**20, chunks_per_npu=2, seed=seed)
        assert predict_time(result.algorithm, topo) == pytest.approx(result.schedule_ns, rel=1e-12)


def test_ring_all_gather_reaches_its_closed_form():
    # unidirectional ring of N: every chunk needs N-1 hops and each link carries one chunk per step
    n, size = 6, 6 * 2**20
    topo = load_topology(f"ring:{n},bidirectional=false")
    result = tacos(topo, AG, size)
    hop = topo.links[0].transfer_ns(size // n)
    assert result.schedule_ns == pytest.approx((n - 1) * hop)


def test_chunks_are_padded_up():
    topo = load_topology("ring:3")
    result = tacos(topo, AG, 1000, chunks_per_npu=2)
    assert result.algorithm.chunk_count == 6 and result.algorithm.chunk_bytes() == 167  # ceil(1000 / 6)


def test_deterministic_and_trials_keep_the_best():
    topo = load_topology("torus2d:4x4")
    a = tacos(topo, AG, 2**20, chunks_per_npu=2, seed=7)
    b = tacos(topo, AG, 2**20, chunks_per_npu=2, seed=7)
    assert a.algorithm.ops.equals(b.algorithm.ops)
    singles = [tacos(topo, AR, 2**20, chunks_per_npu=2, seed=s).schedule_ns for s in range(3, 7)]
    best = tacos(topo, AR, 2**20, chunks_per_npu=2, seed=3, trials=4)
    assert best.schedule_ns == min(singles) and best.seed == 3 + singles.index(min(singles))


def test_written_files_read_back_into_the_same_algorithm(tmp_path):
    algo = tacos(load_topology("dgx:2x2"), AR, 2**20, chunks_per_npu=2).algorithm
    write_algorithm(algo, tmp_path / "ar")
    assert read_algorithm(tmp_path / "ar").equals(algo)


def test_refuses_what_it_cannot_do():
    topo = load_topology("ring:4")
    with pytest.raises(InputError, match="not all-to-all"):
        tacos(topo, Collective.ALL_TO_ALL, 2**20)
    with pytest.raises(InputError, match="chunks per NPU must be positive"):
        tacos(topo, AG, 2**20, chunks_per_npu=0)


@st.composite
def random_topologies(draw):
    """Strongly connected random digraphs with random bandwidths and latencies."""
    n = draw(st.integers(2, 7))
    topo = Topology(n, name="random")
    order = draw(st.permutations(range(n)))
    speeds = st.sampled_from([12.5, 25.0, 50.0, 100.0])
    latencies = st.sampled_from([0.0, 100.0, 500.0])
    for a, b in zip(order, order[1:] + order[:1]):  # a directed cycle keeps it strongly connected
        topo.add_link(a, b, draw(speeds), draw(latencies))
    for a, b in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=8)):
        if a != b and not any(l.src == a and l.dst == b for l in topo.links):
            topo.add_link(a, b, draw(speeds), draw(latencies))
    return topo


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_topologies(), st.integers(1, 3), st.integers(0, 100))
def test_random_asymmetric_topologies(topo, k, seed):
    assert nx.is_strongly_connected(nx.DiGraph([(l.src, l.dst) for l in topo.links]))
    for collective in (AG, RS):
        result = tacos(topo, collective, 2**20, chunks_per_npu=k, seed=seed)
        assert verify_algorithm(result.algorithm).ok
        assert predict_time(result.algorithm, topo) == pytest.approx(result.schedule_ns, rel=1e-12)


def test_schedule_respects_links_and_never_repeats_a_delivery():
    topo = load_topology("hetero-mesh2d:3x3")
    channels = build_channels(topo, chunk_bytes=2**18)
    schedule = match_all_gather(channels, 2, seed=1)
    pairs = schedule.dst * (9 * 2) + schedule.chunk
    assert len(np.unique(pairs)) == len(pairs) == 9 * 2 * 8
    # each transfer lasts its link's latency + size/bandwidth, and one link carries one chunk at a time
    assert np.allclose(schedule.end - schedule.start, channels.direct_ns[schedule.channel])
    for channel in np.unique(schedule.channel):
        mine = np.flatnonzero(schedule.channel == channel)
        order = mine[np.argsort(schedule.start[mine])]
        assert np.all(schedule.start[order][1:] >= schedule.end[order][:-1])
    # a chunk leaves an NPU only after it arrived there
    arrival = {(int(d), int(c)): e for d, c, e in zip(schedule.dst, schedule.chunk, schedule.end)}
    for s, c, t in zip(schedule.src, schedule.chunk, schedule.start):
        assert c // 2 == s or arrival[int(s), int(c)] <= t
