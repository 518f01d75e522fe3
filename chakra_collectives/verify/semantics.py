"""Prove what an algorithm computes by executing it on symbolic data.

Every buffer slot holds a symbolic value ``(index, ranks)`` (see
:mod:`chakra_collectives.ir.collective`): which chunk of the collective it is, and whose
contributions have been summed into it. Inputs start with the collective's precondition;
SEND captures slots, RECV stores what its matching SEND captured, COPY copies and REDUCE
combines. A reduction of two different chunks, or one that counts a rank twice, is a fault. At
the end every output slot must hold the collective's postcondition, otherwise the first wrong
slot is the counterexample.

The semantics are executed in one valid order; that the result is the same in every order
(no data race) is proved separately, by :mod:`~chakra_collectives.verify.races`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm, OpKind
from chakra_collectives.ir.pattern import ChunkPattern
from chakra_collectives.ir.execution import Execution, execute, happens_before_edges, topological_levels

Value = tuple[int, int] | None
"""``(chunk index, bitmask of contributing ranks)``; ``None`` = the slot holds nothing."""

INVALID = (-1, 0)
"""The value of a faulty reduction (reported once, then propagated)."""


@dataclass
class SemanticRun:
    execution: Execution
    storage: dict[tuple[int, int], list[Value]]
    fault: str | None


def run_symbolically(algo: CollectiveAlgorithm, partner: np.ndarray, *, order: str) -> SemanticRun:
    """Execute ``algo`` eagerly in ``order`` ("fifo" or "lifo") on symbolic data.

    Effects do not change which operations can run, so the schedule is computed first and the
    effects are then applied along it.
    """
    execution = execute(algo, partner, semantics="eager", order=order)
    ops = algo.ops
    storage = _initial_storage(algo)
    src_buf, src_off = algo.resolve(ops.rank, ops.src_buf, ops.src_off)
    dst_buf, dst_off = algo.resolve(ops.rank, ops.dst_buf, ops.dst_off)
    # per operation: kind, count, source slots list, source offset, target slots list, target offset
    rank = ops.rank.tolist()
    buffers = [[storage.get((r, b)) for b in range(3)] + [None] for r in range(algo.num_ranks)]  # [-1] -> None
    operations = list(
        zip(
            ops.kind.tolist(),
            ops.count.tolist(),
            [buffers[r][b] for r, b in zip(rank, src_buf.tolist())],
            src_off.tolist(),
            [buffers[r][b] for r, b in zip(rank, dst_buf.tolist())],
            dst_off.tolist(),
            partner.tolist(),
        )
    )
    messages: dict[int, list[Value]] = {}
    faults: list[str] = []
    SEND, RECV, REDUCE, COPY = (int(k) for k in (OpKind.SEND, OpKind.RECV, OpKind.REDUCE, OpKind.COPY))
    ranged = ops.ranged_slots(src_off, dst_off)
    for i in execution.order:
        k, n, source, so, target, do, p = operations[i]
        if i in ranged:  # a message of several chunk ranges: its chunks in order, range by range
            if k == SEND:
                messages[i] = [source[at] for at in ranged[i]]
            elif k == RECV:
                for at, value in zip(ranged[i], messages.pop(p)):
                    target[at] = value
        elif k == SEND:
            messages[i] = source[so : so + n]
        elif k == RECV:
            target[do : do + n] = messages.pop(p)
        elif k == COPY:
            target[do : do + n] = source[so : so + n]
        elif k == REDUCE:
            for j in range(n):
                a, b = target[do + j], source[so + j]
                if a is not None and b is not None and a[0] == b[0] >= 0 and not a[1] & b[1]:
                    target[do + j] = (a[0], a[1] | b[1])
                    continue
                target[do + j] = INVALID
                if not faults:
                    where = f"rank {rank[i]}: node {ops.node_id[i]}: "
                    dst_slot, src_slot = _slot(int(dst_buf[i]), do + j), _slot(int(src_buf[i]), so + j)
                    if a is None or b is None:
                        faults.append(where + f"reduces {dst_slot} with {src_slot} but one of them holds nothing")
                    elif a[0] != b[0] and a[0] >= 0 and b[0] >= 0:
                        faults.append(where + f"reduces chunk {a[0]} with chunk {b[0]} ({dst_slot} += {src_slot})")
                    elif a[1] & b[1]:
                        faults.append(where + f"counts rank(s) {format_ranks(a[1] & b[1])} twice in chunk {a[0]} ({dst_slot})")
    return SemanticRun(execution=execution, storage=storage, fault=faults[0] if faults else None)


def run_moves(algo: CollectiveAlgorithm, partner: np.ndarray) -> SemanticRun | None:
    """:func:`run_symbolically`'s result computed with numpy, for an algorithm that finishes with
    eager sends and whose every reduction is sound (two values of one chunk over disjoint ranks);
    ``None`` for any other (the fifo run then finds and reports the fault).

    The operations run a topological level at a time (every SEND of a level captures its slots,
    every COPY and REDUCE reads, then COPYs, RECVs and REDUCEs write), slots holding the index of
    their value in a table of (chunk, ranks) values that each level's reductions extend. The
    order is a valid one, not ``fifo``'s: where no two unordered operations touch one slot with a
    write (what the race check proves) the result is the same.

    >>> from chakra_collectives.synth.baselines import ring
    >>> from chakra_collectives.ir.matching import match_messages
    >>> for collective in (Collective.ALL_GATHER, Collective.ALL_REDUCE):
    ...     algo = ring(collective, 4, size_bytes=4096)
    ...     partner = match_messages(algo).partner
    ...     print(run_moves(algo, partner).storage == run_symbolically(algo, partner, order="fifo").storage)
    True
    True
    """
    ops = algo.ops
    size = len(ops)
    level = topological_levels(size, *happens_before_edges(algo, partner))
    if np.any(level < 0):
        return None
    storage = _initial_storage(algo)
    keys = list(storage)
    lengths = np.array([len(storage[k]) for k in keys], dtype=np.int64)
    base = np.zeros((algo.num_ranks, 3), dtype=np.int64)
    base[tuple(np.array(keys).T)] = np.cumsum(lengths) - lengths
    where: list[int] = []
    initial: list[Value] = []
    for (r, b), held in storage.items():
        at = int(base[r, b])
        for offset, value in enumerate(held):
            if value is not None:
                where.append(at + offset)
                initial.append(value)
    made = len(initial)
    slots = np.full(int(lengths.sum()), -1, dtype=np.int64)
    slots[np.array(where, dtype=np.int64)] = np.arange(made)
    count = ops.count.astype(np.int64)
    is_send, is_recv, is_copy = ops.kind == OpKind.SEND, (ops.kind == OpKind.RECV) & (partner >= 0), ops.kind == OpKind.COPY
    is_reduce = ops.kind == OpKind.REDUCE
    # the value table: the initial values, then one value per reduced slot (a level's reductions append)
    known = made + int(np.maximum(count[is_reduce], 0).sum())
    chunk_of = np.full(known, -1, dtype=np.int64)
    ranks_of = np.empty(known, dtype=object)
    chunk_of[:made] = [v[0] for v in initial]  # type: ignore[index]
    ranks_of[:made] = [v[1] for v in initial]  # type: ignore[index]
    src_buf, src_off = (np.broadcast_to(c, (size,)) for c in algo.resolve(ops.rank, ops.src_buf, ops.src_off))
    dst_buf, dst_off = (np.broadcast_to(c, (size,)) for c in algo.resolve(ops.rank, ops.dst_buf, ops.dst_off))
    src_at = base[ops.rank, np.maximum(src_buf, 0)] + src_off
    dst_at = base[ops.rank, np.maximum(dst_buf, 0)] + dst_off
    carried = np.where(is_send, np.maximum(count, 0), 0)
    message_at = np.cumsum(carried) - carried
    message = np.full(int(carried.sum()), -1, dtype=np.int64)
    order = np.lexsort((np.arange(size), level))
    bounds = np.searchsorted(level[order], np.arange(int(level.max(initial=0)) + 2))

    def spread(chosen: np.ndarray, start: np.ndarray) -> np.ndarray:
        return ops.slots(chosen, start)  # through every range of a several-range message

    def in_message(chosen: np.ndarray, start: np.ndarray) -> np.ndarray:
        n = np.maximum(count[chosen], 0)
        return np.repeat(start - np.cumsum(n) + n, n) + np.arange(int(n.sum()))

    for lv in range(len(bounds) - 1):
        now = order[bounds[lv] : bounds[lv + 1]]
        sends, copies, recvs, reduces = now[is_send[now]], now[is_copy[now]], now[is_recv[now]], now[is_reduce[now]]
        message[in_message(sends, message_at[sends])] = slots[spread(sends, src_at[sends])]
        copied = slots[spread(copies, src_at[copies])]
        if len(reduces):
            into = spread(reduces, dst_at[reduces])
            held, added = slots[into], slots[spread(reduces, src_at[reduces])]
            if np.any((held < 0) | (added < 0)) or np.any((chunk_of[held] != chunk_of[added]) | (chunk_of[held] < 0)):
                return None  # a reduction with nothing, or of two chunks: the fifo run reports it
            if any((ranks_of[held] & ranks_of[added]).tolist()):
                return None  # a rank counted twice
            fresh = np.arange(made, made + len(into))
            chunk_of[fresh], ranks_of[fresh] = chunk_of[held], ranks_of[held] | ranks_of[added]
            made += len(into)
        slots[spread(copies, dst_at[copies])] = copied
        slots[spread(recvs, dst_at[recvs])] = message[in_message(recvs, message_at[partner[recvs]])]
        if len(reduces):
            slots[into] = fresh
    present = np.zeros(made + 1, dtype=bool)
    present[slots] = True
    used = np.flatnonzero(present[:made])
    table: list[Value] = [None] * (made + 1)  # index -1: nothing
    for i, chunk, ranks in zip(used.tolist(), chunk_of[used].tolist(), ranks_of[used].tolist()):
        table[i] = (chunk, ranks)
    for k, start, length in zip(keys, (base[r, b] for r, b in keys), lengths.tolist()):
        storage[k] = [table[i] for i in slots[start : start + length].tolist()]
    return SemanticRun(execution=Execution(order=order.tolist(), stuck=[]), storage=storage, fault=None)


def _initial_storage(algo: CollectiveAlgorithm) -> dict[tuple[int, int], list[Value]]:
    # in-place aliasing maps a view onto another buffer at up to chunk_count slots, so input
    # and output storage is at least that large (declared ranges were checked by structure)
    storage: dict[tuple[int, int], list[Value]] = {}
    for r in range(algo.num_ranks):
        for buf in Buffer:
            declared = algo.buffer_chunks(r, buf)
            storage[r, int(buf)] = [None] * (declared if buf is Buffer.SCRATCH else max(declared, algo.chunk_count))
    if algo.collective is Collective.CUSTOM:
        return storage
    share = algo.share
    pattern = _pattern(algo)
    for r in range(algo.num_ranks):
        slots = np.arange(_view_size(algo, r, Buffer.INPUT))
        buffers, offsets = (np.broadcast_to(c, slots.shape).tolist() for c in algo.resolve(r, np.full(len(slots), int(Buffer.INPUT)), slots))
        if pattern is not None:
            values = [pattern.initial_value(rank=r, slot=slot) for slot in slots.tolist()]
        else:
            values = algo.collective.initial_values(rank=r, num_slots=len(slots), share=share)
        for value, b, o in zip(values, buffers, offsets):
            storage[r, b][o] = value
    return storage


def _pattern(algo: CollectiveAlgorithm) -> ChunkPattern | None:
    """The pattern a pattern algorithm is held to (``None`` for the other collectives)."""
    if algo.collective is not Collective.PATTERN:
        return None
    if algo.pattern is None or algo.pattern.num_ranks != algo.num_ranks or algo.pattern.chunk_count != algo.chunk_count:
        raise InputError("a pattern algorithm needs its pattern (same ranks and chunks) to be verified")
    return algo.pattern


def _view_size(algo: CollectiveAlgorithm, rank: int, buffer: Buffer) -> int:
    """Chunks of the collective's input/output *view* of ``rank`` (in-place files may declare 0)."""
    sizes = algo.collective.buffer_chunks(rank=rank, num_ranks=algo.num_ranks, chunk_count=algo.chunk_count, root=algo.root)
    return sizes[0] if buffer is Buffer.INPUT else sizes[1]


def output_view(algo: CollectiveAlgorithm, storage: dict[tuple[int, int], list[Value]]) -> list[list[Value]]:
    """Per rank, the values of its output view (through in-place aliasing)."""
    view = []
    for r in range(algo.num_ranks):
        slots = np.arange(_view_size(algo, r, Buffer.OUTPUT))
        buffers, offsets = algo.resolve(r, np.full(len(slots), int(Buffer.OUTPUT)), slots)
        buffers = np.broadcast_to(buffers, slots.shape).tolist()
        view.append([storage[r, b][o] for b, o in zip(buffers, np.broadcast_to(offsets, slots.shape).tolist())])
    return view


SAME_ON_EVERY_RANK = frozenset({Collective.ALL_GATHER, Collective.ALL_REDUCE, Collective.BROADCAST})
"""Collectives whose every rank's output must hold the same values (slot by slot)."""


def postcondition_violation(algo: CollectiveAlgorithm, outputs: list[list[Value]]) -> str | None:
    """The first output slot that does not hold what the collective requires, as a counterexample.

    A rank's output is compared with its expected values as one list (and slot by slot only
    when they differ); the expected values of :data:`SAME_ON_EVERY_RANK` collectives are made
    once, not once per rank.
    """
    share = algo.share
    pattern = _pattern(algo)
    shared: list[Value] | None = None
    for r, values in enumerate(outputs):
        if shared is not None and len(shared) == len(values):
            expected_values = shared
        elif pattern is not None:
            expected_values = [pattern.expected_value(rank=r, slot=slot) for slot in range(len(values))]
        else:
            expected_values = [
                algo.collective.expected_value(rank=r, slot=slot, share=share, num_ranks=algo.num_ranks, root=algo.root)
                for slot in range(len(values))
            ]
            if algo.collective in SAME_ON_EVERY_RANK:
                shared = expected_values
        if values == expected_values:
            continue
        for slot, (got, expected) in enumerate(zip(values, expected_values)):
            if expected is not None and got != expected:
                b, o = (int(v) for v in algo.resolve(r, Buffer.OUTPUT, slot))
                alias = "" if (b, o) == (Buffer.OUTPUT, slot) else f" (stored at {_slot(b, o)})"
                return (
                    f"counterexample: rank {r}, buffer output, slot {slot}{alias}: expected {describe_value(expected)}, "
                    f"got {describe_value(got)}"
                )
    return None


def describe_value(value: Value) -> str:
    """Readable symbolic value.

    >>> describe_value((5, 0b1011))
    'chunk 5 summed over ranks 0-1,3'
    >>> describe_value((2, 0b100))
    'chunk 2 from rank 2'
    >>> describe_value(None)
    'nothing'
    """
    if value is None:
        return "nothing"
    if value[0] < 0:
        return "the result of a faulty reduction"
    index, mask = value
    if mask & (mask - 1) == 0:
        return f"chunk {index} from rank {mask.bit_length() - 1}"
    return f"chunk {index} summed over ranks {format_ranks(mask)}"


def format_ranks(mask: int) -> str:
    """Compact rank set of a bitmask: ``0-3,5``.

    >>> format_ranks(0b101111)
    '0-3,5'
    """
    ranks = [i for i in range(mask.bit_length()) if mask >> i & 1]
    spans: list[str] = []
    start = prev = ranks[0]
    for r in ranks[1:] + [None]:  # type: ignore[list-item]
        if r is not None and r == prev + 1:
            prev = r
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(spans)


def _slot(buf: int, offset: int) -> str:
    return f"{('input', 'output', 'scratch')[buf]}[{offset}]"
