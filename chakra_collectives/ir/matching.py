"""Pair every SEND with its RECV: same ``(src, dst, tag)``, k-th with k-th in program order.

This is ASTRA-sim's rule (FIFO per ``(src, dst, tag)``; it also requires equal sizes, or the
pair never completes) and, with one tag per connection, MSCCL's (FIFO per connection). The
one pairing every consumer uses: the verifier, the network model's lowering, the MSCCL-IR
exporter, ``inspect`` and the replayer's point-to-point workload messages
(:func:`pair_in_order` on their own columns).

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> result = match_messages(ring(Collective.ALL_GATHER, 3, size_bytes=300))
>>> result.problems, int((result.partner >= 0).sum())
([], 12)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.ir.algorithm import CollectiveAlgorithm
from chakra_collectives.ir.grouping import occurrence
from chakra_collectives.ir.ops import OpKind, OpTable


@dataclass
class Matching:
    partner: np.ndarray
    """For each operation, the index of the operation it pairs with (-1: none or not comm);
    int32 below 2**31 operations."""
    problems: list[str]
    """One line per problem found (at most the ``limit`` asked for), naming rank and node."""


def pair_in_order(send_keys: np.ndarray, recv_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pair the k-th send of every key with the k-th receive of that key.

    ``send_keys`` and ``recv_keys`` hold one row per send / receive, in program order, each
    row a key such as ``(sender, receiver, tag)``. Returns the positions of every pair: rows
    ``sends[i]`` of ``send_keys`` and ``recvs[i]`` of ``recv_keys`` pair up. Rows without a
    partner are in neither array. Vectorised: one sort per side and one set intersection.

    >>> sends = np.array([[0, 1, 7], [0, 1, 7], [1, 0, 7]])
    >>> recvs = np.array([[1, 0, 7], [0, 1, 7]])
    >>> s, r = pair_in_order(sends, recvs)
    >>> sorted(zip(s.tolist(), r.tolist()))      # the second 0 -> 1 send has no receive
    [(0, 1), (2, 0)]
    """
    packed = _packed(list(send_keys.T), list(recv_keys.T)) if send_keys.ndim == 2 and recv_keys.ndim == 2 else None
    if packed is not None:  # each key one int64: sorts instead of row comparisons
        send_packed, recv_packed = packed
        return _pair_packed(send_packed, recv_packed)
    send_full = np.column_stack([send_keys, occurrence(send_keys)]).astype(np.int64)
    recv_full = np.column_stack([recv_keys, occurrence(recv_keys)]).astype(np.int64)
    return _intersect_rows(send_full, recv_full)


def _packed(send_columns: list[np.ndarray], recv_columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """Both sides' keys, given column by column, as single int64 keys (mixed radix), when the
    columns are non-negative and the product of their ranges fits; else None."""
    if not len(send_columns) or len(send_columns) != len(recv_columns) or len(send_columns[0]) == 0 or len(recv_columns[0]) == 0:
        return None
    if min(min(int(c.min()) for c in send_columns), min(int(c.min()) for c in recv_columns)) < 0:
        return None
    spans = [max(int(s.max()), int(r.max())) + 1 for s, r in zip(send_columns, recv_columns)]
    if int(np.prod(np.array(spans, dtype=object))) >= 2**62:
        return None
    send, recv = np.zeros(len(send_columns[0]), dtype=np.int64), np.zeros(len(recv_columns[0]), dtype=np.int64)
    for send_column, recv_column, span in zip(send_columns, recv_columns, spans):
        send *= span
        send += send_column
        recv *= span
        recv += recv_column
    return send, recv


def _pair_packed(send: np.ndarray, recv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pair_in_order` on packed keys: sort each side by (key, program order) and walk
    the k-th of every key on one side to the k-th on the other."""
    send_order = np.argsort(send, kind="stable")
    recv_order = np.argsort(recv, kind="stable")
    send_sorted, recv_sorted = send[send_order], recv[recv_order]
    send_occurrence = np.arange(len(send)) - np.searchsorted(send_sorted, send_sorted, side="left")
    recv_occurrence = np.arange(len(recv)) - np.searchsorted(recv_sorted, recv_sorted, side="left")
    # the k-th receive of a key pairs with the send at (first send of that key) + k, if it exists
    first = np.searchsorted(send_sorted, recv_sorted, side="left")
    candidate = first + recv_occurrence
    inside = candidate < len(send)
    candidate = np.where(inside, candidate, 0)
    found = inside & (send_sorted[candidate] == recv_sorted) & (send_occurrence[candidate] == recv_occurrence)
    pairs = np.flatnonzero(found)
    in_send, in_recv = send_order[candidate[pairs]], recv_order[pairs]
    by_send = np.argsort(in_send, kind="stable")
    return in_send[by_send], in_recv[by_send]


def match_messages(algo: CollectiveAlgorithm, limit: int = 10) -> Matching:
    """Pair every SEND of ``algo`` with its RECV and describe what does not pair.

    The pairing (:attr:`Matching.partner`) is always complete; ``limit`` caps only how many
    problems are *described* -- unmatched SENDs first, then unmatched RECVs, then pairs whose
    sizes differ -- because describing costs a Python loop and callers that only need to know
    whether any problem exists (the lowering to tasks, the MSCCL exporter) ask for 1.

    >>> from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective
    >>> b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=1, size_bytes=64)
    >>> _ = b.send(0, 1, tag=0, src=(Buffer.INPUT, 0), count=1)
    >>> _ = b.send(0, 1, tag=0, src=(Buffer.INPUT, 0), count=1)
    >>> _ = b.recv(1, 0, tag=0, dst=(Buffer.OUTPUT, 0), count=1)
    >>> matching = match_messages(b.build(input_chunks=[1, 1], output_chunks=[1, 1]))
    >>> matching.partner.tolist(), matching.problems
    ([2, -1, 0], ['rank 0: node 1: SEND to rank 1 tag 0 (64 B) has no matching RECV on rank 1'])
    """
    ops = algo.ops
    size = len(ops)
    partner = np.full(size, -1, dtype=np.int32 if size < 2**31 else np.int64)
    sends = np.flatnonzero(ops.kind == OpKind.SEND)
    recvs = np.flatnonzero(ops.kind == OpKind.RECV)
    # key of a message: (sender, receiver, tag); occurrence: k-th with that key in program order
    send_columns = [ops.rank[sends], ops.peer[sends], ops.tag[sends]]
    recv_columns = [ops.peer[recvs], ops.rank[recvs], ops.tag[recvs]]
    packed = _packed(send_columns, recv_columns)
    if packed is not None:  # one int64 per message instead of three columns
        del send_columns, recv_columns
        in_send, in_recv = _pair_packed(*packed)
        del packed
    else:
        in_send, in_recv = pair_in_order(
            np.stack(send_columns, axis=1).astype(np.int64), np.stack(recv_columns, axis=1).astype(np.int64)
        )
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


def _amount(ops: OpTable, nbytes: np.ndarray, i: int) -> str:
    chunks = f"{ops.count[i]} chunks, " if ops.count[i] >= 0 else ""
    return f"{chunks}{nbytes[i]} B"


def _intersect_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the rows present in both ``a`` and ``b`` (each row unique within its array)."""
    if len(a) == 0 or len(b) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    view_dtype = np.dtype((np.void, a.dtype.itemsize * a.shape[1]))
    av = np.ascontiguousarray(a).view(view_dtype).ravel()
    bv = np.ascontiguousarray(b).view(view_dtype).ravel()
    _, in_a, in_b = np.intersect1d(av, bv, assume_unique=True, return_indices=True)
    return in_a, in_b


__all__ = ["Matching", "match_messages", "pair_in_order"]
