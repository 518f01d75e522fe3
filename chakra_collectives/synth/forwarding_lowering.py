"""Turn a :class:`~chakra_collectives.synth.forwarding.Forwarding` schedule into IR operations.

Every message is one SEND and one RECV. The sender reads its pieces where they are: its input
(the piece's origin), its output (a piece it received as a destination) or the scratch slots
of the message that brought them, in that order of slots; pieces that do not lie in one
contiguous run are first gathered by COPYs into fresh scratch slots (staging; local copies cost
nothing in the default network model). The receiver takes a message straight into its output
when it is a destination of every piece and their output slots follow each other; otherwise
into fresh scratch slots, from which COPYs put the pieces it is a destination of into its
output. Destinations that hold the data from the start copy it from their input.

Dependencies are exactly what the schedule assumed: a SEND waits for the operations that
brought (or staged) its pieces and, over a direct channel, for the previous SEND over it (one
message at a time per link, in the schedule's order); a paced message (``Forwarding.after``)
also for the RECV of the message it waits for. Each rank's program is in time order (at
one instant: receives, their copies, then staging and sends).

Built column-wise with numpy, *level* by level: a message's level is one more than the highest
level of the messages that brought its pieces to the sender (0: it carries pieces from their
origin), so where its pieces lie is known when its level is laid out.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm, OpKind, OpTable
from chakra_collectives.ir.pattern import ChunkPattern
from chakra_collectives.ir.demand import Demand
from chakra_collectives.synth.channels import Channels
from chakra_collectives.synth.forwarding import Forwarding

_INPUT, _OUTPUT, _SCRATCH = int(Buffer.INPUT), int(Buffer.OUTPUT), int(Buffer.SCRATCH)
_SEND, _RECV, _COPY, _COMPUTE = int(OpKind.SEND), int(OpKind.RECV), int(OpKind.COPY), int(OpKind.COMPUTE)
_COLUMNS = ("rank", "kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count", "duration", "time", "cls")


class _Ops:
    """Operations added in blocks (numpy columns); ids in order of addition."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, np.ndarray]] = []
        self.size = 0
        self.deps: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, rank, kind, time, cls, *, peer=-1, tag=-1, src=(-1, -1), dst=(-1, -1), count=1, duration=np.nan) -> np.ndarray:
        rank = np.asarray(rank, dtype=np.int64)
        size = len(rank)
        values = dict(zip(_COLUMNS, (rank, kind, peer, tag, src[0], src[1], dst[0], dst[1], count, duration, time, cls)))
        self.blocks.append({k: np.broadcast_to(np.asarray(v), (size,)) for k, v in values.items()})
        ids = np.arange(self.size, self.size + size, dtype=np.int64)
        self.size += size
        return ids

    def depend(self, owners: np.ndarray, targets: np.ndarray) -> None:
        keep = targets >= 0
        self.deps.append((np.asarray(owners, dtype=np.int64)[keep], np.asarray(targets, dtype=np.int64)[keep]))

    def table(self) -> OpTable:
        c = {k: np.concatenate([b[k] for b in self.blocks]) if self.blocks else np.zeros(0) for k in _COLUMNS}
        size = self.size
        order = np.lexsort((np.arange(size), c["cls"], c["time"], c["rank"]))
        position = np.empty(size, dtype=np.int64)
        position[order] = np.arange(size)
        owner = position[np.concatenate([o for o, _ in self.deps])] if self.deps else np.zeros(0, np.int64)
        target = position[np.concatenate([t for _, t in self.deps])] if self.deps else np.zeros(0, np.int64)
        key = owner * max(size, 1) + target
        key.sort()  # a sort and a pass: cheaper than np.unique's hashing on millions of pairs
        if len(key) > 1:
            key = key[np.concatenate([[True], key[1:] != key[:-1]])]
        owner, target = key // max(size, 1), key % max(size, 1)
        dep_ptr = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=size), out=dep_ptr[1:])
        columns = {k: c[k][order] for k in _COLUMNS[:-3]}
        return OpTable.from_columns(dep_ptr=dep_ptr, dep_idx=target, duration_ns=c["duration"][order].astype(np.float64), **columns)


def _allocate(counter: np.ndarray, ranks: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Fresh slots on ``ranks`` (in the given order): the first slot of each request."""
    order = np.argsort(ranks, kind="stable")
    r, s = ranks[order], sizes[order]
    cumulative = np.cumsum(s) - s
    first_of_rank = np.searchsorted(r, r, side="left")
    base = np.empty(len(ranks), dtype=np.int64)
    base[order] = counter[r] + cumulative - cumulative[first_of_rank]
    np.add.at(counter, ranks, sizes)
    return base


def _run_starts(group: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """True where a run begins: a new ``group``, or some key not one more than the previous one's."""
    start = np.ones(len(group), dtype=bool)
    if len(group) > 1:
        follows = group[1:] == group[:-1]
        for key in keys:
            follows &= key[1:] == key[:-1] + 1
        start[1:] = ~follows
    return start


def _levels(f: Forwarding, message_of: np.ndarray) -> np.ndarray:
    level = np.zeros(f.num_messages, dtype=np.int64)
    via = f.entry_via
    has_via = via >= 0
    starts = f.entry_ptr[:-1]
    while True:
        entry_level = np.where(has_via, level[message_of[np.maximum(via, 0)]] + 1, 0)
        new = np.maximum.reduceat(entry_level, starts) if len(entry_level) else level
        if np.array_equal(new, level):
            return level
        level = new


def message_tags(forwarding: Forwarding) -> np.ndarray:
    """Each message's tag: per ordered pair of NPUs, its messages numbered in start order.

    >>> from chakra_collectives.synth.channels import build_channels
    >>> from chakra_collectives.ir.demand import demand_for
    >>> from chakra_collectives.synth.forwarding import match_demand
    >>> from chakra_collectives.topology import ring
    >>> f = match_demand(build_channels(ring(3), chunk_bytes=2**16), demand_for(Collective.ALL_TO_ALL, num_npus=3, chunks_per_npu=2), latency_ratio=0)
    >>> sorted(message_tags(f).tolist())
    [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    """
    f = forwarding
    pair = f.src.astype(np.int64) * f.num_npus + f.dst.astype(np.int64)
    order = np.argsort(pair, kind="stable")
    tag = np.empty(f.num_messages, dtype=np.int64)
    tag[order] = np.arange(f.num_messages) - np.searchsorted(pair[order], pair[order], side="left")
    return tag


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
    """The algorithm of ``forwarding`` (see the module docstring).

    >>> from chakra_collectives.synth.channels import build_channels
    >>> from chakra_collectives.ir.demand import demand_for
    >>> from chakra_collectives.synth.forwarding import match_demand
    >>> from chakra_collectives.topology import ring
    >>> from chakra_collectives.verify import verify_algorithm
    >>> d = demand_for(Collective.ALL_TO_ALL, num_npus=5, chunks_per_npu=2)
    >>> f = match_demand(build_channels(ring(5), chunk_bytes=2**16), d)
    >>> algo = forwarding_algorithm(f, d, collective=Collective.ALL_TO_ALL, chunk_count=10, size_bytes=10 * 2**16)
    >>> verify_algorithm(algo).ok
    True
    """
    f, d = forwarding, demand
    n = f.num_npus
    ops = _Ops()
    scratch = np.zeros(n, dtype=np.int64)
    if d.local:
        npu, slot, out = (np.array(col, dtype=np.int64) for col in zip(*d.local))
        ops.add(npu, _COPY, -1.0, 0, src=(_INPUT, slot), dst=(_OUTPUT, out))
    counts = np.diff(f.entry_ptr)
    message_of = np.repeat(np.arange(f.num_messages, dtype=np.int64), counts)
    piece = f.entry_piece.astype(np.int64)
    via = f.entry_via
    src, dst = f.src.astype(np.int64), f.dst.astype(np.int64)
    # where each entry lands on its receiver (filled level by level)
    e_buf = np.zeros(len(piece), dtype=np.int64)
    e_off = np.zeros(len(piece), dtype=np.int64)
    e_op = np.full(len(piece), -1, dtype=np.int64)
    # output slot of each delivered entry on its receiver
    dest_key = np.repeat(np.arange(d.num_pieces, dtype=np.int64), np.diff(d.dest_ptr)) * n + d.dest
    receiver = dst[message_of]
    out_slot = np.full(len(piece), -1, dtype=np.int64)
    delivered = f.entry_delivered
    out_slot[delivered] = d.out_slot[np.searchsorted(dest_key, piece[delivered] * n + receiver[delivered])]
    tag = message_tags(f)
    send_op = np.full(f.num_messages, -1, dtype=np.int64)
    recv_op = np.full(f.num_messages, -1, dtype=np.int64)
    level = _levels(f, message_of)
    entry_level = level[message_of]
    for lvl in range(int(level.max(initial=-1)) + 1):
        entries = np.flatnonzero(entry_level == lvl)
        msg = message_of[entries]
        w = via[entries]
        from_origin = w < 0
        safe = np.maximum(w, 0)
        buf = np.where(from_origin, _INPUT, e_buf[safe])
        off = np.where(from_origin, d.in_slot[piece[entries]], e_off[safe])
        made_by = np.where(from_origin, -1, e_op[safe])
        sort = np.lexsort((off, buf, msg))
        entries, msg, buf, off, made_by = entries[sort], msg[sort], buf[sort], off[sort], made_by[sort]
        messages, first = np.unique(msg, return_index=True)
        size = counts[messages]
        index = np.arange(len(entries)) - np.repeat(first, size)  # position inside its message
        # sender: staged when its pieces are not one run of one buffer
        run = _run_starts(msg, off)
        run[1:] |= buf[1:] != buf[:-1]
        runs_per_message = np.add.reduceat(run.astype(np.int64), first)
        staged = runs_per_message > 1
        u = src[messages]
        src_buf, src_off = buf[first].copy(), off[first].copy()
        if staged.any():
            base = _allocate(scratch, u[staged], size[staged])
            stage_base = np.zeros(len(messages), dtype=np.int64)
            stage_base[staged] = base
            src_buf[staged], src_off[staged] = _SCRATCH, base
            position_of = np.searchsorted(messages, msg)
            in_staged = staged[position_of]
            run_rows = np.flatnonzero(run & in_staged)
            m_pos = position_of[run_rows]
            # a run ends where the next run starts or its message ends
            run_len = np.minimum(np.append(run_rows[1:], len(entries)), first[m_pos] + size[m_pos]) - run_rows
            copies = ops.add(
                u[m_pos], _COPY, f.start[messages[m_pos]], 3,
                src=(buf[run_rows], off[run_rows]), dst=(_SCRATCH, stage_base[m_pos] + index[run_rows]), count=run_len,
            )
            copy_of_entry = np.repeat(copies, run_len)
            rows = np.flatnonzero(in_staged)
            ops.depend(copy_of_entry, made_by[rows])
        sends = ops.add(u, _SEND, f.start[messages], 4, peer=dst[messages], tag=tag[messages], src=(src_buf, src_off), count=size)
        send_op[messages] = sends
        if staged.any():
            ops.depend(sends[position_of[rows]], copy_of_entry)
        plain = ~staged[np.searchsorted(messages, msg)]
        ops.depend(sends[np.searchsorted(messages, msg[plain])], made_by[plain])
        # receiver: straight into its output, or into scratch and copied out
        slot = out_slot[entries]
        straight_pairs = _run_starts(msg, slot) | (slot < 0)
        straight = np.add.reduceat(straight_pairs.astype(np.int64), first) == 1
        straight &= np.logical_and.reduceat(slot >= 0, first)
        v = dst[messages]
        recv_buf = np.where(straight, _OUTPUT, _SCRATCH)
        recv_off = slot[first].copy()
        into_scratch = ~straight
        if into_scratch.any():
            recv_off[into_scratch] = _allocate(scratch, v[into_scratch], size[into_scratch])
        recvs = ops.add(v, _RECV, f.end[messages], 1, peer=u, tag=tag[messages], dst=(recv_buf, recv_off), count=size)
        recv_op[messages] = recvs
        position_of = np.searchsorted(messages, msg)
        e_buf[entries] = recv_buf[position_of]
        e_off[entries] = recv_off[position_of] + index
        e_op[entries] = recvs[position_of]
        copied = into_scratch[position_of] & (slot >= 0)
        if copied.any():
            rows = np.flatnonzero(copied)
            starts = _run_starts(msg[rows], slot[rows], index[rows])
            run_rows = rows[starts]
            run_len = np.diff(np.append(np.flatnonzero(starts), len(rows)))
            m_pos = position_of[run_rows]
            copies = ops.add(
                v[m_pos], _COPY, f.end[messages[m_pos]], 2,
                src=(_SCRATCH, recv_off[m_pos] + index[run_rows]), dst=(_OUTPUT, slot[run_rows]), count=run_len,
            )
            ops.depend(copies, recvs[m_pos])
    # one message at a time per direct channel, in the schedule's order
    direct = np.flatnonzero(f.channel >= 0)
    by_channel = direct[np.argsort(f.channel[direct], kind="stable")]
    same = f.channel[by_channel[1:]] == f.channel[by_channel[:-1]]
    ops.depend(send_op[by_channel[1:][same]], send_op[by_channel[:-1][same]])
    if f.after is not None:  # a paced message leaves once the message it waits for has reached its sender
        paced = np.flatnonzero(f.after >= 0)
        ops.depend(send_op[paced], recv_op[f.after[paced]])
    idle = np.flatnonzero(np.bincount(np.concatenate([b["rank"] for b in ops.blocks] or [np.zeros(0, np.int64)]), minlength=n) == 0)
    if len(idle):  # a rank no piece crosses still needs one operation (an ET file holds at least one node)
        ops.add(idle, _COMPUTE, 0.0, 0, count=-1, duration=0.0)
    table = ops.table()
    sizes = np.array([collective.buffer_chunks(rank=r, num_ranks=n, chunk_count=chunk_count, root=root) for r in range(n)], dtype=np.int64)
    return CollectiveAlgorithm(
        collective=collective,
        num_ranks=n,
        chunk_count=chunk_count,
        ops=table,
        input_chunks=sizes[:, 0],
        output_chunks=sizes[:, 1],
        scratch_chunks=scratch,
        size_bytes=size_bytes,
        root=root if collective.has_root else None,
        name=name,
        provenance=dict(provenance or {}),
        pattern=pattern,
    )


def name_routes(algo: CollectiveAlgorithm, forwarding: Forwarding, channels: Channels) -> CollectiveAlgorithm:
    """``algo`` with every SEND over a routed channel naming that channel's node path (``routes``)."""
    channel_of = {key: int(c) for key, c in zip(zip(forwarding.src.tolist(), forwarding.dst.tolist(), message_tags(forwarding).tolist()), forwarding.channel.tolist())}
    ops = algo.ops
    route = np.full(len(ops), -1, dtype=np.int32)
    sends = np.flatnonzero(ops.kind == OpKind.SEND)
    for i, rank, peer, tag in zip(sends.tolist(), ops.rank[sends].tolist(), ops.peer[sends].tolist(), ops.tag[sends].tolist()):
        c = channel_of[rank, peer, tag]
        route[i] = -1 - c if c < 0 else -1
    return replace(algo, ops=replace(ops, route=route), routes=channels.routing().paths)
