"""Pair every SEND with its RECV: same ``(src, dst, tag)``, k-th with k-th in program order.

This is ASTRA-sim's rule (FIFO per ``(src, dst, tag)``; it also requires equal sizes, or the
pair never completes) and, with one tag per connection, MSCCL's (FIFO per connection).

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> result = match_messages(ring(Collective.ALL_GATHER, 3, size_bytes=300))
>>> result.problems, int((result.partner >= 0).sum())
([], 12)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.ir import CollectiveAlgorithm, OpKind


@dataclass
class Matching:
    partner: np.ndarray
    """For each operation, the index of the operation it pairs with (-1: none or not comm)."""
    problems: list[str]


def match_messages(algo: CollectiveAlgorithm, limit: int = 10) -> Matching:
    ops = algo.ops
    size = len(ops)
    partner = np.full(size, -1, dtype=np.int64)
    index = np.arange(size, dtype=np.int64)
    sends = index[ops.kind == OpKind.SEND]
    recvs = index[ops.kind == OpKind.RECV]
    # key of a message: (sender, receiver, tag); occurrence: k-th with that key in program order
    send_keys = np.stack([ops.rank[sends].astype(np.int64), ops.peer[sends].astype(np.int64), ops.tag[sends]], axis=1)
    recv_keys = np.stack([ops.peer[recvs].astype(np.int64), ops.rank[recvs].astype(np.int64), ops.tag[recvs]], axis=1)
    send_occ = _occurrence(send_keys)
    recv_occ = _occurrence(recv_keys)
    send_full = np.column_stack([send_keys, send_occ])
    recv_full = np.column_stack([recv_keys, recv_occ])
    common, in_send, in_recv = _intersect_rows(send_full, recv_full)
    partner[sends[in_send]] = recvs[in_recv]
    partner[recvs[in_recv]] = sends[in_send]

    problems: list[str] = []
    unmatched_sends = sends[partner[sends] < 0]
    unmatched_recvs = recvs[partner[recvs] < 0]
    nbytes = algo.op_bytes()
    for i in unmatched_sends[:limit]:
        problems.append(
            f"rank {ops.rank[i]}: node {ops.node_id[i]}: SEND to rank {ops.peer[i]} tag {ops.tag[i]} "
            f"({nbytes[i]} B) has no matching RECV on rank {ops.peer[i]}"
        )
    for i in unmatched_recvs[: max(0, limit - len(problems))]:
        problems.append(
            f"rank {ops.rank[i]}: node {ops.node_id[i]}: RECV from rank {ops.peer[i]} tag {ops.tag[i]} "
            f"({nbytes[i]} B) has no matching SEND on rank {ops.peer[i]}"
        )
    paired_sends = sends[in_send]
    paired_recvs = recvs[in_recv]
    wrong_bytes = nbytes[paired_sends] != nbytes[paired_recvs]
    both_counted = (ops.count[paired_sends] >= 0) & (ops.count[paired_recvs] >= 0)
    wrong_count = both_counted & (ops.count[paired_sends] != ops.count[paired_recvs])
    for s, r in zip(paired_sends[wrong_bytes | wrong_count], paired_recvs[wrong_bytes | wrong_count]):
        if len(problems) >= limit:
            break
        problems.append(
            f"rank {ops.rank[s]}: node {ops.node_id[s]}: SEND to rank {ops.peer[s]} tag {ops.tag[s]} moves "
            f"{_amount(ops, nbytes, s)} but its RECV (rank {ops.rank[r]} node {ops.node_id[r]}) expects {_amount(ops, nbytes, r)}"
        )
    return Matching(partner=partner, problems=problems)


def _amount(ops, nbytes: np.ndarray, i: int) -> str:
    chunks = f"{ops.count[i]} chunks, " if ops.count[i] >= 0 else ""
    return f"{chunks}{nbytes[i]} B"


def _occurrence(keys: np.ndarray) -> np.ndarray:
    """For each row, how many earlier rows have the same key (rows are in program order)."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(keys.T[::-1])
    sorted_keys = keys[order]
    new_group = np.ones(len(keys), dtype=bool)
    new_group[1:] = np.any(sorted_keys[1:] != sorted_keys[:-1], axis=1)
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(len(keys)), 0))
    occurrence = np.empty(len(keys), dtype=np.int64)
    occurrence[order] = np.arange(len(keys)) - group_start
    return occurrence


def _intersect_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows present in both ``a`` and ``b`` (each row unique within its array) and their positions."""
    if len(a) == 0 or len(b) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    view_dtype = np.dtype((np.void, a.dtype.itemsize * a.shape[1]))
    av = np.ascontiguousarray(a).view(view_dtype).ravel()
    bv = np.ascontiguousarray(b).view(view_dtype).ravel()
    common, in_a, in_b = np.intersect1d(av, bv, assume_unique=True, return_indices=True)
    return common, in_a, in_b
