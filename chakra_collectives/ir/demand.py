"""What a collective without reductions asks the network to move: pieces, their origin and their destinations.

Two views: :class:`Demand` (pieces with one origin each, what the forwarding matcher plans)
and :class:`ChunkDemand` (chunks with every holder, in fabric NPU ids, what the bounds read).

A :class:`Demand` lists *pieces*: piece ``p`` starts in input slot ``in_slot[p]`` of NPU
``origin[p]`` and must reach output slot ``out_slot[j]`` of NPU ``dest[j]`` for every ``j`` in
``dest_ptr[p] .. dest_ptr[p + 1] - 1``. A destination that already holds the data copies it
locally (``local``: ``(npu, input slot, output slot)``). All-to-all pieces are unicast (one per
ordered pair of ranks and chunk), gather's and scatter's too; an all-gather's or a pattern's
may go to many NPUs. A pattern chunk held by several ranks becomes one piece per holder, each
serving the targets nearest to it (``distance``).

>>> d = demand_for(Collective.ALL_TO_ALL, num_npus=3, chunks_per_npu=1)
>>> d.origin.tolist(), d.in_slot.tolist(), d.dest.tolist(), d.out_slot.tolist(), d.local
([0, 0, 1, 1, 2, 2], [1, 2, 0, 2, 0, 1], [1, 2, 0, 2, 0, 1], [0, 0, 1, 1, 2, 2], [(0, 0, 0), (1, 1, 1), (2, 2, 2)])
>>> demand_for(Collective.GATHER, num_npus=3, chunks_per_npu=2, root=1).dest.tolist()
[1, 1, 1, 1]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.ir.collective import Collective
from chakra_collectives.ir.pattern import ChunkPattern

BOUNDED_MOVING = (Collective.ALL_TO_ALL, Collective.GATHER, Collective.SCATTER, Collective.PATTERN)
"""The collectives :class:`ChunkDemand` describes (what the bounds of moving collectives read)."""


@dataclass(frozen=True)
class Demand:
    num_npus: int
    origin: np.ndarray
    in_slot: np.ndarray
    dest_ptr: np.ndarray
    dest: np.ndarray
    """Destinations of each piece (sorted per piece, never its origin)."""
    out_slot: np.ndarray
    local: list[tuple[int, int, int]]
    """Local copies ``(npu, input slot, output slot)`` of data a destination already holds."""

    @property
    def num_pieces(self) -> int:
        return len(self.origin)

    def destinations(self, piece: int) -> np.ndarray:
        return self.dest[self.dest_ptr[piece] : self.dest_ptr[piece + 1]]


def demand_for(
    collective: Collective,
    *,
    num_npus: int,
    chunks_per_npu: int = 1,
    root: int = 0,
    pattern: ChunkPattern | None = None,
    distance: np.ndarray | None = None,
) -> Demand:
    """The demand of ``collective`` over ``num_npus`` ranks (rank ``r`` on NPU ``r``), ``K = chunks_per_npu``."""
    n, k = num_npus, chunks_per_npu
    c = n * k
    if collective is Collective.ALL_TO_ALL:
        src = np.repeat(np.arange(n), c)
        slot = np.tile(np.arange(c), n)
        dst = slot // k
        out = src * k + slot % k
        return _unicast(n, src, slot, dst, out)
    if collective is Collective.GATHER:
        chunk = np.arange(c)
        return _unicast(n, chunk // k, chunk % k, np.full(c, root), chunk)
    if collective is Collective.SCATTER:
        chunk = np.arange(c)
        return _unicast(n, np.full(c, root), chunk, chunk // k, chunk % k)
    if collective is Collective.ALL_GATHER:
        holders = tuple((chunk // k,) for chunk in range(c))
        return _from_pattern(n, holders, tuple(tuple(range(n)) for _ in range(c)), None, in_slot=lambda chunk: chunk % k)
    if collective is Collective.BROADCAST:
        return _from_pattern(n, ((root,),) * c, (tuple(range(n)),) * c, None, in_slot=lambda chunk: chunk)
    if collective is Collective.PATTERN:
        if pattern is None:
            raise InputError("a pattern collective needs its pattern")
        return _from_pattern(n, pattern.holders, pattern.targets, distance, in_slot=lambda chunk: chunk)
    raise InputError(f"{collective.value} reduces: it is no demand of pieces to move")


def _unicast(n: int, src: np.ndarray, slot: np.ndarray, dst: np.ndarray, out: np.ndarray) -> Demand:
    moving = src != dst
    local = [(int(a), int(b), int(o)) for a, b, o in zip(src[~moving], slot[~moving], out[~moving])]
    count = int(moving.sum())
    return Demand(
        num_npus=n,
        origin=src[moving].astype(np.int32),
        in_slot=slot[moving].astype(np.int32),
        dest_ptr=np.arange(count + 1, dtype=np.int64),
        dest=dst[moving].astype(np.int32),
        out_slot=out[moving].astype(np.int32),
        local=local,
    )


def _from_pattern(n, holders, targets, distance, *, in_slot) -> Demand:
    origin, slots, ptr, dest, out = [], [], [0], [], []
    local: list[tuple[int, int, int]] = []
    for chunk, (held, wanted) in enumerate(zip(holders, targets)):
        slot = in_slot(chunk)
        for target in wanted:
            if target in held:
                local.append((target, slot, chunk))
        missing = sorted(set(wanted) - set(held))
        if not missing:
            continue
        if len(held) == 1 or distance is None:
            served = {held[0]: missing}
        else:  # each target from its nearest holder (ties: the first named)
            served = {}
            for target in missing:
                nearest = min(held, key=lambda h: (distance[h, target], held.index(h)))
                served.setdefault(nearest, []).append(target)
        for holder in held:
            if holder in served:
                origin.append(holder)
                slots.append(slot)
                dest.extend(served[holder])
                out.extend([chunk] * len(served[holder]))
                ptr.append(len(dest))
    return Demand(
        num_npus=n,
        origin=np.array(origin, dtype=np.int32),
        in_slot=np.array(slots, dtype=np.int32),
        dest_ptr=np.array(ptr, dtype=np.int64),
        dest=np.array(dest, dtype=np.int32),
        out_slot=np.array(out, dtype=np.int32),
        local=local,
    )


@dataclass(frozen=True)
class ChunkDemand:
    """Chunks to move, in fabric NPU ids: holders ``h_npu[h_ptr[c]:h_ptr[c+1]]``, targets likewise."""

    num_npus: int
    chunk_bytes: float
    h_ptr: np.ndarray
    h_npu: np.ndarray
    t_ptr: np.ndarray
    t_npu: np.ndarray

    @property
    def num_chunks(self) -> int:
        return len(self.h_ptr) - 1


def chunk_demand(
    collective: Collective,
    *,
    num_ranks: int,
    chunk_bytes: float,
    chunks_per_npu: int = 1,
    root: int = 0,
    pattern: ChunkPattern | None = None,
    placement: tuple[int, ...] | None = None,
    num_npus: int | None = None,
) -> ChunkDemand:
    """The chunks ``collective`` over ``num_ranks`` ranks moves, rank ``r`` on NPU ``placement[r]`` (default ``r``).

    >>> d = chunk_demand(Collective.GATHER, num_ranks=3, chunk_bytes=8.0, root=1, placement=(4, 5, 6), num_npus=8)
    >>> d.h_npu.tolist(), d.t_npu.tolist()
    ([4, 6], [5, 5])
    """
    if collective not in BOUNDED_MOVING:
        raise InputError(f"{collective.value} is not a collective that only moves data")
    placed = np.arange(num_ranks) if placement is None else np.asarray(placement, dtype=np.int64)
    if collective is Collective.PATTERN:
        if pattern is None:
            raise InputError("a pattern collective needs its pattern")
        holders = [placed[list(h)] for h in pattern.holders]
        targets = [placed[sorted(set(t) - set(h))] for h, t in zip(pattern.holders, pattern.targets)]
        keep = [i for i, t in enumerate(targets) if len(t)]
        h_ptr = np.concatenate([[0], np.cumsum([len(holders[i]) for i in keep])]).astype(np.int64)
        t_ptr = np.concatenate([[0], np.cumsum([len(targets[i]) for i in keep])]).astype(np.int64)
        h_npu = np.concatenate([holders[i] for i in keep]) if keep else np.zeros(0, np.int64)
        t_npu = np.concatenate([targets[i] for i in keep]) if keep else np.zeros(0, np.int64)
    else:
        pieces = demand_for(collective, num_npus=num_ranks, chunks_per_npu=chunks_per_npu, root=root)
        h_ptr = np.arange(pieces.num_pieces + 1, dtype=np.int64)
        h_npu = placed[pieces.origin]
        t_ptr, t_npu = pieces.dest_ptr.astype(np.int64), placed[pieces.dest]
    return ChunkDemand(int(num_npus if num_npus is not None else num_ranks), float(chunk_bytes), h_ptr, h_npu.astype(np.int64), t_ptr, t_npu.astype(np.int64))
