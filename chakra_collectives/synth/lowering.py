"""Turn All-Gather schedules into IR: All-Gather, Reduce-Scatter (time-reversed), All-Reduce.

Built column-wise with numpy straight into the final layout (:meth:`OpTable.from_columns`,
``int32`` columns): a 4096-NPU All-Gather has ~16M messages, too many for one Python call per
operation, and too many for a sort of all operations. Every rank's program is laid out from
the schedule's ``send_seq`` / ``recv_seq`` (each NPU's sends and receives in time order), so an
operation's global index is computed, never searched for.

Dependencies encode exactly what the schedule assumed, so the network model replays it:

* a SEND depends on the RECVs that brought its chunks (forwarding), on the previous SEND over
  the same direct channel (one message at a time per link, in the schedule's order), and, for
  messages routed through switches, on the *anchor*: an operation of its rank that completes
  at the instant the matcher released the message;
* Reduce-Scatter is the All-Gather schedule of the reversed channels run backwards: where the
  All-Gather sent chunks ``R`` from ``p`` to ``x``, the Reduce-Scatter sends ``x``'s partial sums
  of ``R`` to ``p`` once every partial sum ``x`` received for them has been reduced in; the owner
  of a chunk ends with the full sum;
* All-Reduce is that Reduce-Scatter followed by an All-Gather whose sends of a chunk wait for
  its full sum (and whose first send over a link waits for the last Reduce-Scatter send over it).

Each rank's program is in time order (at one instant receives, then their reductions, then
sends), so every dependency points backwards in program order.

Channels that share a pair of NPUs (detours, :class:`~chakra_collectives.synth.channels.ChannelRouting`)
keep their messages apart by tag -- channel ``i``'s tags are moved up by its position among the
pair's channels times the most messages any channel carries -- and every SEND over a routed
channel names the channel's route.

Reduce-Scatter accumulators: every received message lands in fresh scratch slots. ``x``'s
partial sums of a message's chunks ``R`` are accumulated in the slots of the *first* message
``x`` receives for them when that message carries exactly ``R`` (it is then reduced with ``x``'s
input: no copy; always the case without merged messages); otherwise in their own scratch
slots, initialized by one COPY of the input. Messages for chunks ``x`` never received a partial
sum of are sent straight from the input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm, OpKind, OpTable
from chakra_collectives.ir.grouping import distinct, occurrence
from chakra_collectives.synth.channels import ChannelRouting
from chakra_collectives.synth.schedule import NO_ANCHOR, Schedule, expand_runs, run_blocks

_I32 = np.int32
_NONE = -1


# ---------------------------------------------------------------------- building blocks
class _Columns:
    """Operation columns preallocated at their final size, filled by position."""

    _TYPES = {"kind": np.int8, "peer": _I32, "tag": _I32, "src_buf": np.int8, "src_off": _I32, "dst_buf": np.int8, "dst_off": _I32, "count": _I32}

    def __init__(self, ops_per_rank: np.ndarray, *, routed: bool = False, first_rank: int = 0) -> None:
        self.first_rank = first_rank
        self.starts = np.zeros(len(ops_per_rank) + 1, dtype=np.int64)
        np.cumsum(ops_per_rank, out=self.starts[1:])
        self.size = int(self.starts[-1])
        if self.size >= 2**31:
            raise ValueError(f"{self.size} operations do not fit int32 indices")
        self.ops_per_rank = ops_per_rank
        self.cols = {name: np.full(self.size, _NONE, dtype=dtype) for name, dtype in self._TYPES.items()}
        if routed:  # SENDs name their routes
            self.cols["route"] = np.full(self.size, _NONE, dtype=_I32)
        self.more: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        """Further chunk ranges ``(position, offset, count)``, each operation's in order."""

    def put(self, at: np.ndarray, **values) -> None:
        for name, value in values.items():
            self.cols[name][at] = value

    def table(self, deps: "_Deps") -> OpTable:
        n = len(self.ops_per_rank)
        rank = np.repeat(np.arange(self.first_rank, self.first_rank + n, dtype=_I32), self.ops_per_rank)
        node_id = np.arange(self.size, dtype=_I32)
        node_id -= np.repeat(self.starts[:-1].astype(_I32), self.ops_per_rank)
        dep_ptr, dep_idx = deps.build()
        ranges = {}
        if self.more:
            position, offset, count = (np.concatenate(column) for column in zip(*self.more))
            order = np.argsort(position, kind="stable")
            ptr = np.zeros(self.size + 1, dtype=np.int64)
            np.cumsum(np.bincount(position, minlength=self.size), out=ptr[1:])
            ranges = dict(more_ptr=ptr, more_off=offset[order].astype(_I32), more_count=count[order].astype(_I32))
        return OpTable.from_columns(rank=rank, node_id=node_id, dep_ptr=dep_ptr, dep_idx=dep_idx, **ranges, **self.cols)


class _Deps:
    """Dependencies gathered in parts, laid out in CSR without sorting all of them.

    Each :meth:`add` names every owner at most once; :meth:`add_many` takes any pairs and
    removes duplicates (a sort, for the parts that need it).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, owners: np.ndarray, targets: np.ndarray) -> None:
        keep = targets >= 0
        if not keep.all():
            owners, targets = owners[keep], targets[keep]
        if len(owners):
            self.parts.append((owners.astype(_I32, copy=False), targets.astype(_I32, copy=False)))

    def add_many(self, owners: np.ndarray, targets: np.ndarray) -> None:
        keep = targets >= 0
        key = distinct(owners[keep].astype(np.int64) * self.size + targets[keep])
        owners, targets = key // self.size, key % self.size
        self.add_slots(owners, targets, np.arange(len(owners)) - np.searchsorted(owners, owners, side="left"))

    def add_slots(self, owners: np.ndarray, targets: np.ndarray, slot: np.ndarray) -> None:
        """Pairs where ``slot`` numbers the pairs of each owner 0, 1, ...: added slot by slot."""
        if len(slot) == 0:
            return
        for j in range(int(slot.max()) + 1):
            chosen = slot == j
            self.add(owners[chosen], targets[chosen])

    def build(self) -> tuple[np.ndarray, np.ndarray]:
        counts = np.zeros(self.size, dtype=_I32)
        for owners, _ in self.parts:
            counts[owners] += 1
        total = int(counts.sum(dtype=np.int64))
        dep_ptr = np.zeros(self.size + 1, dtype=_I32 if total < 2**31 else np.int64)  # int32 where it fits, never both at once
        np.cumsum(counts, out=dep_ptr[1:])
        dep_idx = np.empty(total, dtype=_I32)
        counts[:] = 0
        while self.parts:
            owners, targets = self.parts.pop(0)
            dep_idx[dep_ptr[owners] + counts[owners]] = targets
            counts[owners] += 1
        return dep_ptr, dep_idx


def _consecutive_slots(owners: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drop repeats of the previous pair (pairs grouped by owner); number each owner's pairs."""
    keep = np.ones(len(owners), dtype=bool)
    keep[1:] = (owners[1:] != owners[:-1]) | (targets[1:] != targets[:-1])
    keep &= targets >= 0
    owners, targets = owners[keep], targets[keep]
    first = np.ones(len(owners), dtype=bool)
    first[1:] = owners[1:] != owners[:-1]
    index = np.arange(len(owners))
    slot = index - np.maximum.accumulate(np.where(first, index, 0))
    return owners, targets, slot


def _by_channel(schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(first, messages, transfer)``: channel ``ch``'s ``t``-th message is ``transfer[first[ch] + t]``.

    Channels are keyed by :func:`_channel_key` (direct first, then routed).
    """
    key = _channel_key(schedule)
    messages = np.bincount(key, minlength=schedule.num_channels)
    first = np.zeros(len(messages), dtype=np.int64)
    np.cumsum(messages[:-1], out=first[1:])
    transfer = np.empty(schedule.num_transfers, dtype=_I32)
    transfer[first[key] + schedule.tag] = np.arange(schedule.num_transfers, dtype=_I32)
    return first, messages, transfer


def _channel_key(schedule: Schedule) -> np.ndarray:
    """Direct channel ``i`` -> ``i``; routed channel ``i`` (``-1 - i``) -> ``num_direct + i``."""
    channel = schedule.channel.astype(np.int64)
    return np.where(channel >= 0, channel, schedule.num_direct - 1 - channel)


@dataclass(frozen=True)
class _Routes:
    """Per channel key: the tag base that keeps a pair's channels apart, and the SENDs' route."""

    tag_base: np.ndarray
    route: np.ndarray

    @classmethod
    def of(cls, routing: ChannelRouting | None, *schedules: Schedule) -> "_Routes | None":
        """``None`` without ``routing``; else tag bases past the most messages any channel carries
        in ``schedules`` together."""
        if routing is None:
            return None
        per_channel = sum(np.bincount(_channel_key(s), minlength=len(routing.pair_slot)) for s in schedules)
        stride = int(np.max(per_channel, initial=0)) + 1
        route = np.concatenate([np.full(routing.num_direct, _NONE, dtype=np.int64), np.arange(len(routing.paths), dtype=np.int64)])
        return cls(routing.pair_slot * stride, route)


# ---------------------------------------------------------------------- all-gather
def _add_all_gather(
    ops: _Columns,
    deps: _Deps,
    schedule: Schedule,
    body_start: np.ndarray,
    *,
    from_input: bool,
    tag_offset: np.ndarray | None = None,
    owner_ready: np.ndarray | None = None,
    channel_after: np.ndarray | None = None,
    routes: _Routes | None = None,
    ranks: range | None = None,
) -> None:
    """Add the SEND/RECV pairs of ``schedule``; rank ``r``'s program starts at ``body_start[r]``
    (``ranks``: only the operations of these ranks; ``body_start`` of the others is not read).

    ``from_input``: owners send their chunks from the input (All-Gather), else from the output
    (All-Reduce). ``owner_ready[chunk]``: the op an owner's send of the chunk waits for;
    ``channel_after[ch]``: an op the first send over channel ``ch`` waits for (-1: none).
    ``routes``: tag bases and routes of channels that share pairs.
    """
    k = schedule.chunks_per_npu
    c_total = schedule.num_chunks
    chunk, count, src, dst = schedule.chunk, schedule.count, schedule.src, schedule.dst
    whole = ranks is None or len(ranks) == schedule.num_npus
    ranks = range(schedule.num_npus) if ranks is None else ranks

    def sent_here(ids: np.ndarray) -> np.ndarray:
        """The messages of ``ids`` whose SEND is one of ``ranks``' operations (every dependency
        of a SEND is an operation of its own rank)."""
        return ids if whole else ids[(src[ids] >= ranks.start) & (src[ids] < ranks.stop)]

    sending = slice(None) if whole else sent_here(np.arange(schedule.num_transfers))
    receiving = slice(None) if whole else np.flatnonzero((dst >= ranks.start) & (dst < ranks.stop))
    body_start = body_start.astype(_I32)  # positions fit int32 (_Columns checks): 8 bytes a message less than int64
    send_pos = body_start[src] + schedule.send_seq.astype(_I32, copy=False)
    recv_pos = body_start[dst] + schedule.recv_seq.astype(_I32, copy=False)
    first, messages, on_channel = _by_channel(schedule)
    key = _channel_key(schedule)
    tags = schedule.tag if tag_offset is None else schedule.tag + tag_offset[key].astype(_I32)
    owned = (chunk // k) == src
    if from_input:
        send_buf = np.where(owned, _I32(Buffer.INPUT), _I32(Buffer.OUTPUT)).astype(np.int8)
        send_off = np.where(owned, chunk - src * k, chunk)
    else:
        send_buf, send_off = np.int8(Buffer.OUTPUT), chunk
    if routes is not None:
        tags = tags + routes.tag_base[key].astype(_I32)
        ops.put(send_pos[sending], route=routes.route[key[sending]].astype(_I32))
    if not np.isscalar(send_buf):
        send_buf = send_buf[sending]
    ops.put(send_pos[sending], kind=np.int8(OpKind.SEND), peer=dst[sending], tag=tags[sending], src_buf=send_buf, src_off=send_off[sending], count=count[sending])
    ops.put(recv_pos[receiving], kind=np.int8(OpKind.RECV), peer=src[receiving], tag=tags[receiving], dst_buf=np.int8(Buffer.OUTPUT), dst_off=chunk[receiving], count=count[receiving])
    if schedule.multi_run:  # the further runs of a message: at their chunk ids in both output buffers
        for rows, pos in ((sending, send_pos), (receiving, recv_pos)):
            ids = np.arange(schedule.num_transfers)[rows]
            ids = ids[schedule.more_ptr[ids + 1] > schedule.more_ptr[ids]]
            message, start, length = schedule.runs(ids)
            later = np.ones(len(message), dtype=bool)
            later[np.searchsorted(message, ids)] = False  # each message's first run is the op's own
            ops.more.append((pos[message[later]].astype(np.int64), start[later], length[later]))
    del send_buf, send_off, sending, receiving
    # forwarding: a send waits for the RECVs that brought its chunks, looked up in the delivery
    # index of a range of senders at a time (the whole index is N x C entries)
    forwarded = sent_here(np.flatnonzero(~owned))
    anchored = sent_here(np.flatnonzero(schedule.anchor != NO_ANCHOR))
    duplicate = np.zeros(len(anchored), dtype=bool)  # routed sends whose anchor is one of their forwarding RECVs
    ranges = [r for r in (range(max(r.start, ranks.start), min(r.stop, ranks.stop)) for r in schedule.npu_ranges()) if len(r)]
    for npus in ranges:
        delivery = schedule.delivery(npus)
        sending = forwarded if whole and len(ranges) == 1 else forwarded[(src[forwarded] >= npus.start) & (src[forwarded] < npus.stop)]
        if schedule.max_chunks == 1:
            via = delivery[(src[sending].astype(np.int64) - npus.start) * c_total + chunk[sending]]
            deps.add(send_pos[sending], recv_pos[via])
        else:
            for block in run_blocks(count[sending]):  # per chunk, a block of messages at a time
                ids, chunks = schedule.chunks_of(sending[block])
                via = delivery[(src[ids].astype(np.int64) - npus.start) * c_total + chunks]
                owners, targets, slot = _consecutive_slots(ids, via)
                deps.add_slots(send_pos[owners], recv_pos[targets], slot)
        if len(anchored):
            here = np.flatnonzero((src[anchored] >= npus.start) & (src[anchored] < npus.stop))
            ids, offset = expand_runs(count[anchored[here]])
            brought = delivery[(src[anchored[here][ids]].astype(np.int64) - npus.start) * c_total + chunk[anchored[here][ids]] + offset]
            np.logical_or.at(duplicate, here[ids], (brought == schedule.anchor[anchored[here][ids]]) & ~schedule.anchor_is_send[anchored[here][ids]])
        del delivery
    if owner_ready is not None:  # an owner's send waits until its chunks are final
        own = sent_here(np.flatnonzero(owned))
        message, offset = expand_runs(count[own])
        ids = own[message]
        deps.add_many(send_pos[ids], owner_ready[chunk[ids] + offset])
    # one message at a time per direct channel, in the schedule's order
    direct = sent_here(np.flatnonzero((schedule.channel >= 0) & (schedule.tag > 0)))
    previous = on_channel[first[key[direct]] + schedule.tag[direct] - 1]
    deps.add(send_pos[direct], send_pos[previous])
    if channel_after is not None:
        opening = sent_here(np.flatnonzero((schedule.channel >= 0) & (schedule.tag == 0)))
        deps.add(send_pos[opening], channel_after[schedule.channel[opening]])
    # routed messages: released exactly when the matcher released them (unless the anchor
    # is one of the send's forwarding RECVs already)
    if len(anchored):
        anchor = schedule.anchor[anchored]
        target = np.where(schedule.anchor_is_send[anchored], send_pos[anchor], recv_pos[anchor])
        deps.add(send_pos[anchored[~duplicate]], target[~duplicate])


def all_gather_algorithm(
    schedule: Schedule, *, size_bytes: int, name: str = "tacos", provenance: dict[str, str] | None = None, routing: ChannelRouting | None = None,
    ranks: range | None = None,
) -> CollectiveAlgorithm:
    """The All-Gather ``schedule`` describes, as an IR algorithm (own chunks sent from the input;
    ``routing``: the channels' routes, when pairs share channels).

    ``ranks``: only these ranks' operations, exactly as the whole algorithm has them (a part:
    every dependency is an operation of its own rank, so a range of ranks is lowered from the
    schedule and the delivery index of its own NPUs; what
    :func:`~chakra_collectives.converters.chakra_et.write_parts` writes a range at a time).
    """
    n, k = schedule.num_npus, schedule.chunks_per_npu
    ranks = range(n) if ranks is None else ranks
    routes = _Routes.of(routing, schedule)
    lengths = 1 + schedule.program_lengths()  # a COPY of the own chunks, then the program
    ops = _Columns(lengths[ranks.start : ranks.stop], routed=routes is not None, first_rank=ranks.start)
    ops.put(
        ops.starts[:-1], kind=np.int8(OpKind.COPY), src_buf=np.int8(Buffer.INPUT), src_off=_I32(0),
        dst_buf=np.int8(Buffer.OUTPUT), dst_off=np.arange(ranks.start, ranks.stop, dtype=_I32) * k, count=_I32(k),
    )
    deps = _Deps(ops.size)
    body_start = ops.starts[:-1] + 1
    if len(ranks) < n:
        body_start = np.zeros(n, dtype=np.int64)
        body_start[ranks.start : ranks.stop] = ops.starts[:-1] + 1
    _add_all_gather(ops, deps, schedule, body_start, from_input=True, routes=routes, ranks=ranks)
    return _algorithm(Collective.ALL_GATHER, schedule, ops.table(deps), size_bytes, name, provenance, scratch=np.zeros(n, np.int64), routing=routing)


# ---------------------------------------------------------------------- reduce-scatter
class _ReduceScatter:
    """The Reduce-Scatter mirrored from ``rev`` (an All-Gather schedule on the reversed channels).

    In ``rev``, transfer ``i`` moved chunks ``R_i`` from ``p = src`` to ``x = dst``. Mirrored in time
    it becomes a SEND of ``x``'s partial sums of ``R_i`` (its *out* message) and, at ``p``, a RECV
    followed by the REDUCEs of those sums into ``p``'s accumulators (an *in* message). A rank's
    program is its ``rev`` program backwards. This class computes the layout (how many
    operations each rank needs, in which order); :meth:`emit` fills them in.
    """

    def __init__(self, rev: Schedule, *, result_offset) -> None:
        if rev.multi_run:
            raise ValueError("a Reduce-Scatter is mirrored from a schedule whose messages carry one run each")
        self.rev = rev
        self.result_offset = result_offset
        n, k = rev.num_npus, rev.chunks_per_npu
        c_total = rev.num_chunks
        t = rev.num_transfers
        src, dst, chunk, count = rev.src, rev.dst, rev.chunk, rev.count
        self.owned = (chunk // k) == src  # in messages at an owner reduce into its result
        # chunk-level view of every in message: (transfer, chunk) at p = src
        self.entry_msg, offset = expand_runs(count)
        self.entry_chunk = chunk[self.entry_msg] + offset
        entry_rank = src[self.entry_msg].astype(np.int64)
        delivery = rev.delivery()
        # the out message of p that carries each chunk (the accumulator it reduces into; -1 at owners)
        self.entry_out = np.where(self.owned[self.entry_msg], -1, delivery[entry_rank * c_total + self.entry_chunk])
        del delivery
        # reductions: one per maximal stretch of an in message's chunks with the same accumulator
        new = np.ones(len(self.entry_msg), dtype=bool)
        new[1:] = (self.entry_msg[1:] != self.entry_msg[:-1]) | (self.entry_out[1:] != self.entry_out[:-1])
        self.entry_reduce = np.cumsum(new) - 1
        self.reduce_msg = self.entry_msg[new]
        self.reduce_out = self.entry_out[new]
        self.reduce_first = self.entry_chunk[new]
        self.reduce_len = np.bincount(self.entry_reduce).astype(_I32)
        reduces_per_msg = np.bincount(self.reduce_msg, minlength=t)
        # program order: each rank's rev program backwards; element e of rank r sits at flat[r] + L_r - 1 - e
        lengths = rev.program_lengths()
        flat_start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=flat_start[1:])
        self.in_element = flat_start[src] + lengths[src] - 1 - rev.send_seq  # RECV (+ REDUCEs) at p
        self.out_element = flat_start[dst] + lengths[dst] - 1 - rev.recv_seq  # SEND at x
        # writers of each (rank, chunk) accumulator, in program order: sort the entries
        order_key = (entry_rank * c_total + self.entry_chunk) * (2 * t + 1) + self.in_element[self.entry_msg]
        self.by_writer = np.argsort(order_key, kind="stable")
        group = (entry_rank * c_total + self.entry_chunk)[self.by_writer]
        self.group_first = np.ones(len(group), dtype=bool)
        self.group_first[1:] = group[1:] != group[:-1]
        self.group_last = np.ones(len(group), dtype=bool)
        self.group_last[:-1] = group[1:] != group[:-1]
        # accumulator of each out message: in place (first in message carries exactly its chunks),
        # own slots after a COPY of the input, or none (sent from the input)
        first_writer = np.full(n * c_total, -1, dtype=np.int64)
        sorted_entries = self.by_writer[self.group_first]
        first_writer[entry_rank[sorted_entries] * c_total + self.entry_chunk[sorted_entries]] = self.entry_msg[sorted_entries]
        out_msg, out_offset = expand_runs(count)
        writer = first_writer[dst[out_msg].astype(np.int64) * c_total + chunk[out_msg] + out_offset]
        del first_writer
        has_writer = np.zeros(t, dtype=bool)
        np.logical_or.at(has_writer, out_msg, writer >= 0)
        same = np.ones(t, dtype=bool)
        candidate = writer[np.cumsum(count) - count]  # the first chunk's first writer
        np.logical_and.at(same, out_msg, writer == candidate[out_msg])
        safe = np.maximum(candidate, 0)
        self.in_place = has_writer & same & (candidate >= 0) & (chunk[safe] == chunk) & (count[safe] == count)
        self.in_place_msg = np.where(self.in_place, candidate, -1)
        self.copied = has_writer & ~self.in_place
        # operations per rank: owner COPY + init COPYs, then per element 1 (SEND) or 1 + reductions
        element_ops = np.zeros(int(flat_start[-1]), dtype=np.int64)
        element_ops[self.out_element] = 1
        element_ops[self.in_element] = 1 + reduces_per_msg
        self.copies_per_rank = np.bincount(dst[self.copied], minlength=n)
        header = 1 + self.copies_per_rank
        element_total = np.zeros(len(element_ops) + 1, dtype=np.int64)
        np.cumsum(element_ops, out=element_total[1:])
        body = element_total[flat_start[1:]] - element_total[flat_start[:-1]]
        self.ops_per_rank = header + body
        self.header = header
        self.element_ops = element_ops
        self.flat_start = flat_start
        # scratch: every in message lands in count fresh slots, then the init COPYs' slots
        in_slots = np.zeros(len(element_ops), dtype=np.int64)
        in_slots[self.in_element] = count
        cumulative = np.cumsum(in_slots) - in_slots
        self.recv_slot = (cumulative[self.in_element] - cumulative[flat_start[src]] if t else np.zeros(0, np.int64))
        received = np.bincount(src, weights=count, minlength=n).astype(np.int64)
        copy_slots = np.zeros(len(element_ops), dtype=np.int64)
        copy_slots[self.out_element[self.copied]] = count[self.copied]
        cumulative = np.cumsum(copy_slots) - copy_slots
        self.copy_slot = received[dst] + cumulative[self.out_element] - cumulative[flat_start[dst]] if t else np.zeros(0, np.int64)
        self.scratch = received + np.bincount(dst[self.copied], weights=count[self.copied], minlength=n).astype(np.int64)

    def emit(self, ops: _Columns, deps: _Deps, rank_start: np.ndarray, release: "Release | None" = None, routes: _Routes | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Fill the operations (rank ``r``'s part starts at ``rank_start[r]``; ``release``: see
        :func:`reduce_scatter_algorithm`).

        Returns the op holding each chunk's full sum at its owner, and per channel the op of
        the last Reduce-Scatter SEND over it (-1: none).
        """
        rev = self.rev
        n, k = rev.num_npus, rev.chunks_per_npu
        c_total = rev.num_chunks
        t = rev.num_transfers
        src, dst, chunk, count = rev.src, rev.dst, rev.chunk, rev.count
        # global position of every element of the flat (backwards) programs
        element_start = np.zeros(len(self.element_ops) + 1, dtype=np.int64)
        np.cumsum(self.element_ops, out=element_start[1:])
        body_offset = rank_start + self.header - element_start[self.flat_start[:-1]]  # + element_start[element]
        in_pos = body_offset[src] + element_start[self.in_element]
        out_pos = body_offset[dst] + element_start[self.out_element]
        # header: owner COPY of its own chunks into the result, then the init COPYs
        owner_copy = rank_start[:n]
        ranks = np.arange(n, dtype=_I32)
        buf, off = self.result_offset(ranks * k)
        ops.put(owner_copy, kind=np.int8(OpKind.COPY), src_buf=np.int8(Buffer.INPUT), src_off=ranks * k, dst_buf=buf, dst_off=off, count=_I32(k))
        copied = np.flatnonzero(self.copied)
        copy_pos = rank_start[dst[copied]] + 1 + occurrence(dst[copied], by=self.out_element[copied])
        ops.put(copy_pos, kind=np.int8(OpKind.COPY), src_buf=np.int8(Buffer.INPUT), src_off=chunk[copied], dst_buf=np.int8(Buffer.SCRATCH), dst_off=self.copy_slot[copied], count=count[copied])
        # accumulator (scratch slot) of each out message
        acc_slot = np.full(t, -1, dtype=np.int64)
        acc_slot[copied] = self.copy_slot[copied]
        in_place = np.flatnonzero(self.in_place)
        acc_slot[in_place] = self.recv_slot[self.in_place_msg[in_place]]
        init_op = np.full(t, -1, dtype=np.int64)
        init_op[copied] = copy_pos
        # tags: per channel, in the Reduce-Scatter's time order
        first, messages, on_channel = _by_channel(rev)
        key = _channel_key(rev)
        tags = (messages[key] - 1 - rev.tag).astype(_I32)
        pair_tags = tags if routes is None else tags + routes.tag_base[key].astype(_I32)
        if routes is not None:
            ops.put(out_pos, route=routes.route[key].astype(_I32))
        # in messages: RECV into fresh slots
        ops.put(in_pos, kind=np.int8(OpKind.RECV), peer=dst, tag=pair_tags, dst_buf=np.int8(Buffer.SCRATCH), dst_off=self.recv_slot, count=count)
        # reductions
        reduce_pos = in_pos[self.reduce_msg] + 1 + (np.arange(len(self.reduce_msg)) - np.searchsorted(self.reduce_msg, self.reduce_msg, side="left"))
        msg = self.reduce_msg
        out = self.reduce_out
        at_owner = out < 0
        inplace_reduce = (~at_owner) & (self.in_place_msg[np.maximum(out, 0)] == msg)
        within_in = self.reduce_first - chunk[msg]
        res_buf, res_off = self.result_offset(self.reduce_first)
        dst_buf = np.where(at_owner, res_buf, _I32(Buffer.SCRATCH)).astype(np.int8)
        dst_off = np.where(at_owner, res_off, np.where(inplace_reduce, self.recv_slot[msg], acc_slot[np.maximum(out, 0)] + self.reduce_first - chunk[np.maximum(out, 0)]))
        src_buf = np.where(inplace_reduce, _I32(Buffer.INPUT), _I32(Buffer.SCRATCH)).astype(np.int8)
        src_off = np.where(inplace_reduce, chunk[msg], self.recv_slot[msg] + within_in)
        ops.put(reduce_pos, kind=np.int8(OpKind.REDUCE), src_buf=src_buf, src_off=src_off, dst_buf=dst_buf, dst_off=dst_off, count=self.reduce_len)
        del dst_buf, dst_off, src_buf, src_off, within_in
        deps.add(reduce_pos, in_pos[msg])
        # each accumulator chunk: writers in program order; a writer waits for the previous one
        # (the first: for the owner COPY, or the init COPY; in-place accumulators start with their RECV)
        writer_op = reduce_pos[self.entry_reduce]
        entries = self.by_writer
        e_rank = src[self.entry_msg[entries]]
        prev_writer = np.empty(len(entries), dtype=np.int64)
        prev_writer[1:] = writer_op[entries[:-1]]
        opens = self.group_first
        e_out = self.entry_out[entries]
        prev_writer[opens] = np.where(e_out[opens] < 0, owner_copy[e_rank[opens]], init_op[np.maximum(e_out[opens], 0)])
        deps.add_many(writer_op[entries], prev_writer)
        # out messages: SEND the accumulated sums (or the bare input)
        has_acc = acc_slot >= 0
        ops.put(
            out_pos, kind=np.int8(OpKind.SEND), peer=src, tag=pair_tags,
            src_buf=np.where(has_acc, _I32(Buffer.SCRATCH), _I32(Buffer.INPUT)).astype(np.int8),
            src_off=np.where(has_acc, acc_slot, chunk), count=count,
        )
        last_writer = np.full(n * c_total, -1, dtype=np.int64)
        last = entries[self.group_last]
        last_writer[src[self.entry_msg[last]].astype(np.int64) * c_total + self.entry_chunk[last]] = writer_op[last]
        out_msg, out_offset = expand_runs(count)
        waits = last_writer[dst[out_msg].astype(np.int64) * c_total + chunk[out_msg] + out_offset]
        waits = np.where((waits < 0) & self.copied[out_msg], init_op[out_msg], waits)
        deps.add_many(out_pos[out_msg], waits)
        # one message at a time per direct channel: in Reduce-Scatter time, the previous SEND
        # over a channel is the next one in the mirrored schedule
        direct = np.flatnonzero((rev.channel >= 0) & (tags > 0))
        following = on_channel[first[key[direct]] + rev.tag[direct] + 1]
        deps.add(out_pos[direct], out_pos[following])
        if release is not None:  # out messages released when an op of their rank completes
            anchored = np.flatnonzero(release.anchor != NO_ANCHOR)
            anchor = release.anchor[anchored]
            deps.add(out_pos[anchored], np.where(release.anchor_is_out[anchored], out_pos[anchor], in_pos[anchor]))
        # results
        owners = np.arange(c_total) // k
        final = last_writer[owners * c_total + np.arange(c_total)]
        final = np.where(final >= 0, final, owner_copy[owners])
        last_send = np.full(rev.num_direct, -1, dtype=np.int64)
        opening = np.flatnonzero((rev.channel >= 0) & (rev.tag == 0))
        last_send[rev.channel[opening]] = out_pos[opening]
        return final, last_send


@dataclass(frozen=True)
class Release:
    """When a Reduce-Scatter's out messages leave, beyond their data: out message ``i`` (transfer
    ``i`` of the reversed schedule) waits for the out message (``anchor_is_out``) or in message
    of transfer ``anchor[i]`` on its rank (``NO_ANCHOR``: nothing more). A schedule that planned
    its routed messages' departures pins them this way, as the All-Gather's anchors do."""

    anchor: np.ndarray
    anchor_is_out: np.ndarray


def mirrored_release(rev: Schedule) -> Release:
    """Pin the routed messages of the Reduce-Scatter run backwards from ``rev``: transfer ``i``
    (``p -> x``, ending at ``e_i``) becomes ``x``'s out message, leaving at ``T - e_i``, when
    ``x``'s operation of a transfer ``j`` that starts at ``e_i`` completes (its out message
    when ``x`` received ``j``, its in message when ``x`` sent it).
    """
    anchor = np.full(rev.num_transfers, NO_ANCHOR, dtype=np.int32)
    is_out = np.zeros(rev.num_transfers, dtype=bool)
    starting: dict[tuple[int, float], tuple[int, bool]] = {}
    for j in range(rev.num_transfers):
        starting.setdefault((int(rev.dst[j]), float(rev.start[j])), (j, True))
        starting.setdefault((int(rev.src[j]), float(rev.start[j])), (j, False))
    for i in np.flatnonzero(rev.channel < 0).tolist():
        found = starting.get((int(rev.dst[i]), float(rev.end[i])))
        if found is not None:
            anchor[i], is_out[i] = found
    return Release(anchor, is_out)


def reduce_scatter_algorithm(
    rev: Schedule, *, size_bytes: int, name: str = "tacos", provenance: dict[str, str] | None = None, release: Release | None = None,
    routing: ChannelRouting | None = None,
) -> CollectiveAlgorithm:
    """Reduce-Scatter from an All-Gather schedule on the reversed channels (see the module
    docstring; ``routing``: the channels' routes, forwards, when pairs share channels)."""
    k = rev.chunks_per_npu
    rs = _ReduceScatter(rev, result_offset=lambda c: (np.int8(Buffer.OUTPUT), c % k))
    routes = _Routes.of(routing, rev)
    ops = _Columns(rs.ops_per_rank, routed=routes is not None)
    deps = _Deps(ops.size)
    rs.emit(ops, deps, ops.starts[:-1], release, routes)
    return _algorithm(Collective.REDUCE_SCATTER, rev, ops.table(deps), size_bytes, name, provenance, scratch=rs.scratch, routing=routing)


def all_reduce_algorithm(
    rev: Schedule,
    all_gather: Schedule,
    *,
    size_bytes: int,
    name: str = "tacos",
    provenance: dict[str, str] | None = None,
    release: Release | None = None,
    routing: ChannelRouting | None = None,
) -> CollectiveAlgorithm:
    """All-Reduce: the Reduce-Scatter of ``rev`` (``release``: see :class:`Release`) then the
    All-Gather ``all_gather`` (``routing``: the channels' routes, when pairs share channels)."""
    rs = _ReduceScatter(rev, result_offset=lambda c: (np.int8(Buffer.OUTPUT), c))
    routes = _Routes.of(routing, rev, all_gather)
    ops = _Columns(rs.ops_per_rank + all_gather.program_lengths(), routed=routes is not None)
    deps = _Deps(ops.size)
    final, last_send = rs.emit(ops, deps, ops.starts[:-1], release, routes)
    # All-Gather tags continue after the Reduce-Scatter's over the same pair of NPUs
    _, offset, _ = _by_channel(rev)  # Reduce-Scatter messages per channel
    after = last_send  # both schedules number the same channels
    _add_all_gather(
        ops, deps, all_gather, ops.starts[:-1] + rs.ops_per_rank, from_input=False, tag_offset=offset,
        owner_ready=final, channel_after=after, routes=routes,
    )
    return _algorithm(Collective.ALL_REDUCE, all_gather, ops.table(deps), size_bytes, name, provenance, scratch=rs.scratch, routing=routing)


def _algorithm(collective, schedule, table, size_bytes, name, provenance, *, scratch, routing: ChannelRouting | None = None) -> CollectiveAlgorithm:
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
        routes=() if routing is None else routing.paths,
    )
