"""Classic collective algorithms, written in the IR, each registered by name
(:mod:`~chakra_collectives.synth.registry`): ``ring``, ``biring``, ``direct``, ``rhd``, ``tree``.

>>> from chakra_collectives.ir import Collective
>>> ring(Collective.ALL_REDUCE, 4, size_bytes=2**20).describe()
'all-reduce over 4 ranks, 4 chunks, 60 ops (ring)'
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from chakra_collectives.deprecation import renamed_keyword
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm
from chakra_collectives.ir.steps import FRESH, StepBuilder
from chakra_collectives.synth.footprint import message_footprint, phases
from chakra_collectives.synth.registry import SynthesisOptions, Synthesized, Synthesizer, register
from chakra_collectives.topology import Topology


accepts_old_chunks_name = renamed_keyword("chunks_per_rank", "chunks_per_npu")
"""Baselines also take ``chunks_per_rank=``, the old name of ``chunks_per_npu`` (one name everywhere:
``synthesize``, the CLI's -k); it warns and goes in the next release."""


@accepts_old_chunks_name
def ring(
    collective: Collective,
    num_ranks: int,
    *,
    size_bytes: int,
    chunks_per_npu: int = 1,
) -> CollectiveAlgorithm:
    """Unidirectional ring (rank ``r`` sends to ``r+1``) for all-gather, reduce-scatter, all-reduce.

    Each of the ``N-1`` steps moves one rank's share (``chunks_per_npu`` chunks) in one
    message; all-reduce is reduce-scatter followed by all-gather. Received partial sums land in
    scratch and are reduced into place, so the input buffer is never modified.
    """
    if num_ranks < 2:
        raise InputError("a ring needs at least 2 ranks")
    if collective not in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE):
        raise InputError(f"ring does not implement {collective.value} (all-gather, reduce-scatter, all-reduce)")
    _check_amounts(size_bytes, chunks_per_npu)
    n, k = num_ranks, chunks_per_npu
    b = StepBuilder(
        collective, num_ranks=n, chunk_count=n * k, size_bytes=size_bytes, name="ring",
        provenance={"algorithm": "ring", "chunks_per_rank": str(k)},
    )
    r = np.arange(n)
    after = (r + 1) % n
    if collective is not Collective.ALL_GATHER:
        # reduce-scatter: at step s, r passes its partial sum of block r-1-s on; the receiver adds its own
        for step in range(n - 1):
            block = (r - 1 - step) % n
            src = (Buffer.INPUT, block * k) if step == 0 else (Buffer.SCRATCH, block * k)
            if step < n - 2:
                dst = (Buffer.SCRATCH, block * k)
            else:  # the last partial sum is the receiver's own block: it lands in the output
                dst = (Buffer.OUTPUT, 0 if collective is Collective.REDUCE_SCATTER else after * k)
            b.transfer(r, after, src=src, dst=dst, count=k, reduce_with=(Buffer.INPUT, block * k))
    if collective is not Collective.REDUCE_SCATTER:
        for step in range(n - 1):
            block = (r - step) % n
            first = step == 0 and collective is Collective.ALL_GATHER
            b.transfer(r, after, src=(Buffer.INPUT, 0) if first else (Buffer.OUTPUT, block * k), dst=(Buffer.OUTPUT, block * k), count=k)
        if collective is Collective.ALL_GATHER:
            b.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, r * k), count=k)
    return b.build()


# ---------------------------------------------------------------------- step-based baselines
Step = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""``(src, dst, first chunk, chunk count)`` arrays: the messages of one step."""


def _schedule_algorithm(
    collective: Collective,
    num_ranks: int,
    *,
    size_bytes: int,
    k: int,
    name: str,
    reduce_steps: list[Step],
    gather_steps: list[Step],
    provenance: dict[str, str] | None = None,
) -> CollectiveAlgorithm:
    """Reduce-Scatter, All-Gather or All-Reduce from message steps (shares of ``k`` chunks).

    All-Gather data lives in the output buffer; reductions accumulate in a working copy of the
    input kept in scratch (slots ``0 .. C-1``), and every received partial sum lands in its own
    scratch slot after those, so no message ever overwrites data still to be read. Dependencies
    follow the data (:class:`~chakra_collectives.ir.steps.StepBuilder`).
    """
    n, c = num_ranks, num_ranks * k
    b = StepBuilder(
        collective, num_ranks=n, chunk_count=c, size_bytes=size_bytes, name=name,
        provenance={"algorithm": name, "chunks_per_rank": str(k), **(provenance or {})},
    )
    r = np.arange(n)
    if collective is Collective.ALL_GATHER:
        b.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, r * k), count=k)
    else:
        b.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.SCRATCH, 0), count=c)
        for src, dst, first, count in reduce_steps:
            b.transfer(src, dst, src=(Buffer.SCRATCH, first), dst=FRESH, count=count, reduce_into=(Buffer.SCRATCH, first), sends_first=True)
        b.copy(r, src=(Buffer.SCRATCH, r * k), dst=(Buffer.OUTPUT, 0 if collective is Collective.REDUCE_SCATTER else r * k), count=k)
    if collective is not Collective.REDUCE_SCATTER:
        for src, dst, first, count in gather_steps:
            b.transfer(src, dst, src=(Buffer.OUTPUT, first), dst=(Buffer.OUTPUT, first), count=count, sends_first=True)
    algo = b.build()
    if collective is not Collective.ALL_GATHER and algo.scratch_chunks.max() < c:  # every rank keeps its working copy
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


def _both(*steps: Step) -> Step:
    """One step made of several (their messages in order)."""
    return tuple(np.concatenate(parts) for parts in zip(*steps))  # type: ignore[return-value]


@accepts_old_chunks_name
def bidirectional_ring(collective: Collective, num_ranks: int, *, size_bytes: int, chunks_per_npu: int = 1) -> CollectiveAlgorithm:
    """Two rings at once: half of every share goes clockwise, half anticlockwise.

    A share is ``2 * chunks_per_npu`` chunks (``chunks_per_npu`` per direction), so both
    directions of every ring link carry data at every step.

    >>> from chakra_collectives.verify import verify_algorithm
    >>> verify_algorithm(bidirectional_ring(Collective.ALL_REDUCE, 4, size_bytes=2**20)).ok
    True
    """
    _check(collective, _RS_AG_AR, "biring", num_ranks, size_bytes, chunks_per_npu)
    n, half = num_ranks, chunks_per_npu
    k = 2 * half
    r = np.arange(n)
    up, down = (r + 1) % n, (r - 1) % n
    halves = np.full(n, half)
    gather = [_both((r, up, ((r - s) % n) * k, halves), (r, down, ((r + s) % n) * k + half, halves)) for s in range(n - 1)]
    reduce = [_both((r, up, ((r - 1 - s) % n) * k, halves), (r, down, ((r + 1 + s) % n) * k + half, halves)) for s in range(n - 1)]
    return _schedule_algorithm(collective, n, size_bytes=size_bytes, k=k, name="biring", reduce_steps=reduce, gather_steps=gather)


@accepts_old_chunks_name
def direct(collective: Collective, num_ranks: int, *, size_bytes: int, chunks_per_npu: int = 1) -> CollectiveAlgorithm:
    """All-pairs: every rank sends each other rank what it needs directly, ``r -> r+1, r+2, ...``.

    >>> from chakra_collectives.verify import verify_algorithm
    >>> verify_algorithm(direct(Collective.ALL_TO_ALL, 3, size_bytes=2**20)).ok
    True
    """
    supported = (*_RS_AG_AR, Collective.ALL_TO_ALL)
    _check(collective, supported, "direct", num_ranks, size_bytes, chunks_per_npu)
    n, k = num_ranks, chunks_per_npu
    if collective is Collective.ALL_TO_ALL:
        return _direct_all_to_all(n, size_bytes, k)
    r = np.arange(n)
    counts = np.full(n, k)
    gather = [(r, (r + s) % n, r * k, counts) for s in range(1, n)]
    reduce = [(r, (r + s) % n, ((r + s) % n) * k, counts) for s in range(1, n)]
    return _schedule_algorithm(collective, n, size_bytes=size_bytes, k=k, name="direct", reduce_steps=reduce, gather_steps=gather)


def _direct_all_to_all(n: int, size_bytes: int, k: int) -> CollectiveAlgorithm:
    b = StepBuilder(
        Collective.ALL_TO_ALL, num_ranks=n, chunk_count=n * k, size_bytes=size_bytes, name="direct",
        provenance={"algorithm": "direct", "chunks_per_rank": str(k)},
    )
    r = np.arange(n)
    b.copy(r, src=(Buffer.INPUT, r * k), dst=(Buffer.OUTPUT, r * k), count=k)
    for s in range(1, n):
        b.transfer(r, (r + s) % n, src=(Buffer.INPUT, ((r + s) % n) * k), dst=(Buffer.OUTPUT, r * k), count=k)
    return b.build()


@accepts_old_chunks_name
def recursive_halving_doubling(collective: Collective, num_ranks: int, *, size_bytes: int, chunks_per_npu: int = 1) -> CollectiveAlgorithm:
    """Recursive halving (Reduce-Scatter) and doubling (All-Gather); All-Reduce is both (Rabenseifner).

    Needs a power-of-two number of ranks: at step ``i`` rank ``r`` exchanges with ``r XOR 2^i``.

    >>> from chakra_collectives.verify import verify_algorithm
    >>> verify_algorithm(recursive_halving_doubling(Collective.ALL_REDUCE, 8, size_bytes=2**20)).ok
    True
    """
    _check(collective, _RS_AG_AR, "rhd", num_ranks, size_bytes, chunks_per_npu)
    n, k = num_ranks, chunks_per_npu
    if n & (n - 1):
        raise InputError(f"rhd (recursive halving/doubling) needs a power-of-two number of ranks, got {n}")
    levels = n.bit_length() - 1
    r = np.arange(n)
    gather = [(r, r ^ (1 << i), ((r >> i) << i) * k, np.full(n, (1 << i) * k)) for i in range(levels)]
    reduce = [(r, r ^ (1 << i), (((r ^ (1 << i)) >> i) << i) * k, np.full(n, (1 << i) * k)) for i in reversed(range(levels))]
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
    b = StepBuilder(
        collective, num_ranks=n, chunk_count=c, size_bytes=size_bytes, root=root, name="tree",
        provenance={"algorithm": "tree", "chunks": str(c)}, fresh_from=c,
    )
    # level i: every v < 2^i with v + 2^i < N sends to v + 2^i (relative ranks)
    levels = [np.arange(min(1 << i, n - (1 << i))) for i in range((n - 1).bit_length())]
    edges = [((v + root) % n, (v + (1 << i) + root) % n) for i, v in enumerate(levels)]
    if collective is Collective.BROADCAST:
        b.copy([root], src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=c)
        for j in range(c):
            for parent, child in edges:
                b.transfer(parent, child, src=(Buffer.OUTPUT, j), dst=(Buffer.OUTPUT, j), count=1)
        return b.build()
    # reduce: each rank accumulates into scratch[j] (a copy of its input), children's sums land after
    r = np.arange(n)
    b.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.SCRATCH, 0), count=c)
    for j in range(c):
        for parent, child in reversed(edges):
            b.transfer(child[::-1], parent[::-1], src=(Buffer.SCRATCH, j), dst=FRESH, count=1, reduce_into=(Buffer.SCRATCH, j))
    b.copy([root], src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=c)
    algo = b.build()
    return replace(algo, scratch_chunks=np.maximum(algo.scratch_chunks, c))


def baseline_messages(name: str, collective: Collective, num_ranks: int, *, chunks_per_npu: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, chunks)``: every message the baseline ``name`` sends, without building it.

    Chunks are the baseline's own (``biring`` cuts a share into ``2 * chunks_per_npu``).
    Lets ``best`` bound a baseline's time before paying for it (:attr:`~chakra_collectives.synth.registry.Synthesizer.messages`).

    >>> src, dst, chunks = baseline_messages("ring", Collective.ALL_REDUCE, 4)
    >>> len(src), sorted(set(zip(src.tolist(), dst.tolist())))[:2], int(chunks.sum())
    (24, [(0, 1), (1, 2)], 24)
    """
    n, k = num_ranks, chunks_per_npu
    ranks = np.arange(n)
    phases = 2 if collective is Collective.ALL_REDUCE else 1
    if name in ("ring", "biring"):
        steps = phases * (n - 1)
        pairs = [(ranks, (ranks + 1) % n)] + ([(ranks, (ranks - 1) % n)] if name == "biring" else [])
        src = np.concatenate([np.tile(s, steps) for s, _ in pairs])
        dst = np.concatenate([np.tile(d, steps) for _, d in pairs])
        return src, dst, np.full(len(src), k, dtype=np.int64)
    if name == "direct":
        src, dst = np.nonzero(~np.eye(n, dtype=bool))
        src, dst = np.tile(src, phases), np.tile(dst, phases)
        return src, dst, np.full(len(src), k, dtype=np.int64)
    if name == "rhd":
        levels = n.bit_length() - 1
        src = np.tile(ranks, levels * phases)
        level = np.tile(np.repeat(np.arange(levels), n), phases)
        return src, src ^ (1 << level), k * (1 << level)
    raise InputError(f"no message list for {name}")


def _message_count(name: str) -> Callable[[Collective, int, int], float]:
    """How many messages baseline ``name`` sends for ``(collective, N, K)`` (its footprint's measure)."""

    def sent(collective: Collective, n: int, k: int) -> float:
        if name == "tree":
            return (n - 1) * k
        per_phase = n * max(1, n.bit_length() - 1) if name == "rhd" else n * (n - 1)
        return per_phase * phases(collective) * (2 if name == "biring" else 1)

    return sent


_FOOTPRINTS = {
    "ring": message_footprint(_message_count("ring"), "neighbour"),
    "biring": message_footprint(_message_count("biring"), "neighbour", per_slot=200),
    "direct": message_footprint(_message_count("direct"), "any", per_slot=1000),
    "rhd": message_footprint(_message_count("rhd"), "any", per_slot=100),
    "tree": message_footprint(_message_count("tree"), "any"),
}
"""Memory models of the baselines (:mod:`~chakra_collectives.synth.footprint`); ``per_slot``:
the per-chunk state each rank keeps while the algorithm is built, an envelope of what
``bench/bench_estimates.py`` measures (rhd 20-40 bytes per (rank, chunk), biring about 60, from
8 ranks x 4,000 chunks to 4,096 ranks x 1 chunk)."""


def _register(name: str, build, collectives: tuple[Collective, ...], summary: str, *, share_factor: int = 1, accepts=None, messages: bool = True) -> None:
    """Register baseline ``name``; ``share_factor`` is how many of its chunks a requested chunk becomes (biring: 2)."""

    def make(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Synthesized:
        return Synthesized(build(collective, num_ranks, options))

    def message_list(collective: Collective, num_ranks: int, options: SynthesisOptions):
        src, dst, chunks = baseline_messages(name, collective, num_ranks, chunks_per_npu=options.chunks_per_npu)
        chunk_bytes = -(-options.size_bytes // (num_ranks * options.chunks_per_npu * share_factor))
        return src, dst, chunks * chunk_bytes

    extra = {} if accepts is None else {"accepts": accepts}
    register(Synthesizer(name, make, collectives, summary, messages=message_list if messages else None, footprint=_FOOTPRINTS[name], **extra))


_register("ring", lambda c, n, o: ring(c, n, size_bytes=o.size_bytes, chunks_per_npu=o.chunks_per_npu), _RS_AG_AR,
          "unidirectional ring (rank r sends to r+1)")
_register("biring", lambda c, n, o: bidirectional_ring(c, n, size_bytes=o.size_bytes, chunks_per_npu=o.chunks_per_npu), _RS_AG_AR,
          "two rings at once, half of every share each way", share_factor=2)
_register("direct", lambda c, n, o: direct(c, n, size_bytes=o.size_bytes, chunks_per_npu=o.chunks_per_npu), (*_RS_AG_AR, Collective.ALL_TO_ALL),
          "all-pairs: every rank sends each other rank what it needs")
_register("rhd", lambda c, n, o: recursive_halving_doubling(c, n, size_bytes=o.size_bytes, chunks_per_npu=o.chunks_per_npu), _RS_AG_AR,
          "recursive halving / doubling (powers of two)", accepts=lambda n: n & (n - 1) == 0)
_register("tree", lambda c, n, o: binomial_tree(c, n, size_bytes=o.size_bytes, chunks=o.chunks_per_npu, root=o.root),
          (Collective.BROADCAST, Collective.REDUCE), "binomial tree broadcast / reduce from the root", messages=False)
