"""Whether a converted workload can run to its end: every call matched, no rank waiting in a circle.

Real traces come from runs that finished, but a damaged trace (times or ids that contradict
each other, one rank's calls reordered) can make ranks wait for each other forever. Before
``from-pytorch`` writes, every collective call is joined with the same call on the other
members of its group (the k-th call of a group on each rank), every COMM_SEND with its COMM_RECV
(:func:`~chakra_collectives.ir.matching.pair_in_order`, k-th with k-th per ``(src, dst, tag)``),
and the dependencies of the joined graph must be acyclic
(:func:`~chakra_collectives.ir.dag.topological_order`; :func:`~chakra_collectives.ir.dag.find_cycle`
names a cycle). That is conservative: a send counts as waiting
for its receive too, as NCCL's do.

>>> import numpy as np
>>> from types import SimpleNamespace as W
>>> crossed = W(rank=np.array([0, 0, 1, 1]), node_id=np.array([0, 1, 0, 1]), node_type=np.array([7, 7, 7, 7]),
...             pg_name=["a", "b", "b", "a"], peer=np.full(4, -1), tag=np.full(4, -1), num_ranks=2,
...             dep_ptr=np.array([0, 0, 1, 1, 2]), dep_idx=np.array([0, 2]))
>>> [label(crossed, i) for i in blocking_cycle(crossed)]
['rank 0 node 0', 'rank 0 node 1']
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.ir.dag import find_cycle, topological_order
from chakra_collectives.ir.matching import pair_in_order
from chakra_collectives.ir.workload import NodeKind


def label(workload: Any, index: int) -> str:
    """``rank R node N`` of node ``index``."""
    return f"rank {int(workload.rank[index])} node {int(workload.node_id[index])}"


def blocking_cycle(workload: Any) -> list[int] | None:
    """Nodes (indices) that wait for each other in a circle once calls are joined (a joined call
    is named by its first node), or ``None``; an :class:`InputError` when a send or a receive
    has no partner.

    ``workload`` has the columns of :class:`~chakra_collectives.ir.workload.Workload`.
    """
    size = len(workload.rank)
    joined = np.arange(size)
    ranks = workload.rank.tolist()
    first_of_call: dict[tuple[str | None, int], int] = {}
    count: dict[tuple[int, str | None], int] = {}
    for i in np.flatnonzero(workload.node_type == NodeKind.COMM_COLL).tolist():
        pg = workload.pg_name[i]
        k = count.get((ranks[i], pg), 0)
        count[(ranks[i], pg)] = k + 1
        joined[i] = first_of_call.setdefault((pg, k), i)
    sends = np.flatnonzero(workload.node_type == NodeKind.COMM_SEND)
    recvs = np.flatnonzero(workload.node_type == NodeKind.COMM_RECV)
    rank, peer, tag = workload.rank.astype(np.int64), workload.peer, workload.tag
    in_send, in_recv = pair_in_order(
        np.column_stack([rank[sends], peer[sends], tag[sends]]), np.column_stack([peer[recvs], rank[recvs], tag[recvs]])
    )
    for unmatched, what in ((np.setdiff1d(np.arange(len(sends)), in_send), sends), (np.setdiff1d(np.arange(len(recvs)), in_recv), recvs)):
        if len(unmatched):
            i = int(what[unmatched[0]])
            kind = "COMM_SEND to" if workload.node_type[i] == NodeKind.COMM_SEND else "COMM_RECV from"
            raise InputError(f"{label(workload, i)}: {kind} rank {int(peer[i])} tag {int(tag[i])} has no partner on that rank")
    joined[recvs[in_recv]] = sends[in_send]
    owner = np.repeat(np.arange(size), np.diff(workload.dep_ptr))
    waiter, waited = joined[owner], joined[workload.dep_idx]
    keep = waiter != waited
    order = np.argsort(waiter[keep], kind="stable")
    dep_idx = waited[keep][order]
    dep_ptr = np.concatenate([[0], np.cumsum(np.bincount(waiter[keep], minlength=size))])
    if topological_order(dep_ptr, dep_idx) is not None:  # the usual answer, without importing scipy
        return None
    return find_cycle(dep_ptr, dep_idx)
