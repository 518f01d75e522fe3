"""A member whose rank of the algorithm runs no operation is done as soon as it begins."""

import numpy as np

from chakra_collectives.converters.chakra_et import WorkloadBuilder, read_workload
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective
from chakra_collectives.network.model import NetworkModel
from chakra_collectives.replay.algorithms import AlgorithmCatalog
from chakra_collectives.replay.expand import expand_workload
from chakra_collectives.replay.groups import ProcessGroups
from chakra_collectives.topology import ring


def _one_message_algorithm() -> object:
    b = AlgorithmBuilder(Collective.ALL_REDUCE, num_ranks=4, chunk_count=1, size_bytes=64)
    _ = b.send(0, 2, tag=0, src=(Buffer.INPUT, 0), count=1)
    _ = b.recv(2, 0, tag=0, dst=(Buffer.OUTPUT, 0), count=1)
    return b.build(input_chunks=[1] * 4, output_chunks=[1] * 4)


def test_members_without_operations_end_when_they_begin(tmp_path):
    builder = WorkloadBuilder(4)
    for rank in range(4):
        builder.collective(rank, "all-reduce", 64, deps=[builder.comp(rank, duration_ns=1000 * (rank + 1))])
    builder.write(tmp_path / "w")
    workload = read_workload(tmp_path / "w")
    algo = _one_message_algorithm()
    catalog = AlgorithmCatalog({Collective.ALL_REDUCE: algo})
    expanded = expand_workload(workload, NetworkModel(ring(4)), catalog, ProcessGroups.world(4))
    graph = expanded.graph
    (instance,) = expanded.instances
    for member, node in zip(instance.members, instance.nodes):
        deps = graph.dep_idx[graph.dep_ptr[node] : graph.dep_ptr[node + 1]].tolist()
        begin = int(expanded.begin_task[node])
        block = range(instance.first_task, instance.first_task + instance.num_tasks)
        if member in (1, 3):  # idle: its end waits for its begin only
            assert deps == [begin]
        else:  # its end waits for its operations, not for its begin
            assert begin not in deps and all(d in block for d in deps)
    # two calls of one algorithm share its template: the second call's idle members too
    builder = WorkloadBuilder(4)
    for rank in range(4):
        first = builder.collective(rank, "all-reduce", 64)
        builder.collective(rank, "all-reduce", 64, deps=[first])
    builder.write(tmp_path / "w2")
    twice = expand_workload(read_workload(tmp_path / "w2"), NetworkModel(ring(4)), catalog, ProcessGroups.world(4))
    for instance in twice.instances:
        idle = [m for m, n in zip(instance.members, instance.nodes)
                if twice.graph.dep_idx[twice.graph.dep_ptr[n] : twice.graph.dep_ptr[n + 1]].tolist() == [int(twice.begin_task[n])]]
        assert idle == [1, 3]
    assert np.array_equal(np.sort(np.unique(twice.instance_of_task[twice.instance_of_task >= 0])), [0, 1])
