"""Turn a :class:`~chakra_collectives.synth.forwarding.Forwarding` schedule into IR operations.

Every message is one SEND and one RECV. The sender reads its pieces where they are: its input
(the piece's origin), its output (a piece it received as a destination) or the scratch slots
of the message that brought them; pieces that do not lie in one contiguous run are first
gathered by COPYs into fresh scratch slots (staging; local copies cost nothing in the default
network model). The receiver takes a message straight into its output when it is a
destination of every piece and their output slots follow each other; otherwise into fresh
scratch slots, from which COPYs put the pieces it is a destination of into its output.
Destinations that hold the data from the start copy it from their input.

Dependencies are exactly what the schedule assumed: a SEND waits for the operations that
brought (or staged) its pieces and, over a direct channel, for the previous SEND over it (one
message at a time per link, in the schedule's order). Each rank's program is in time order (at
one instant receives, their copies, then staging and sends).
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm, OpKind, OpTable
from chakra_collectives.ir.pattern import ChunkPattern
from chakra_collectives.synth.demands import Demand
from chakra_collectives.synth.forwarding import Forwarding

_INPUT, _OUTPUT, _SCRATCH = int(Buffer.INPUT), int(Buffer.OUTPUT), int(Buffer.SCRATCH)
_SEND, _RECV, _COPY = int(OpKind.SEND), int(OpKind.RECV), int(OpKind.COPY)


class _Ops:
    """Operations in creation order with their rank, time and class (for program order)."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {k: [] for k in ("rank", "kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count", "time", "cls")}
        self.dep_owner: list[int] = []
        self.dep_target: list[int] = []

    def add(self, rank, kind, time, cls, *, peer=-1, tag=-1, src=(-1, -1), dst=(-1, -1), count=1, deps=()) -> int:
        c = self.cols
        index = len(c["rank"])
        for name, value in (("rank", rank), ("kind", kind), ("peer", peer), ("tag", tag), ("src_buf", src[0]), ("src_off", src[1]),
                            ("dst_buf", dst[0]), ("dst_off", dst[1]), ("count", count), ("time", time), ("cls", cls)):
            c[name].append(value)
        for d in deps:
            if d >= 0:
                self.dep_owner.append(index)
                self.dep_target.append(d)
        return index

    def table(self) -> OpTable:
        c = {k: np.asarray(v) for k, v in self.cols.items()}
        size = len(c["rank"])
        order = np.lexsort((np.arange(size), c["cls"], c["time"], c["rank"]))
        position = np.empty(size, dtype=np.int64)
        position[order] = np.arange(size)
        owner = position[np.asarray(self.dep_owner, dtype=np.int64)]
        target = position[np.asarray(self.dep_target, dtype=np.int64)]
        key = np.unique(owner * max(size, 1) + target)
        owner, target = key // max(size, 1), key % max(size, 1)
        dep_ptr = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=size), out=dep_ptr[1:])
        columns = {k: c[k][order] for k in ("rank", "kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count")}
        return OpTable.from_columns(dep_ptr=dep_ptr, dep_idx=target, **columns)


def forwarding_algorithm(
    forwarding: Forwarding,
    demand: Demand,
    *,
    collective: Collective,
    chunk_count: int,
    size_bytes: int,
    root: int | None = None,
    pattern: ChunkPattern | None = None,
    name: str = "tacos",
    provenance: dict[str, str] | None = None,
) -> CollectiveAlgorithm:
    """The algorithm of ``forwarding`` (see the module docstring)."""
    f, d = forwarding, demand
    n = f.num_npus
    ops = _Ops()
    scratch = [0] * n
    for npu, slot, out in d.local:
        ops.add(npu, _COPY, -1.0, 0, src=(_INPUT, slot), dst=(_OUTPUT, out))
    piece = f.entry_piece.tolist()
    via = f.entry_via.tolist()
    delivered = f.entry_delivered.tolist()
    in_slot = d.in_slot.tolist()
    ptr = d.dest_ptr.tolist()
    dest = d.dest.tolist()
    out_slot = d.out_slot.tolist()
    unicast = ptr[-1] == len(ptr) - 1  # one destination per piece
    num_entries = len(piece)
    e_buf = [0] * num_entries
    e_off = [0] * num_entries
    e_op = [-1] * num_entries
    tags: dict[tuple[int, int], int] = {}
    last_send: dict[int, int] = {}
    entry_ptr = f.entry_ptr.tolist()
    for m, (u, v, channel, start, end) in enumerate(zip(f.src.tolist(), f.dst.tolist(), f.channel.tolist(), f.start.tolist(), f.end.tolist())):
        entries = range(entry_ptr[m], entry_ptr[m + 1])
        located = []
        for e in entries:
            w = via[e]
            if w < 0:
                located.append((_INPUT, in_slot[piece[e]], -1, e))
            else:
                located.append((e_buf[w], e_off[w], e_op[w], e))
        located.sort()
        count = len(located)
        buf0, off0 = located[0][0], located[0][1]
        contiguous = all(b == buf0 and o == off0 + i for i, (b, o, _, _) in enumerate(located))
        if contiguous:
            source = (buf0, off0)
            send_deps = sorted({op for _, _, op, _ in located if op >= 0})
        else:
            base = scratch[u]
            scratch[u] += count
            send_deps = []
            for run in _runs([(b, o) for b, o, _, _ in located]):
                first, length = run
                b, o = located[first][0], located[first][1]
                producers = sorted({located[i][2] for i in range(first, first + length) if located[i][2] >= 0})
                send_deps.append(ops.add(u, _COPY, start, 3, src=(b, o), dst=(_SCRATCH, base + first), count=length, deps=producers))
            source = (_SCRATCH, base)
        if channel >= 0 and channel in last_send:
            send_deps.append(last_send[channel])
        tag = tags.get((u, v), 0)
        tags[u, v] = tag + 1
        send = ops.add(u, _SEND, start, 4, peer=v, tag=tag, src=source, count=count, deps=send_deps)
        if channel >= 0:
            last_send[channel] = send
        # the receiver
        order = [e for _, _, _, e in located]
        slots = [_out_slot(piece[e], v, ptr, dest, out_slot, unicast) if delivered[e] else -1 for e in order]
        straight = all(delivered[e] for e in order) and all(s == slots[0] + i for i, s in enumerate(slots))
        if straight:
            recv = ops.add(v, _RECV, end, 1, peer=u, tag=tag, dst=(_OUTPUT, slots[0]), count=count)
            for i, e in enumerate(order):
                e_buf[e], e_off[e], e_op[e] = _OUTPUT, slots[0] + i, recv
            continue
        base = scratch[v]
        scratch[v] += count
        recv = ops.add(v, _RECV, end, 1, peer=u, tag=tag, dst=(_SCRATCH, base), count=count)
        for i, e in enumerate(order):
            e_buf[e], e_off[e], e_op[e] = _SCRATCH, base + i, recv
        wanted = [(i, s) for i, s in enumerate(slots) if s >= 0]
        for first, length in _runs([(i, s) for i, s in wanted], key=lambda pair: pair):
            i, s = wanted[first]
            ops.add(v, _COPY, end, 2, src=(_SCRATCH, base + i), dst=(_OUTPUT, s), count=length, deps=(recv,))
    table = ops.table()
    sizes = np.array([collective.buffer_chunks(rank=r, num_ranks=n, chunk_count=chunk_count, root=root) for r in range(n)], dtype=np.int64)
    return CollectiveAlgorithm(
        collective=collective,
        num_ranks=n,
        chunk_count=chunk_count,
        ops=table,
        input_chunks=sizes[:, 0],
        output_chunks=sizes[:, 1],
        scratch_chunks=np.asarray(scratch, dtype=np.int64),
        size_bytes=size_bytes,
        root=root if collective.has_root else None,
        name=name,
        provenance=dict(provenance or {}),
        pattern=pattern,
    )


def _out_slot(piece: int, npu: int, ptr: list[int], dest: list[int], out_slot: list[int], unicast: bool) -> int:
    if unicast:
        return out_slot[piece]
    j = bisect_left(dest, npu, ptr[piece], ptr[piece + 1])
    return out_slot[j]


def _runs(items: list[tuple[int, int]], key=None) -> list[tuple[int, int]]:
    """``(first index, length)`` of the runs of ``items`` that continue each other: same first
    field, second field one more (``key``: both fields one more).

    >>> _runs([(0, 4), (0, 5), (1, 6), (0, 7)])
    [(0, 2), (2, 1), (3, 1)]
    >>> _runs([(0, 4), (1, 5), (3, 6)], key=lambda p: p)
    [(0, 2), (2, 1)]
    """
    runs: list[tuple[int, int]] = []
    for i, (a, b) in enumerate(items):
        if runs:
            first, length = runs[-1]
            pa, pb = items[i - 1]
            follows = (a == pa + 1) if key is not None else (a == pa)
            if follows and b == pb + 1:
                runs[-1] = (first, length + 1)
                continue
        runs.append((i, 1))
    return runs
