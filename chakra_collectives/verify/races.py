"""Data races: two accesses to one buffer slot, at least one a write, that nothing orders.

Operation ``a`` happens before ``b`` when a path of dependencies and messages (a SEND before
its RECV) leads from ``a`` to ``b``. If every pair of conflicting accesses is ordered that way,
every valid execution computes the same result, so the symbolic execution of one order proves
the collective for all of them.

Along one valid execution order, each slot's accesses form a sequence; it suffices to check
each access against the previous write of its slot, and each read against the next write (the
classic race-detection pairs). The pairs are found for all slots at once with numpy; most are
ordered by a direct edge (a dependency, or a SEND and its RECV), which is also checked with
numpy. The rest are decided exactly by reachability bitsets (:func:`happens_before`): every
operation gets the set of earlier operations -- among the few that still need an answer --
that reach it, computed level by level over the dependency + message graph with numpy, in
blocks of sources sized to a memory budget. No pair is left unchecked, whatever the size.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> from chakra_collectives.ir.execution import execute
>>> from chakra_collectives.ir.matching import match_messages
>>> algo = ring(Collective.ALL_REDUCE, 4, size_bytes=4096)
>>> partner = match_messages(algo).partner
>>> find_race(algo, partner, execute(algo, partner).order) is None
True
"""

from __future__ import annotations

import numpy as np

from chakra_collectives import progress
from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.ir.execution import happens_before_edges, topological_levels

MEMORY_BUDGET_BYTES = 256 * 2**20
"""Bytes the reachability bitsets of one block may take; more sources take more blocks."""

_OFFSET_BITS = 40


def find_race(algo: CollectiveAlgorithm, partner: np.ndarray, order: list[int]) -> str | None:
    """The first data race along the (complete) valid execution ``order``, described; ``None``: none.

    Every conflicting pair of accesses is checked (see the module docstring). A slot belongs to
    one rank, so the accesses are laid out a block of ranks at a time (at most
    :data:`ACCESSES_PER_BLOCK` of them, or one rank): a BFB all-reduce at 1,024 NPUs and 10
    chunks per NPU makes about 90M accesses, several GB laid out at once.
    """
    ops = algo.ops
    size = len(ops)
    position = np.empty(size, dtype=np.int64)
    position[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    found: dict[bool, list[tuple[np.ndarray, ...]]] = {False: [], True: []}  # pairs before a write, before a read's next write
    resolved = _resolved(algo)
    for lo, hi in _rank_blocks(algo):
        for after_read, columns in _unordered_candidates(algo, partner, position, resolved, lo, hi).items():
            found[after_read].append(columns)
    parts = found[False] + found[True]  # every block's write-after pairs, then its read-before-write pairs: the whole run's order
    if not parts:
        return None
    a, b, slot, writes_a, writes_b = (np.concatenate(column) for column in zip(*parts))
    if len(a) == 0:
        return None
    unordered = np.flatnonzero(~happens_before(algo, partner, a, b))
    if len(unordered) == 0:
        return None
    i = int(unordered[np.argmin(position[b[unordered]])])
    how_a = "write" if writes_a[i] else "read"
    how_b = "write" if writes_b[i] else "read"
    return _describe(algo, int(a[i]), how_a, int(b[i]), how_b, int(slot[i]))


ACCESSES_PER_BLOCK = 2**22
"""Slot accesses :func:`find_race` lays out at once (about 100 bytes each with the sort)."""


def _rank_blocks(algo: CollectiveAlgorithm) -> list[tuple[int, int]]:
    """Ranges ``[lo, hi)`` of ranks whose operations make at most :data:`ACCESSES_PER_BLOCK` accesses (or one rank)."""
    ops = algo.ops
    touches = (ops.kind == OpKind.SEND).astype(np.int64) + (ops.kind == OpKind.RECV) + 2 * ((ops.kind == OpKind.COPY) | (ops.kind == OpKind.REDUCE))
    per_rank = np.bincount(ops.rank, weights=touches * np.maximum(ops.count, 0), minlength=algo.num_ranks)
    blocks, lo, held = [], 0, 0.0
    for rank, accesses in enumerate(per_rank.tolist()):
        if rank > lo and held + accesses > ACCESSES_PER_BLOCK:
            blocks.append((lo, rank))
            lo, held = rank, 0.0
        held += accesses
    blocks.append((lo, algo.num_ranks))
    return blocks


def _unordered_candidates(
    algo: CollectiveAlgorithm, partner: np.ndarray, position: np.ndarray, resolved: tuple[np.ndarray, ...], lo: int, hi: int
) -> dict[bool, tuple[np.ndarray, ...]]:
    """The conflicting pairs on the slots of ranks ``lo .. hi - 1`` that no direct edge orders:
    ``(a, b, slot, a writes, b writes)``, those where ``b`` is a write after its slot's previous
    access (``False``) and those where ``a`` is a read before its slot's next write (``True``)."""
    op, slot, writes = _accesses(algo, resolved, lo, hi)
    empty = np.zeros(0, dtype=np.int64)
    if len(op) == 0:
        return {}
    sorted_by = np.lexsort((position[op], slot))
    op, slot, writes = op[sorted_by], slot[sorted_by], writes[sorted_by]
    index = np.arange(len(op))
    new_group = np.r_[True, slot[1:] != slot[:-1]]
    starts = np.flatnonzero(new_group)
    group = np.cumsum(new_group) - 1
    group_start = starts[group]
    group_end = np.r_[starts[1:], len(op)][group]
    del group, starts, new_group
    # previous write of the same slot (strictly earlier in the order), for every access
    last_write = np.maximum.accumulate(np.where(writes, index, -1))
    previous = np.r_[-1, last_write[:-1]]
    has_previous = previous >= group_start
    # next write of the same slot (strictly later), for every read
    next_write = np.minimum.accumulate(np.where(writes, index, len(op))[::-1])[::-1]
    following = np.r_[next_write[1:], len(op)]
    has_next = ~writes & (following < group_end)
    out = {}
    for after_read, (first, second) in ((False, (previous[has_previous], index[has_previous])), (True, (index[has_next], following[has_next]))):
        a, b = op[first], op[second]
        keep = a != b
        a, b, first, second = a[keep], b[keep], first[keep], second[keep]
        direct = _direct_edge(algo, partner, a, b) if len(a) else np.zeros(0, dtype=bool)
        first, second = first[~direct], second[~direct]
        out[after_read] = (op[first], op[second], slot[first], writes[first], writes[second]) if len(first) else (empty, empty, empty, np.zeros(0, bool), np.zeros(0, bool))
    return out




def happens_before(algo: CollectiveAlgorithm, partner: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each pair, whether a path of dependencies and messages leads from ``a[i]`` to ``b[i]``.

    Exact for any graph: the distinct sources are numbered and processed in blocks of ``64 W``;
    for a block, every operation's ancestors among the block's sources are a ``W``-word bitset,
    the OR of its predecessors' (plus the predecessor itself when it is a source), filled in
    one topological level at a time. ``W`` is as large as :data:`MEMORY_BUDGET_BYTES` allows.

    >>> from chakra_collectives.ir import Collective
    >>> from chakra_collectives.synth.baselines import ring
    >>> from chakra_collectives.ir.matching import match_messages
    >>> algo = ring(Collective.ALL_GATHER, 3, size_bytes=3)
    >>> partner = match_messages(algo).partner
    >>> # rank 0's first SEND (op 0) reaches rank 1's RECV (op 5), which its forwarding SEND (op 8)
    >>> # waits for; nothing leads from rank 1's own first SEND (op 6) back to op 0
    >>> happens_before(algo, partner, np.array([0, 6]), np.array([8, 0])).tolist()
    [True, False]
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    answer = np.zeros(len(a), dtype=bool)
    if len(a) == 0:
        return answer
    ops = algo.ops
    size = len(ops)
    edge_src, edge_dst = happens_before_edges(algo, partner)
    level = topological_levels(size, edge_src, edge_dst)
    by_target = np.lexsort((edge_dst, level[edge_dst]))
    edge_src, edge_dst = edge_src[by_target], edge_dst[by_target]
    target_level = level[edge_dst]
    level_start = np.searchsorted(target_level, np.arange(int(level.max(initial=0)) + 2))
    sources, source_of = np.unique(a, return_inverse=True)
    words = int(max(1, min(-(-len(sources) // 64), MEMORY_BUDGET_BYTES // (8 * max(size, 1)))))
    block = 64 * words
    passes = -(-len(sources) // block)
    with progress.task("happens-before", total=passes, unit="blocks") as done:
        for lo in range(0, len(sources), block):
            members = sources[lo : lo + block]
            bit_index = np.full(size, -1, dtype=np.int64)
            bit_index[members] = np.arange(len(members))
            reach = np.zeros((size, words), dtype=np.uint64)
            for lv in range(1, len(level_start) - 1):
                e0, e1 = level_start[lv], level_start[lv + 1]
                if e0 == e1:
                    continue
                src, dst = edge_src[e0:e1], edge_dst[e0:e1]
                values = reach[src]
                own = bit_index[src]
                mine = own >= 0
                values[np.flatnonzero(mine), own[mine] // 64] |= np.left_shift(np.uint64(1), (own[mine] % 64).astype(np.uint64))
                heads = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])
                reach[dst[heads]] = np.bitwise_or.reduceat(values, heads, axis=0)
            asked = np.flatnonzero((source_of >= lo) & (source_of < lo + block))
            bit = source_of[asked] - lo
            word = reach[b[asked], bit // 64]
            answer[asked] = (word >> (bit % 64).astype(np.uint64)) & np.uint64(1) == 1
            done.advance()
    return answer


def _resolved(algo: CollectiveAlgorithm) -> tuple[np.ndarray, ...]:
    """Every operation's source and destination ``(buffer, offset)`` after in-place aliasing."""
    ops = algo.ops
    src_buf, src_off = algo.resolve(ops.rank, ops.src_buf, ops.src_off)
    dst_buf, dst_off = algo.resolve(ops.rank, ops.dst_buf, ops.dst_off)
    return tuple(np.broadcast_to(c, ops.kind.shape) for c in (src_buf, src_off, dst_buf, dst_off))


def _accesses(algo: CollectiveAlgorithm, resolved: tuple[np.ndarray, ...], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every slot access ``(operation, slot key, is_write)`` of ranks ``lo .. hi - 1``; a reduction's target counts as a write."""
    ops = algo.ops
    kind = ops.kind
    src_buf, src_off, dst_buf, dst_off = resolved
    mine = (ops.rank >= lo) & (ops.rank < hi)
    reads = mine & ((kind == OpKind.SEND) | (kind == OpKind.COPY) | (kind == OpKind.REDUCE))
    stores = mine & ((kind == OpKind.RECV) | (kind == OpKind.COPY) | (kind == OpKind.REDUCE))
    parts = [_expand(ops, reads, src_buf, src_off, False), _expand(ops, stores, dst_buf, dst_off, True)]
    return tuple(np.concatenate(column) for column in zip(*parts))  # type: ignore[return-value]


def _expand(ops, mask: np.ndarray, buf: np.ndarray, off: np.ndarray, writes: bool):
    chosen = np.flatnonzero(mask & (ops.count > 0))
    counts = ops.count[chosen].astype(np.int64)
    op = np.repeat(chosen, counts)
    slot = ops.slots(chosen, off[chosen])  # through every range of a several-range message
    key = ((ops.rank[op].astype(np.int64) * 3 + buf[op]) << _OFFSET_BITS) + slot
    return op, key, np.full(len(op), writes)


def _direct_edge(algo: CollectiveAlgorithm, partner: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether ``a -> b`` is one dependency or one message (SEND to its RECV): ``a`` among ``b``'s
    dependencies, read a position at a time over the pairs whose ``b`` has that many (no search
    over every edge: a few million pairs on a million operations)."""
    ops = algo.ops
    found = (ops.kind[a] == OpKind.SEND) & (partner[a] == b)
    first = ops.dep_ptr[b].astype(np.int64)
    degree = ops.dep_ptr[b + 1].astype(np.int64) - first
    pending = np.flatnonzero(degree > 0)
    position = 0
    while len(pending):
        found[pending[ops.dep_idx[first[pending] + position] == a[pending]]] = True
        position += 1
        pending = pending[degree[pending] > position]
    return found


def _describe(algo: CollectiveAlgorithm, a: int, how_a: str, b: int, how_b: str, slot: int) -> str:
    ops = algo.ops
    rank, buf = divmod(slot >> _OFFSET_BITS, 3)
    offset = slot & ((1 << _OFFSET_BITS) - 1)
    name = ("input", "output", "scratch")[buf]

    def op(i: int) -> str:
        return f"node {ops.node_id[i]} ({OpKind(int(ops.kind[i])).name})"

    return (
        f"rank {rank}, {name}[{offset}]: {op(a)} {how_a}s it and {op(b)} {how_b}s it, "
        "and no dependency or message orders them"
    )
