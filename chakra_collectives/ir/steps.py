"""StepBuilder: write an algorithm as steps of array operations (a column-wise AlgorithmBuilder).

Classic algorithms (ring, direct, recursive halving/doubling, trees) are sequences of *steps*:
in a step, every participating rank does the same thing to different chunks. A step here is
one call with arrays -- ``copy(ranks, ...)`` or ``transfer(srcs, dsts, ...)`` -- so building a
1,024-rank all-pairs all-reduce (5M operations) costs a few thousand numpy calls instead of
millions of Python calls of :class:`~chakra_collectives.ir.builder.AlgorithmBuilder`.

The result is the algorithm :class:`AlgorithmBuilder` gives for the same calls made one
operation at a time, in the same order:

* each rank's program lists its operations in call order (inside a step, in the order the
  step's layout gives: every move's SEND, RECV (and REDUCE) together, or all SENDs first);
* tags number the messages of each ``(src, dst)`` pair in call order (``fresh_tag``);
* dependencies come from the data: an operation waits for the last writer of every chunk it
  reads or overwrites (read-after-write and write-after-write), as of the *start* of its step
  -- plus, inside a step, a REDUCE waits for the RECV it combines. Reading a slot a pending
  operation of the same step writes is refused (two writes of one slot in a step too), so
  steps mean what they say. Write-after-read is not tracked: a producer must not overwrite a
  slot that a SEND not yet known to have completed still reads (none of ours do; the
  verifier's race check would report it).

Columns are compact: ``int32`` offsets, counts, peers, tags and node ids, ``int8`` kinds and
buffers, ``int32`` dependency indices.

>>> import numpy as np
>>> from chakra_collectives.ir import Buffer, Collective
>>> b = StepBuilder(Collective.ALL_GATHER, num_ranks=3, chunk_count=3, size_bytes=3 * 1024)
>>> ranks = np.arange(3)
>>> b.copy(ranks, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, ranks), count=1)
>>> for step in (1, 2):   # rank r sends its chunk to r + step
...     b.transfer(ranks, (ranks + step) % 3, src=(Buffer.OUTPUT, ranks), dst=(Buffer.OUTPUT, ranks), count=1)
>>> algo = b.build()
>>> algo.describe(), [str(op.kind.name) + str(op.deps) for op in algo.ops_of(0)][:3]
('all-gather over 3 ranks, 3 chunks, 15 ops', ['COPY()', 'SEND(0,)', 'RECV()'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from chakra_collectives.ir.algorithm import CollectiveAlgorithm
from chakra_collectives.ir.builder import touched_scratch
from chakra_collectives.ir.collective import Collective
from chakra_collectives.ir.grouping import occurrence
from chakra_collectives.ir.ops import NONE, Buffer, OpKind, OpTable

FRESH = "fresh"
"""``dst`` of :meth:`StepBuilder.transfer`: receive into new scratch slots of the receiver."""

_I32 = np.int32
_NO_WRITER = -1


@dataclass
class _Step:
    """One step as it was asked for (its operations are generated again when laid out)."""

    copy: bool
    src_rank: np.ndarray
    """COPY: the ranks; transfer: the senders."""
    dst_rank: np.ndarray | None
    src: tuple[int, np.ndarray]
    dst: tuple[int, np.ndarray]
    count: np.ndarray
    reduce: str | None = None
    """``"into"`` / ``"with"`` (see :meth:`StepBuilder.transfer`)."""
    other: tuple[int, np.ndarray] | None = None
    """The REDUCE's own place."""
    sends_first: bool = False
    local: np.ndarray | None = None
    """Each operation's index in its rank's program (call order)."""
    dep_op: np.ndarray | None = None
    """Dependencies: owner (index into this step's operations, ascending), and ..."""
    dep_target: np.ndarray | None = None
    """... the target's index in the owner's rank program (ascending per owner)."""
    tags: np.ndarray | None = None

    @property
    def moves(self) -> int:
        return len(self.src_rank)

    @property
    def per_move(self) -> int:
        return 1 if self.copy else 2 if self.reduce is None else 3

    def layout(self) -> tuple[np.ndarray, np.ndarray]:
        """Call-order positions of every move's SEND and RECV (the REDUCE follows its RECV)."""
        m, per = self.moves, self.per_move
        moves = np.arange(m)
        if self.sends_first:
            return moves, m + (per - 1) * moves
        return per * moves, per * moves + 1

    def ranks(self) -> np.ndarray:
        """The rank of each operation, in call order."""
        if self.copy:
            return self.src_rank
        send_at, recv_at = self.layout()
        rank = np.empty(self.per_move * self.moves, dtype=np.int64)
        rank[send_at], rank[recv_at] = self.src_rank, self.dst_rank
        if self.reduce is not None:
            rank[recv_at + 1] = self.dst_rank
        return rank

    def columns(self) -> dict[str, np.ndarray]:
        """Every operation's columns, in call order."""
        size = self.per_move * self.moves
        cols = {
            "kind": np.empty(size, dtype=np.int8), "peer": np.full(size, NONE, dtype=_I32), "tag": np.full(size, NONE, dtype=_I32),
            "src_buf": np.full(size, NONE, dtype=np.int8), "src_off": np.full(size, NONE, dtype=_I32),
            "dst_buf": np.full(size, NONE, dtype=np.int8), "dst_off": np.full(size, NONE, dtype=_I32), "count": np.empty(size, dtype=_I32),
        }
        if self.copy:
            cols["kind"][:] = OpKind.COPY
            cols["src_buf"][:], cols["src_off"][:] = self.src
            cols["dst_buf"][:], cols["dst_off"][:] = self.dst
            cols["count"][:] = self.count
            return cols
        send_at, recv_at = self.layout()
        cols["kind"][send_at], cols["kind"][recv_at] = OpKind.SEND, OpKind.RECV
        cols["peer"][send_at], cols["peer"][recv_at] = self.dst_rank, self.src_rank
        cols["tag"][send_at] = cols["tag"][recv_at] = self.tags
        cols["src_buf"][send_at], cols["src_off"][send_at] = self.src
        cols["dst_buf"][recv_at], cols["dst_off"][recv_at] = self.dst
        cols["count"][send_at] = cols["count"][recv_at] = self.count
        if self.reduce is not None:
            at = recv_at + 1
            cols["kind"][at] = OpKind.REDUCE
            cols["count"][at] = self.count
            read, write = (self.dst, self.other) if self.reduce == "into" else (self.other, self.dst)
            cols["src_buf"][at], cols["src_off"][at] = read
            cols["dst_buf"][at], cols["dst_off"][at] = write
        return cols


class StepBuilder:
    """Accumulates steps; :meth:`build` lays them out as a :class:`CollectiveAlgorithm`."""

    def __init__(
        self,
        collective: Collective,
        *,
        num_ranks: int,
        chunk_count: int,
        size_bytes: int,
        fresh_from: int | None = None,
        root: int | None = None,
        name: str = "",
        provenance: dict[str, str] | None = None,
    ) -> None:
        """``fresh_from``: the first scratch slot :data:`FRESH` receives use (default ``chunk_count``);
        slots from there on are not tracked (each is written once, by its RECV)."""
        if num_ranks < 1 or chunk_count < 1:
            raise ValueError("num_ranks and chunk_count must be positive")
        self.collective, self.num_ranks, self.chunk_count, self.size_bytes = collective, num_ranks, chunk_count, size_bytes
        self.root, self.name, self.provenance = root, name, dict(provenance or {})
        self.tracked = chunk_count if fresh_from is None else fresh_from
        self._next_fresh = np.full(num_ranks, self.tracked, dtype=np.int64)
        self._program = np.zeros(num_ranks, dtype=np.int64)  # operations per rank so far
        self._writers: dict[int, np.ndarray] = {}  # buffer -> (ranks, tracked slots): last writer's program index
        self._steps: list[_Step] = []

    # ------------------------------------------------------------------ steps
    def copy(self, rank, *, src, dst, count) -> None:
        """One COPY per entry of ``rank``: ``dst[i] = src[i]`` for ``count`` chunks.

        ``src`` and ``dst`` are ``(buffer, offset)``; offsets and ``count`` are scalars or arrays.
        """
        rank = np.asarray(rank, dtype=np.int64)
        m = len(rank)
        step = _Step(True, rank, None, _ref(src, m), _ref(dst, m), _wide(count, m))
        ops = np.arange(m)
        self._record(step, reads=[(ops, *step.src, step.count), (ops, *step.dst, step.count)], writes=[(ops, *step.dst, step.count)])

    def transfer(self, src_rank, dst_rank, *, src, dst, count, reduce_into=None, reduce_with=None, sends_first: bool = False) -> None:
        """One message per move ``i``: ``src_rank[i]`` sends ``count[i]`` chunks from ``src``,
        ``dst_rank[i]`` receives them into ``dst`` (``(buffer, offset)`` or :data:`FRESH`).

        ``reduce_into=(buffer, offset)``: the receiver then REDUCEs the received chunks into
        that place (``place += received``); ``reduce_with=(buffer, offset)``: it REDUCEs those
        chunks of its own into the received ones (``received += own``). Layout: every move's
        SEND, RECV (, REDUCE) together, in move order; ``sends_first``: every SEND first, then
        every move's RECV (, REDUCE).
        """
        if reduce_into is not None and reduce_with is not None:
            raise ValueError("give reduce_into or reduce_with, not both")
        src_rank = np.asarray(src_rank, dtype=np.int64).reshape(-1)
        dst_rank = np.asarray(dst_rank, dtype=np.int64).reshape(-1)
        m = len(src_rank)
        count = _wide(count, m)
        fresh = isinstance(dst, str) and dst == FRESH
        where = (int(Buffer.SCRATCH), self._fresh(dst_rank, count)) if fresh else _ref(dst, m)
        other = reduce_into if reduce_into is not None else reduce_with
        reduce = None if other is None else "into" if reduce_into is not None else "with"
        step = _Step(False, src_rank, dst_rank, _ref(src, m), where, count, reduce, None if other is None else _ref(other, m), sends_first)
        send_at, recv_at = step.layout()
        reads = [(send_at, *step.src, count)] + ([] if fresh else [(recv_at, *where, count)])
        writes = [] if fresh else [(recv_at, *where, count)]
        if reduce is not None:
            reads.append((recv_at + 1, *step.other, count))  # the received chunks' writer is the RECV itself
            if reduce == "with":  # the REDUCE, not the RECV, leaves the received chunks
                writes = []
            writes.append((recv_at + 1, *(step.other if reduce == "into" else where), count))
        self._record(step, reads, writes, after_recv=(recv_at + 1, recv_at) if reduce is not None else None)

    # ------------------------------------------------------------------ internals
    def _record(self, step: _Step, reads, writes, after_recv=None) -> None:
        rank = step.ranks()
        local = self._program[rank] + occurrence(rank)
        self._program += np.bincount(rank, minlength=self.num_ranks)
        owner, target = self._last_writers(rank, reads)
        if after_recv is not None:  # a REDUCE waits for the RECV it combines
            reducer, receiver = after_recv
            owner, target = np.concatenate([owner, reducer]), np.concatenate([target, local[receiver]])
        step.local = local.astype(_I32)
        step.dep_op, step.dep_target = _sorted_unique(owner, target)
        self._steps.append(step)
        self._write(rank, local, writes)

    def _fresh(self, rank: np.ndarray, count: np.ndarray) -> np.ndarray:
        """New scratch slots for each receive, in move order."""
        order = np.argsort(rank, kind="stable")
        sorted_rank, sorted_count = rank[order], count[order]
        before = np.cumsum(sorted_count) - sorted_count
        before -= before[_group_starts(sorted_rank)]
        slots = np.empty(len(rank), dtype=np.int64)
        slots[order] = self._next_fresh[sorted_rank] + before
        self._next_fresh += np.bincount(rank, weights=count, minlength=self.num_ranks).astype(np.int64)
        if len(rank) and self._next_fresh.max() >= 2**31:
            raise ValueError("scratch slots do not fit int32 offsets")
        return slots

    def _expand(self, rows: np.ndarray, buf: int, off: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(entry, slot)`` for every tracked chunk of the ranges (``entry`` indexes the ranges)."""
        if len(count) and count.max() == 1:
            entry, slot = np.arange(len(off)), off
        else:
            entry = np.repeat(np.arange(len(off)), count)
            slot = np.repeat(off - (np.cumsum(count) - count), count) + np.arange(len(entry))
        if buf == Buffer.SCRATCH and len(slot) and slot.max() >= self.tracked:
            keep = slot < self.tracked
            entry, slot = entry[keep], slot[keep]
        return entry, slot

    def _last_writers(self, rank, reads) -> tuple[np.ndarray, np.ndarray]:
        """``(owner, target)``: every chunk each operation touches, and its last writer
        (program index) as of the start of the step."""
        owners, targets = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for ops, buf, off, count in reads:
            table = self._writers.get(buf)
            if table is None:
                continue
            entry, slot = self._expand(ops, buf, off, count)
            writer = table[rank[ops[entry]], slot]
            found = writer != _NO_WRITER
            owners.append(ops[entry[found]])
            targets.append(writer[found].astype(np.int64))
        return np.concatenate(owners), np.concatenate(targets)

    def _write(self, rank, local, writes) -> None:
        """Record the step's writes (after all its reads); one slot written twice in a step is an error."""
        for ops, buf, off, count in writes:
            entry, slot = self._expand(ops, buf, off, count)
            table = self._writers.get(buf)
            if table is None:
                table = self._writers[buf] = np.full((self.num_ranks, self.tracked), _NO_WRITER, dtype=_I32)
            rows, values = rank[ops[entry]], local[ops[entry]]
            table[rows, slot] = values
            if np.any(table[rows, slot] != values):  # two operations of one rank wrote one slot
                raise ValueError("a step writes one chunk slot twice")

    # ------------------------------------------------------------------ freeze
    def build(self, *, scratch_chunks: Sequence[int] | None = None) -> CollectiveAlgorithm:
        """Lay the steps out rank by rank (see the module docstring) and freeze them."""
        n = self.num_ranks
        ops_per_rank = self._program
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(ops_per_rank, out=starts[1:])
        size = int(starts[-1])
        if size >= 2**31:
            raise ValueError(f"{size} operations do not fit int32 indices")
        self._writers = {}
        self._assign_tags()
        cols = {
            "kind": np.empty(size, dtype=np.int8), "peer": np.empty(size, dtype=_I32), "tag": np.empty(size, dtype=_I32),
            "src_buf": np.empty(size, dtype=np.int8), "src_off": np.empty(size, dtype=_I32),
            "dst_buf": np.empty(size, dtype=np.int8), "dst_off": np.empty(size, dtype=_I32), "count": np.empty(size, dtype=_I32),
        }
        dep_counts = np.zeros(size + 1, dtype=_I32)
        for step in self._steps:
            position = starts[step.ranks()] + step.local
            for name, values in step.columns().items():
                cols[name][position] = values
            if len(step.dep_op):
                owners, counts = np.unique(step.dep_op, return_counts=True)
                dep_counts[position[owners] + 1] = counts
        dep_ptr = np.cumsum(dep_counts, dtype=np.int64)
        del dep_counts
        if dep_ptr[-1] < 2**31:
            dep_ptr = dep_ptr.astype(_I32)
        dep_idx = np.empty(int(dep_ptr[-1]), dtype=_I32)
        for step in self._steps:
            op = step.dep_op
            if len(op):
                base = starts[step.ranks()[op]]
                within = np.arange(len(op)) - _group_starts(op)
                dep_idx[dep_ptr[base + step.local[op]] + within] = base + step.dep_target
        self._steps = []
        rank = np.repeat(np.arange(n, dtype=_I32), ops_per_rank)
        table = OpTable.from_columns(
            rank=rank,
            node_id=(np.arange(size, dtype=_I32) - starts[:-1].astype(_I32)[rank]),
            dep_ptr=dep_ptr,
            dep_idx=dep_idx,
            **cols,
        )
        defaults = [self.collective.buffer_chunks(rank=r, num_ranks=n, chunk_count=self.chunk_count, root=self.root) for r in range(n)]
        return CollectiveAlgorithm(
            collective=self.collective,
            num_ranks=n,
            chunk_count=self.chunk_count,
            ops=table,
            input_chunks=np.array([d[0] for d in defaults], dtype=np.int64),
            output_chunks=np.array([d[1] for d in defaults], dtype=np.int64),
            scratch_chunks=np.asarray(touched_scratch(table, n) if scratch_chunks is None else scratch_chunks, dtype=np.int64),
            size_bytes=self.size_bytes,
            root=self.root,
            name=self.name,
            provenance=self.provenance,
        )

    def _assign_tags(self) -> None:
        """Tag of every message: its index among the messages of its ``(src, dst)`` pair, in call order."""
        transfers = [step for step in self._steps if not step.copy]
        if not transfers:
            return
        tags = occurrence(np.concatenate([step.src_rank * self.num_ranks + step.dst_rank for step in transfers]))
        if tags.max() >= 2**31:
            raise ValueError("tags do not fit int32")
        at = 0
        for step in transfers:
            step.tags = tags[at : at + step.moves].astype(_I32)
            at += step.moves


# ---------------------------------------------------------------------- helpers
def _ref(ref, m: int) -> tuple[int, np.ndarray]:
    buf, off = ref
    return int(buf), _wide(off, m)


def _wide(value, m: int) -> np.ndarray:
    """``value`` as an int64 array of ``m`` entries (a scalar is repeated)."""
    array = np.asarray(value, dtype=np.int64).reshape(-1)
    return np.full(m, int(array[0]), dtype=np.int64) if len(array) == 1 and m != 1 else array


def _group_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """For each entry of a sorted array, the index of the first entry with its key."""
    index = np.arange(len(sorted_keys))
    new = np.ones(len(sorted_keys), dtype=bool)
    new[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return np.maximum.accumulate(np.where(new, index, 0))


def _sorted_unique(owner: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``(owner, target)`` pairs, sorted by owner then target (``int32``)."""
    if len(owner) == 0:
        return owner.astype(_I32), target.astype(_I32)
    key = np.sort(owner * 2**31 + target)
    keep = np.ones(len(key), dtype=bool)
    keep[1:] = key[1:] != key[:-1]
    key = key[keep]
    return (key // 2**31).astype(_I32), (key % 2**31).astype(_I32)


__all__ = ["FRESH", "StepBuilder"]
