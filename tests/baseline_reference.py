"""The classic baselines written one operation at a time with AlgorithmBuilder: the reference
that the column-wise ones in chakra_collectives.synth.baselines must equal operation for
operation (tests/test_synth_baselines.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

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
    _check_amounts(size_bytes, chunks_per_rank)
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


# ---------------------------------------------------------------------- step-based baselines
Move = tuple[int, int, int, int]
"""``(src, dst, first chunk, chunk count)``: one message of a step."""


class _Program:
    """Emit messages step by step, deriving dependencies from who last wrote / read each chunk.

    All-Gather data lives in the output buffer; reductions accumulate in a working copy of the
    input kept in scratch (slots ``0 .. C-1``), and every received partial sum lands in its own
    scratch slot after those, so no message ever overwrites data still to be read.
    """

    def __init__(self, builder: AlgorithmBuilder) -> None:
        self.b = builder
        self.n, self.c = builder.num_ranks, builder.chunk_count
        self.writer: dict[tuple[int, int, int], int] = {}
        self.readers: dict[tuple[int, int, int], list[int]] = {}
        self.next_slot = [self.c] * self.n

    def _deps(self, rank: int, buf: Buffer, first: int, count: int, *, write: bool) -> list[int]:
        deps: set[int] = set()
        for i in range(first, first + count):
            key = (rank, int(buf), i)
            if key in self.writer:
                deps.add(self.writer[key])
            if write:
                deps.update(self.readers.get(key, ()))
        return sorted(deps)

    def _read(self, rank: int, buf: Buffer, first: int, count: int, op: int) -> None:
        for i in range(first, first + count):
            self.readers.setdefault((rank, int(buf), i), []).append(op)

    def _write(self, rank: int, buf: Buffer, first: int, count: int, op: int) -> None:
        for i in range(first, first + count):
            self.writer[rank, int(buf), i] = op
            self.readers.pop((rank, int(buf), i), None)

    def copy(self, rank: int, src: tuple[Buffer, int], dst: tuple[Buffer, int], count: int) -> None:
        deps = self._deps(rank, src[0], src[1], count, write=False) + self._deps(rank, dst[0], dst[1], count, write=True)
        op = self.b.copy(rank, src=src, dst=dst, count=count, deps=sorted(set(deps)))
        self._read(rank, src[0], src[1], count, op)
        self._write(rank, dst[0], dst[1], count, op)

    def gather_step(self, moves: list[Move]) -> None:
        """Each move copies output chunks of ``src`` into the same output chunks of ``dst``."""
        sent = []
        for src, dst, first, count in moves:
            deps = self._deps(src, Buffer.OUTPUT, first, count, write=False)
            tag = self.b.fresh_tag(src, dst)
            op = self.b.send(src, dst, tag=tag, src=(Buffer.OUTPUT, first), count=count, deps=deps)
            self._read(src, Buffer.OUTPUT, first, count, op)
            sent.append(tag)
        for (src, dst, first, count), tag in zip(moves, sent):
            deps = self._deps(dst, Buffer.OUTPUT, first, count, write=True)
            op = self.b.recv(dst, src, tag=tag, dst=(Buffer.OUTPUT, first), count=count, deps=deps)
            self._write(dst, Buffer.OUTPUT, first, count, op)

    def reduce_step(self, moves: list[Move]) -> None:
        """Each move adds ``src``'s working partial sums of the chunks into ``dst``'s."""
        sent = []
        for src, dst, first, count in moves:
            deps = self._deps(src, Buffer.SCRATCH, first, count, write=False)
            tag = self.b.fresh_tag(src, dst)
            op = self.b.send(src, dst, tag=tag, src=(Buffer.SCRATCH, first), count=count, deps=deps)
            self._read(src, Buffer.SCRATCH, first, count, op)
            sent.append(tag)
        for (src, dst, first, count), tag in zip(moves, sent):
            slot = self.next_slot[dst]
            self.next_slot[dst] += count
            recv = self.b.recv(dst, src, tag=tag, dst=(Buffer.SCRATCH, slot), count=count)
            deps = [recv] + self._deps(dst, Buffer.SCRATCH, first, count, write=True)
            op = self.b.reduce(dst, src=(Buffer.SCRATCH, slot), dst=(Buffer.SCRATCH, first), count=count, deps=sorted(set(deps)))
            self._write(dst, Buffer.SCRATCH, first, count, op)

    def build(self) -> CollectiveAlgorithm:
        return self.b.build()  # scratch: the largest slot any operation touches


def _schedule_algorithm(
    collective: Collective,
    num_ranks: int,
    *,
    size_bytes: int,
    k: int,
    name: str,
    reduce_steps: list[list[Move]],
    gather_steps: list[list[Move]],
    provenance: dict[str, str] | None = None,
) -> CollectiveAlgorithm:
    """Reduce-Scatter, All-Gather or All-Reduce from message steps (shares of ``k`` chunks)."""
    builder = AlgorithmBuilder(
        collective, num_ranks=num_ranks, chunk_count=num_ranks * k, size_bytes=size_bytes, name=name,
        provenance={"algorithm": name, "chunks_per_rank": str(k), **(provenance or {})},
    )
    program = _Program(builder)
    n, c = num_ranks, num_ranks * k
    if collective is Collective.ALL_GATHER:
        for r in range(n):
            program.copy(r, (Buffer.INPUT, 0), (Buffer.OUTPUT, r * k), k)
        for step in gather_steps:
            program.gather_step(step)
        return program.build()
    for r in range(n):
        program.copy(r, (Buffer.INPUT, 0), (Buffer.SCRATCH, 0), c)
    for step in reduce_steps:
        program.reduce_step(step)
    final = (lambda r: (Buffer.OUTPUT, 0)) if collective is Collective.REDUCE_SCATTER else (lambda r: (Buffer.OUTPUT, r * k))
    for r in range(n):
        program.copy(r, (Buffer.SCRATCH, r * k), final(r), k)
    if collective is Collective.ALL_REDUCE:
        for step in gather_steps:
            program.gather_step(step)
    algo = program.build()
    if algo.scratch_chunks.max() < c:  # every rank keeps its working copy
        algo = replace(algo, scratch_chunks=np.maximum(algo.scratch_chunks, c))
    return algo


def _check(collective: Collective, supported: tuple[Collective, ...], name: str, num_ranks: int, size_bytes: int, chunks: int) -> None:
    if num_ranks < 2:
        raise InputError(f"{name} needs at least 2 ranks")
    if collective not in supported:
        raise InputError(f"{name} does not implement {collective.value} ({', '.join(c.value for c in supported)})")
    _check_amounts(size_bytes, chunks)


def _check_amounts(size_bytes: int, chunks: int) -> None:
    if not size_bytes > 0:
        raise InputError(f"collective size must be positive, got {size_bytes}")
    if chunks < 1:
        raise InputError(f"chunks must be positive, got {chunks}")


_RS_AG_AR = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)


def bidirectional_ring(collective: Collective, num_ranks: int, *, size_bytes: int, chunks_per_rank: int = 1) -> CollectiveAlgorithm:
    """Two rings at once: half of every share goes clockwise, half anticlockwise.

    A share is ``2 * chunks_per_rank`` chunks (``chunks_per_rank`` per direction), so both
    directions of every ring link carry data at every step.

    >>> from chakra_collectives.verify import verify_algorithm
    >>> verify_algorithm(bidirectional_ring(Collective.ALL_REDUCE, 4, size_bytes=2**20)).ok
    True
    """
    _check(collective, _RS_AG_AR, "biring", num_ranks, size_bytes, chunks_per_rank)
    n, half = num_ranks, chunks_per_rank
    k = 2 * half
    gather, reduce = [], []
    for step in range(n - 1):
        gather.append(
            [((r), (r + 1) % n, ((r - step) % n) * k, half) for r in range(n)]
            + [(r, (r - 1) % n, ((r + step) % n) * k + half, half) for r in range(n)]
        )
        reduce.append(
            [(r, (r + 1) % n, ((r - 1 - step) % n) * k, half) for r in range(n)]
            + [(r, (r - 1) % n, ((r + 1 + step) % n) * k + half, half) for r in range(n)]
        )
    return _schedule_algorithm(collective, n, size_bytes=size_bytes, k=k, name="biring", reduce_steps=reduce, gather_steps=gather)


def direct(collective: Collective, num_ranks: int, *, size_bytes: int, chunks_per_rank: int = 1) -> CollectiveAlgorithm:
    """All-pairs: every rank sends each other rank what it needs directly, ``r -> r+1, r+2, ...``.

    >>> from chakra_collectives.verify import verify_algorithm
    >>> verify_algorithm(direct(Collective.ALL_TO_ALL, 3, size_bytes=2**20)).ok
    True
    """
    supported = (*_RS_AG_AR, Collective.ALL_TO_ALL)
    _check(collective, supported, "direct", num_ranks, size_bytes, chunks_per_rank)
    n, k = num_ranks, chunks_per_rank
    if collective is Collective.ALL_TO_ALL:
        return _direct_all_to_all(n, size_bytes, k)
    gather = [[(r, (r + s) % n, r * k, k) for r in range(n)] for s in range(1, n)]
    reduce = [[(r, (r + s) % n, ((r + s) % n) * k, k) for r in range(n)] for s in range(1, n)]
    return _schedule_algorithm(collective, n, size_bytes=size_bytes, k=k, name="direct", reduce_steps=reduce, gather_steps=gather)


def _direct_all_to_all(n: int, size_bytes: int, k: int) -> CollectiveAlgorithm:
    builder = AlgorithmBuilder(
        Collective.ALL_TO_ALL, num_ranks=n, chunk_count=n * k, size_bytes=size_bytes, name="direct",
        provenance={"algorithm": "direct", "chunks_per_rank": str(k)},
    )
    for r in range(n):
        builder.copy(r, src=(Buffer.INPUT, r * k), dst=(Buffer.OUTPUT, r * k), count=k)
    for s in range(1, n):
        for r in range(n):
            builder.transfer(r, (r + s) % n, src=(Buffer.INPUT, ((r + s) % n) * k), dst=(Buffer.OUTPUT, r * k), count=k)
    return builder.build()


def recursive_halving_doubling(collective: Collective, num_ranks: int, *, size_bytes: int, chunks_per_rank: int = 1) -> CollectiveAlgorithm:
    """Recursive halving (Reduce-Scatter) and doubling (All-Gather); All-Reduce is both (Rabenseifner).

    Needs a power-of-two number of ranks: at step ``i`` rank ``r`` exchanges with ``r XOR 2^i``.

    >>> from chakra_collectives.verify import verify_algorithm
    >>> verify_algorithm(recursive_halving_doubling(Collective.ALL_REDUCE, 8, size_bytes=2**20)).ok
    True
    """
    _check(collective, _RS_AG_AR, "rhd", num_ranks, size_bytes, chunks_per_rank)
    n, k = num_ranks, chunks_per_rank
    if n & (n - 1):
        raise InputError(f"rhd (recursive halving/doubling) needs a power-of-two number of ranks, got {n}")
    levels = n.bit_length() - 1
    gather = [[(r, r ^ (1 << i), ((r >> i) << i) * k, (1 << i) * k) for r in range(n)] for i in range(levels)]
    reduce = [[(r, r ^ (1 << i), (((r ^ (1 << i)) >> i) << i) * k, (1 << i) * k) for r in range(n)] for i in reversed(range(levels))]
    return _schedule_algorithm(collective, n, size_bytes=size_bytes, k=k, name="rhd", reduce_steps=reduce, gather_steps=gather)


def binomial_tree(collective: Collective, num_ranks: int, *, size_bytes: int, chunks: int = 1, root: int = 0) -> CollectiveAlgorithm:
    """Binomial tree Broadcast from (or Reduce to) ``root``; ``chunks`` pipelined pieces.

    Relative rank ``v = (r - root) mod N`` receives from ``v - 2^j`` (its highest bit cleared)
    and sends to ``v + 2^i`` for the later steps ``i``; Reduce runs the same tree backwards.

    >>> from chakra_collectives.verify import verify_algorithm
    >>> verify_algorithm(binomial_tree(Collective.REDUCE, 5, size_bytes=2**20, chunks=2, root=3)).ok
    True
    """
    supported = (Collective.BROADCAST, Collective.REDUCE)
    _check(collective, supported, "tree", num_ranks, size_bytes, chunks)
    if not 0 <= root < num_ranks:
        raise InputError(f"root {root} is not a rank (0..{num_ranks - 1})")
    n, c = num_ranks, chunks
    builder = AlgorithmBuilder(
        collective, num_ranks=n, chunk_count=c, size_bytes=size_bytes, root=root, name="tree",
        provenance={"algorithm": "tree", "chunks": str(c)},
    )
    absolute = lambda v: (v + root) % n  # noqa: E731
    edges = [(v, v + (1 << i)) for i in range((n - 1).bit_length()) for v in range(1 << i) if v + (1 << i) < n]
    if collective is Collective.BROADCAST:
        builder.copy(root, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=c)
        arrived: dict[tuple[int, int], int] = {}
        for j in range(c):
            for parent, child in edges:
                src_rank, dst_rank = absolute(parent), absolute(child)
                deps = [arrived[parent, j]] if (parent, j) in arrived else [0] if parent == 0 else []
                _, recv = builder.transfer(src_rank, dst_rank, src=(Buffer.OUTPUT, j), dst=(Buffer.OUTPUT, j), count=1, send_deps=deps)
                arrived[child, j] = recv
        return builder.build()
    # reduce: each rank accumulates into scratch[j] (a copy of its input), children's sums land after
    program = _Program(builder)
    program.next_slot = [c] * n
    for r in range(n):
        program.copy(r, (Buffer.INPUT, 0), (Buffer.SCRATCH, 0), c)
    for j in range(c):
        for parent, child in reversed(edges):
            program.reduce_step([(absolute(child), absolute(parent), j, 1)])
    program.copy(root, (Buffer.SCRATCH, 0), (Buffer.OUTPUT, 0), c)
    algo = program.build()
    return replace(algo, scratch_chunks=np.maximum(algo.scratch_chunks, c))
