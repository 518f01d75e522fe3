"""Group IR operations into MSCCL steps, fusing receive chains into rcs / rrc / rrs / rrcs.

The exporter runs the algorithm once (breadth-first; rendezvous sends when it finishes that
way, a SEND completing just before its RECV, else eager sends) and keeps the completion
position ``T`` of every operation. A *group* becomes one MSCCL step and executes, in the
exported program, atomically at the position of its last operation, ``K = T(last)``. Every
threadblock runs its steps in ``K`` order, so the exported program is deadlock-free whenever
``K`` respects every dependency; a fusion is therefore accepted only when no operation outside
the group depends on an inner operation of the group with ``T < K`` (then every group waits
only for groups with a smaller ``K``, messages included, because a send is always the last
operation of its group and a receive completes after its send).

Patterns (``R`` receive, ``X`` reduce, ``S`` send; ``d``, ``s`` slots; ``t`` a scratch slot
whose received value nothing else reads), each chosen so that the importer
(:mod:`.lower`) turns the step back into exactly these operations:

======================================  ======  ===========================
operations                              step    XML src / dst
======================================  ======  ===========================
R->d; S d                               rcs     (sender's slot) / d
R->d; X d+=s  (s, d disjoint)           rrc     s / d
R->t; X d+=t                            rrc     d / d
R->t; X t+=s; S t                       rrs     s / (receiver's slot)
R->d; X d+=s; S d                       rrcs    s / d
R->t; X d+=t; S d                       rrcs    d / d
======================================  ======  ===========================
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from chakra_collectives.ir import Buffer, CollectiveAlgorithm, OpKind
from chakra_collectives.converters.msccl.program import StepType
from chakra_collectives.ir.structure import dependents

SEND, RECV, REDUCE, COPY = int(OpKind.SEND), int(OpKind.RECV), int(OpKind.REDUCE), int(OpKind.COPY)
_SINGLE = {SEND: StepType.SEND, RECV: StepType.RECV, REDUCE: StepType.REDUCE, COPY: StepType.COPY}
SCRATCH = int(Buffer.SCRATCH)


class OpColumns:
    """The algorithm's operations as Python lists (fast scalar access), with resolved slots."""

    def __init__(self, algo: CollectiveAlgorithm) -> None:
        ops = algo.ops
        self.size = len(ops)
        self.rank = ops.rank.tolist()
        self.kind = ops.kind.tolist()
        self.peer = ops.peer.tolist()
        self.count = ops.count.tolist()
        self.src = list(zip(ops.src_buf.tolist(), ops.src_off.tolist()))
        self.dst = list(zip(ops.dst_buf.tolist(), ops.dst_off.tolist()))
        rsb, rso = (np.asarray(v) for v in algo.resolve(ops.rank, ops.src_buf, ops.src_off))
        rdb, rdo = (np.asarray(v) for v in algo.resolve(ops.rank, ops.dst_buf, ops.dst_off))
        self.rsrc = list(zip(rsb.tolist(), rso.tolist()))
        self.rdst = list(zip(rdb.tolist(), rdo.tolist()))
        reads = (ops.kind != RECV) & (rsb == SCRATCH)
        writes = (ops.kind != SEND) & (rdb == SCRATCH)
        self.touching_scratch = np.flatnonzero(reads | writes).tolist()
        """Operations that read or write a scratch slot (after in-place aliasing)."""
        self.dep_ptr = ops.dep_ptr.tolist()
        self.dep_idx = ops.dep_idx.tolist()
        self.dependent_ptr, self.dependent_idx = dependents(algo)

    def deps(self, op: int) -> list[int]:
        """Operations ``op`` waits for."""
        return self.dep_idx[self.dep_ptr[op] : self.dep_ptr[op + 1]]

    def dependents(self, op: int) -> list[int]:
        """Operations that wait for ``op``."""
        return self.dependent_idx[self.dependent_ptr[op] : self.dependent_ptr[op + 1]]


def disjoint(a: tuple[int, int], b: tuple[int, int], count: int) -> bool:
    return a[0] != b[0] or a[1] + count <= b[1] or b[1] + count <= a[1]


@dataclass(slots=True)
class Group:
    """Operations that become one step, in execution order (the last one defines ``K``)."""

    ops: tuple[int, ...]
    type: StepType
    src_from: int = -1
    """Operation whose local ``src`` (or, with ``dst_as_src``, ``dst``) is the step's ``src`` (-1: remote)."""
    dst_as_src: bool = False

    @property
    def last(self) -> int:
        return self.ops[-1]


class _ScratchAccesses:
    """Per (rank, scratch slot): accesses in execution order, to tell whether a value dies."""

    def __init__(self, cols: OpColumns, position: list[int]) -> None:
        index: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
        for i in cols.touching_scratch:
            k = cols.kind[i]
            n = cols.count[i]
            r = cols.rank[i]
            accesses = []
            if k != RECV and cols.rsrc[i][0] == SCRATCH:
                accesses.append((cols.rsrc[i][1], "r"))
            if k != SEND and cols.rdst[i][0] == SCRATCH:
                accesses.append((cols.rdst[i][1], "rw" if k == REDUCE else "w"))
            for offset, mode in accesses:
                for slot in range(offset, offset + n):
                    index.setdefault((r, slot), []).append((position[i], i, mode))
        for entries in index.values():
            entries.sort()
        self.index = index

    def dies(self, rank: int, ref: tuple[int, int], count: int, writer: int, members: tuple[int, ...], position: list[int]) -> bool:
        """True when the value ``writer`` stores in ``ref`` is read by ``members`` only."""
        end = max(position[m] for m in members)
        for slot in range(ref[1], ref[1] + count):
            entries = self.index.get((rank, slot), [])
            at = bisect_right(entries, (position[writer], writer, "~"))
            for t, op, mode in entries[at:]:
                if op in members:
                    continue
                if mode != "w" or t < end:
                    return False
                break
        return True


def form_groups(cols: OpColumns, position: list[int], *, fuse: bool, together: list[int] | None = None) -> list[Group]:
    """Every operation in exactly one group, groups listed in execution order of their first op.

    With ``together`` (a value per operation), only operations with equal values are fused.
    """
    fuser = _Fuser(cols, position, together) if fuse else None
    grouped = fuser.grouped if fuser else [False] * cols.size
    groups: list[Group] = []
    kind = cols.kind
    for i in sorted(range(cols.size), key=position.__getitem__):
        if grouped[i]:
            continue
        group = fuser.fuse(i) if fuser is not None and kind[i] == RECV else None
        if group is None:
            k = kind[i]
            group = Group((i,), _SINGLE[k], src_from=i if k != RECV else -1)
        for op in group.ops:
            grouped[op] = True
        groups.append(group)
    return groups


class _Fuser:
    """Finds the longest safe fusion pattern starting at a receive (see the module docstring)."""

    def __init__(self, cols: OpColumns, position: list[int], together: list[int] | None = None) -> None:
        self.cols = cols
        self.position = position
        self.together = together
        self.grouped = [False] * cols.size
        self.scratch = _ScratchAccesses(cols, position)

    def _consumers(self, op: int, kind: int, count: int) -> list[int]:
        """Ungrouped operations of ``kind`` and ``count`` chunks that wait for ``op``, earliest first."""
        cols, grouped = self.cols, self.grouped
        kinds, counts = cols.kind, cols.count
        found = [j for j in cols.dependents(op) if kinds[j] == kind and counts[j] == count and not grouped[j]]
        if len(found) > 1:
            found.sort(key=self.position.__getitem__)
        return found

    def _forward(self, op: int, ref: tuple[int, int], count: int) -> int | None:
        """The first send that waits for ``op`` and sends exactly ``ref``."""
        for j in self._consumers(op, SEND, count):
            if self.cols.rsrc[j] == ref:
                return j
        return None

    def _safe(self, members: tuple[int, ...]) -> bool:
        """No operation outside the group waits for an inner one before the group's end (and,
        with ``together``, its operations may be fused)."""
        if self.together is not None and len({self.together[m] for m in members}) > 1:
            return False
        position, dependents = self.position, self.cols.dependents
        end = position[members[-1]]
        for m in members[:-1]:
            for j in dependents(m):
                if position[j] < end and j not in members:
                    return False
        return True

    def _dies(self, ref: tuple[int, int], count: int, writer: int, members: tuple[int, ...]) -> bool:
        return ref[0] == SCRATCH and self.scratch.dies(self.cols.rank[writer], ref, count, writer, members, self.position)

    def fuse(self, r: int) -> Group | None:
        """The group a receive heads: the longest pattern that fits and is safe, or None."""
        cols = self.cols
        n = cols.count[r]
        d = cols.rdst[r]
        rsrc, rdst = cols.rsrc, cols.rdst
        for x in self._consumers(r, REDUCE, n):
            if rdst[x] == d and disjoint(rsrc[x], d, n):  # d += s: the received slot keeps the result
                s = self._forward(x, d, n)
                if s is not None and self._safe((r, x, s)):
                    kind = StepType.RECV_REDUCE_SEND if self._dies(d, n, r, (r, x, s)) else StepType.RECV_REDUCE_COPY_SEND
                    return Group((r, x, s), kind, src_from=x)
                return Group((r, x), StepType.RECV_REDUCE_COPY, src_from=x) if self._safe((r, x)) else None
            if rsrc[x] == d and disjoint(rdst[x], d, n) and self._dies(d, n, r, (r, x)):  # x += t: t dies
                s = self._forward(x, rdst[x], n)
                if s is not None and self._safe((r, x, s)):
                    return Group((r, x, s), StepType.RECV_REDUCE_COPY_SEND, src_from=x, dst_as_src=True)
                return Group((r, x), StepType.RECV_REDUCE_COPY, src_from=x, dst_as_src=True) if self._safe((r, x)) else None
        s = self._forward(r, d, n)
        if s is not None and self._safe((r, s)):
            return Group((r, s), StepType.RECV_COPY_SEND)
        return None


__all__ = ["Group", "OpColumns", "disjoint", "form_groups"]
