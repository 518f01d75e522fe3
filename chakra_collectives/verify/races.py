"""Data races: two accesses to one buffer slot, at least one a write, that nothing orders.

Operation ``a`` happens before ``b`` when a path of dependencies and messages (a SEND before
its RECV) leads from ``a`` to ``b``. If every pair of conflicting accesses is ordered that way,
every valid execution computes the same result, so the symbolic execution of one order proves
the collective for all of them.

Along one valid execution order, each slot's accesses form a sequence; it suffices to check
each access against the previous write of its slot, and each read against the next write (the
classic race-detection pairs). The pairs are found for all slots at once with numpy; most are
ordered by a direct edge (a dependency, or a SEND and its RECV), which is also checked with
numpy; the rest are decided by a breadth-first search from ``a`` that never looks past ``b``'s
position in the order. Searches share a visit budget: an algorithm whose ordering paths are
too long to check within it is reported as such (the caller then falls back to comparing two
extreme execution orders).

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> from chakra_collectives.ir.execution import execute
>>> from chakra_collectives.ir.matching import match_messages
>>> algo = ring(Collective.ALL_REDUCE, 4, size_bytes=4096)
>>> partner = match_messages(algo).partner
>>> find_race(algo, partner, execute(algo, partner).order)
RaceCheck(race=None, complete=True)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.ir.structure import dependents

VISIT_BUDGET_PER_OP = 20
"""The searches together may visit this many operations per operation of the algorithm."""

_OFFSET_BITS = 40


@dataclass(frozen=True)
class RaceCheck:
    race: str | None
    """A description of the first race found (``None``: none found)."""
    complete: bool
    """False when the visit budget ran out before every pair was checked."""


def find_race(algo: CollectiveAlgorithm, partner: np.ndarray, order: list[int]) -> RaceCheck:
    """Check every conflicting pair of accesses along the (complete) valid execution ``order``."""
    ops = algo.ops
    size = len(ops)
    position = np.empty(size, dtype=np.int64)
    position[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    op, slot, writes = _accesses(algo)
    if len(op) == 0:
        return RaceCheck(race=None, complete=True)
    sorted_by = np.lexsort((position[op], slot))
    op, slot, writes = op[sorted_by], slot[sorted_by], writes[sorted_by]
    index = np.arange(len(op))
    new_group = np.r_[True, slot[1:] != slot[:-1]]
    starts = np.flatnonzero(new_group)
    group = np.cumsum(new_group) - 1
    group_start = starts[group]
    group_end = np.r_[starts[1:], len(op)][group]
    # previous write of the same slot (strictly earlier in the order), for every access
    last_write = np.maximum.accumulate(np.where(writes, index, -1))
    previous = np.r_[-1, last_write[:-1]]
    has_previous = previous >= group_start
    # next write of the same slot (strictly later), for every read
    next_write = np.minimum.accumulate(np.where(writes, index, len(op))[::-1])[::-1]
    following = np.r_[next_write[1:], len(op)]
    has_next = ~writes & (following < group_end)
    first = np.concatenate([previous[has_previous], index[has_next]])
    second = np.concatenate([index[has_previous], following[has_next]])
    a, b = op[first], op[second]
    keep = a != b
    a, b, first, second = a[keep], b[keep], first[keep], second[keep]
    direct = _direct_edge(algo, partner, a, b)
    a, b, first, second = a[~direct], b[~direct], first[~direct], second[~direct]
    if len(a) == 0:
        return RaceCheck(race=None, complete=True)
    checked = _Reachability(algo, partner, position)
    for i in np.argsort(position[b], kind="stable").tolist():
        ordered = checked.before(int(a[i]), int(b[i]))
        if ordered is None:
            return RaceCheck(race=None, complete=False)
        if not ordered:
            how_a = "write" if writes[first[i]] else "read"
            how_b = "write" if writes[second[i]] else "read"
            return RaceCheck(race=_describe(algo, int(a[i]), how_a, int(b[i]), how_b, int(slot[first[i]])), complete=True)
    return RaceCheck(race=None, complete=True)


def _accesses(algo: CollectiveAlgorithm) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every slot access ``(operation, slot key, is_write)``; a reduction's target counts as a write."""
    ops = algo.ops
    kind = ops.kind
    src_buf, src_off = algo.resolve(ops.rank, ops.src_buf, ops.src_off)
    dst_buf, dst_off = algo.resolve(ops.rank, ops.dst_buf, ops.dst_off)
    reads = (kind == OpKind.SEND) | (kind == OpKind.COPY) | (kind == OpKind.REDUCE)
    stores = (kind == OpKind.RECV) | (kind == OpKind.COPY) | (kind == OpKind.REDUCE)
    parts = [
        _expand(ops, reads, np.broadcast_to(src_buf, kind.shape), np.broadcast_to(src_off, kind.shape), False),
        _expand(ops, stores, np.broadcast_to(dst_buf, kind.shape), np.broadcast_to(dst_off, kind.shape), True),
    ]
    return tuple(np.concatenate(column) for column in zip(*parts))  # type: ignore[return-value]


def _expand(ops, mask: np.ndarray, buf: np.ndarray, off: np.ndarray, writes: bool):
    chosen = np.flatnonzero(mask & (ops.count > 0))
    counts = ops.count[chosen]
    op = np.repeat(chosen, counts)
    within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    key = ((ops.rank[op].astype(np.int64) * 3 + buf[op]) << _OFFSET_BITS) + off[op] + within
    return op, key, np.full(len(op), writes)


def _direct_edge(algo: CollectiveAlgorithm, partner: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether ``a -> b`` is one dependency or one message (SEND to its RECV)."""
    ops = algo.ops
    size = len(ops)
    owner = np.repeat(np.arange(size, dtype=np.int64), np.diff(ops.dep_ptr))
    sends = np.flatnonzero((ops.kind == OpKind.SEND) & (partner >= 0))
    edges = np.concatenate([ops.dep_idx * size + owner, sends * size + partner[sends]])
    return np.isin(a * size + b, edges)


class _Reachability:
    """Breadth-first "does ``a`` happen before ``b``?" with a shared visit budget."""

    def __init__(self, algo: CollectiveAlgorithm, partner: np.ndarray, position: np.ndarray) -> None:
        ops = algo.ops
        sends = np.flatnonzero((ops.kind == OpKind.SEND) & (partner >= 0))
        self.succ_ptr, self.succ = dependents(algo, extra=(sends, partner[sends]))
        self.position = position.tolist()
        self.budget = VISIT_BUDGET_PER_OP * len(ops)

    def before(self, a: int, b: int) -> bool | None:
        """``None`` when the budget is exhausted."""
        succ, succ_ptr, position = self.succ, self.succ_ptr, self.position
        limit = position[b]
        seen = {a}
        queue = deque([a])
        while queue:
            node = queue.popleft()
            for nxt in succ[succ_ptr[node] : succ_ptr[node + 1]]:
                if nxt == b:
                    return True
                if nxt not in seen and position[nxt] < limit:
                    seen.add(nxt)
                    queue.append(nxt)
            self.budget -= 1
            if self.budget <= 0:
                return None
        return False


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
