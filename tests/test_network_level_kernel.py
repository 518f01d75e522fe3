"""The compiled walk (network/level_kernel.py, numba) times a graph as the numpy level loop does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.astra_sim import write_astra_sim_dir
from chakra_collectives.astra_system import SystemConfig, simulate
from chakra_collectives.astra_system import levels as astra_levels
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.ir import Collective
from chakra_collectives.network import NetworkModel
from chakra_collectives.network.graph import LOCAL, RECV, SEND, TaskGraph
from chakra_collectives.network.levels import HopCosts, contention_free_times
from chakra_collectives.synth.baselines import ring
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology

from network_helpers import random_graphs
from test_network_levels import hop_costs

pytest.importorskip("numba")  # an optional dependency (the dev extra has it)
from chakra_collectives.network.level_kernel import compiled_contention_free_times  # noqa: E402


def assert_same_times(graph: TaskGraph, costs: HopCosts) -> None:
    levels, walk = contention_free_times(graph, costs, keep_hops=False), compiled_contention_free_times(graph, costs)
    assert (levels is None) == (walk is None)
    if levels is not None:
        assert np.array_equal(levels.start, walk.start) and np.array_equal(levels.end, walk.end)
        assert levels.start.dtype == walk.start.dtype and levels.end.dtype == walk.end.dtype


@settings(max_examples=300, deadline=None)
@given(graph=st.one_of(random_graphs(), random_graphs(integer_durations=True)), mode=st.sampled_from(["tacos", "astra-sim"]))
def test_the_walk_times_random_graphs_as_the_levels_do(graph, mode):
    """Random graphs on a 2x3 torus (routes of several hops, messages that meet on links, RECVs
    waiting for SENDs that wait for them: deadlocks): the same times, or ``None`` for both."""
    model = NetworkModel(load_topology("torus2d:2x3"), network_model=mode)
    assert_same_times(graph, hop_costs(graph, model))


def test_a_deadlock_and_a_recv_without_its_send_never_run():
    """A RECV whose SEND waits for it, and a RECV with no SEND (the level loop does not take one):
    some task never runs, so no times."""
    hops = HopCosts(kind_of_send=np.array([0]), hop_ptr=np.array([0, 1]), hop_link=np.array([0]),
                    hop_busy=np.array([10]), hop_delivered=np.array([10]))
    cycle = TaskGraph.build(kind=[SEND, RECV], npu=[0, 1], partner=[1, 0], nbytes=[8, 8], duration=[0, 0], dep_ptr=[0, 1, 1], dep_idx=[1])
    assert compiled_contention_free_times(cycle, hops) is None and contention_free_times(cycle, hops) is None
    alone = TaskGraph.build(kind=[LOCAL, RECV], npu=[0, 1], partner=[-1, -1], nbytes=[0, 8], duration=[5, 0], dep_ptr=[0, 0, 1], dep_idx=[0])
    empty = HopCosts(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert compiled_contention_free_times(alone, empty) is None


@pytest.mark.parametrize("spec, algorithm", [("ring:16", "ring"), ("torus2d:4x4", "ring"), ("ring:8", "tacos")])
def test_the_twin_predicts_the_same_with_either_loop(spec, algorithm, tmp_path, monkeypatch):
    """``synth --astra-sim``'s prediction, the level loop's and the compiled walk's (every graph
    taken by the walk): the same per-rank finishes, node times and exposed communication."""
    topo = load_topology(spec)
    n = topo.num_npus
    algo = ring(Collective.ALL_REDUCE, n, size_bytes=2**20) if algorithm == "ring" else tacos(topo, "all-reduce", 2**20).algorithm
    written = write_astra_sim_dir(tmp_path / "astra", topo, algo)
    workload = read_workload(written.directory / written.workload)
    config = SystemConfig.from_file(written.directory / "system.json")
    runs = []
    for threshold in (2**62, 0):
        monkeypatch.setattr(astra_levels, "COMPILED_TASKS", threshold)
        runs.append(simulate(workload, written.network, config, backend=written.backend, custom_base=written.directory))
    levels, walk = runs
    assert levels.method == walk.method == "levels"
    assert levels.finish_ns == walk.finish_ns and levels.exposed_ns == walk.exposed_ns
    assert np.array_equal(levels.start_ns, walk.start_ns) and np.array_equal(levels.end_ns, walk.end_ns)
    assert max(walk.finish_ns) == written.expected_ns
