"""The compiled event loop (network/event_kernel.py, numba) is the Python loop's, event for event."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.ir import Collective
from chakra_collectives.network import NetworkModel, engine
from chakra_collectives.network.collective import collective_task_graph
from chakra_collectives.network.graph import TaskGraph
from chakra_collectives.network.levels import HopCosts, contention_free_times
from chakra_collectives.synth.baselines import direct, ring
from chakra_collectives.topology import load_topology

from network_helpers import random_graphs

pytest.importorskip("numba")  # an optional dependency (the dev extra has it)


def both_loops(graph: TaskGraph, model: NetworkModel, monkeypatch) -> tuple:
    """The event loop's timing of ``graph`` (level-by-level timing off), by the Python loop and by
    the compiled one, hops recorded."""
    timings = []
    with monkeypatch.context() as patch:
        patch.setattr(engine, "contention_free_times", lambda *args, **kwargs: None)
        for threshold in (2**62, 0):
            patch.setattr(engine, "COMPILED_TASKS", threshold)
            timings.append(engine.run(graph, model, record_links=True))
    return tuple(timings)


def assert_identical(python, compiled) -> None:
    """Same times (NaN where a task never ran), stuck tasks, link use, and every hop in the same
    order (the order the loop offered messages to links)."""
    assert np.array_equal(python.start, compiled.start, equal_nan=True)
    assert np.array_equal(python.end, compiled.end, equal_nan=True)
    assert python.start.dtype == compiled.start.dtype == np.float64
    assert np.array_equal(python.stuck, compiled.stuck)
    for name in ("busy_ns", "bytes", "messages"):
        assert np.array_equal(getattr(python.links, name), getattr(compiled.links, name))
    ours, theirs = python.links.intervals, compiled.links.intervals
    for name in ("link", "begin", "end", "send"):
        assert getattr(ours, name).tolist() == getattr(theirs, name).tolist(), name


@settings(max_examples=200, deadline=None)
@given(
    graph=st.one_of(random_graphs(), random_graphs(units=True), random_graphs(integer_durations=True), random_graphs(units=True, integer_durations=True)),
    mode=st.sampled_from(["tacos", "astra-sim"]),
)
def test_the_compiled_loop_is_the_python_loop_on_random_contended_graphs(graph, mode):
    """Random graphs on a 2x3 torus (messages of equal sizes meet on shared links at the same
    instants; units make tasks queue; some graphs deadlock): the compiled loop gives the Python
    loop's times, stuck tasks and hops in the same order, float and integer (ASTRA-sim) times."""
    model = NetworkModel(load_topology("torus2d:2x3"), network_model=mode)
    with pytest.MonkeyPatch.context() as patch:
        assert_identical(*both_loops(graph, model, patch))


@pytest.mark.parametrize("mode", ["tacos", "astra-sim"])
def test_contended_collectives_time_the_same(mode, monkeypatch):
    """Collectives whose messages queue: a ring All-Reduce on a torus (its neighbours a few hops
    apart meet their own messages), a direct All-Gather on a ring; thousands of same-instant
    offers to a link, settled in the same order."""
    for spec, algo in (("torus2d:4x8", ring(Collective.ALL_REDUCE, 32, size_bytes=2**20)), ("ring:8", direct(Collective.ALL_GATHER, 8, size_bytes=2**20))):
        model = NetworkModel(load_topology(spec), network_model=mode)
        graph = collective_task_graph(algo, model)
        python, compiled = both_loops(graph, model, monkeypatch)
        assert_identical(python, compiled)
        messages = engine._Messages(graph, model)
        costs = HopCosts(messages.kind_of_send, messages.hop_ptr, messages.hop_link, messages.hop_busy, messages.hop_delivered)
        assert contention_free_times(graph, costs) is None  # messages do wait for links
        assert python.finished and len(python.links.intervals) >= len(graph) // 2


def test_large_graphs_take_the_compiled_loop_and_small_ones_never_load_numba(monkeypatch):
    """From :data:`~chakra_collectives.network.engine.COMPILED_TASKS` tasks on the compiled loop
    runs (the Python loop is not called); below it numba is not even imported (start-up)."""
    model = NetworkModel(load_topology("ring:8"))
    graph = collective_task_graph(direct(Collective.ALL_GATHER, 8, size_bytes=2**20), model)
    monkeypatch.setattr(engine, "COMPILED_TASKS", len(graph))
    monkeypatch.setattr(engine, "_run", lambda *args, **kwargs: pytest.fail("the Python loop ran"))
    assert engine.run(graph, model).finished
    code = (
        "import sys\n"
        "from chakra_collectives.ir import Collective\n"
        "from chakra_collectives.network import NetworkModel, engine\n"
        "from chakra_collectives.network.collective import collective_task_graph\n"
        "from chakra_collectives.synth.baselines import direct\n"
        "from chakra_collectives.topology import load_topology\n"
        "model = NetworkModel(load_topology('ring:8'))\n"
        "graph = collective_task_graph(direct(Collective.ALL_GATHER, 8, size_bytes=2**20), model)\n"
        "assert len(graph) < engine.COMPILED_TASKS and engine.run(graph, model).finished\n"
        "print('numba' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
