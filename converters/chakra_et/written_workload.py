"""The workload that an algorithm's rank files read as, built from the algorithm without the files.

:func:`~chakra_collectives.converters.chakra_et.writer.write_algorithm` writes one node per
operation and :func:`~chakra_collectives.converters.chakra_et.workload_reader.read_workload`
reads them back as a :class:`~chakra_collectives.ir.workload.Workload`. Whoever has just written
the files (``synth --astra-sim`` predicting what ASTRA-sim will report) can have that workload
without decoding them again: :func:`written_workload` maps the operations' columns as the
writer encodes them and the reader decodes them --

* SEND / RECV become COMM_SEND / COMM_RECV with the operation's peer, tag and bytes; REDUCE,
  COPY and COMPUTE become COMP nodes of ``round(duration / 1000)`` microseconds (none: 0);
* dependencies go through the reader's own repair
  (:func:`~chakra_collectives.converters.chakra_et.repairs.repair_dependencies`), so that the
  ones implied by others are left out exactly as reading leaves them out;

and returns ``None`` for what the mapping does not cover (node ids that repeat within a rank,
a negative duration): the caller then reads the files. ``tests/test_written_workload.py``
checks every column against reading the written files.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> w = written_workload(ring(Collective.ALL_GATHER, 4, size_bytes=2**20), "ag")
>>> w.num_ranks, len(w), w.describe(0), str(w.paths[1])     # per rank: 3 steps of a SEND and a RECV, one COPY
(4, 28, 'node 0 COMM_SEND to rank 1 tag 0', 'ag.1.et')
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chakra_collectives.converters.chakra_et.nodes import AttributeColumns, EtFile, NodeColumns
from chakra_collectives.converters.chakra_et.read_policy import ReadPolicy, Repairs
from chakra_collectives.converters.chakra_et.repairs import repair_dependencies
from chakra_collectives.converters.chakra_et.writer import rank_path
from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.ir.workload import NO_COLLECTIVE, NodeKind, Workload


def written_workload(
    algo: CollectiveAlgorithm, prefix: str | Path, *, size_bytes: int | None = None, reduce_bandwidth_gbps: float | None = None
) -> Workload | None:
    """What ``read_workload(prefix)`` returns after ``write_algorithm(algo, prefix, size_bytes=...,
    reduce_bandwidth_gbps=...)``, under the default read policy (``None``: read the files)."""
    ops = algo.ops
    size = algo.size_bytes if size_bytes is None else size_bytes
    nbytes = algo.op_bytes(size)
    durations = algo.local_durations(nbytes, reduce_bandwidth_gbps)
    bounds = algo.rank_bounds().astype(np.int64)
    rank = ops.rank.astype(np.int32)
    node_id = ops.node_id.astype(np.int64)
    kind = ops.kind
    send, recv = kind == OpKind.SEND, kind == OpKind.RECV
    comm = send | recv
    local = ~comm
    timed = local & ~np.isnan(durations)
    if (durations[timed] < 0).any() or not _ids_unique_per_rank(rank, node_id):
        return None
    micros = np.zeros(len(kind), dtype=np.int64)
    micros[timed] = np.rint(durations[timed] / 1000.0)  # the writer's round(): half to even, as rint
    node_type = np.full(len(kind), NodeKind.COMP, dtype=np.int8)  # built in its own type: no int64 temporaries of 5M nodes
    node_type[send] = NodeKind.COMM_SEND
    node_type[recv] = NodeKind.COMM_RECV
    paths = [rank_path(prefix, r) for r in range(algo.num_ranks)]
    columns = NodeColumns(
        files=[EtFile(path, r, {}) for r, path in enumerate(paths)],
        file_ptr=bounds,
        ids=node_id,
        types=node_type.astype(np.int32),
        duration_micros=micros,
        dep_ptr=ops.dep_ptr.astype(np.int64),
        dep_pos=ops.dep_idx.astype(np.int64),  # data_deps, in the order written
        dep_ctrl=np.zeros(len(ops.dep_idx), dtype=bool),
        attributes=AttributeColumns(node_of=np.zeros(0, dtype=np.int32), ids=np.zeros(0, dtype=np.int32), num_nodes=len(kind)),
    )
    repairs = Repairs()
    dep_ptr, dep_idx, repairs.dependencies = repair_dependencies(columns, ReadPolicy().dependencies)
    count = len(kind)
    return Workload(
        prefix=str(prefix),
        num_ranks=algo.num_ranks,
        rank=rank,
        node_id=node_id,
        node_type=node_type,
        duration_ns=micros * 1000.0,  # micros is 0 but for local operations
        is_cpu_op=np.zeros(count, dtype=bool),
        comm_type=np.full(count, NO_COLLECTIVE, dtype=np.int64),
        comm_size=np.where(comm, nbytes, 0).astype(np.int64, copy=False),
        peer=np.where(comm, ops.peer, -1).astype(np.int64, copy=False),
        tag=np.where(comm, np.maximum(ops.tag, 0), -1).astype(np.int64, copy=False),
        pg_name=[None] * count,
        involved_dim=[None] * count,
        dep_ptr=dep_ptr,
        dep_idx=dep_idx,
        paths=paths,
        repairs=repairs,
    )


def _ids_unique_per_rank(rank: np.ndarray, node_id: np.ndarray) -> bool:
    """Whether no node id repeats within a rank: in one pass where each rank's ids ascend (as
    the synthesizers number them), else by sorting.

    >>> _ids_unique_per_rank(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])), _ids_unique_per_rank(np.array([0, 0, 0]), np.array([2, 0, 2]))
    (True, False)
    """
    if bool(np.all((rank[1:] > rank[:-1]) | ((rank[1:] == rank[:-1]) & (node_id[1:] > node_id[:-1])))):
        return True
    order = np.lexsort((node_id, rank))
    return not ((rank[order][1:] == rank[order][:-1]) & (node_id[order][1:] == node_id[order][:-1])).any()


__all__ = ["written_workload"]
