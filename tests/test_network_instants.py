"""The event loop instant by instant (``network.instants``): the Python loop's times bit for bit
where its conditions hold, ``None`` (the loop runs) where they do not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.ir import Collective
from chakra_collectives.network import NetworkModel, engine, instants
from chakra_collectives.network.collective import collective_task_graph
from chakra_collectives.network.engine import run
from chakra_collectives.network.graph import LOCAL, RECV, SEND, TaskGraph
from chakra_collectives.network.levels import HopCosts
from chakra_collectives.synth.forestcoll import forestcoll
from chakra_collectives.topology import load_topology

TOPOLOGY = load_topology("torus2d:2x3")


@st.composite
def sends_waiting_for_messages(draw):
    """SEND/RECV pairs between distinct NPUs of a 2x3 torus (few sizes: ties on shared links);
    each SEND waits for up to three earlier tasks (SENDs or RECVs); RECVs wait for nothing; a
    few LOCAL tasks (no time, nothing waits for them)."""
    pairs = draw(st.integers(1, 40))
    kind, npu, partner, nbytes = [], [], [], []
    for _ in range(pairs):
        src = draw(st.integers(0, 5))
        dst = (src + draw(st.integers(1, 5))) % 6
        size = draw(st.sampled_from([0, 2**10, 2**20]))
        at = len(kind)
        kind += [SEND, RECV]
        npu += [src, dst]
        partner += [at + 1, at]
        nbytes += [size, size]
    for _ in range(draw(st.integers(0, 3))):
        kind.append(LOCAL)
        npu.append(draw(st.integers(0, 5)))
        partner.append(-1)
        nbytes.append(0)
    dep_ptr, dep_idx = [0], []
    for task, k in enumerate(kind):
        if k == SEND and task:
            dep_idx += draw(st.lists(st.sampled_from([t for t in range(len(kind)) if kind[t] != LOCAL and t != task and t != partner[task]]), max_size=3))
        dep_ptr.append(len(dep_idx))
    return TaskGraph.build(kind=kind, npu=npu, partner=partner, nbytes=nbytes, duration=[0.0] * len(kind), dep_ptr=dep_ptr, dep_idx=dep_idx)


def timed_both_ways(graph: TaskGraph, model: NetworkModel, monkeypatch):
    """``run`` instant by instant (however sparse) and by the event loop alone."""
    with monkeypatch.context() as patch:
        patch.setattr(engine, "contention_free_times", lambda *args, **kwargs: None)
        patch.setattr(engine, "COMPILED_TASKS", 2**62)
        taken = []
        real = instants.instant_times
        patch.setattr(engine, "instant_times", lambda *args, **kwargs: taken.append(real(*args, **kwargs)) or taken[-1])
        patch.setattr(instants, "MIN_EVENTS_PER_INSTANT", 0)
        fast = run(graph, model)
        patch.setattr(engine, "instant_times", lambda *args, **kwargs: None)
        loop = run(graph, model)
    return fast, loop, taken[-1] is not None


def assert_same(fast, loop):
    assert np.array_equal(fast.start, loop.start, equal_nan=True)
    assert np.array_equal(fast.end, loop.end, equal_nan=True)
    assert np.array_equal(fast.stuck, loop.stuck)
    for name in ("busy_ns", "bytes", "messages"):
        assert np.array_equal(getattr(fast.links, name), getattr(loop.links, name))


@pytest.mark.parametrize("mode", ["tacos", "astra-sim"])
@settings(max_examples=150, deadline=None)
@given(graph=sends_waiting_for_messages())
def test_random_graphs_time_as_the_event_loop(graph, mode):
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, loop, taken = timed_both_ways(graph, NetworkModel(TOPOLOGY, network_model=mode), monkeypatch)
    assert taken
    assert_same(fast, loop)


@pytest.mark.parametrize("spec, collective, pieces", [("dgx:4x8", "all-gather", 8), ("a100:2", "all-gather", None), ("mi250:1", "broadcast", None)])
def test_forestcoll_schedules_time_as_the_event_loop(spec, collective, pieces, monkeypatch):
    """Pipelined trees (queues on shared NICs, the last piece in two messages): the same times."""
    topo = load_topology(spec)
    algo = forestcoll(topo, collective, "64MiB", chunks_per_tree=pieces).algorithm
    model = NetworkModel(topo)
    fast, loop, taken = timed_both_ways(collective_task_graph(algo, model), model, monkeypatch)
    assert taken
    assert_same(fast, loop)
    assert not len(loop.stuck)


def one_hop(kind, partner, dep_ptr, dep_idx, duration=None, unit=None):
    size = len(kind)
    graph = TaskGraph.build(kind=kind, npu=[0] * size, partner=partner, nbytes=[8] * size, duration=duration or [0.0] * size, dep_ptr=dep_ptr, dep_idx=dep_idx, unit=unit)
    sends = int(np.sum(np.array(kind) == SEND))
    costs = HopCosts(np.zeros(sends, dtype=np.int64), np.array([0, 1]), np.array([0]), np.array([10.0]), np.array([10.0]))
    return graph, costs


def test_graphs_outside_the_conditions_are_left_to_the_loop():
    recv_waits = one_hop([SEND, RECV, LOCAL], [1, 0, -1], [0, 0, 1, 1], [2])
    timed_local = one_hop([SEND, RECV, LOCAL], [1, 0, -1], [0, 0, 0, 0], [], duration=[0.0, 0.0, 5.0])
    waits_for_local = one_hop([SEND, RECV, LOCAL], [1, 0, -1], [0, 1, 1, 1], [2])
    holds_unit = one_hop([SEND, RECV], [1, 0], [0, 0, 0], [], unit=[0, -1])
    fine = one_hop([SEND, RECV, LOCAL], [1, 0, -1], [0, 0, 0, 0], [])
    for graph, costs in (recv_waits, timed_local, waits_for_local, holds_unit):
        assert instants.instant_times(graph, costs, num_links=1) is None
    start, end = instants.instant_times(*fine, num_links=1)
    assert start.tolist() == [0.0, 0.0, 0.0] and end.tolist() == [10.0, 10.0, 0.0]


def test_sparse_instants_go_back_to_the_loop(monkeypatch):
    """A chain of single messages: one event an instant, below the density at its check."""
    size = 2 * 200
    kind = [SEND, RECV] * 200
    partner = [i + 1 if i % 2 == 0 else i - 1 for i in range(size)]
    dep_ptr = np.cumsum([0] + [1 if i % 2 == 0 and i else 0 for i in range(size)]).tolist()  # SEND 2j waits for RECV 2j - 1
    dep_idx = [i - 1 for i in range(2, size, 2)]
    graph, costs = one_hop(kind, partner, dep_ptr, dep_idx)
    assert instants.instant_times(graph, costs, num_links=1) is None
    monkeypatch.setattr(instants, "MIN_EVENTS_PER_INSTANT", 0)
    start, end = instants.instant_times(graph, costs, num_links=1)
    assert end[-1] == 10.0 * 200
