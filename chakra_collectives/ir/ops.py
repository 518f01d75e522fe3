"""The operations of an algorithm, stored column-wise.

An algorithm has one ordered program per rank; each operation is one of

* ``SEND``  -- send ``count`` chunks read from ``src`` to rank ``peer`` (message tag ``tag``);
* ``RECV``  -- receive ``count`` chunks from rank ``peer`` into ``dst``;
* ``REDUCE`` -- local ``dst[i] = dst[i] (+) src[i]`` for ``count`` chunks;
* ``COPY``  -- local ``dst[i] = src[i]``;
* ``COMPUTE`` -- opaque local work with only a duration (a foreign COMP node).

and waits for its ``deps`` (operations of the same rank) to finish. A SEND or RECV may move
several ranges of chunks as one message: ``count`` chunks in all, the first range at
``src``/``dst`` and the further ones listed in the table's ``more_*`` columns (offsets in the
same buffer, :meth:`OpTable.runs`); the network times the message by its ``count``. ``src``/``dst`` are chunk
references ``(buffer, offset)`` in chunk units, so bytes are derived only when an algorithm is
written or replayed for a concrete collective size. Operations read from foreign files may carry
only bytes: then ``count`` is ``-1`` and ``nbytes`` holds the size. A SEND may name the path its
message takes through the network (``route``, an index into the algorithm's routes; ``-1``: the
network's own route). An operation imported from MSCCL-IR remembers the threadblock that ran it
and that threadblock's channel (``threadblock``, ``channel``; ``-1``: none), so an export can
keep the program's layout.

All operations of all ranks live in one :class:`OpTable` of numpy columns, grouped by rank and in
program order inside a rank; dependencies are kept in CSR form (``dep_ptr``/``dep_idx``, global
indices). Synthesizers of 10^7 operations build it with array operations; readable per-operation
views are :class:`Op` objects.

Columns are compact where that is safe: a producer may hand ``int32`` columns (and an ``int32``
``dep_ptr`` and ``dep_idx``) where the declared type is ``int64``, and they are kept as they are;
columns it omits hold their "not applicable" value as a read-only broadcast view that takes
no memory. Consumers therefore widen to ``int64`` before arithmetic that could overflow
(``count * chunk_bytes``, keys built from several columns) and never write into a table.

>>> table = OpTable.from_rows([
...     dict(rank=0, kind=OpKind.SEND, peer=1, tag=0, src=(Buffer.INPUT, 0), count=1),
...     dict(rank=1, kind=OpKind.RECV, peer=0, tag=0, dst=(Buffer.OUTPUT, 0), count=1),
... ])
>>> len(table), table.op(1).kind.name, table.op(1).dst
(2, 'RECV', ChunkRef(buffer=<Buffer.OUTPUT: 1>, offset=0))
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any, Iterable, NamedTuple

import numpy as np


class Buffer(IntEnum):
    """The per-rank buffers an operation can address (MSCCL's ``i``, ``o``, ``s``)."""

    INPUT = 0
    OUTPUT = 1
    SCRATCH = 2

    @property
    def letter(self) -> str:
        return "ios"[self]


class OpKind(IntEnum):
    SEND = 0
    RECV = 1
    REDUCE = 2
    COPY = 3
    COMPUTE = 4

    @property
    def is_comm(self) -> bool:
        return self <= OpKind.RECV


NONE = -1
"""Column value meaning "not applicable" (no peer, no buffer, bytes derived from chunks...)."""


class ChunkRef(NamedTuple):
    buffer: Buffer
    offset: int

    def __str__(self) -> str:
        return f"{self.buffer.letter}[{self.offset}]"


@dataclass(frozen=True)
class Op:
    """A readable view of one operation (see the module docstring for the semantics)."""

    rank: int
    index: int
    """Position in the rank's program (also the node id our ET writer uses)."""
    kind: OpKind
    peer: int | None
    tag: int | None
    src: ChunkRef | None
    dst: ChunkRef | None
    count: int | None
    nbytes: int | None
    duration_ns: float | None
    deps: tuple[int, ...]
    node_id: int
    route: int | None = None
    """A SEND's route: index into the algorithm's ``routes`` (``None``: the network's own route)."""
    threadblock: int | None = None
    """The MSCCL-IR threadblock the operation came from (``None``: not imported from MSCCL-IR)."""
    channel: int | None = None
    """That threadblock's channel."""
    more: tuple[tuple[int, int], ...] = ()
    """A SEND's or RECV's further ranges ``(offset, count)`` in its buffer, after its first one
    (which then holds ``count`` minus theirs)."""


_INT_COLUMNS = {
    "rank": np.int32,
    "kind": np.int8,
    "peer": np.int32,
    "tag": np.int64,
    "src_buf": np.int8,
    "src_off": np.int64,
    "dst_buf": np.int8,
    "dst_off": np.int64,
    "count": np.int64,
    "nbytes": np.int64,
    "node_id": np.int64,
    "route": np.int32,
    "threadblock": np.int32,
    "channel": np.int32,
}


def _column(value: Any, dtype: type) -> np.ndarray:
    """``value`` as a ``dtype`` column, or as it is when it is a narrower ``int32`` array (compact)."""
    if isinstance(value, np.ndarray) and value.dtype == np.int32 and np.dtype(dtype).itemsize > 4:
        return value
    return np.asarray(value, dtype=dtype)


@dataclass(frozen=True, eq=False)
class OpTable:
    """All operations of an algorithm as numpy columns (see the module docstring)."""

    rank: np.ndarray
    kind: np.ndarray
    peer: np.ndarray
    tag: np.ndarray
    src_buf: np.ndarray
    src_off: np.ndarray
    dst_buf: np.ndarray
    dst_off: np.ndarray
    count: np.ndarray
    nbytes: np.ndarray
    duration_ns: np.ndarray
    node_id: np.ndarray
    route: np.ndarray
    """A SEND's route: index into :attr:`CollectiveAlgorithm.routes` (-1: the network model's route)."""
    threadblock: np.ndarray
    """The MSCCL-IR threadblock an imported operation ran in (-1: none; a layout hint for export)."""
    channel: np.ndarray
    """That threadblock's channel (-1: none)."""
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    more_ptr: np.ndarray | None = None
    """CSR index (one entry per operation, plus one) of the SENDs' and RECVs' further chunk
    ranges in :attr:`more_off` / :attr:`more_count` (``None``: every operation moves one range)."""
    more_off: np.ndarray | None = None
    """Offset of each further range in its operation's buffer (a SEND's source, a RECV's destination)."""
    more_count: np.ndarray | None = None
    """Chunks of each further range."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_columns(
        cls, *, dep_ptr: Any, dep_idx: Any, more_ptr: Any = None, more_off: Any = None, more_count: Any = None, **columns: Any
    ) -> "OpTable":
        """Build from whole columns; omitted columns get their "not applicable" value.

        ``rank`` is required and must be non-decreasing; ``node_id`` defaults to the index
        of each operation inside its rank; ``more_*``: the further chunk ranges (CSR, all three
        or none).
        """
        rank = np.asarray(columns.pop("rank"), dtype=np.int32)
        size = len(rank)
        if size and np.any(np.diff(rank) < 0):
            raise ValueError("operations must be grouped by rank")
        built: dict[str, np.ndarray] = {"rank": rank}
        for name, dtype in _INT_COLUMNS.items():
            if name == "rank":
                continue
            value = columns.pop(name, None)
            if value is None:
                if name == "node_id":
                    starts = np.searchsorted(rank, rank, side="left") if size else np.zeros(0, np.int64)
                    built[name] = np.arange(size, dtype=np.int64) - starts
                else:
                    built[name] = np.broadcast_to(np.array(NONE, dtype=dtype), (size,))
            else:
                built[name] = _column(value, dtype)
        duration = columns.pop("duration_ns", None)
        built["duration_ns"] = np.broadcast_to(np.nan, (size,)) if duration is None else np.asarray(duration, dtype=np.float64)
        if columns:
            raise TypeError(f"unknown columns {sorted(columns)}")
        built["dep_ptr"] = _column(dep_ptr, np.int64)
        built["dep_idx"] = _column(dep_idx, np.int64)
        if more_ptr is not None:
            built["more_ptr"] = _column(more_ptr, np.int64)
            built["more_off"] = _column(more_off, np.int64)
            built["more_count"] = _column(more_count, np.int64)
        table = cls(**built)
        table._check_shapes()
        return table

    @classmethod
    def from_rows(cls, rows: Iterable[dict[str, Any]]) -> "OpTable":
        """Build from one dict per operation (keys as :class:`Op`; ``deps`` are rank-local indices).

        Convenient for tests and small hand-written algorithms; producers of large algorithms
        use :class:`~chakra_collectives.ir.builder.AlgorithmBuilder` or :meth:`from_columns`.
        """
        rows = sorted(enumerate(rows), key=lambda item: (item[1]["rank"], item[0]))
        cols: dict[str, list[Any]] = {name: [] for name in (*_INT_COLUMNS, "duration_ns")}
        dep_ptr, dep_idx = [0], []
        more_ptr, more = [0], []
        first_of_rank: dict[int, int] = {}
        for position, (_, row) in enumerate(rows):
            rank = row["rank"]
            first = first_of_rank.setdefault(rank, position)
            src, dst = row.get("src"), row.get("dst")
            values = {
                "rank": rank,
                "kind": int(row["kind"]),
                "peer": row.get("peer", NONE),
                "tag": row.get("tag", NONE),
                "src_buf": NONE if src is None else int(src[0]),
                "src_off": NONE if src is None else src[1],
                "dst_buf": NONE if dst is None else int(dst[0]),
                "dst_off": NONE if dst is None else dst[1],
                "count": row.get("count", NONE),
                "nbytes": row.get("nbytes", NONE),
                "node_id": row.get("node_id", position - first),
                "route": row.get("route", NONE),
                "threadblock": row.get("threadblock", NONE),
                "channel": row.get("channel", NONE),
                "duration_ns": row.get("duration_ns", np.nan),
            }
            for name, value in values.items():
                cols[name].append(NONE if value is None and name != "duration_ns" else value)
            dep_idx.extend(first + d for d in row.get("deps", ()))
            dep_ptr.append(len(dep_idx))
            more.extend(row.get("more", ()))
            more_ptr.append(len(more))
        ranges = {}
        if more:
            ranges = dict(more_ptr=more_ptr, more_off=[m[0] for m in more], more_count=[m[1] for m in more])
        return cls.from_columns(dep_ptr=dep_ptr, dep_idx=dep_idx, **ranges, **cols)

    def _check_shapes(self) -> None:
        size = len(self.rank)
        for f in fields(self):
            column = getattr(self, f.name)
            expected = size + 1 if f.name in ("dep_ptr", "more_ptr") else None
            if f.name in ("dep_idx", "more_off", "more_count") or column is None:
                continue
            if len(column) != (expected if expected is not None else size):
                raise ValueError(f"column {f.name} has {len(column)} entries, expected {expected or size}")
        if self.dep_ptr[0] != 0 or self.dep_ptr[-1] != len(self.dep_idx) or np.any(np.diff(self.dep_ptr) < 0):
            raise ValueError("dep_ptr is not a valid CSR index into dep_idx")
        if (self.more_ptr is None) != (self.more_off is None) or (self.more_ptr is None) != (self.more_count is None):
            raise ValueError("more_ptr, more_off and more_count come together")
        if self.more_ptr is not None:
            if self.more_ptr[0] != 0 or self.more_ptr[-1] != len(self.more_off) or len(self.more_count) != len(self.more_off) or np.any(np.diff(self.more_ptr) < 0):
                raise ValueError("more_ptr is not a valid CSR index into more_off / more_count")
            ranged = np.diff(self.more_ptr) > 0
            if np.any(ranged & (self.kind > OpKind.RECV)):
                raise ValueError("only SENDs and RECVs move several chunk ranges")

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return len(self.rank)

    def rank_bounds(self, num_ranks: int) -> np.ndarray:
        """``bounds[r]:bounds[r+1]`` is the slice of rank ``r``'s operations."""
        # queries of the ranks' own type: mixed types would convert (copy) all of self.rank per call
        return np.searchsorted(self.rank, np.arange(num_ranks + 1, dtype=np.result_type(self.rank.dtype, np.int32)), side="left")

    @property
    def multi_range(self) -> bool:
        """Some SEND or RECV moves more than one range of chunks."""
        return self.more_ptr is not None and len(self.more_off) > 0

    def more_of(self, index: int) -> tuple[tuple[int, int], ...]:
        """Operation ``index``'s further ranges ``(offset, count)`` (empty: one range)."""
        if self.more_ptr is None:
            return ()
        lo, hi = int(self.more_ptr[index]), int(self.more_ptr[index + 1])
        return tuple(zip(self.more_off[lo:hi].tolist(), self.more_count[lo:hi].tolist()))

    def runs(self, chosen: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(operation, start, length)`` of every chunk range of the operations ``chosen``, in
        order, each operation's first range starting at ``first[i]`` (its own offset, or a slot
        it resolves to) and the further ones as far from it as their offsets are from the
        operation's own (:func:`split_runs`).

        >>> t = OpTable.from_rows([dict(rank=0, kind=OpKind.SEND, peer=1, tag=0, src=(Buffer.OUTPUT, 2), count=3, more=[(7, 1)])])
        >>> [v.tolist() for v in t.runs(np.array([0]), np.array([102]))]   # slots 102, 103 and 107
        [[0, 0], [102, 107], [2, 1]]
        """
        chosen = np.asarray(chosen, dtype=np.int64)
        count = np.maximum(self.count[chosen].astype(np.int64), 0)
        if not self.multi_range:
            return chosen, np.asarray(first, dtype=np.int64), count
        own = np.where(self.kind[chosen] == OpKind.RECV, self.dst_off[chosen], self.src_off[chosen]).astype(np.int64)
        more_first = self.more_off.astype(np.int64)
        op, start, length = split_runs(chosen, own, count, self.more_ptr, more_first, self.more_count)
        shift = np.repeat(np.asarray(first, dtype=np.int64) - own, np.diff(self.more_ptr)[chosen] + 1)
        return op, start + shift, length

    def slots(self, chosen: np.ndarray, first: np.ndarray) -> np.ndarray:
        """Every chunk slot of the operations ``chosen``, in order: ``first[i], first[i] + 1, ..``
        through each of their ranges (:meth:`runs`)."""
        _, start, length = self.runs(chosen, first)
        starts = np.cumsum(length) - length
        return np.repeat(start - starts, length) + np.arange(int(length.sum()), dtype=np.int64)

    def ranged_slots(self, src_off: np.ndarray, dst_off: np.ndarray) -> dict[int, list[int]]:
        """Per SEND or RECV of several chunk ranges, its slots in order, from each operation's own
        offset in ``src_off`` (a SEND's) or ``dst_off`` (a RECV's): the offsets as they are, or as
        in-place aliasing resolves them. Empty when every operation moves one range."""
        if not self.multi_range:
            return {}
        chosen = np.flatnonzero(np.diff(self.more_ptr) > 0)
        recv = self.kind[chosen] == OpKind.RECV
        first = np.where(recv, np.broadcast_to(dst_off, self.kind.shape)[chosen], np.broadcast_to(src_off, self.kind.shape)[chosen])
        slots = self.slots(chosen, first).tolist()
        count = self.count[chosen].astype(np.int64)
        ends = np.cumsum(count).tolist()
        return {i: slots[end - n : end] for i, n, end in zip(chosen.tolist(), count.tolist(), ends)}

    def deps_of(self, index: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[index] : self.dep_ptr[index + 1]]

    def op(self, index: int) -> Op:
        """A readable view of operation ``index`` (dependencies as rank-local indices)."""
        rank = int(self.rank[index])
        first = int(np.searchsorted(self.rank, rank, side="left"))

        def optional(value: Any) -> int | None:
            return None if value == NONE else int(value)

        def ref(buf: int, off: int) -> ChunkRef | None:
            return None if buf == NONE else ChunkRef(Buffer(int(buf)), int(off))

        duration = float(self.duration_ns[index])
        return Op(
            rank=rank,
            index=index - first,
            kind=OpKind(int(self.kind[index])),
            peer=optional(self.peer[index]),
            tag=optional(self.tag[index]),
            src=ref(self.src_buf[index], self.src_off[index]),
            dst=ref(self.dst_buf[index], self.dst_off[index]),
            count=optional(self.count[index]),
            nbytes=optional(self.nbytes[index]),
            duration_ns=None if np.isnan(duration) else duration,
            deps=tuple(int(d) - first for d in self.deps_of(index)),
            node_id=int(self.node_id[index]),
            route=optional(self.route[index]),
            threadblock=optional(self.threadblock[index]),
            channel=optional(self.channel[index]),
            more=self.more_of(index),
        )

    def equals(self, other: "OpTable") -> bool:
        """Column-by-column equality (NaN durations compare equal)."""
        if self.multi_range != other.multi_range:
            return False
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a is None or b is None:
                if self.multi_range and (a is None) != (b is None):
                    return False
                continue
            if f.name.startswith("more_") and not self.multi_range:
                continue
            if a.shape != b.shape:
                return False
            if f.name == "duration_ns":
                if not np.array_equal(a, b, equal_nan=True):
                    return False
            elif not np.array_equal(a, b):
                return False
        return True


def split_runs(
    ids: np.ndarray, first: np.ndarray, total: np.ndarray, more_ptr: np.ndarray, more_first: np.ndarray, more_count: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(item, start, length)`` of every run of the items ``ids`` that move ``total[i]`` chunks:
    the first run at ``first[i]``, then the further runs ``more_ptr[id] : more_ptr[id + 1]`` of
    ``more_first`` / ``more_count`` (the first run holds ``total`` minus theirs). ``first`` and
    ``total`` are per item of ``ids``; ``more_*`` are indexed by id. The one expansion of
    several-range messages: :meth:`OpTable.runs` and a TACOS schedule's runs.

    >>> [v.tolist() for v in split_runs(np.array([1, 0]), np.array([5, 0]), np.array([2, 4]), np.array([0, 2, 2]), np.array([8, 3]), np.array([1, 1]))]
    [[1, 0, 0, 0], [5, 0, 8, 3], [2, 2, 1, 1]]
    """
    ids = np.asarray(ids, dtype=np.int64)
    lo, hi = more_ptr[ids].astype(np.int64), more_ptr[ids + 1].astype(np.int64)
    taken = np.concatenate([[0], np.cumsum(more_count, dtype=np.int64)])
    per = 1 + hi - lo
    item = np.repeat(ids, per)
    position = np.arange(len(item)) - np.repeat(np.cumsum(per) - per, per)  # 0: the first run
    start = np.repeat(np.asarray(first, dtype=np.int64), per)
    length = np.repeat(np.asarray(total, dtype=np.int64) - (taken[hi] - taken[lo]), per)
    later = np.flatnonzero(position > 0)
    j = np.repeat(lo, per)[later] + position[later] - 1
    start[later] = more_first[j]
    length[later] = more_count[j]
    return item, start, length
