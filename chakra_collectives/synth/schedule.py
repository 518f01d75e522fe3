"""The schedule of an All-Gather as TACOS's matcher writes it and the lowering and BFB read it.

:class:`Schedule` holds every message as columns (a message carries a run of consecutive
chunks, or several runs: :meth:`Schedule.runs`); :func:`expand_runs` and :func:`run_blocks` turn
runs into chunks a block at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from chakra_collectives.ir.ops import split_runs

NO_ANCHOR = -1


class RunPlan(Protocol):
    """Runs of chunks worked out on demand from a plan's own description (a schedule too large to
    hold every run: :mod:`~chakra_collectives.synth.torus_trees` at 16,384 NPUs, 268M runs)."""

    further_runs: int
    """Runs beyond every message's first, all messages together, or a bound above that."""

    def runs(self, ids: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(message, first, length)`` of every run of the messages ``ids`` sent by ``src``, as :meth:`Schedule.runs`."""

    def in_order(self, order: np.ndarray) -> "RunPlan":
        """The same plan for its messages taken in ``order`` (message ``i`` is given message ``order[i]``)."""


@dataclass(frozen=True)
class Schedule:
    """Every message of an All-Gather schedule (columns, in decision order = start-time order).

    A message carries ``count`` chunks: the run ``chunk ..`` and, when :attr:`more_ptr` is set,
    the further runs ``more_chunk[j] .. more_chunk[j] + more_count[j] - 1`` for ``j`` in
    ``more_ptr[i] : more_ptr[i + 1]`` (the first run then has ``count`` minus theirs);
    :meth:`runs` lists them all.
    ``send_seq`` / ``recv_seq`` place the message's send and receive in their NPU's *program*:
    the sequence of all sends and receives of that NPU in time order (at one instant receives
    first, then sends; ties in transfer order), numbered from 0.
    """

    num_npus: int
    chunks_per_npu: int
    chunk: np.ndarray
    count: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    start: np.ndarray
    end: np.ndarray
    channel: np.ndarray
    """Index of a direct channel (>= 0) or ``-1 - i`` for routed channel ``i``."""
    tag: np.ndarray
    """The message's index among the messages over its channel (one channel per NPU pair)."""
    send_seq: np.ndarray
    recv_seq: np.ndarray
    anchor: np.ndarray
    """For routed sends: the transfer whose operation on ``src`` completes at ``start``
    (``NO_ANCHOR``: none needed); see :attr:`anchor_is_send`."""
    anchor_is_send: np.ndarray
    """True: the anchor is that transfer's SEND (``src`` sent it); False: its RECV on ``src``."""
    max_chunks: int = 1
    """The largest message cap the matcher allowed (1: no merging)."""
    num_direct: int = 0
    """Direct channels of the :class:`~chakra_collectives.synth.channels.Channels` matched (channel keys ``>= num_direct`` are routed)."""
    num_routed: int = 0
    owner_start: np.ndarray | None = None
    """Unequal shares (:mod:`~chakra_collectives.synth.shares`): NPU ``i`` owns chunks
    ``owner_start[i] .. owner_start[i + 1] - 1`` (``num_npus + 1`` offsets from 0 to
    :attr:`num_chunks`); ``None``: ``chunks_per_npu`` each, chunk ``c`` on NPU ``c // chunks_per_npu``."""
    more_ptr: np.ndarray | None = None
    """CSR index of every message's further runs into :attr:`more_chunk` / :attr:`more_count`
    (``None``: every message is one run)."""
    more_chunk: np.ndarray | None = None
    more_count: np.ndarray | None = None
    run_plan: RunPlan | None = None
    """Every message's runs worked out when asked for instead of held (then :attr:`more_ptr` is ``None``)."""

    @property
    def multi_run(self) -> bool:
        """Some message carries more than one run of consecutive chunks."""
        return self.run_plan is not None or (self.more_ptr is not None and len(self.more_chunk) > 0)

    @property
    def further_runs(self) -> int:
        """Runs beyond every message's first (a :attr:`run_plan`'s: at most this many)."""
        if self.run_plan is not None:
            return self.run_plan.further_runs
        return len(self.more_chunk) if self.more_ptr is not None else 0

    def of_several_runs(self, ids: np.ndarray) -> np.ndarray:
        """The messages of ``ids`` that may carry more than one run (a :attr:`run_plan`'s: all)."""
        if self.run_plan is not None:
            return ids
        if not self.multi_run:
            return ids[:0]
        return ids[self.more_ptr[ids + 1] > self.more_ptr[ids]]

    def runs(self, ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(message, first, length)`` of every run of the messages ``ids`` (default: all), message
        by message, each message's runs in order.

        >>> s = Schedule(2, 2, *[np.array(v) for v in ([0, 2], [3, 1])], *[np.zeros(2, np.int32)] * 10,
        ...              more_ptr=np.array([0, 1, 1]), more_chunk=np.array([3]), more_count=np.array([1]))
        >>> [v.tolist() for v in s.runs()]           # message 0: chunks 0, 1 and 3
        [[0, 0, 1], [0, 3, 2], [2, 1, 1]]
        """
        ids = np.arange(self.num_transfers, dtype=np.int64) if ids is None else np.asarray(ids)
        if self.run_plan is not None:
            return self.run_plan.runs(ids, self.src[ids])
        if not self.multi_run:
            return ids, self.chunk[ids], self.count[ids]
        return split_runs(ids, self.chunk[ids], self.count[ids], self.more_ptr, self.more_chunk, self.more_count)

    def chunks_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(message, chunk)`` for every chunk the messages ``ids`` carry, in order."""
        message, first, length = self.runs(ids)
        run, offset = expand_runs(length)
        return message[run], first[run] + offset

    @property
    def num_channels(self) -> int:
        return self.num_direct + self.num_routed

    @property
    def time_ns(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0

    @property
    def num_transfers(self) -> int:
        """Messages (a merged message counts once)."""
        return len(self.chunk)

    @property
    def num_chunks(self) -> int:
        return self.num_npus * self.chunks_per_npu

    def owner_starts(self) -> np.ndarray:
        """:attr:`owner_start`, or the equal shares' offsets ``0, K, 2K, ..., N K``."""
        if self.owner_start is not None:
            return self.owner_start
        return np.arange(self.num_npus + 1, dtype=np.int64) * self.chunks_per_npu

    def owners(self, chunks: np.ndarray) -> np.ndarray:
        """The NPU that owns each of ``chunks`` (at the start of an All-Gather, at the end of a Reduce-Scatter).

        >>> empty = [np.zeros(0, np.int32)] * 12
        >>> Schedule(2, 2, *empty).owners(np.arange(4)).tolist(), Schedule(2, 2, *empty, owner_start=np.array([0, 3, 4])).owners(np.arange(4)).tolist()
        ([0, 0, 1, 1], [0, 0, 0, 1])
        """
        if self.owner_start is None:
            return np.asarray(chunks) // self.chunks_per_npu
        return np.searchsorted(self.owner_start, chunks, side="right") - 1

    def program_lengths(self) -> np.ndarray:
        """Sends plus receives of every NPU."""
        n = self.num_npus
        return np.bincount(self.src, minlength=n) + np.bincount(self.dst, minlength=n)

    def delivery(self, npus: range | None = None, *, into: np.ndarray | None = None, positions: bool = False) -> np.ndarray:
        """``index[(npu - npus.start) * C + chunk]``: the transfer that delivered ``chunk`` to
        ``npu`` (-1: its owner), for the NPUs ``npus`` (default: all of them; a range of rows
        needs ``len(npus) * C`` entries, not ``N * C``). ``into``: the transfers into ``npus``,
        ascending, when the caller has them (else found by a pass over all transfers);
        ``positions``: each entry is the transfer's position in ``into`` instead of its id.

        >>> s = Schedule(2, 1, *[np.array(v, np.int32) for v in ([0, 1], [1, 1], [0, 1], [1, 0])], *[np.zeros(2, np.int32)] * 8)
        >>> s.delivery().tolist(), s.delivery(range(1, 2), into=np.array([0], np.int32), positions=True).tolist()
        ([-1, 1, 0, -1], [0, -1])
        """
        c = self.num_chunks
        npus = range(self.num_npus) if npus is None else npus
        index = np.full(len(npus) * c, -1, dtype=np.int32)
        if into is None:
            into = np.arange(self.num_transfers, dtype=np.int32) if len(npus) == self.num_npus else np.flatnonzero((self.dst >= npus.start) & (self.dst < npus.stop)).astype(np.int32)
        for block in run_blocks(self.count[into]):  # a block's chunks at a time: temporaries stay small
            at, offset = expand_runs(self.count[into[block]])
            at = at + np.int32(block.start)
            ids = into[at]
            chunks = self.chunks_of(into[block])[1] if self.multi_run else self.chunk[ids] + offset
            index[(self.dst[ids].astype(np.int64) - npus.start) * c + chunks] = at if positions else ids
        return index

    def npu_ranges(self, budget_bytes: int | None = None) -> list[range]:
        """Consecutive ranges of NPUs whose :meth:`delivery` rows take at most ``budget_bytes``
        (default :data:`DELIVERY_BYTES`; at least one NPU each).

        >>> Schedule(3, 2, *[np.zeros(0, np.int32)] * 12).npu_ranges(budget_bytes=48)   # 6 chunks: 24 bytes a row
        [range(0, 2), range(2, 3)]
        """
        rows = max(1, (DELIVERY_BYTES if budget_bytes is None else budget_bytes) // (4 * self.num_chunks))
        return [range(start, min(start + rows, self.num_npus)) for start in range(0, self.num_npus, rows)]


DELIVERY_BYTES = 64 * 2**20
"""Bytes of delivery index (:meth:`Schedule.delivery`) the lowering lays out at once: the rows of
1,024 NPUs at 16,384 chunks (a whole 16,384-NPU index is 1 GiB)."""


def expand_runs(count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(message, offset)`` for every chunk of messages of ``count`` chunks (offset inside its run).

    >>> ids, offset = expand_runs(np.array([1, 3, 2]))
    >>> ids.tolist(), offset.tolist()
    ([0, 1, 1, 1, 2, 2], [0, 0, 1, 2, 0, 1])
    """
    count = np.asarray(count)
    ids = np.repeat(np.arange(len(count), dtype=np.int32), count)
    starts = np.cumsum(count) - count
    offset = np.arange(len(ids), dtype=np.int32) - np.repeat(starts, count).astype(np.int32)
    return ids, offset


RUN_BLOCK_CHUNKS = 2**20
"""Chunks of runs :func:`run_blocks` puts in one block by default (a block's expansion takes
about 30 MB)."""


def run_blocks(count: np.ndarray, max_chunks: int | None = None) -> list[slice]:
    """Consecutive slices of messages of ``count`` chunks, each carrying at most ``max_chunks``
    chunks (or one message, if larger): per-chunk work (``expand_runs``) done block by block
    needs memory for a block, not for every (NPU, chunk) pair of a 16,384-NPU schedule.

    >>> run_blocks(np.array([2, 2, 3, 1]), max_chunks=4)
    [slice(0, 2, None), slice(2, 4, None)]
    >>> run_blocks(np.array([5, 1]), max_chunks=4)
    [slice(0, 1, None), slice(1, 2, None)]
    """
    max_chunks = RUN_BLOCK_CHUNKS if max_chunks is None else max_chunks
    ends = np.cumsum(count, dtype=np.int64)
    blocks, start = [], 0
    while start < len(count):
        base = ends[start - 1] if start else 0
        stop = max(int(np.searchsorted(ends, base + max_chunks, side="right")), start + 1)
        blocks.append(slice(start, stop))
        start = stop
    return blocks


def from_messages(
    n: int, k: int, num_direct: int, chunk: np.ndarray, count: np.ndarray, src: np.ndarray, dst: np.ndarray, start: np.ndarray,
    end: np.ndarray, channel: np.ndarray, more: tuple[np.ndarray, np.ndarray, np.ndarray] | RunPlan | None = None,
) -> Schedule:
    """The :class:`Schedule` of messages over direct channels given in any order: put in start
    order (ties in the given order), with their tags and program positions (at one instant an NPU
    receives first, then sends). ``more``: ``(ptr, first, length)``, every message's further runs
    in CSR form indexed as given (``count`` is all its chunks), or a :class:`RunPlan` of the
    messages as given that works them out when asked.

    >>> s = from_messages(2, 1, 2, *[np.array(v) for v in ([1, 0], [1, 1], [1, 0], [0, 1], [5.0, 0.0], [9.0, 4.0], [1, 0])])
    >>> s.chunk.tolist(), s.tag.tolist(), s.send_seq.tolist(), s.recv_seq.tolist()
    ([0, 1], [0, 0], [0, 1], [0, 1])
    """
    m = len(start)
    order = np.lexsort((np.arange(m), start))
    chunk, count, src, dst, start, end, channel = (np.asarray(c)[order] for c in (chunk, count, src, dst, start, end, channel))
    src, dst, channel = src.astype(np.int64), dst.astype(np.int64), channel.astype(np.int64)
    index = np.arange(m)
    tag = np.empty(m, dtype=np.int64)
    by_channel = np.lexsort((index, channel))
    first = np.searchsorted(channel[by_channel], channel[by_channel], side="left")
    tag[by_channel] = index - first
    npu = np.concatenate([dst, src])
    time = np.concatenate([end, start])
    is_send = np.concatenate([np.zeros(m, np.int8), np.ones(m, np.int8)])
    program = np.lexsort((np.concatenate([index, index]), is_send, time, npu))
    position = np.empty(2 * m, dtype=np.int64)
    first = np.searchsorted(npu[program], npu[program], side="left")
    position[program] = np.arange(2 * m) - first
    del npu, time, is_send, program, first, by_channel  # before the runs are gathered: at torus2d:64x64, 150 MiB
    runs: dict = {}
    if more is not None and not isinstance(more, tuple):
        runs = {"run_plan": more.in_order(order)}
    elif more is not None:
        ptr, more_first, more_length = more
        per = np.diff(ptr)[order]
        new_ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(per, out=new_ptr[1:])
        index = np.int32 if new_ptr[-1] < 2**31 else np.int64  # the gather of every run: 4 bytes a run where they fit
        taken = np.repeat((ptr[:-1][order] - new_ptr[:-1]).astype(index), per)
        taken += np.arange(int(new_ptr[-1]), dtype=index)
        runs = {"more_ptr": new_ptr, "more_chunk": more_first[taken].astype(np.int32, copy=False), "more_count": more_length[taken].astype(np.int32, copy=False)}
    i32 = np.int32
    return Schedule(
        num_npus=n, chunks_per_npu=k, chunk=chunk.astype(i32), count=count.astype(i32), src=src.astype(i32), dst=dst.astype(i32),
        start=start.astype(np.float64), end=end.astype(np.float64), channel=channel.astype(i32), tag=tag.astype(i32), send_seq=position[m:].astype(i32),
        recv_seq=position[:m].astype(i32), anchor=np.broadcast_to(i32(NO_ANCHOR), (m,)), anchor_is_send=np.broadcast_to(False, (m,)),
        max_chunks=int(count.max(initial=1)), num_direct=num_direct, **runs,
    )


__all__ = ["DELIVERY_BYTES", "NO_ANCHOR", "RUN_BLOCK_CHUNKS", "RunPlan", "Schedule", "expand_runs", "from_messages", "run_blocks"]
