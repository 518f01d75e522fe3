"""Classic collective algorithms, written in the IR.

>>> from chakra_collectives.ir import Collective
>>> ring(Collective.ALL_REDUCE, 4, size_bytes=2**20).describe()
'all-reduce over 4 ranks, 4 chunks, 60 ops (ring)'
"""

from __future__ import annotations

from chakra_collectives.errors import InputError
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, CollectiveAlgorithm


def ring(
    collective: Collective,
    num_ranks: int,
    *,
    size_bytes: int,
    chunks_per_rank: int = 1,
) -> CollectiveAlgorithm:
    """Unidirectional ring (rank ``r`` sends to ``r+1``) for all-gather, reduce-scatter, all-reduce.

    Each of the ``N-1`` steps moves one rank's share (``chunks_per_rank`` chunks) in one
    message; all-reduce is reduce-scatter followed by all-gather. Received partial sums land in
    scratch and are reduced into place, so the input buffer is never modified.
    """
    if num_ranks < 2:
        raise InputError("a ring needs at least 2 ranks")
    if collective not in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE):
        raise InputError(f"ring does not implement {collective.value} (all-gather, reduce-scatter, all-reduce)")
    k = chunks_per_rank
    builder = AlgorithmBuilder(
        collective,
        num_ranks=num_ranks,
        chunk_count=num_ranks * k,
        size_bytes=size_bytes,
        name="ring",
        provenance={"algorithm": "ring", "chunks_per_rank": str(k)},
    )
    if collective is Collective.ALL_GATHER:
        _ring_all_gather(builder, first_block_src=lambda r: (Buffer.INPUT, 0), after={})
        for r in range(num_ranks):
            builder.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, r * k), count=k)
    else:
        final_out = (lambda r: (Buffer.OUTPUT, 0)) if collective is Collective.REDUCE_SCATTER else (lambda r: (Buffer.OUTPUT, r * k))
        finished = _ring_reduce_scatter(builder, final_out)
        if collective is Collective.ALL_REDUCE:
            _ring_all_gather(builder, first_block_src=final_out, after=finished)
    return builder.build()


def _ring_reduce_scatter(builder: AlgorithmBuilder, final_out) -> dict[int, int]:
    """Reduce-scatter phase; returns, per rank, the op that completes its own block."""
    n, k = builder.num_ranks, builder.chunk_count // builder.num_ranks
    previous: dict[int, int] = {}
    finished: dict[int, int] = {}
    for step in range(n - 1):
        last = step == n - 2
        sends = {}
        for r in range(n):
            block = (r - 1 - step) % n
            src = (Buffer.INPUT, block * k) if step == 0 else (Buffer.SCRATCH, block * k)
            deps = [previous[r]] if step else []
            sends[r] = (src, deps)
        for r in range(n):
            dst_rank = (r + 1) % n
            block = (r - 1 - step) % n
            dst = final_out(dst_rank) if last else (Buffer.SCRATCH, block * k)
            src, deps = sends[r]
            _, recv = builder.transfer(r, dst_rank, src=src, dst=dst, count=k, send_deps=deps)
            reduce = builder.reduce(dst_rank, src=(Buffer.INPUT, block * k), dst=dst, count=k, deps=[recv])
            previous[dst_rank] = reduce
            if last:
                finished[dst_rank] = reduce
    return finished


def _ring_all_gather(builder: AlgorithmBuilder, first_block_src, after: dict[int, int]) -> None:
    """All-gather phase: rank ``r`` starts by sending its block from ``first_block_src(r)``."""
    n, k = builder.num_ranks, builder.chunk_count // builder.num_ranks
    previous = dict(after)
    for step in range(n - 1):
        current = {}
        for r in range(n):
            dst_rank = (r + 1) % n
            block = (r - step) % n
            src = first_block_src(r) if step == 0 else (Buffer.OUTPUT, block * k)
            deps = [previous[r]] if r in previous else []
            _, recv = builder.transfer(r, dst_rank, src=src, dst=(Buffer.OUTPUT, block * k), count=k, send_deps=deps)
            current[dst_rank] = recv
        previous = current
