"""The engine's fast path: contention-free task graphs timed level by level equal the event engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.ir import Collective
from chakra_collectives.network import NetworkModel
from chakra_collectives.network.collective import collective_task_graph
from chakra_collectives.network import engine, levels
from chakra_collectives.network.engine import run
from chakra_collectives.network.graph import LOCAL, RECV, SEND, TaskGraph
from chakra_collectives.network.levels import HopCosts, contention_free_times
from chakra_collectives.synth.baselines import direct, ring
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology

from network_helpers import random_graphs

pytestmark = pytest.mark.usefixtures("event_loop")  # every test with the Python and the compiled event loop


def hop_costs(graph: TaskGraph, model: NetworkModel) -> HopCosts:
    """Every SEND's own route and hop times, straight from the model."""
    sends = np.flatnonzero(graph.kind == SEND)
    routes = [model.route(int(graph.npu[s]), int(graph.npu[graph.partner[s]])) for s in sends]
    lengths = np.array([len(r) for r in routes], dtype=np.int64)
    links = np.array([link for r in routes for link in r], dtype=np.int64)
    busy, delivered = model.hop_times(links, np.repeat(graph.nbytes[sends], lengths))
    return HopCosts(np.arange(len(sends)), np.concatenate([[0], np.cumsum(lengths)]), links, busy, delivered)


def cases():
    for spec in ("ring:6", "torus2d:3x4", "hypercube:3x3", "switch:6", "fully-connected:5"):
        topo = load_topology(spec)
        n = topo.num_npus
        for collective in ("all-gather", "reduce-scatter", "all-reduce"):
            yield spec, topo, tacos(topo, collective, n * 2**20, chunks_per_npu=2).algorithm
            yield spec, topo, ring(Collective.parse(collective), n, size_bytes=n * 2**20)
            yield spec, topo, direct(Collective.parse(collective), n, size_bytes=n * 2**20)


def event_engine(graph: TaskGraph, model: NetworkModel, monkeypatch, *, record_links: bool = False):
    """``run`` with the fast path turned off."""
    with monkeypatch.context() as patch:
        patch.setattr(engine, "contention_free_times", lambda *args, **kwargs: None)
        return run(graph, model, record_links=record_links)


def hop_rows(timing) -> list[tuple[int, float, float, int]]:
    hops = timing.links.intervals
    return sorted(zip(hops.link.tolist(), hops.begin.tolist(), hops.end.tolist(), hops.send.tolist()))


@pytest.mark.parametrize("mode", ["tacos", "astra-sim"])
def test_fast_path_equals_the_event_engine(mode, monkeypatch):
    taken = 0
    for spec, topo, algo in cases():
        model = NetworkModel(topo, network_model=mode)
        graph = collective_task_graph(algo, model)
        events = event_engine(graph, model, monkeypatch, record_links=True)
        fast = contention_free_times(graph, hop_costs(graph, model))
        if fast is not None:
            taken += 1
            assert np.array_equal(fast.start, events.start) and np.array_equal(fast.end, events.end), (spec, algo.name)
        for record_links in (False, True):  # whichever path: the same times, link use and hops
            timing = run(graph, model, record_links=record_links)
            assert np.array_equal(timing.end, events.end) and np.array_equal(timing.links.busy_ns, events.links.busy_ns)
            assert np.array_equal(timing.links.bytes, events.links.bytes)
            assert hop_rows(timing) == (hop_rows(events) if record_links else [])
    assert taken >= 20


def test_blocks_of_edges_and_links_time_the_same(monkeypatch):
    """Successor lists and the no-overlap check are worked a block at a time: blocks of a
    few edges (many block boundaries, a task's successors split across none) give the event
    engine's times, and a contended graph is still found out whichever block its links fall in."""
    monkeypatch.setattr(levels, "EDGE_BLOCK", 7)
    checked = 0
    for spec, topo, algo in cases():
        model = NetworkModel(topo)
        graph = collective_task_graph(algo, model)
        events = event_engine(graph, model, monkeypatch)
        fast = contention_free_times(graph, hop_costs(graph, model), keep_hops=False)
        if fast is not None:
            checked += 1
            assert np.array_equal(fast.start, events.start) and np.array_equal(fast.end, events.end), (spec, algo.name)
            assert len(fast.hop_link) == len(fast.hop_begin) == 0  # hops laid out only when kept
    assert checked >= 20
    contended = collective_task_graph(direct(Collective.ALL_GATHER, 8, size_bytes=2**20), NetworkModel(load_topology("ring:8")))
    assert contention_free_times(contended, hop_costs(contended, NetworkModel(load_topology("ring:8")))) is None


def test_recording_links_keeps_the_fast_path(monkeypatch):
    """replay --json (its timeline records every hop) must compute what the text run computes:
    a contention-free graph never reaches the event engine, recorded or not."""
    model = NetworkModel(load_topology("ring:16"), network_model="astra-sim")
    graph = collective_task_graph(ring(Collective.ALL_REDUCE, 16, size_bytes=2**20), model)
    expected = hop_rows(event_engine(graph, model, monkeypatch, record_links=True))
    monkeypatch.setattr(engine, "_run", lambda *args, **kwargs: pytest.fail("the event engine ran"))
    monkeypatch.setattr(engine, "_run_compiled", lambda *args, **kwargs: pytest.fail("the compiled event engine ran"))
    timing = run(graph, model, record_links=True)
    assert hop_rows(timing) == expected and len(expected) == 2 * 16 * 15


def test_schedules_made_for_the_network_take_the_fast_path():
    topo = load_topology("torus2d:4x4")
    model = NetworkModel(topo)
    for algo in (tacos(topo, "all-reduce", 16 * 2**20).algorithm, ring(Collective.ALL_REDUCE, 16, size_bytes=2**20)):
        if algo.name == "ring":
            model = NetworkModel(load_topology("ring:16"))
        graph = collective_task_graph(algo, model)
        assert contention_free_times(graph, hop_costs(graph, model)) is not None


def test_contention_and_units_fall_back_to_the_event_engine():
    model = NetworkModel(load_topology("ring:8"))
    graph = collective_task_graph(direct(Collective.ALL_GATHER, 8, size_bytes=2**20), model)  # messages share links
    assert contention_free_times(graph, hop_costs(graph, model)) is None
    small = collective_task_graph(ring(Collective.ALL_GATHER, 8, size_bytes=2**20), model)
    fields = {name: getattr(small, name) for name in small.__dataclass_fields__}
    held = TaskGraph.build(**{**fields, "unit": np.zeros(len(small), dtype=np.int32)})
    assert contention_free_times(held, hop_costs(held, model)) is None


def test_contention_is_found_early_and_the_verdicts_stay(monkeypatch):
    """The hops timed so far are checked at a few shares of the tasks: a ring all-reduce on a
    torus (neighbours of the ring a few hops apart queue behind their own messages) is left to
    the event engine by the second check at the latest, and whether or not the checks run, every graph gets
    the same verdict and times."""
    verdicts = []
    seen = []
    original = levels._links_never_overlap_so_far
    monkeypatch.setattr(levels, "_links_never_overlap_so_far", lambda *args: seen.append(original(*args)) or seen[-1])
    for early in ((), levels.EARLY_CHECKS):
        monkeypatch.setattr(levels, "EARLY_CHECKS", early)
        verdicts.append([])
        for spec, topo, algo in cases():
            model = NetworkModel(topo)
            graph = collective_task_graph(algo, model)
            fast = contention_free_times(graph, hop_costs(graph, model), keep_hops=False)
            verdicts[-1].append(None if fast is None else (fast.start.tolist(), fast.end.tolist()))
    assert verdicts[0] == verdicts[1] and seen and sum(v is None for v in verdicts[1]) >= 5
    seen.clear()
    model = NetworkModel(load_topology("torus2d:4x8"))
    graph = collective_task_graph(ring(Collective.ALL_REDUCE, 32, size_bytes=2**20), model)
    assert contention_free_times(graph, hop_costs(graph, model)) is None and seen[-1] is False and len(seen) <= 2


def test_first_sends_meeting_on_a_later_hop_are_found_before_the_successors(monkeypatch):
    """A ring whose neighbours are hops apart (genkautz:16): its 16 first SENDs leave on 16
    different links, but two of them meet on a later hop at the same instant; that is seen
    before any successor list is laid out, and the event engine times the graph (same times
    with the check as without it)."""
    topo = load_topology("genkautz:16,degree=2")
    model = NetworkModel(topo)
    graph = collective_task_graph(ring(Collective.ALL_REDUCE, 16, size_bytes=2**20), model)
    costs = hop_costs(graph, model)
    first = np.flatnonzero((np.diff(graph.dep_ptr) == 0) & (graph.kind == SEND))
    first_links = costs.hop_link[costs.hop_ptr[np.searchsorted(np.flatnonzero(graph.kind == SEND), first)]]
    assert len(first) == 16 and len(set(first_links.tolist())) == 16  # no collision on a first hop
    with monkeypatch.context() as patch:
        patch.setattr(levels, "_successors", lambda *args: pytest.fail("successors laid out"))
        assert contention_free_times(graph, costs) is None
    timed = run(graph, model)
    with monkeypatch.context() as patch:
        patch.setattr(levels, "_first_sends_collide", lambda *args: False)
        assert contention_free_times(graph, costs) is None  # found later, at a check of the hops timed so far
        assert np.array_equal(run(graph, model).end, timed.end)


@settings(max_examples=150, deadline=None)
@given(graph=random_graphs(), mode=st.sampled_from(["tacos", "astra-sim"]))
def test_early_verdicts_are_the_final_check_and_the_fast_path_is_the_event_engine(graph, mode):
    """On random graphs: the checks made early (the first SENDs' hops, the hops timed so far)
    reject exactly the graphs the final check rejects, and a graph timed level by level gets
    the event engine's times and hops."""
    model = NetworkModel(load_topology("torus2d:2x3"), network_model=mode)
    costs = hop_costs(graph, model)
    with pytest.MonkeyPatch.context() as patch:
        early = contention_free_times(graph, costs)
        patch.setattr(levels, "EARLY_CHECKS", ())
        patch.setattr(levels, "_first_sends_collide", lambda *args: False)
        final = contention_free_times(graph, costs)
        assert (early is None) == (final is None)
        patch.setattr(engine, "contention_free_times", lambda *args, **kwargs: None)
        events = run(graph, model, record_links=True)
    if early is not None:
        assert np.array_equal(early.start, events.start) and np.array_equal(early.end, events.end)
        assert hop_rows(run(graph, model, record_links=True)) == hop_rows(events)


def test_a_message_of_no_bytes_beside_one_of_some_is_left_to_the_event_engine():
    """Two messages on one link at the same instant, one of them of no bytes (SEND 9, beside
    SEND 16's 1 KiB): whether it waits for the other is the event order's (the engine's: it does,
    arriving at 519 ns, not 500), so the level timing leaves the graph to the engine instead of
    saying it does not wait. Hypothesis's example, as it found it."""
    kind = [SEND, RECV, RECV, SEND, RECV, SEND, RECV, SEND, RECV, SEND, SEND, RECV, SEND, RECV, SEND, RECV, SEND, RECV, SEND, RECV] + [LOCAL] * 6
    npu = [0] * 26
    npu[9] = npu[16] = 4
    partner = [1, 0, 16, 4, 3, 6, 5, 8, 7, 17, 11, 10, 13, 12, 15, 14, 2, 9, 19, 18] + [-1] * 6
    nbytes = [0] * 26
    nbytes[2] = nbytes[16] = 1024
    graph = TaskGraph.build(kind=kind, npu=npu, partner=partner, nbytes=nbytes, duration=[0.0] * 26, dep_ptr=[0] * 10 + [1] * 17, dep_idx=[0])
    model = NetworkModel(load_topology("torus2d:2x3"), network_model="astra-sim")
    assert contention_free_times(graph, hop_costs(graph, model)) is None
    assert run(graph, model).end[[9, 17]].tolist() == [519.0, 519.0]
