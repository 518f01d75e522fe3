"""Turn All-Gather schedules into IR: All-Gather, Reduce-Scatter (time-reversed), All-Reduce.

Built column-wise with numpy straight into the final layout (:meth:`OpTable.from_columns`,
``int32`` columns): a 4096-NPU All-Gather has ~16M messages, too many for one Python call per
operation, and too many for a sort of all operations. Every rank's program is laid out from
the schedule's ``send_seq`` / ``recv_seq`` (each NPU's sends and receives in time order), so an
operation's global index is computed, never searched for. Every dependency is between
operations of one rank, so any range of ranks can be lowered alone (``ranks=``, exactly the
whole algorithm's operations of those ranks; :func:`lowered_in_parts` for a writer that lowers
part after part), and the per-chunk work is done a range of NPUs at a time: the All-Gather's
delivery rows, the Reduce-Scatter's layout (:data:`REDUCE_SCATTER_PAIRS` pairs at once).

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

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm, OpKind, OpTable
from chakra_collectives.ir.grouping import distinct, occurrence
from chakra_collectives.ir.parts import AlgorithmParts
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


def _channel_key(schedule: Schedule, ids: np.ndarray | None = None) -> np.ndarray:
    """Direct channel ``i`` -> ``i``; routed channel ``i`` (``-1 - i``) -> ``num_direct + i``
    (of the messages ``ids``; default: all)."""
    channel = (schedule.channel if ids is None else schedule.channel[ids]).astype(np.int64)
    return np.where(channel >= 0, channel, schedule.num_direct - 1 - channel)


def _on_channel(key: np.ndarray, tag: np.ndarray, which: np.ndarray, step: int) -> np.ndarray:
    """For messages of channel keys ``key`` and tags ``tag`` holding *every* message of each
    channel they use (those a range of NPUs sends, or those it receives): the position of the
    message ``step`` places later (earlier, for a negative ``step``) on the channel of each
    message at the positions ``which``.

    >>> _on_channel(np.array([1, 0, 1, 0]), np.array([1, 0, 0, 1]), np.array([0, 3]), -1).tolist()
    [2, 1]
    """
    counts = np.bincount(key)
    first = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    order = np.empty(len(key), dtype=np.int64)
    order[first[key] + tag] = np.arange(len(key))
    return order[first[key[which]] + tag[which] + step]


class _Messages:
    """The messages of a schedule that a range of NPUs sends or receives (ascending ids): every
    message for all NPUs; else found by a pass over all messages or, once :meth:`indexed`, cut
    from the messages sorted by NPU (8 bytes a message, shared by a mirrored phase, which has
    the same ends)."""

    def __init__(self, schedule: Schedule) -> None:
        self.src, self.dst = schedule.src, schedule.dst
        self.num_npus, self.num_transfers = schedule.num_npus, schedule.num_transfers
        self._sorted: dict[str, tuple[np.ndarray, np.ndarray]] | None = None

    def indexed(self) -> "_Messages":
        """The same, its messages sorted by sending and receiving NPU (once)."""
        if self._sorted is None:
            self._sorted = {}
            for end, npu in (("src", self.src), ("dst", self.dst)):
                bounds = np.zeros(self.num_npus + 1, dtype=np.int64)
                np.cumsum(np.bincount(npu, minlength=self.num_npus), out=bounds[1:])
                self._sorted[end] = (np.argsort(npu, kind="stable").astype(_I32), bounds)
        return self

    def like(self, schedule: Schedule) -> "_Messages":
        """These messages for ``schedule`` when it has the same ends, else its own."""
        return self if schedule.src is self.src and schedule.dst is self.dst else _Messages(schedule)

    def sent_by(self, npus: range) -> np.ndarray:
        return self._of("src", self.src, npus)

    def received_by(self, npus: range) -> np.ndarray:
        return self._of("dst", self.dst, npus)

    def _of(self, end: str, npu: np.ndarray, npus: range) -> np.ndarray:
        if npus.start <= 0 and npus.stop >= self.num_npus:
            return np.arange(self.num_transfers, dtype=_I32)
        if self._sorted is None:
            return np.flatnonzero((npu >= npus.start) & (npu < npus.stop)).astype(_I32)
        order, bounds = self._sorted[end]
        return np.sort(order[bounds[npus.start] : bounds[npus.stop]])


def _take(values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``values[at]``, zeros when ``values`` is empty (``at`` then only points at masked-out entries)."""
    return values[at] if len(values) else np.zeros(len(at), dtype=values.dtype)


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
    messages: _Messages | None = None,
) -> None:
    """Add the SEND/RECV pairs of ``schedule``; rank ``r``'s program starts at ``body_start[r]``
    (``ranks``: only the operations of these ranks; ``body_start`` of the others is not read;
    ``messages``: the schedule's messages by NPU, when the caller keeps them).

    ``from_input``: owners send their chunks from the input (All-Gather), else from the output
    (All-Reduce). ``owner_ready[chunk]``: the op an owner's send of the chunk waits for;
    ``channel_after[ch]``: an op the first send over channel ``ch`` waits for (-1: none).
    ``routes``: tag bases and routes of channels that share pairs.
    Every dependency of a SEND is an operation of its own rank, so only the messages the ranks
    send or receive are read (and each sender's delivery rows).
    """
    c_total = schedule.num_chunks
    chunk, count, src, dst = schedule.chunk, schedule.count, schedule.src, schedule.dst
    ranks = range(schedule.num_npus) if ranks is None else ranks
    messages = _Messages(schedule) if messages is None else messages
    body_start = body_start.astype(_I32)  # positions fit int32 (_Columns checks): 8 bytes a message less than int64

    def send_pos(ids: np.ndarray) -> np.ndarray:
        return body_start[src[ids]] + schedule.send_seq[ids].astype(_I32, copy=False)

    def recv_pos(ids: np.ndarray) -> np.ndarray:
        return body_start[dst[ids]] + schedule.recv_seq[ids].astype(_I32, copy=False)

    def tags(ids: np.ndarray, key: np.ndarray) -> np.ndarray:
        tag = schedule.tag[ids] if tag_offset is None else schedule.tag[ids] + tag_offset[key].astype(_I32)
        return tag if routes is None else tag + routes.tag_base[key].astype(_I32)

    sending, receiving = messages.sent_by(ranks), messages.received_by(ranks)
    send_key = _channel_key(schedule, sending)
    at = send_pos(sending)
    owned = schedule.owners(chunk[sending]) == src[sending]
    if from_input:
        send_buf = np.where(owned, _I32(Buffer.INPUT), _I32(Buffer.OUTPUT)).astype(np.int8)
        send_off = np.where(owned, chunk[sending] - schedule.owner_starts()[src[sending]], chunk[sending])
    else:
        send_buf, send_off = np.int8(Buffer.OUTPUT), chunk[sending]
    if routes is not None:
        ops.put(at, route=routes.route[send_key].astype(_I32))
    ops.put(at, kind=np.int8(OpKind.SEND), peer=dst[sending], tag=tags(sending, send_key), src_buf=send_buf, src_off=send_off, count=count[sending])
    ops.put(
        recv_pos(receiving), kind=np.int8(OpKind.RECV), peer=src[receiving], tag=tags(receiving, _channel_key(schedule, receiving)),
        dst_buf=np.int8(Buffer.OUTPUT), dst_off=chunk[receiving], count=count[receiving],
    )
    if schedule.multi_run:  # the further runs of a message: at their chunk ids in both output buffers
        for rows, pos in ((sending, send_pos), (receiving, recv_pos)):
            message, start, length = schedule.runs(schedule.of_several_runs(rows))
            later = np.zeros(len(message), dtype=bool)
            later[1:] = message[1:] == message[:-1]  # each message's first run is the op's own
            ops.more.append((pos(message[later]).astype(np.int64), start[later], length[later]))
    del send_buf, send_off, receiving
    # forwarding: a send waits for the RECVs that brought its chunks, looked up in the delivery
    # index of a range of senders at a time (the whole index is N x C entries)
    forwarded = sending[~owned]
    anchored = sending[schedule.anchor[sending] != NO_ANCHOR]
    duplicate = np.zeros(len(anchored), dtype=bool)  # routed sends whose anchor is one of their forwarding RECVs
    ranges = [r for r in (range(max(r.start, ranks.start), min(r.stop, ranks.stop)) for r in schedule.npu_ranges()) if len(r)]
    for npus in ranges:
        delivery = schedule.delivery(npus, into=messages.received_by(npus))
        here = forwarded if len(ranges) == 1 else forwarded[(src[forwarded] >= npus.start) & (src[forwarded] < npus.stop)]
        if schedule.max_chunks == 1:
            via = delivery[(src[here].astype(np.int64) - npus.start) * c_total + chunk[here]]
            deps.add(send_pos(here), recv_pos(via))
        else:
            for block in run_blocks(count[here]):  # per chunk, a block of messages at a time
                ids, chunks = schedule.chunks_of(here[block])
                via = delivery[(src[ids].astype(np.int64) - npus.start) * c_total + chunks]
                owners, targets, slot = _consecutive_slots(ids, via)
                deps.add_slots(send_pos(owners), recv_pos(targets), slot)
        if len(anchored):
            inside = np.flatnonzero((src[anchored] >= npus.start) & (src[anchored] < npus.stop))
            ids, offset = expand_runs(count[anchored[inside]])
            brought = delivery[(src[anchored[inside][ids]].astype(np.int64) - npus.start) * c_total + chunk[anchored[inside][ids]] + offset]
            np.logical_or.at(duplicate, inside[ids], (brought == schedule.anchor[anchored[inside][ids]]) & ~schedule.anchor_is_send[anchored[inside][ids]])
        del delivery
    if owner_ready is not None:  # an owner's send waits until its chunks are final
        own = sending[owned]
        message, offset = expand_runs(count[own])
        ids = own[message]
        deps.add_many(send_pos(ids), owner_ready[chunk[ids] + offset])
    # one message at a time per direct channel, in the schedule's order
    tag, direct_channel = schedule.tag[sending], schedule.channel[sending] >= 0
    direct = np.flatnonzero(direct_channel & (tag > 0))
    deps.add(at[direct], at[_on_channel(send_key, tag, direct, -1)])
    if channel_after is not None:
        opening = np.flatnonzero(direct_channel & (tag == 0))
        deps.add(at[opening], channel_after[schedule.channel[sending[opening]]])
    # routed messages: released exactly when the matcher released them (unless the anchor
    # is one of the send's forwarding RECVs already)
    if len(anchored):
        anchor = schedule.anchor[anchored]
        target = np.where(schedule.anchor_is_send[anchored], send_pos(anchor), recv_pos(anchor))
        deps.add(send_pos(anchored[~duplicate]), target[~duplicate])


def all_gather_algorithm(
    schedule: Schedule, *, size_bytes: int, name: str = "tacos", provenance: dict[str, str] | None = None, routing: ChannelRouting | None = None,
    ranks: range | None = None,
) -> CollectiveAlgorithm:
    """The All-Gather ``schedule`` describes, as an IR algorithm (own chunks sent from the input;
    ``routing``: the channels' routes, when pairs share channels).

    ``ranks``: only these ranks' operations, exactly as the whole algorithm has them (a part:
    every dependency is an operation of its own rank, so a range of ranks is lowered from the
    schedule and the delivery index of its own NPUs; what
    :func:`~chakra_collectives.converters.chakra_et.write_parts` writes a range at a time,
    :func:`lowered_in_parts`).
    """
    return _all_gather(schedule, _Messages(schedule), size_bytes=size_bytes, name=name, provenance=provenance, routing=routing, ranks=ranks)


def _all_gather(
    schedule: Schedule, messages: _Messages, *, size_bytes: int, name: str, provenance: dict[str, str] | None, routing: ChannelRouting | None = None,
    ranks: range | None = None,
) -> CollectiveAlgorithm:
    n, k = schedule.num_npus, schedule.chunks_per_npu
    if schedule.owner_start is not None:
        raise ValueError("an All-Gather gives every rank K chunks; unequal shares are an All-Reduce's layout")
    ranks = range(n) if ranks is None else ranks
    routes = _Routes.of(routing, schedule)
    lengths = 1 + schedule.program_lengths()  # a COPY of the own chunks, then the program
    ops = _Columns(lengths[ranks.start : ranks.stop], routed=routes is not None, first_rank=ranks.start)
    ops.put(
        ops.starts[:-1], kind=np.int8(OpKind.COPY), src_buf=np.int8(Buffer.INPUT), src_off=_I32(0),
        dst_buf=np.int8(Buffer.OUTPUT), dst_off=np.arange(ranks.start, ranks.stop, dtype=_I32) * k, count=_I32(k),
    )
    deps = _Deps(ops.size)
    body_start = np.zeros(n, dtype=np.int64)
    body_start[ranks.start : ranks.stop] = ops.starts[:-1] + 1
    _add_all_gather(ops, deps, schedule, body_start, from_input=True, routes=routes, ranks=ranks, messages=messages)
    return _algorithm(Collective.ALL_GATHER, schedule, ops.table(deps), size_bytes, name, provenance, scratch=np.zeros(n, np.int64), routing=routing)


# ---------------------------------------------------------------------- reduce-scatter
REDUCE_SCATTER_PAIRS = 2**22
"""(NPU, chunk) pairs whose Reduce-Scatter operations are laid out at once (:class:`_ReduceScatter`,
a range of NPUs at a time): the per-chunk work (entries, writers' order, first- and
last-writer rows) holds about 100 bytes a pair, so a range's takes about 400 MiB at any size."""


class _ReduceScatter:
    """The Reduce-Scatter mirrored from ``rev`` (an All-Gather schedule on the reversed channels).

    In ``rev``, transfer ``i`` moved chunks ``R_i`` from ``p = src`` to ``x = dst``. Mirrored in time
    it becomes a SEND of ``x``'s partial sums of ``R_i`` (its *out* message) and, at ``p``, a RECV
    followed by the REDUCEs of those sums into ``p``'s accumulators (an *in* message). A rank's
    program is its ``rev`` program backwards. Every dependency is between operations of one
    rank, and a rank's operations depend only on the messages it sends and receives, so the
    layout is worked out a range of ranks at a time (:class:`_RangeLayout`, ranges of
    :data:`REDUCE_SCATTER_PAIRS` pairs): here once for how many operations and scratch slots
    each rank needs, again by :meth:`emit` for the ranks it fills (kept when one range is all,
    unless not ``keep``: the ranks are then filled a part at a time).
    """

    def __init__(self, rev: Schedule, *, result_offset, messages: _Messages | None = None, keep: bool = True) -> None:
        if rev.multi_run:
            raise ValueError("a Reduce-Scatter is mirrored from a schedule whose messages carry one run each")
        self.rev = rev
        self.result_offset = result_offset
        n = rev.num_npus
        self.messages = _Messages(rev) if messages is None else messages
        self.lengths = rev.program_lengths()
        self.ops_per_rank = np.zeros(n, dtype=np.int64)
        self.scratch = np.zeros(n, dtype=np.int64)
        ranges = self.ranges(range(n))
        if len(ranges) > 1:
            self.messages.indexed()
        self.kept: _RangeLayout | None = None
        for npus in ranges:
            layout = _RangeLayout(self, npus)
            self.ops_per_rank[npus.start : npus.stop] = layout.ops_per_rank
            self.scratch[npus.start : npus.stop] = layout.scratch
            if len(ranges) == 1 and keep:
                self.kept = layout
            del layout

    def ranges(self, ranks: range) -> list[range]:
        """``ranks`` cut where the layout's ranges are cut."""
        cuts = self.rev.npu_ranges(budget_bytes=4 * REDUCE_SCATTER_PAIRS)
        return [r for r in (range(max(r.start, ranks.start), min(r.stop, ranks.stop)) for r in cuts) if len(r)]

    def emit(
        self, ops: _Columns, deps: _Deps, rank_start: np.ndarray, release: "Release | None" = None, routes: _Routes | None = None,
        ranks: range | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fill the operations of ``ranks`` (default all; rank ``ranks[i]``'s part starts at
        ``rank_start[i]``; ``release``: see :func:`reduce_scatter_algorithm`).

        Returns the op holding each chunk's full sum at its owner, and per channel the op of
        the last Reduce-Scatter SEND over it (-1: none, or not one of ``ranks``' operations).
        """
        rev = self.rev
        ranks = range(rev.num_npus) if ranks is None else ranks
        final = np.full(rev.num_chunks, -1, dtype=np.int64)
        last_send = np.full(rev.num_direct, -1, dtype=np.int64)
        for npus in self.ranges(ranks):
            layout = self.kept if self.kept is not None and self.kept.npus == npus else _RangeLayout(self, npus)
            layout.emit(ops, deps, rank_start[npus.start - ranks.start : npus.stop - ranks.start], release, routes, final, last_send)
        return final, last_send


class _RangeLayout:
    """The Reduce-Scatter's layout for the ranks ``npus``: how many operations each needs, in
    which order, from the *in* messages they receive and the *out* messages they send (a
    message is named by its position among those: ``ins``, ``outs``)."""

    def __init__(self, rs: _ReduceScatter, npus: range) -> None:
        rev = rs.rev
        c_total = rev.num_chunks
        src, dst, chunk, count = rev.src, rev.dst, rev.chunk, rev.count
        lo, width = npus.start, len(npus)
        self.rs, self.npus = rs, npus
        self.ins = ins = rs.messages.sent_by(npus)
        self.outs = outs = rs.messages.received_by(npus)
        self.in_rank = in_rank = (src[ins] - lo).astype(np.int64)
        self.out_rank = out_rank = (dst[outs] - lo).astype(np.int64)
        in_chunk, in_count, out_chunk, out_count = chunk[ins], count[ins], chunk[outs], count[outs]
        # program order: each rank's rev program backwards; element e of rank r sits at flat[r] + L_r - 1 - e
        lengths = rs.lengths[lo : npus.stop]
        flat_start = np.zeros(width + 1, dtype=np.int64)
        np.cumsum(lengths, out=flat_start[1:])
        self.in_element = flat_start[in_rank] + lengths[in_rank] - 1 - rev.send_seq[ins]  # RECV (+ REDUCEs) at p
        self.out_element = flat_start[out_rank] + lengths[out_rank] - 1 - rev.recv_seq[outs]  # SEND at x
        # chunk-level view of every in message: (in message, chunk) at p
        self.entry_in, offset = expand_runs(in_count)
        self.entry_chunk = in_chunk[self.entry_in] + offset
        self.entry_rank = entry_rank = in_rank[self.entry_in]
        owned = rev.owners(in_chunk) == src[ins]  # in messages at an owner reduce into its result
        delivery = rev.delivery(npus, into=outs, positions=True)
        # the out message of p that carries each chunk (the accumulator it reduces into; -1 at owners)
        self.entry_out = np.where(owned[self.entry_in], -1, delivery[entry_rank * c_total + self.entry_chunk])
        del delivery, offset
        # reductions: one per maximal stretch of an in message's chunks with the same accumulator
        new = np.ones(len(self.entry_in), dtype=bool)
        new[1:] = (self.entry_in[1:] != self.entry_in[:-1]) | (self.entry_out[1:] != self.entry_out[:-1])
        self.entry_reduce = np.cumsum(new) - 1
        self.reduce_in = self.entry_in[new]
        self.reduce_out = self.entry_out[new]
        self.reduce_first = self.entry_chunk[new]
        self.reduce_len = np.bincount(self.entry_reduce).astype(_I32)
        reduces_per_in = np.bincount(self.reduce_in, minlength=len(ins))
        del new
        # writers of each (rank, chunk) accumulator, in program order: sort the entries
        elements = int(flat_start[-1])
        order_key = (entry_rank * c_total + self.entry_chunk) * (elements + 1) + self.in_element[self.entry_in]
        self.by_writer = np.argsort(order_key, kind="stable")
        del order_key
        group = (entry_rank * c_total + self.entry_chunk)[self.by_writer]
        self.group_first = np.ones(len(group), dtype=bool)
        self.group_first[1:] = group[1:] != group[:-1]
        self.group_last = np.ones(len(group), dtype=bool)
        self.group_last[:-1] = group[1:] != group[:-1]
        del group
        # accumulator of each out message: in place (first in message carries exactly its chunks),
        # own slots after a COPY of the input, or none (sent from the input)
        first_writer = np.full(width * c_total, -1, dtype=np.int64)
        sorted_entries = self.by_writer[self.group_first]
        first_writer[entry_rank[sorted_entries] * c_total + self.entry_chunk[sorted_entries]] = self.entry_in[sorted_entries]
        del sorted_entries
        out_msg, out_offset = expand_runs(out_count)
        writer = first_writer[out_rank[out_msg] * c_total + out_chunk[out_msg] + out_offset]
        del first_writer, out_offset
        t = len(outs)
        has_writer = np.zeros(t, dtype=bool)
        np.logical_or.at(has_writer, out_msg, writer >= 0)
        same = np.ones(t, dtype=bool)
        candidate = writer[np.cumsum(out_count) - out_count]  # the first chunk's first writer
        np.logical_and.at(same, out_msg, writer == candidate[out_msg])
        del writer, out_msg
        safe = np.maximum(candidate, 0)
        carries_exactly = (_take(in_chunk, safe) == out_chunk) & (_take(in_count, safe) == out_count)
        self.in_place = has_writer & same & (candidate >= 0) & carries_exactly
        self.in_place_in = np.where(self.in_place, candidate, -1)
        self.copied = has_writer & ~self.in_place
        # operations per rank: owner COPY + init COPYs, then per element 1 (SEND) or 1 + reductions
        element_ops = np.zeros(elements, dtype=np.int64)
        element_ops[self.out_element] = 1
        element_ops[self.in_element] = 1 + reduces_per_in
        self.header = 1 + np.bincount(out_rank[self.copied], minlength=width)
        element_total = np.zeros(elements + 1, dtype=np.int64)
        np.cumsum(element_ops, out=element_total[1:])
        self.ops_per_rank = self.header + element_total[flat_start[1:]] - element_total[flat_start[:-1]]
        self.element_start = element_total
        self.flat_start = flat_start
        # scratch: every in message lands in count fresh slots, then the init COPYs' slots
        slots = np.zeros(elements, dtype=np.int64)
        slots[self.in_element] = in_count
        cumulative = np.cumsum(slots) - slots
        self.recv_slot = cumulative[self.in_element] - cumulative[flat_start[in_rank]]
        received = np.bincount(in_rank, weights=in_count, minlength=width).astype(np.int64)
        slots[:] = 0
        slots[self.out_element[self.copied]] = out_count[self.copied]
        cumulative = np.cumsum(slots) - slots
        self.copy_slot = received[out_rank] + cumulative[self.out_element] - cumulative[flat_start[out_rank]]
        self.scratch = received + np.bincount(out_rank[self.copied], weights=out_count[self.copied], minlength=width).astype(np.int64)

    def emit(
        self, ops: _Columns, deps: _Deps, rank_start: np.ndarray, release: "Release | None", routes: _Routes | None, final: np.ndarray,
        last_send: np.ndarray,
    ) -> None:
        """Fill the range's operations (rank ``npus[i]``'s part starts at ``rank_start[i]``); set
        ``final`` for the chunks its ranks own and ``last_send`` for the channels they send over
        (see :meth:`_ReduceScatter.emit`)."""
        rev = self.rs.rev
        c_total = rev.num_chunks
        src, dst, chunk, count = rev.src, rev.dst, rev.chunk, rev.count
        ins, outs, in_rank, out_rank = self.ins, self.outs, self.in_rank, self.out_rank
        lo, width = self.npus.start, len(self.npus)
        in_chunk, in_count, out_chunk, out_count = chunk[ins], count[ins], chunk[outs], count[outs]
        result_offset = self.rs.result_offset
        # position of every element of the flat (backwards) programs
        element_start = self.element_start
        body_offset = rank_start + self.header - element_start[self.flat_start[:-1]]  # + element_start[element]
        in_pos = body_offset[in_rank] + element_start[self.in_element]
        out_pos = body_offset[out_rank] + element_start[self.out_element]
        # header: owner COPY of its own chunks into the result, then the init COPYs
        owner_copy = rank_start
        starts = rev.owner_starts()[lo : lo + width + 1]
        buf, off = result_offset(starts[:-1])
        ops.put(owner_copy, kind=np.int8(OpKind.COPY), src_buf=np.int8(Buffer.INPUT), src_off=starts[:-1], dst_buf=buf, dst_off=off, count=np.diff(starts))
        copied = np.flatnonzero(self.copied)
        copy_pos = rank_start[out_rank[copied]] + 1 + occurrence(out_rank[copied], by=self.out_element[copied])
        ops.put(
            copy_pos, kind=np.int8(OpKind.COPY), src_buf=np.int8(Buffer.INPUT), src_off=out_chunk[copied], dst_buf=np.int8(Buffer.SCRATCH),
            dst_off=self.copy_slot[copied], count=out_count[copied],
        )
        # accumulator (scratch slot) of each out message
        acc_slot = np.full(len(outs), -1, dtype=np.int64)
        acc_slot[copied] = self.copy_slot[copied]
        in_place = np.flatnonzero(self.in_place)
        acc_slot[in_place] = self.recv_slot[self.in_place_in[in_place]]
        init_op = np.full(len(outs), -1, dtype=np.int64)
        init_op[copied] = copy_pos
        # tags: per channel, in the Reduce-Scatter's time order (the ranks' ins, and their outs,
        # hold every message of the channels they use)
        in_key, out_key = _channel_key(rev, ins), _channel_key(rev, outs)
        out_tag = rev.tag[outs]
        in_tags = (np.bincount(in_key)[in_key] - 1 - rev.tag[ins]).astype(_I32)
        out_tags = (np.bincount(out_key)[out_key] - 1 - out_tag).astype(_I32)
        if routes is not None:
            in_tags = in_tags + routes.tag_base[in_key].astype(_I32)
            ops.put(out_pos, route=routes.route[out_key].astype(_I32))
        # in messages: RECV into fresh slots
        ops.put(in_pos, kind=np.int8(OpKind.RECV), peer=dst[ins], tag=in_tags, dst_buf=np.int8(Buffer.SCRATCH), dst_off=self.recv_slot, count=in_count)
        del in_tags, in_key
        # reductions
        msg = self.reduce_in
        reduce_pos = in_pos[msg] + 1 + (np.arange(len(msg)) - np.searchsorted(msg, msg, side="left"))
        out = np.maximum(self.reduce_out, 0)
        at_owner = self.reduce_out < 0
        inplace_reduce = (~at_owner) & (_take(self.in_place_in, out) == msg)
        within_in = self.reduce_first - in_chunk[msg]
        res_buf, res_off = result_offset(self.reduce_first)
        dst_buf = np.where(at_owner, res_buf, _I32(Buffer.SCRATCH)).astype(np.int8)
        dst_off = np.where(at_owner, res_off, np.where(inplace_reduce, self.recv_slot[msg], _take(acc_slot, out) + self.reduce_first - _take(out_chunk, out)))
        src_buf = np.where(inplace_reduce, _I32(Buffer.INPUT), _I32(Buffer.SCRATCH)).astype(np.int8)
        src_off = np.where(inplace_reduce, in_chunk[msg], self.recv_slot[msg] + within_in)
        ops.put(reduce_pos, kind=np.int8(OpKind.REDUCE), src_buf=src_buf, src_off=src_off, dst_buf=dst_buf, dst_off=dst_off, count=self.reduce_len)
        del dst_buf, dst_off, src_buf, src_off, within_in, out, at_owner, inplace_reduce
        deps.add(reduce_pos, in_pos[msg])
        # each accumulator chunk: writers in program order; a writer waits for the previous one
        # (the first: for the owner COPY, or the init COPY; in-place accumulators start with their RECV)
        writer_op = reduce_pos[self.entry_reduce]
        entries = self.by_writer
        prev_writer = np.empty(len(entries), dtype=np.int64)
        prev_writer[1:] = writer_op[entries[:-1]]
        opens = self.group_first
        e_out = self.entry_out[entries[opens]]
        prev_writer[opens] = np.where(e_out < 0, owner_copy[self.entry_rank[entries[opens]]], _take(init_op, np.maximum(e_out, 0)))
        deps.add_many(writer_op[entries], prev_writer)
        del prev_writer, e_out
        # out messages: SEND the accumulated sums (or the bare input)
        has_acc = acc_slot >= 0
        ops.put(
            out_pos, kind=np.int8(OpKind.SEND), peer=src[outs], tag=out_tags if routes is None else out_tags + routes.tag_base[out_key].astype(_I32),
            src_buf=np.where(has_acc, _I32(Buffer.SCRATCH), _I32(Buffer.INPUT)).astype(np.int8),
            src_off=np.where(has_acc, acc_slot, out_chunk), count=out_count,
        )
        last_writer = np.full(width * c_total, -1, dtype=np.int64)
        last = entries[self.group_last]
        last_writer[self.entry_rank[last] * c_total + self.entry_chunk[last]] = writer_op[last]
        del writer_op, last
        out_msg, out_offset = expand_runs(out_count)
        waits = last_writer[out_rank[out_msg] * c_total + out_chunk[out_msg] + out_offset]
        waits = np.where((waits < 0) & self.copied[out_msg], init_op[out_msg], waits)
        deps.add_many(out_pos[out_msg], waits)
        del waits, out_msg, out_offset
        # one message at a time per direct channel: in Reduce-Scatter time, the previous SEND
        # over a channel is the next one in the mirrored schedule
        direct_channel = rev.channel[outs] >= 0
        direct = np.flatnonzero(direct_channel & (out_tags > 0))
        deps.add(out_pos[direct], out_pos[_on_channel(out_key, out_tag, direct, 1)])
        if release is not None:  # out messages released when an op of their rank completes
            anchored = np.flatnonzero(release.anchor[outs] != NO_ANCHOR)
            anchor = release.anchor[outs[anchored]]
            is_out = release.anchor_is_out[outs[anchored]]
            target = np.empty(len(anchored), dtype=np.int64)
            target[is_out] = out_pos[np.searchsorted(outs, anchor[is_out])]
            target[~is_out] = in_pos[np.searchsorted(ins, anchor[~is_out])]
            deps.add(out_pos[anchored], target)
        # results: the chunks these ranks own, the channels they send over
        chunks = np.arange(starts[0], starts[-1])
        owner = rev.owners(chunks) - lo
        found = last_writer[owner * c_total + chunks]
        final[chunks] = np.where(found >= 0, found, owner_copy[owner])
        opening = np.flatnonzero(direct_channel & (out_tag == 0))
        last_send[rev.channel[outs[opening]]] = out_pos[opening]


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
    routing: ChannelRouting | None = None, ranks: range | None = None,
) -> CollectiveAlgorithm:
    """Reduce-Scatter from an All-Gather schedule on the reversed channels (see the module
    docstring; ``routing``: the channels' routes, forwards, when pairs share channels;
    ``ranks``: only these ranks' operations, exactly as the whole algorithm has them).

    A schedule of unequal shares (:attr:`Schedule.owner_start`) gives every rank the output of
    its own share: a layout for timing the phase of an All-Reduce, not a Reduce-Scatter's
    postcondition (which gives every rank ``K`` chunks)."""
    rs = _ReduceScatter(rev, result_offset=_share_offset(rev))
    algo = _reduce_scatter(rs, size_bytes=size_bytes, name=name, provenance=provenance, release=release, routing=routing, ranks=ranks)
    return algo if rev.owner_start is None else replace(algo, output_chunks=np.diff(rev.owner_starts())[ranks.start : ranks.stop] if ranks is not None else np.diff(rev.owner_starts()))


def _share_offset(rev: Schedule):
    """A Reduce-Scatter's result offset of chunk ``c``: its place in its owner's share."""
    starts = rev.owner_starts()
    return lambda c: (np.int8(Buffer.OUTPUT), c - starts[rev.owners(c)])


def _reduce_scatter(
    rs: _ReduceScatter, *, size_bytes: int, name: str, provenance: dict[str, str] | None, release: Release | None = None,
    routing: ChannelRouting | None = None, ranks: range | None = None,
) -> CollectiveAlgorithm:
    rev = rs.rev
    ranks = range(rev.num_npus) if ranks is None else ranks
    routes = _Routes.of(routing, rev)
    ops = _Columns(rs.ops_per_rank[ranks.start : ranks.stop], routed=routes is not None, first_rank=ranks.start)
    deps = _Deps(ops.size)
    rs.emit(ops, deps, ops.starts[:-1], release, routes, ranks)
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
    ranks: range | None = None,
) -> CollectiveAlgorithm:
    """All-Reduce: the Reduce-Scatter of ``rev`` (``release``: see :class:`Release`) then the
    All-Gather ``all_gather`` (``routing``: the channels' routes, when pairs share channels;
    ``ranks``: only these ranks' operations, exactly as the whole algorithm has them).
    Both schedules own the same chunks (:meth:`Schedule.owner_starts`; unequal shares change
    which rank reduces what, not the All-Reduce's pre- and postcondition)."""
    if not np.array_equal(rev.owner_starts(), all_gather.owner_starts()):
        raise ValueError("the Reduce-Scatter and the All-Gather of an All-Reduce must own the same chunks")
    rs = _ReduceScatter(rev, result_offset=lambda c: (np.int8(Buffer.OUTPUT), c))
    return _all_reduce(
        rs, all_gather, rs.messages.like(all_gather), np.bincount(_channel_key(rev), minlength=rev.num_channels),
        size_bytes=size_bytes, name=name, provenance=provenance, release=release, routing=routing, ranks=ranks,
    )


def _all_reduce(
    rs: _ReduceScatter, all_gather: Schedule, gather: _Messages, rs_messages: np.ndarray, *, size_bytes: int, name: str,
    provenance: dict[str, str] | None, release: Release | None = None, routing: ChannelRouting | None = None, ranks: range | None = None,
    gather_lengths: np.ndarray | None = None,
) -> CollectiveAlgorithm:
    """``rs_messages``: the Reduce-Scatter's messages per channel key (the All-Gather's tags over
    a pair continue after them); ``gather_lengths``: the All-Gather's program lengths, if known."""
    n = all_gather.num_npus
    ranks = range(n) if ranks is None else ranks
    routes = _Routes.of(routing, rs.rev, all_gather)
    gather_lengths = all_gather.program_lengths() if gather_lengths is None else gather_lengths
    rs_ops = rs.ops_per_rank[ranks.start : ranks.stop]
    ops = _Columns(rs_ops + gather_lengths[ranks.start : ranks.stop], routed=routes is not None, first_rank=ranks.start)
    deps = _Deps(ops.size)
    final, last_send = rs.emit(ops, deps, ops.starts[:-1], release, routes, ranks)
    body_start = np.zeros(n, dtype=np.int64)
    body_start[ranks.start : ranks.stop] = ops.starts[:-1] + rs_ops
    _add_all_gather(  # both schedules number the same channels
        ops, deps, all_gather, body_start, from_input=False, tag_offset=rs_messages, owner_ready=final, channel_after=last_send, routes=routes,
        ranks=ranks, messages=gather,
    )
    return _algorithm(Collective.ALL_REDUCE, all_gather, ops.table(deps), size_bytes, name, provenance, scratch=rs.scratch, routing=routing)


def lowered_in_parts(
    collective: Collective, schedules: Sequence[Schedule], *, size_bytes: int, name: str = "tacos", provenance: dict[str, str] | None = None,
) -> AlgorithmParts:
    """``collective`` of ``schedules`` -- ``(all_gather,)``, ``(rev,)`` for a Reduce-Scatter or
    ``(rev, all_gather)`` for an All-Reduce, without routes -- as
    :class:`~chakra_collectives.ir.parts.AlgorithmParts`: lowered a range of ranks at a time by
    the writer, each part exactly the whole algorithm's operations of its ranks. What the parts
    share is worked out here, once, before any writer forks: the messages sorted by NPU (8
    bytes a message; a mirrored All-Reduce's phases share them), a Reduce-Scatter's operations
    and scratch per rank (its layout, a range at a time).

    >>> from chakra_collectives.synth.tacos import tacos
    >>> from chakra_collectives.topology import torus2d
    >>> phases = [p.schedule for p in tacos(torus2d(3, 3), Collective.ALL_REDUCE, 2**20).phases]
    >>> parts = lowered_in_parts(Collective.ALL_REDUCE, phases, size_bytes=2**20)
    >>> whole = all_reduce_algorithm(*phases, size_bytes=2**20)
    >>> parts.num_ops == whole.num_ops, parts.lower(range(3, 5)).num_ops == int(whole.rank_bounds()[5] - whole.rank_bounds()[3])
    (True, True)
    """
    first = schedules[0]
    n, k = first.num_npus, first.chunks_per_npu
    messages = _Messages(first).indexed()
    common = {"size_bytes": size_bytes, "name": name, "provenance": provenance}
    if collective is Collective.ALL_GATHER:
        lengths = 1 + first.program_lengths()

        def lower(ranks: range) -> CollectiveAlgorithm:
            return _all_gather(first, messages, ranks=ranks, **common)

    elif collective is Collective.REDUCE_SCATTER:
        rs = _ReduceScatter(first, result_offset=_share_offset(first), messages=messages, keep=False)
        lengths = rs.ops_per_rank

        def lower(ranks: range) -> CollectiveAlgorithm:
            return _reduce_scatter(rs, ranks=ranks, **common)

    else:
        gather_schedule = schedules[1]
        rs = _ReduceScatter(first, result_offset=lambda c: (np.int8(Buffer.OUTPUT), c), messages=messages, keep=False)
        gather = messages.like(gather_schedule).indexed()
        gather_lengths = gather_schedule.program_lengths()
        rs_messages = np.bincount(_channel_key(first), minlength=first.num_channels)
        lengths = rs.ops_per_rank + gather_lengths

        def lower(ranks: range) -> CollectiveAlgorithm:
            return _all_reduce(rs, gather_schedule, gather, rs_messages, ranks=ranks, gather_lengths=gather_lengths, **common)

    further = sum(2 * s.further_runs for s in schedules)  # a message's SEND and RECV each list its further runs
    return AlgorithmParts(collective, n, n * k, size_bytes, lengths, lower, provenance=dict(provenance or {}), further_runs=further)


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
