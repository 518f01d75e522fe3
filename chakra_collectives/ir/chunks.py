"""Which chunks of the collective each message carries.

A SEND names buffer slots, not chunks: an all-gather forwards chunk ``c`` from output slot
``c``, but an imported reduce-scatter sends a partial sum from a *scratch* slot whose offset
says nothing about the chunk in it. :func:`sent_chunks` follows the data: inputs start as the
collective's chunks (:meth:`~chakra_collectives.ir.collective.Collective.initial_value`), and
along a valid execution order RECV stores what its SEND read, COPY copies and REDUCE keeps the
chunk it accumulates. For pictures and reports; the verifier proves the full contents.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.ir.execution import execute
>>> from chakra_collectives.ir.matching import match_messages
>>> from chakra_collectives.synth.baselines import ring
>>> algo = ring(Collective.ALL_GATHER, 3, size_bytes=3)
>>> partner = match_messages(algo).partner
>>> first, count = sent_chunks(algo, partner, execute(algo, partner).order)
>>> sends = algo.ops.kind == 0
>>> first[sends].tolist(), count[sends].tolist()   # rank r sends its own chunk r, then forwards r-1
([0, 2, 1, 0, 2, 1], [1, 1, 1, 1, 1, 1])
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.ir.algorithm import CollectiveAlgorithm
from chakra_collectives.ir.collective import Collective
from chakra_collectives.ir.ops import Buffer, OpKind

UNKNOWN = -1


def sent_chunks(algo: CollectiveAlgorithm, partner: np.ndarray, order: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per operation, the first chunk index a SEND carries and how many consecutive chunks (a
    message of several runs: its first run's)
    (``UNKNOWN`` and 0 for other operations, and for data that holds no known chunk: custom
    collectives, files without chunk identity, slots never written)."""
    ops = algo.ops
    first = np.full(len(ops), UNKNOWN, dtype=np.int64)
    count = np.zeros(len(ops), dtype=np.int64)
    if algo.collective is Collective.CUSTOM or not algo.has_chunk_identity:
        return first, count
    src_buf, src_off = algo.resolve(ops.rank, ops.src_buf, ops.src_off)
    dst_buf, dst_off = algo.resolve(ops.rank, ops.dst_buf, ops.dst_off)
    ranged = ops.ranged_slots(src_off, dst_off)  # messages of several chunk ranges: their slots
    src_buf = np.broadcast_to(src_buf, ops.kind.shape).tolist()
    dst_buf = np.broadcast_to(dst_buf, ops.kind.shape).tolist()
    src_off = np.broadcast_to(src_off, ops.kind.shape).tolist()
    dst_off = np.broadcast_to(dst_off, ops.kind.shape).tolist()
    storage: dict[tuple[int, int], list[int]] = {}
    for r in range(algo.num_ranks):
        for buf in Buffer:
            size = algo.buffer_chunks(r, buf)
            storage[r, int(buf)] = [UNKNOWN] * (size if buf is Buffer.SCRATCH else max(size, algo.chunk_count))
        view = algo.collective.buffer_chunks(rank=r, num_ranks=algo.num_ranks, chunk_count=algo.chunk_count, root=algo.root)[0]
        for slot in range(view):
            b, o = (int(v) for v in algo.resolve(r, Buffer.INPUT, slot))
            if o < len(storage[r, b]):
                if algo.collective is Collective.PATTERN:  # the pattern says who holds chunk ``slot``
                    held = algo.pattern is not None and algo.pattern.initial_value(rank=r, slot=slot) is not None
                    storage[r, b][o] = slot if held else UNKNOWN
                else:
                    storage[r, b][o] = algo.collective.initial_value(rank=r, slot=slot, share=algo.share)[0]
    kind, rank, n = ops.kind.tolist(), ops.rank.tolist(), ops.count.tolist()
    messages: dict[int, list[int]] = {}
    SEND, RECV, REDUCE, COPY = (int(k) for k in (OpKind.SEND, OpKind.RECV, OpKind.REDUCE, OpKind.COPY))
    for i in order:
        k, r, c = kind[i], rank[i], n[i]
        if k == SEND:
            held = storage[r, src_buf[i]]
            data = [held[at] for at in ranged[i]] if i in ranged else held[src_off[i] : src_off[i] + c]
            messages[i] = data
            run = next((j for j in range(1, len(data)) if data[j] != data[0] + j), len(data))
            if data and data[0] != UNKNOWN and (i in ranged or run == len(data)):
                first[i], count[i] = data[0], run
        elif k == RECV and partner[i] >= 0 and int(partner[i]) in messages:
            target = storage[r, dst_buf[i]]
            if i in ranged:
                for at, value in zip(ranged[i], messages.pop(int(partner[i]))):
                    target[at] = value
            else:
                target[dst_off[i] : dst_off[i] + c] = messages.pop(int(partner[i]))[:c]
        elif k == COPY:
            storage[r, dst_buf[i]][dst_off[i] : dst_off[i] + c] = storage[r, src_buf[i]][src_off[i] : src_off[i] + c]
        elif k == REDUCE:
            target, source = storage[r, dst_buf[i]], storage[r, src_buf[i]]
            for j in range(c):
                if target[dst_off[i] + j] == UNKNOWN:
                    target[dst_off[i] + j] = source[src_off[i] + j]
    return first, count


__all__ = ["UNKNOWN", "sent_chunks"]
