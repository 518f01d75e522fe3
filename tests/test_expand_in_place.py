"""Expansion writes every call's template into the task graph in place: the dependencies it
builds are those of the plain definition (module docstring of replay/expand.py), task by task."""

from __future__ import annotations

import numpy as np
from chakra.schema.protobuf.et_def_pb2 import BARRIER

from chakra_collectives.converters.chakra_et import WorkloadBuilder, read_workload
from chakra_collectives.ir import Collective
from chakra_collectives.network.collective import collective_task_graph
from chakra_collectives.network.model import NetworkModel
from chakra_collectives.replay.algorithms import AlgorithmCatalog
from chakra_collectives.replay.expand import expand_workload
from chakra_collectives.replay.groups import ProcessGroups
from chakra_collectives.topology import ring


def expected_dependencies(expanded, model: NetworkModel) -> list[list[int]]:
    """Every task's dependencies by the definition: a node (or its begin task) waits for its
    dependencies' (end) tasks; an operation for its template's dependencies, or -- without any
    -- for its rank's begin task; a call's end for its rank's last operations (or its begin,
    when the rank has none); a call with nothing to run is one task between begins and ends."""
    graph, workload = expanded.graph, expanded.workload
    deps: list[list[int]] = [[] for _ in range(len(graph))]
    for node in range(len(workload)):
        for dep in workload.dep_idx[workload.dep_ptr[node] : workload.dep_ptr[node + 1]].tolist():
            deps[int(expanded.begin_task[node])].append(dep)
    for inst in expanded.instances:
        begins = [int(expanded.begin_task[n]) for n in inst.nodes]
        base, count = inst.first_task, inst.num_tasks
        if inst.algorithm in ("synchronization only", "none (group of one)"):
            deps[base] += begins
            for end in inst.nodes:
                deps[end].append(base)
            continue
        catalog = AlgorithmCatalog({})
        collective = Collective.parse(inst.collective)
        algo, label = catalog.get(collective, inst.members, model.topology)
        template = collective_task_graph(algo, model, size_bytes=catalog.run_size(collective, inst.size_bytes, algo, label)[0])
        assert len(template) == count
        member_of_npu = {npu: i for i, npu in enumerate(inst.members)}
        waited = set()
        for task in range(base, base + count):
            inside = [base + d for d in template.dep_idx[template.dep_ptr[task - base] : template.dep_ptr[task - base + 1]].tolist()]
            waited.update(inside)
            if not inside:
                deps[task].append(begins[member_of_npu[int(graph.npu[task])]])
            else:
                deps[task] += inside
        ran = set()
        for task in range(base, base + count):
            member = member_of_npu[int(graph.npu[task])]
            ran.add(member)
            if task not in waited:
                deps[inst.nodes[member]].append(task)
        for member in range(len(inst.members)):
            if member not in ran:
                deps[inst.nodes[member]].append(begins[member])
    return deps


def test_expanded_dependencies_are_those_of_the_definition(tmp_path):
    b = WorkloadBuilder(4)
    for r in range(4):
        first = b.comp(r, duration_ns=1000)
        gathered = b.collective(r, "all-gather", 2**20, deps=[first])
        reduced = b.collective(r, "all-reduce", 2**20, deps=[gathered, first])
        synced = b.collective(r, "all-reduce", 1, comm_type=BARRIER, deps=[reduced])
        b.comp(r, duration_ns=500, deps=[synced, gathered])
    b.write(tmp_path / "w")
    workload = read_workload(tmp_path / "w")
    model = NetworkModel(ring(4))
    expanded = expand_workload(workload, model, AlgorithmCatalog({}), ProcessGroups.world(4))
    assert [inst.algorithm for inst in expanded.instances][2] == "synchronization only"
    graph = expanded.graph
    actual = [sorted(graph.dep_idx[graph.dep_ptr[t] : graph.dep_ptr[t + 1]].tolist()) for t in range(len(graph))]
    assert actual == [sorted(d) for d in expected_dependencies(expanded, model)]
    assert np.all(np.diff(graph.dep_ptr) >= 0) and graph.dep_ptr[-1] == len(graph.dep_idx)


def test_replay_lets_go_of_the_algorithms_before_timing(tmp_path, monkeypatch):
    import gc
    import weakref

    from chakra_collectives.converters.chakra_et import single_collective_workload
    from chakra_collectives.replay import replayer
    from chakra_collectives.synth.baselines import ring as ring_algorithm

    single_collective_workload(tmp_path / "w", "all-reduce", 4, 2**20)
    algorithm = ring_algorithm(Collective.ALL_REDUCE, 4, size_bytes=2**20)
    alive = weakref.ref(algorithm)
    given = [{Collective.ALL_REDUCE: algorithm}]
    del algorithm
    seen_while_timing = []
    timing = replayer.run

    def run(*args, **kwargs):
        gc.collect()
        seen_while_timing.append(alive() is not None)
        return timing(*args, **kwargs)

    monkeypatch.setattr(replayer, "run", run)
    result = replayer.replay(tmp_path / "w", ring(4), algorithms=given.pop())
    assert seen_while_timing == [False] and result.total_ns > 0
    assert [inst.algorithm for inst in result.expanded.instances] != []
