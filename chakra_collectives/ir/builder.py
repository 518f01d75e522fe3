"""AlgorithmBuilder: write an algorithm one operation at a time.

Producers that think in messages use :meth:`AlgorithmBuilder.transfer`, which emits a matched
SEND/RECV pair with a fresh tag, so every message between two ranks is unambiguous (the
verifier and ASTRA-sim pair sends and receives on ``(src, dst, tag)``).

>>> from chakra_collectives.ir import Buffer, Collective
>>> b = AlgorithmBuilder(Collective.ALL_REDUCE, num_ranks=2, chunk_count=2, size_bytes=64)
>>> s, r = b.transfer(0, 1, src=(Buffer.INPUT, 0), dst=(Buffer.SCRATCH, 0), count=1)
>>> red = b.reduce(1, src=(Buffer.SCRATCH, 0), dst=(Buffer.INPUT, 0), count=1, deps=[r])
>>> b.build(scratch_chunks=[0, 1]).describe()
'all-reduce over 2 ranks, 2 chunks, 3 ops'
"""

from __future__ import annotations

from itertools import chain
from typing import Iterable, Sequence

import numpy as np

from chakra_collectives.ir.algorithm import CollectiveAlgorithm
from chakra_collectives.ir.collective import Collective
from chakra_collectives.ir.ops import NONE, OpKind, OpTable

Ref = tuple[int, int]
"""``(buffer, offset)`` in chunks."""

_COLUMNS = ("kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count", "nbytes", "duration_ns", "node_id")


class AlgorithmBuilder:
    """Accumulates per-rank programs; :meth:`build` freezes them into a CollectiveAlgorithm.

    Every ``add``-style method returns the new operation's index inside its rank, which is what
    later operations of the same rank list in ``deps``.
    """

    def __init__(
        self,
        collective: Collective,
        *,
        num_ranks: int,
        chunk_count: int,
        size_bytes: int,
        inplace: bool = False,
        root: int | None = None,
        name: str = "",
        provenance: dict[str, str] | None = None,
    ) -> None:
        if num_ranks < 1:
            raise ValueError("num_ranks must be positive")
        if chunk_count < 1:
            raise ValueError("chunk_count must be positive")
        self.collective = collective
        self.num_ranks = num_ranks
        self.chunk_count = chunk_count
        self.size_bytes = size_bytes
        self.inplace = inplace
        self.root = root
        self.name = name
        self.provenance = dict(provenance or {})
        self._rows: list[list[tuple]] = [[] for _ in range(num_ranks)]
        """Per rank, one tuple per operation, in the order of ``_COLUMNS``."""
        self._deps: list[list[Sequence[int]]] = [[] for _ in range(num_ranks)]
        self._next_tag: dict[tuple[int, int], int] = {}

    # ------------------------------------------------------------------ operations
    def add(
        self,
        rank: int,
        kind: OpKind,
        *,
        peer: int = NONE,
        tag: int = NONE,
        src: Ref | None = None,
        dst: Ref | None = None,
        count: int = NONE,
        nbytes: int = NONE,
        duration_ns: float = float("nan"),
        deps: Iterable[int] = (),
        node_id: int | None = None,
    ) -> int:
        """Append one operation to ``rank``'s program and return its index there."""
        rows = self._rows[rank]
        index = len(rows)
        sbuf, soff = (NONE, NONE) if src is None else src
        dbuf, doff = (NONE, NONE) if dst is None else dst
        node = index if node_id is None else node_id
        rows.append((int(kind), peer, tag, int(sbuf), soff, int(dbuf), doff, count, nbytes, duration_ns, node))
        self._deps[rank].append(deps if type(deps) is tuple else tuple(deps))
        return index

    def send(self, rank: int, peer: int, *, tag: int, src: Ref, count: int, deps: Iterable[int] = ()) -> int:
        return self.add(rank, OpKind.SEND, peer=peer, tag=tag, src=src, count=count, deps=deps)

    def recv(self, rank: int, peer: int, *, tag: int, dst: Ref, count: int, deps: Iterable[int] = ()) -> int:
        return self.add(rank, OpKind.RECV, peer=peer, tag=tag, dst=dst, count=count, deps=deps)

    def reduce(self, rank: int, *, src: Ref, dst: Ref, count: int, deps: Iterable[int] = (), duration_ns: float = float("nan")) -> int:
        """``dst[i] = dst[i] (+) src[i]`` for ``count`` chunks."""
        return self.add(rank, OpKind.REDUCE, src=src, dst=dst, count=count, deps=deps, duration_ns=duration_ns)

    def copy(self, rank: int, *, src: Ref, dst: Ref, count: int, deps: Iterable[int] = ()) -> int:
        return self.add(rank, OpKind.COPY, src=src, dst=dst, count=count, deps=deps)

    def fresh_tag(self, src_rank: int, dst_rank: int) -> int:
        """Next unused tag for messages from ``src_rank`` to ``dst_rank``."""
        key = (src_rank, dst_rank)
        tag = self._next_tag.get(key, 0)
        self._next_tag[key] = tag + 1
        return tag

    def transfer(
        self,
        src_rank: int,
        dst_rank: int,
        *,
        src: Ref,
        dst: Ref,
        count: int,
        send_deps: Iterable[int] = (),
        recv_deps: Iterable[int] = (),
    ) -> tuple[int, int]:
        """Emit a matched SEND on ``src_rank`` and RECV on ``dst_rank``; return both indices."""
        tag = self.fresh_tag(src_rank, dst_rank)
        send = self.send(src_rank, dst_rank, tag=tag, src=src, count=count, deps=send_deps)
        recv = self.recv(dst_rank, src_rank, tag=tag, dst=dst, count=count, deps=recv_deps)
        return send, recv

    def num_ops(self, rank: int) -> int:
        return len(self._rows[rank])

    # ------------------------------------------------------------------ freeze
    def build(
        self,
        *,
        input_chunks: Sequence[int] | None = None,
        output_chunks: Sequence[int] | None = None,
        scratch_chunks: Sequence[int] | None = None,
    ) -> CollectiveAlgorithm:
        """Freeze into a :class:`CollectiveAlgorithm`.

        Buffer sizes default to the collective's own (see
        :mod:`~chakra_collectives.ir.collective`); scratch defaults to the largest scratch
        slot any operation touches.
        """
        n = self.num_ranks
        if input_chunks is None or output_chunks is None:
            if self.collective is Collective.CUSTOM:
                raise ValueError("a custom collective must give input_chunks and output_chunks")
            defaults = [
                self.collective.buffer_chunks(rank=r, num_ranks=n, chunk_count=self.chunk_count, root=self.root) for r in range(n)
            ]
            input_chunks = input_chunks if input_chunks is not None else [d[0] for d in defaults]
            output_chunks = output_chunks if output_chunks is not None else [d[1] for d in defaults]
        sizes = np.array([len(rows) for rows in self._rows], dtype=np.int64)
        merged: dict[str, list] = {c: [] for c in _COLUMNS}
        for rows in self._rows:
            for name, values in zip(_COLUMNS, zip(*rows)):
                merged[name].extend(values)
        deps = list(chain.from_iterable(self._deps))
        dep_counts = np.fromiter(map(len, deps), dtype=np.int64, count=len(deps))
        local = np.fromiter(chain.from_iterable(deps), dtype=np.int64, count=int(dep_counts.sum()))
        first_of_op = np.repeat(np.cumsum(sizes) - sizes, sizes)  # rank-local index -> global index
        table = OpTable.from_columns(
            rank=np.repeat(np.arange(n, dtype=np.int32), sizes),
            dep_ptr=np.concatenate([[0], np.cumsum(dep_counts)]),
            dep_idx=local + np.repeat(first_of_op, dep_counts),
            **merged,
        )
        if scratch_chunks is None:
            scratch_chunks = touched_scratch(table, n)
        return CollectiveAlgorithm(
            collective=self.collective,
            num_ranks=n,
            chunk_count=self.chunk_count,
            ops=table,
            input_chunks=np.asarray(input_chunks, dtype=np.int64),
            output_chunks=np.asarray(output_chunks, dtype=np.int64),
            scratch_chunks=np.asarray(scratch_chunks, dtype=np.int64),
            size_bytes=self.size_bytes,
            inplace=self.inplace,
            root=self.root,
            name=self.name,
            provenance=self.provenance,
        )


def touched_scratch(table: OpTable, num_ranks: int) -> np.ndarray:
    """Per rank, one past the highest scratch slot any operation reads or writes: one maximum
    over each rank's run of operations (an OpTable is grouped by rank), no scatter."""
    sizes = np.zeros(num_ranks, dtype=np.int64)
    rank = table.rank
    present = np.flatnonzero(np.bincount(rank, minlength=num_ranks))
    if not len(present):
        return sizes
    starts = np.searchsorted(rank, present)
    count = np.maximum(table.count, 1)
    for buf, off in ((table.src_buf, table.src_off), (table.dst_buf, table.dst_off)):
        ends = np.where(buf == 2, off.astype(np.int64) + count, 0)
        sizes[present] = np.maximum(sizes[present], np.maximum.reduceat(ends, starts))
    return sizes
