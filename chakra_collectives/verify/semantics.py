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

    def violation(self, algo: CollectiveAlgorithm) -> str | None:
        """:func:`postcondition_violation` of the run's outputs."""
        return postcondition_violation(algo, output_view(algo, self.storage))


@dataclass
class MovedRun:
    """:func:`run_moves`'s result, held compactly: per slot the index of its value, per value its
    chunk and its ranks -- the one rank of an initial value, a bitset row (``uint64`` words) of a
    reduction's. A 1,024-rank value is 128 bytes, not a Python tuple and integer per slot.
    """

    execution: Execution
    layout: tuple[list[tuple[int, int]], np.ndarray, np.ndarray]
    """The (rank, buffer) storages, each one's first slot (by rank and buffer) and its length."""
    slots: np.ndarray
    """Per slot the index of the value it holds (-1: nothing)."""
    chunk_of: np.ndarray
    """Per value its chunk index."""
    origin: np.ndarray
    """Per initial value (the first ``len(origin)``) the rank it comes from."""
    bits: np.ndarray
    """Per reduced value (after the initial ones) its ranks as bits, 64 to a word."""
    fault: None = None

    def rows(self, values: np.ndarray) -> np.ndarray:
        """The ranks of ``values`` (indices, none -1) as bitset rows."""
        out = np.zeros((len(values), self.bits.shape[1]), dtype=np.uint64)
        initial = len(self.origin)
        first = np.flatnonzero((values >= 0) & (values < initial))
        ranks = self.origin[values[first]]
        out[first, ranks >> 6] = np.left_shift(np.uint64(1), (ranks & 63).astype(np.uint64))
        reduced = np.flatnonzero(values >= initial)
        out[reduced] = self.bits[values[reduced] - initial]
        return out

    def value(self, index: int) -> Value:
        """The symbolic value of one index (``-1``: nothing)."""
        if index < 0:
            return None
        row = self.rows(np.array([index]))[0]
        return int(self.chunk_of[index]), int.from_bytes(row.astype("<u8").tobytes(), "little")

    @property
    def storage(self) -> dict[tuple[int, int], list[Value]]:
        """Every slot's symbolic value, as :func:`run_symbolically` holds them (for small runs)."""
        keys, base, lengths = self.layout
        table: dict[int, Value] = {}
        storage: dict[tuple[int, int], list[Value]] = {}
        for key, length in zip(keys, lengths.tolist()):
            start = int(base[key])
            storage[key] = [table[i] if i in table else table.setdefault(i, self.value(i)) for i in self.slots[start : start + length].tolist()]
        return storage

    def violation(self, algo: CollectiveAlgorithm) -> str | None:
        """:func:`postcondition_violation` of the run's outputs, compared a rank at a time as arrays."""
        _, base, _ = self.layout
        pattern = _pattern(algo)
        masks: dict[int, np.ndarray] = {}
        shared: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None
        for r in range(algo.num_ranks):
            n = _view_size(algo, r, Buffer.OUTPUT)
            slots = np.arange(n)
            buffers, offsets = (np.broadcast_to(c, (n,)) for c in algo.resolve(r, np.full(n, int(Buffer.OUTPUT)), slots))
            got = self.slots[base[r, buffers] + offsets]
            if shared is not None and shared[0] == n:
                _, chunk, ranks, given = shared
            else:
                expected = _expected_values(algo, pattern, r, n)
                given = np.array([e is not None for e in expected], dtype=bool)
                chunk = np.array([-1 if e is None else e[0] for e in expected], dtype=np.int64)
                ranks = np.zeros((n, self.bits.shape[1]), dtype=np.uint64)
                for slot, e in enumerate(expected):
                    if e is not None:
                        if e[1] not in masks:
                            masks[e[1]] = np.frombuffer(e[1].to_bytes(8 * self.bits.shape[1], "little"), dtype="<u8")
                        ranks[slot] = masks[e[1]]
                if algo.collective in SAME_ON_EVERY_RANK and pattern is None:
                    shared = (n, chunk, ranks, given)
            held = got >= 0
            right = held & (self.chunk_of[np.maximum(got, 0)] == chunk) & np.all(self.rows(got) == ranks, axis=1)
            wrong = np.flatnonzero(given & ~right)
            if len(wrong):
                slot = int(wrong[0])
                return _counterexample(algo, r, slot, _expected_values(algo, pattern, r, n)[slot], self.value(int(got[slot])))
        return None


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


def run_moves(algo: CollectiveAlgorithm, partner: np.ndarray) -> MovedRun | None:
    """:func:`run_symbolically`'s result computed with numpy, for an algorithm that finishes with
    eager sends and whose every reduction is sound (two values of one chunk over disjoint ranks);
    ``None`` for any other (the fifo run then finds and reports the fault).

    The operations run a topological level at a time (every SEND of a level captures its slots,
    every COPY and REDUCE reads, then COPYs, RECVs and REDUCEs write), slots holding the index of
    their value in a table of (chunk, ranks) values that each level's reductions extend (a
    reduction's ranks as a bitset row). The order is a valid one, not ``fifo``'s: where no two
    unordered operations touch one slot with a write (what the race check proves) the result is
    the same.

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
    layout = _layout(algo)
    keys, base, lengths = layout
    initial = _initial_values(algo, base)
    if initial is None:
        return None
    where, chunks, origin = initial
    made = initial_count = len(where)
    count = ops.count.astype(np.int64)
    is_send, is_recv, is_copy = ops.kind == OpKind.SEND, (ops.kind == OpKind.RECV) & (partner >= 0), ops.kind == OpKind.COPY
    is_reduce = ops.kind == OpKind.REDUCE
    # the value table: the initial values, then one value per reduced slot (a level's reductions append)
    reduced = int(np.maximum(count[is_reduce], 0).sum())
    index = np.int32 if made + reduced < 2**31 else np.int64
    slots = np.full(int(lengths.sum()), -1, dtype=index)
    slots[where] = np.arange(made, dtype=index)
    chunk_of = np.full(made + reduced, -1, dtype=np.int64)
    chunk_of[:made] = chunks
    run = MovedRun(Execution(order=[], stuck=[]), layout, slots, chunk_of, origin, np.zeros((reduced, (algo.num_ranks + 63) // 64), dtype=np.uint64))
    src_buf, src_off = (np.broadcast_to(c, (size,)) for c in algo.resolve(ops.rank, ops.src_buf, ops.src_off))
    dst_buf, dst_off = (np.broadcast_to(c, (size,)) for c in algo.resolve(ops.rank, ops.dst_buf, ops.dst_off))
    src_at = base[ops.rank, np.maximum(src_buf, 0)] + src_off
    dst_at = base[ops.rank, np.maximum(dst_buf, 0)] + dst_off
    carried = np.where(is_send, np.maximum(count, 0), 0)
    message_at = np.cumsum(carried) - carried
    message = np.full(int(carried.sum()), -1, dtype=index)
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
            ranks, more = run.rows(held), run.rows(added)
            if np.any(ranks & more):
                return None  # a rank counted twice
            fresh = np.arange(made, made + len(into), dtype=index)
            chunk_of[fresh] = chunk_of[held]
            run.bits[fresh - initial_count] = np.bitwise_or(ranks, more, out=ranks)
            del ranks, more
            made += len(into)
        slots[spread(copies, dst_at[copies])] = copied
        slots[spread(recvs, dst_at[recvs])] = message[in_message(recvs, message_at[partner[recvs]])]
        if len(reduces):
            slots[into] = fresh
    run.execution = Execution(order=order.tolist(), stuck=[])
    return run


def _layout(algo: CollectiveAlgorithm) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """The verifier's storages (a rank's input, output and scratch, in that order, rank by rank):
    their keys, each one's first slot (indexed by rank and buffer) and its length."""
    declared = np.stack([np.broadcast_to(np.asarray(c), (algo.num_ranks,)) for c in (algo.input_chunks, algo.output_chunks, algo.scratch_chunks)], axis=1)
    lengths = declared.astype(np.int64)
    lengths[:, :2] = np.maximum(lengths[:, :2], algo.chunk_count)  # in-place aliasing reaches up to chunk_count slots
    base = (np.cumsum(lengths.ravel()) - lengths.ravel()).reshape(lengths.shape)
    keys = [(r, int(b)) for r in range(algo.num_ranks) for b in Buffer]
    return keys, base, lengths.ravel()


def _initial_values(algo: CollectiveAlgorithm, base: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Where the collective's precondition puts a value (slots of :func:`_layout`), its chunk
    and the one rank it comes from; ``None`` when a value is not from exactly one rank."""
    if algo.collective is Collective.CUSTOM:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    pattern = _pattern(algo)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for r in range(algo.num_ranks):
        n = _view_size(algo, r, Buffer.INPUT)
        slots = np.arange(n)
        buffers, offsets = (np.broadcast_to(c, (n,)) for c in algo.resolve(r, np.full(n, int(Buffer.INPUT)), slots))
        if pattern is not None:
            values = [pattern.initial_value(rank=r, slot=slot) for slot in range(n)]
            held = np.array([v is not None for v in values], dtype=bool)
            chunks = np.array([v[0] for v in values if v is not None], dtype=np.int64)
            masks = [v[1] for v in values if v is not None]
        else:
            first, mask = algo.collective.initial_value(rank=r, slot=0, share=algo.share)
            held, chunks, masks = np.ones(n, dtype=bool), first + slots, [mask]
        if any(m <= 0 or m & (m - 1) for m in masks):
            return None
        origin = np.array([m.bit_length() - 1 for m in masks], dtype=np.int64)
        parts.append((base[r, buffers[held]] + offsets[held], chunks, np.broadcast_to(origin, chunks.shape)))
    return tuple(np.concatenate(column) if parts else np.zeros(0, dtype=np.int64) for column in zip(*parts))  # type: ignore[return-value]


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
    pattern = _pattern(algo)
    shared: list[Value] | None = None
    for r, values in enumerate(outputs):
        if shared is not None and len(shared) == len(values):
            expected_values = shared
        else:
            expected_values = _expected_values(algo, pattern, r, len(values))
            if algo.collective in SAME_ON_EVERY_RANK and pattern is None:
                shared = expected_values
        if values == expected_values:
            continue
        for slot, (got, expected) in enumerate(zip(values, expected_values)):
            if expected is not None and got != expected:
                return _counterexample(algo, r, slot, expected, got)
    return None


def _expected_values(algo: CollectiveAlgorithm, pattern: ChunkPattern | None, rank: int, n: int) -> list[Value]:
    """What ``output[rank][0:n]`` must hold (``None``: unconstrained)."""
    if pattern is not None:
        return [pattern.expected_value(rank=rank, slot=slot) for slot in range(n)]
    return [algo.collective.expected_value(rank=rank, slot=slot, share=algo.share, num_ranks=algo.num_ranks, root=algo.root) for slot in range(n)]


def _counterexample(algo: CollectiveAlgorithm, rank: int, slot: int, expected: Value, got: Value) -> str:
    b, o = (int(v) for v in algo.resolve(rank, Buffer.OUTPUT, slot))
    alias = "" if (b, o) == (Buffer.OUTPUT, slot) else f" (stored at {_slot(b, o)})"
    return f"counterexample: rank {rank}, buffer output, slot {slot}{alias}: expected {describe_value(expected)}, got {describe_value(got)}"


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
