"""Turn All-Gather schedules into IR: All-Gather, Reduce-Scatter (time-reversed), All-Reduce.

Built column-wise with numpy (:meth:`OpTable.from_columns`): a 4096-NPU All-Gather has ~16M
transfers, too many for one Python call per operation.

Dependencies encode exactly what the schedule assumed, so the network model replays it:

* a SEND depends on the RECV that brought its chunk (forwarding), on the previous SEND over
  the same direct channel (one chunk at a time per link, in the schedule's order), and, for
  chunks routed through switches, on the *anchor*: an operation of its rank that completes at
  the instant the matcher released the chunk;
* Reduce-Scatter is the All-Gather schedule of the reversed channels run backwards: where the
  All-Gather sent chunk ``c`` from ``p`` to ``x``, the Reduce-Scatter sends ``x``'s partial sum
  of ``c`` to ``p`` once every partial sum ``x`` was sent has been reduced into it; the owner
  of ``c`` ends with the full sum;
* All-Reduce is that Reduce-Scatter followed by an All-Gather whose sends of a chunk wait for
  its full sum (and whose first send over a link waits for the last Reduce-Scatter send over it).

Operations of a rank are ordered by the schedule's time (ties: receives, then reductions, then
sends), so every dependency points backwards in program order.
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.ir import NONE, Buffer, Collective, CollectiveAlgorithm, OpKind, OpTable
from chakra_collectives.synth.matcher import NO_ANCHOR, Schedule

# order of operations that share an instant on one rank
_COPY_ORDER, _RECV_ORDER, _REDUCE_ORDER, _SEND_ORDER = 0, 1, 2, 3


class _Ops:
    """Columns of operations under construction (one entry per operation, any order)."""

    def __init__(self) -> None:
        self.parts: list[dict[str, np.ndarray]] = []
        self.size = 0

    def add(self, **cols: np.ndarray) -> np.ndarray:
        """Append operations; return their provisional ids (deps refer to provisional ids)."""
        n = len(cols["rank"])
        ids = np.arange(self.size, self.size + n, dtype=np.int64)
        self.size += n
        self.parts.append(cols)
        return ids

    def build(self, deps: list[tuple[np.ndarray, np.ndarray]]) -> OpTable:
        """Sort by (rank, time, order, id) and translate ``(op, dep)`` pairs to global indices."""
        names = ("rank", "time", "order", "kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count")
        cols = {}
        for name in names:
            values = [p[name] if name in p else np.full(len(p["rank"]), NONE) for p in self.parts]
            cols[name] = np.concatenate(values) if values else np.zeros(0)
        ident = np.arange(self.size, dtype=np.int64)
        perm = np.lexsort((ident, cols["order"], cols["time"], cols["rank"]))
        position = np.empty(self.size, dtype=np.int64)
        position[perm] = ident
        owners = np.concatenate([d[0] for d in deps]) if deps else np.zeros(0, np.int64)
        targets = np.concatenate([d[1] for d in deps]) if deps else np.zeros(0, np.int64)
        keep = targets >= 0
        owners, targets = position[owners[keep]], position[targets[keep]]
        pairs = np.unique(owners * self.size + targets)  # sorted by owner, deduplicated
        owners, targets = pairs // max(self.size, 1), pairs % max(self.size, 1)
        dep_ptr = np.zeros(self.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(owners, minlength=self.size), out=dep_ptr[1:])
        rank = cols["rank"][perm].astype(np.int32)
        starts = np.searchsorted(rank, rank, side="left")
        return OpTable.from_columns(
            rank=rank,
            kind=cols["kind"][perm],
            peer=cols["peer"][perm],
            tag=cols["tag"][perm],
            src_buf=cols["src_buf"][perm],
            src_off=cols["src_off"][perm],
            dst_buf=cols["dst_buf"][perm],
            dst_off=cols["dst_off"][perm],
            count=cols["count"][perm],
            node_id=np.arange(self.size, dtype=np.int64) - starts,
            dep_ptr=dep_ptr,
            dep_idx=targets,
        )


def _tags(src: np.ndarray, dst: np.ndarray, when: np.ndarray, n: int) -> np.ndarray:
    """Message tags: the k-th message from ``src`` to ``dst`` (by time) gets tag ``k``."""
    key = src * n + dst
    order = np.lexsort((np.arange(len(key)), when, key))
    sorted_key = key[order]
    first = np.searchsorted(sorted_key, sorted_key, side="left")
    tags = np.empty(len(key), dtype=np.int64)
    tags[order] = np.arange(len(key)) - first
    return tags


def _previous_on_channel(schedule_channel: np.ndarray, when: np.ndarray) -> np.ndarray:
    """For each transfer, the previous transfer over the same direct channel (-1: none / routed)."""
    size = len(schedule_channel)
    order = np.lexsort((np.arange(size), when, schedule_channel))
    previous = np.full(size, -1, dtype=np.int64)
    same = (schedule_channel[order][1:] == schedule_channel[order][:-1]) & (schedule_channel[order][1:] >= 0)
    previous[order[1:][same]] = order[:-1][same]
    return previous


def _arrival_index(schedule: Schedule) -> np.ndarray:
    """``index[npu * C + chunk]``: the transfer that delivered ``chunk`` to ``npu`` (-1: owner)."""
    num_chunks = schedule.num_npus * schedule.chunks_per_npu
    index = np.full(schedule.num_npus * num_chunks, -1, dtype=np.int64)
    index[schedule.dst * num_chunks + schedule.chunk] = np.arange(schedule.num_transfers)
    return index


# ---------------------------------------------------------------------- all-gather
def _add_all_gather(
    ops: _Ops,
    deps: list,
    schedule: Schedule,
    *,
    owner_source,
    time_offset: float = 0.0,
    owner_ready: np.ndarray | None = None,
    channel_after: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Add the SEND/RECV pairs of ``schedule``; return (send ids, recv ids).

    ``owner_source(chunks)`` gives the (buffer, offset) an owner sends its chunk from;
    ``owner_ready[chunk]`` the op an owner's send of it waits for (-1: none);
    ``channel_after[channel]`` an op the first send over a direct channel waits for.
    """
    n, k = schedule.num_npus, schedule.chunks_per_npu
    t = schedule.num_transfers
    chunk, src, dst = schedule.chunk, schedule.src, schedule.dst
    tags = _tags(src, dst, schedule.start, n)
    owned = chunk // k == src
    own_buf, own_off = owner_source(chunk)
    send_buf = np.where(owned, own_buf, int(Buffer.OUTPUT))
    send_off = np.where(owned, own_off, chunk)
    sends = ops.add(
        rank=src, time=schedule.start + time_offset, order=np.full(t, _SEND_ORDER), kind=np.full(t, int(OpKind.SEND)),
        peer=dst, tag=tags, src_buf=send_buf, src_off=send_off, count=np.ones(t, dtype=np.int64),
    )
    recvs = ops.add(
        rank=dst, time=schedule.end + time_offset, order=np.full(t, _RECV_ORDER), kind=np.full(t, int(OpKind.RECV)),
        peer=src, tag=tags, dst_buf=np.full(t, int(Buffer.OUTPUT)), dst_off=chunk, count=np.ones(t, dtype=np.int64),
    )
    # forwarding: a send of a chunk the sender received waits for that RECV
    arrival = _arrival_index(schedule)
    via = arrival[src * (n * k) + chunk]
    forwarded = via >= 0
    deps.append((sends[forwarded], recvs[via[forwarded]]))
    if owner_ready is not None:
        deps.append((sends[owned], owner_ready[chunk[owned]]))
    # one chunk at a time per direct channel, in the schedule's order
    previous = _previous_on_channel(schedule.channel, schedule.start)
    has_prev = previous >= 0
    deps.append((sends[has_prev], sends[previous[has_prev]]))
    if channel_after is not None:
        first = (~has_prev) & (schedule.channel >= 0)
        deps.append((sends[first], channel_after[schedule.channel[first]]))
    # routed chunks: released exactly when the matcher released them
    anchored = schedule.anchor != NO_ANCHOR
    target = np.where(schedule.anchor_is_send[anchored], sends[schedule.anchor[anchored]], recvs[schedule.anchor[anchored]])
    deps.append((sends[anchored], target))
    return sends, recvs


def all_gather_algorithm(schedule: Schedule, *, size_bytes: int, name: str = "tacos", provenance: dict[str, str] | None = None) -> CollectiveAlgorithm:
    """The All-Gather ``schedule`` describes, as an IR algorithm (own chunks sent from the input)."""
    n, k = schedule.num_npus, schedule.chunks_per_npu
    ops, deps = _Ops(), []
    _add_all_gather(ops, deps, schedule, owner_source=lambda c: (np.full(len(c), int(Buffer.INPUT)), c % k))
    ranks = np.arange(n)
    ops.add(
        rank=ranks, time=np.full(n, -1.0), order=np.full(n, _COPY_ORDER), kind=np.full(n, int(OpKind.COPY)),
        src_buf=np.full(n, int(Buffer.INPUT)), src_off=np.zeros(n, np.int64),
        dst_buf=np.full(n, int(Buffer.OUTPUT)), dst_off=ranks * k, count=np.full(n, k),
    )
    table = ops.build(deps)
    return _algorithm(Collective.ALL_GATHER, schedule, table, size_bytes, name, provenance, scratch=np.zeros(n, np.int64))


# ---------------------------------------------------------------------- reduce-scatter
def _add_reduce_scatter(ops: _Ops, deps: list, reversed_ag: Schedule, *, result_offset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Add the Reduce-Scatter that ``reversed_ag`` (an All-Gather on reversed channels) mirrors.

    Returns (final op per chunk at its owner, scratch chunks per rank, last send per direct channel).
    """
    n, k = reversed_ag.num_npus, reversed_ag.chunks_per_npu
    num_chunks = n * k
    total = reversed_ag.time_ns
    t = reversed_ag.num_transfers
    chunk = reversed_ag.chunk
    # the All-Gather transfer p -> x of chunk c becomes x -> p, during [T - end, T - start]
    sender, receiver = reversed_ag.dst, reversed_ag.src
    start, end = total - reversed_ag.end, total - reversed_ag.start
    owner = chunk // k
    # scratch slots: the j-th message a rank receives lands in scratch[j]
    recv_order = np.lexsort((np.arange(t), end, receiver))
    slot = np.empty(t, dtype=np.int64)
    first_of_rank = np.searchsorted(receiver[recv_order], receiver[recv_order], side="left")
    slot[recv_order] = np.arange(t) - first_of_rank
    scratch = np.bincount(receiver, minlength=n)
    tags = _tags(sender, receiver, start, n)
    recvs = ops.add(
        rank=receiver, time=end, order=np.full(t, _RECV_ORDER), kind=np.full(t, int(OpKind.RECV)), peer=sender, tag=tags,
        dst_buf=np.full(t, int(Buffer.SCRATCH)), dst_off=slot, count=np.ones(t, dtype=np.int64),
    )
    # each (rank, chunk) reduces the partial sums it receives, in arrival order, into an accumulator:
    # at the owner the result slot (after copying its own input there), elsewhere the first arrival
    key = receiver * num_chunks + chunk
    by_key = np.lexsort((np.arange(t), end, key))
    key_sorted = key[by_key]
    first_in_key = np.searchsorted(key_sorted, key_sorted, side="left")
    rank_in_key = np.arange(t) - first_in_key
    is_owner = owner[by_key] == receiver[by_key]
    res_buf, res_off = result_offset(chunk[by_key])
    acc_buf = np.where(is_owner, res_buf, int(Buffer.SCRATCH))
    acc_off = np.where(is_owner, res_off, slot[by_key[first_in_key]])
    # owner: COPY input -> result, then one REDUCE per arrival; others: REDUCE input into the first
    # arrival's slot, then one REDUCE per further arrival
    reduce_src_buf = np.where(~is_owner & (rank_in_key == 0), int(Buffer.INPUT), int(Buffer.SCRATCH))
    reduce_src_off = np.where(~is_owner & (rank_in_key == 0), chunk[by_key], slot[by_key])
    reduces = ops.add(
        rank=receiver[by_key], time=end[by_key], order=np.full(t, _REDUCE_ORDER), kind=np.full(t, int(OpKind.REDUCE)),
        src_buf=reduce_src_buf, src_off=reduce_src_off, dst_buf=acc_buf, dst_off=acc_off, count=np.ones(t, dtype=np.int64),
    )
    deps.append((reduces, recvs[by_key]))
    chained = rank_in_key > 0
    deps.append((reduces[chained], reduces[np.flatnonzero(chained) - 1]))
    last_in_key = np.ones(t, dtype=bool)
    last_in_key[:-1] = key_sorted[1:] != key_sorted[:-1]
    final_reduce = np.full(n * num_chunks, -1, dtype=np.int64)
    final_reduce[key_sorted[last_in_key]] = reduces[last_in_key]
    # owners copy their own input into the result first
    owners = np.arange(num_chunks) // k
    obuf, ooff = result_offset(np.arange(num_chunks))
    copies = ops.add(
        rank=owners, time=np.full(num_chunks, -1.0), order=np.full(num_chunks, _COPY_ORDER), kind=np.full(num_chunks, int(OpKind.COPY)),
        src_buf=np.full(num_chunks, int(Buffer.INPUT)), src_off=np.arange(num_chunks), dst_buf=obuf, dst_off=ooff,
        count=np.ones(num_chunks, dtype=np.int64),
    )
    owner_first = is_owner & (rank_in_key == 0)
    deps.append((reduces[owner_first], copies[chunk[by_key][owner_first]]))
    # sends: x sends its accumulated c (or its bare input when it received no partial sum of c)
    skey = sender * num_chunks + chunk
    before = final_reduce[skey]
    has_acc = before >= 0
    acc_slot_of_key = np.full(n * num_chunks, -1, dtype=np.int64)
    acc_slot_of_key[key_sorted[first_in_key == np.arange(t)]] = slot[by_key[first_in_key == np.arange(t)]]
    sends = ops.add(
        rank=sender, time=start, order=np.full(t, _SEND_ORDER), kind=np.full(t, int(OpKind.SEND)), peer=receiver, tag=tags,
        src_buf=np.where(has_acc, int(Buffer.SCRATCH), int(Buffer.INPUT)),
        src_off=np.where(has_acc, acc_slot_of_key[skey], chunk), count=np.ones(t, dtype=np.int64),
    )
    deps.append((sends[has_acc], before[has_acc]))
    previous = _previous_on_channel(reversed_ag.channel, start)
    has_prev = previous >= 0
    deps.append((sends[has_prev], sends[previous[has_prev]]))
    final = final_reduce[owners * num_chunks + np.arange(num_chunks)]
    final = np.where(final >= 0, final, copies)
    channels = int(reversed_ag.channel.max()) + 1 if t else 0
    last_send = np.full(max(channels, 0), -1, dtype=np.int64)
    direct = reversed_ag.channel >= 0
    order = np.lexsort((start[direct],))
    last_send[reversed_ag.channel[direct][order]] = sends[direct][order]
    return final, scratch, last_send


def reduce_scatter_algorithm(reversed_ag: Schedule, *, size_bytes: int, name: str = "tacos", provenance: dict[str, str] | None = None) -> CollectiveAlgorithm:
    """Reduce-Scatter from an All-Gather schedule on the reversed channels (see the module docstring)."""
    k = reversed_ag.chunks_per_npu
    ops, deps = _Ops(), []
    _, scratch, _ = _add_reduce_scatter(ops, deps, reversed_ag, result_offset=lambda c: (np.full(len(c), int(Buffer.OUTPUT)), c % k))
    table = ops.build(deps)
    return _algorithm(Collective.REDUCE_SCATTER, reversed_ag, table, size_bytes, name, provenance, scratch=scratch)


def all_reduce_algorithm(
    reversed_ag: Schedule, all_gather: Schedule, *, size_bytes: int, name: str = "tacos", provenance: dict[str, str] | None = None
) -> CollectiveAlgorithm:
    """All-Reduce: the Reduce-Scatter of ``reversed_ag`` then the All-Gather ``all_gather``."""
    ops, deps = _Ops(), []
    output = lambda c: (np.full(len(c), int(Buffer.OUTPUT)), c)  # noqa: E731
    final, scratch, last_send = _add_reduce_scatter(ops, deps, reversed_ag, result_offset=output)
    channels = int(all_gather.channel.max()) + 1 if all_gather.num_transfers else 0
    after = np.full(max(channels, len(last_send)), -1, dtype=np.int64)
    after[: len(last_send)] = last_send
    _add_all_gather(
        ops, deps, all_gather, owner_source=output, time_offset=reversed_ag.time_ns, owner_ready=final, channel_after=after,
    )
    table = ops.build(deps)
    return _algorithm(Collective.ALL_REDUCE, all_gather, table, size_bytes, name, provenance, scratch=scratch)


def _algorithm(collective, schedule, table, size_bytes, name, provenance, *, scratch) -> CollectiveAlgorithm:
    n, k = schedule.num_npus, schedule.chunks_per_npu
    sizes = np.array([collective.buffer_chunks(rank=r, num_ranks=n, chunk_count=n * k) for r in range(n)], dtype=np.int64)
    return CollectiveAlgorithm(
        collective=collective,
        num_ranks=n,
        chunk_count=n * k,
        ops=table,
        input_chunks=sizes[:, 0],
        output_chunks=sizes[:, 1],
        scratch_chunks=np.asarray(scratch, dtype=np.int64),
        size_bytes=size_bytes,
        name=name,
        provenance=dict(provenance or {}),
    )
