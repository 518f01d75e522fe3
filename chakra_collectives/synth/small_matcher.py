"""The TACOS matcher of :mod:`.matcher` for small networks of direct links, on Python integers.

:func:`~chakra_collectives.synth.matcher.match_all_gather` keeps every NPU's held and wanted
chunks as rows of numpy bitsets and matches all channels freed at one instant together: the
right shape for thousands of NPUs, but at 64 NPUs a matching is almost all numpy call overhead
(some 300 calls per event on arrays of a few hundred bytes). Here each bitset is one Python
integer and each channel is matched by a few integer operations, making the same decisions in
the same order and drawing the same random numbers from the generator: the schedule is the
same, column for column (``tests/test_small_matcher.py`` compares them), only faster, up to
:data:`SMALL_CHUNKS` chunks (a 256-NPU mesh, All-Gather of 64 MiB: 1.8-3.3x per matching).

Only direct channels: a network with switches (routed channels) is matched by
:mod:`.matcher` at every size.

>>> from chakra_collectives.synth.channels import build_channels
>>> from chakra_collectives.topology import ring
>>> ch = build_channels(ring(4), chunk_bytes=2**20)
>>> schedule = match_small(ch, 1, np.random.default_rng(0), np.ones(ch.num_direct, dtype=np.int32))
>>> len(schedule.chunk), schedule.time_ns == 2 * float(ch.hop_ns(ch.direct_link[:1], 1)[0])   # 12 chunks moved, two hops deep
(12, True)
"""

from __future__ import annotations

import heapq

import numpy as np

from chakra_collectives import progress
from chakra_collectives.ir.grouping import occurrence
from chakra_collectives.synth.channels import Channels
from chakra_collectives.synth.schedule import NO_ANCHOR, Schedule

SMALL_CHUNKS = 512
"""Chunks (NPUs x chunks per NPU) up to which a network of direct links only is matched here
rather than by :mod:`.matcher`'s numpy bitsets. One matching, All-Gather of 64 MiB, numpy / here
in CPU seconds, same run at load ~12: mesh2d:8x8 K=1 0.014 / 0.014, K=2 (ratio 40) 0.030 /
0.021; mesh2d:16x16 K=1 ratio 20 0.70 / 0.40, ratio 40 extending 1.10 / 0.34; torus2d:16x16
0.59 / 0.32. At 1,024 chunks it still won (mesh2d:32x32 9.3 / 5.0 s, torus2d:32x32 4.9 / 4.2 s)
but from 1,024 NPUs the numpy matcher is the one tuned for scale."""

_INF = float("inf")


def uses_small(channels: Channels, chunks_per_npu: int) -> bool:
    """Whether :func:`match_small` serves this matching (direct links only, at most :data:`SMALL_CHUNKS` chunks).

    >>> from chakra_collectives.synth.channels import build_channels
    >>> from chakra_collectives.topology import mesh2d, switch
    >>> uses_small(build_channels(mesh2d(8, 8), chunk_bytes=2**20), 1), uses_small(build_channels(switch(8), chunk_bytes=2**20), 1)
    (True, False)
    """
    return not channels.routed and channels.num_direct > 0 and channels.num_npus * chunks_per_npu <= SMALL_CHUNKS


def match_small(
    channels: Channels, k: int, rng: np.random.Generator, cap: np.ndarray, *, extend_held: bool = False, reach_back: bool = False
) -> Schedule:
    """:func:`~chakra_collectives.synth.matcher.match_all_gather` on direct channels only, with
    ``rng`` as its generator and ``cap`` chunks per message on each channel
    (:func:`~chakra_collectives.synth.matcher.message_caps`); see the module docstring."""
    return _SmallMatcher(channels, k, rng, cap.tolist(), extend_held, reach_back).run()


_SET_BITS = tuple(tuple(i for i in range(8) if byte >> i & 1) for byte in range(256))
"""The set bits of every byte, lowest first."""

_WORD = (1 << 64) - 1


def _select(bits: int, pick: int) -> int:
    """The index of the ``pick``-th set bit (from 0, lowest first) of ``bits``.

    >>> _select(0b101100, 0), _select(0b101100, 2), _select(1 << 200 | 1, 1)
    (2, 5, 200)
    """
    position = 0
    word = bits & _WORD
    ones = word.bit_count()
    while pick >= ones:  # whole 64-bit words first
        pick -= ones
        bits >>= 64
        position += 64
        word = bits & _WORD
        ones = word.bit_count()
    low = word & 0xFFFFFFFF
    ones = low.bit_count()
    if pick >= ones:
        pick -= ones
        word >>= 32
        position += 32
    else:
        word = low
    low = word & 0xFFFF
    ones = low.bit_count()
    if pick >= ones:
        pick -= ones
        word >>= 16
        position += 16
    else:
        word = low
    low = word & 0xFF
    ones = low.bit_count()
    if pick >= ones:
        return position + 8 + _SET_BITS[word >> 8][pick - ones]
    return position + _SET_BITS[low][pick]


class _SmallMatcher:
    """One matching; the comments name the step of :class:`~chakra_collectives.synth.matcher._Matcher` each follows."""

    def __init__(self, channels: Channels, k: int, rng: np.random.Generator, cap: list[int], extend_held: bool, reach_back: bool) -> None:
        n = channels.num_npus
        self.n, self.k, self.rng = n, k, rng
        self.cap, self.max_cap = cap, max(max(cap, default=1), 1)
        self.one_cap = len(set(cap)) == 1
        self.extend_held, self.reach_back = extend_held, reach_back
        self.direct_src, self.direct_dst = channels.direct_src, channels.direct_dst
        self.src, self.dst = self.direct_src.tolist(), self.direct_dst.tolist()
        links = channels.direct_link
        self.latency = channels.link_latency[links].tolist()
        self.rate = channels.link_rate[links].tolist()
        self.chunk_bytes = channels.chunk_bytes
        self.num_direct = len(self.src)
        block = (1 << k) - 1
        self.own = [block << (npu * k) for npu in range(n)]
        everything = (1 << (n * k)) - 1
        self.held = list(self.own)
        self.wanted = [everything & ~own for own in self.own]
        self.remaining = n * n * k - n * k
        self.in_neighbours: list[list[int]] = [[] for _ in range(n)]
        self.out_channels: list[list[int]] = [[] for _ in range(n)]
        for c, (s, d) in enumerate(zip(self.src, self.dst)):
            self.in_neighbours[d].append(s)
            self.out_channels[s].append(c)
        self.busy_until = [_INF] * self.num_direct
        self.carrying = [-1] * self.num_direct
        self.scarce: dict[int, tuple[int, int]] = {}
        """Per destination matched at this instant: the chunks exactly one / two of its direct in-neighbours hold (found when needed)."""
        self.ending: dict[float, list[int]] = {}
        """Channels by the instant their message arrives."""
        self.instants: list[float] = []
        """Those instants, a heap."""
        self.log: list[tuple[int, int, int, float, float]] = []
        """Every message: channel, first chunk, chunks, start and arrival (ns)."""

    def run(self) -> Schedule:
        t = 0.0
        received: list[int] | None = None  # at t = 0 every NPU "received" its own chunks
        freed: list[int] = []
        pairs = self.remaining
        with progress.task("match chunks to links", total=pairs, unit="(NPU, chunk) pairs") as matched:
            while True:
                self._match(t, received, freed)
                matched.update(pairs - self.remaining)
                if not self.instants:
                    break
                t = heapq.heappop(self.instants)
                received, freed = self._arrive(t)
        if self.remaining:
            raise RuntimeError(f"matching stopped with {self.remaining} (NPU, chunk) pairs unserved: is the topology connected?")
        return self._schedule()

    def _arrive(self, t: float) -> tuple[list[int], list[int]]:
        """``_arrive``: deliver every message arriving at ``t``; the NPUs that received and the channels freed."""
        done = sorted(self.ending.pop(t))
        held, dst, log, busy, carrying = self.held, self.dst, self.log, self.busy_until, self.carrying
        received = []
        for c in done:
            _, first, m, _, _ = log[carrying[c]]
            d = dst[c]
            held[d] |= ((1 << m) - 1) << first
            received.append(d)
            busy[c] = _INF
            carrying[c] = -1
        return received, done

    def _match(self, t: float, received: list[int] | None, freed: list[int]) -> None:
        """``_match_direct``: every free channel that may have a new candidate, destination by
        destination in rounds (most constrained channel first, random among equals)."""
        if not self.remaining:
            return
        src, dst, held, wanted, busy = self.src, self.dst, self.held, self.wanted, self.busy_until
        if received is None:
            woken = range(self.num_direct)
        else:
            woken = set(freed)
            for npu in set(received):
                woken.update(self.out_channels[npu])
            woken = sorted(woken)
        active, targets, options = [], [], []
        for c in woken:
            if busy[c] == _INF:
                d = dst[c]
                ways = (held[src[c]] & wanted[d]).bit_count()
                if ways:
                    active.append(c)
                    targets.append(d)
                    options.append(ways)
        if not active:
            return
        rounds: list[list[int]] = []
        self.scarce = {}
        previous, j = -1, 0
        for d, _, _, c in sorted(zip(targets, options, self.rng.random(len(active)).tolist(), active)):
            if d != previous:
                previous, j = d, 0
            else:
                j += 1
            if j == len(rounds):
                rounds.append([c])
            else:
                rounds[j].append(c)
        messages: list[tuple[int, int, int]] = []
        for sel in rounds:
            messages += self._round(sel)
        self._record(t, messages)

    def _scarce_levels(self, d: int) -> tuple[int, int]:
        """The chunks exactly one / exactly two of ``d``'s direct in-neighbours hold."""
        one = two = three = 0
        held = self.held
        for s in self.in_neighbours[d]:
            h = held[s]
            three |= two & h
            two |= one & h
            one |= h
        return one & ~two, two & ~three

    def _round(self, sel: list[int]) -> list[tuple[int, int, int]]:
        """One round (at most one channel per destination): ``(channel, first chunk, count)`` per
        message, drawn at once (``_scarcest`` and ``_pick_runs``)."""
        src, dst, held, wanted, cap, scarce = self.src, self.dst, self.held, self.wanted, self.cap, self.scarce
        rows = []  # (channel, candidates, where the message may start)
        if self.one_cap:
            longest_cap = cap[0]
            merging = longest_cap > 1
        else:
            merging = any(cap[c] > 1 for c in sel)
            longest_cap = max(cap[c] for c in sel)
        for c in sel:
            d = dst[c]
            cand = held[src[c]] & wanted[d]
            if cand:
                if cand & (cand - 1):  # several candidates: the scarcest (the held ones at this instant)
                    levels = scarce.get(d)
                    if levels is None:
                        levels = scarce[d] = self._scarce_levels(d)
                    pool = cand & levels[0] or cand & levels[1] or cand
                else:
                    pool = cand
                if merging and cap[c] > 1:
                    pool = self._starts(pool, cand, d, longest_cap)
                rows.append((c, cand, pool))
        if not rows:
            return []
        out = []
        draws = self.rng.random(len(rows)).tolist()
        if not merging:
            for (c, _, pool), u in zip(rows, draws):
                pick = int(u * pool.bit_count())
                first = _select(pool, pick) if pick else (pool & -pool).bit_length() - 1
                wanted[dst[c]] &= ~(1 << first)
                out.append((c, first, 1))
            return out
        for (c, cand, pool), u in zip(rows, draws):
            pick = int(u * pool.bit_count())
            first = _select(pool, pick) if pick else (pool & -pool).bit_length() - 1
            count = 1
            if cap[c] > 1:
                s = src[c]
                same = cand & self.own[s] if first // self.k == s else cand & ~self.own[s]
                after = same >> first
                count = min((~after & (after + 1)).bit_length() - 1, cap[c])
            wanted[dst[c]] &= ~(((1 << count) - 1) << first)
            out.append((c, first, count))
        return out

    def _starts(self, pool: int, cand: int, d: int, longest_cap: int) -> int:
        """``_pick_runs`` for a merging channel: where its message may start."""
        if self.reach_back:
            reached, path = pool, cand
            limit = min(longest_cap, 64)
            step = 1
            while step < limit:
                reached |= path & (reached >> step)
                if 2 * step < limit:
                    path &= path >> step
                step *= 2
            pool = reached
        starts = pool & ~(pool << 1)
        best, follows, length = starts, cand, 1
        while length < min(16, longest_cap):
            follows &= follows >> length
            length *= 2
            longer = starts & follows
            if not longer:
                break
            best = longer
        if self.extend_held:
            extending = best & ~(self.wanted[d] << 1)
            if extending:
                best = extending
        return best

    def _record(self, t: float, messages: list[tuple[int, int, int]]) -> None:
        """``_record``: the messages, in order, each busy on its channel until it arrives (their
        tags and program positions follow from the order, in :meth:`_schedule`)."""
        latency, rate, chunk_bytes = self.latency, self.rate, self.chunk_bytes
        busy, carrying, ending, log = self.busy_until, self.carrying, self.ending, self.log
        transfer = len(log)
        for c, first, m in messages:
            arrives = t + (latency[c] + (m * chunk_bytes) / rate[c])  # Channels.hop_ns, the same floats
            log.append((c, first, m, t, arrives))
            self.remaining -= m
            busy[c] = arrives
            carrying[c] = transfer
            transfer += 1
            if arrives in ending:
                ending[arrives].append(c)
            else:
                ending[arrives] = [c]
                heapq.heappush(self.instants, arrives)

    def _schedule(self) -> Schedule:
        """The messages as columns. A channel's tag counts its messages so far; an NPU's program
        holds its sends and receives by instant, at each instant receives first, in transfer
        order (:meth:`_arrive`'s order), then sends (:meth:`_match`'s)."""
        size = len(self.log)
        channel, chunk, count, start, end = (np.array(column) for column in zip(*self.log)) if size else (np.zeros(0),) * 5
        channel = channel.astype(np.int64)
        src, dst = self.direct_src[channel], self.direct_dst[channel]
        npu = np.concatenate([src, dst])
        instant = np.concatenate([start, end])
        receive_first = np.repeat([1, 0], size)
        transfer = np.tile(np.arange(size), 2)
        order = np.lexsort((transfer, receive_first, instant, npu))
        in_order = npu[order]
        position = np.empty(2 * size, dtype=np.int32)
        position[order] = np.arange(2 * size) - np.searchsorted(in_order, in_order, side="left")
        as_int = {name: values.astype(np.int32) for name, values in
                  (("chunk", chunk), ("count", count), ("src", src), ("dst", dst), ("channel", channel), ("tag", occurrence(channel)))}
        return Schedule(
            num_npus=self.n, chunks_per_npu=self.k, max_chunks=self.max_cap, num_direct=self.num_direct, num_routed=0,
            start=start.astype(np.float64), end=end.astype(np.float64), send_seq=position[:size], recv_seq=position[size:],
            anchor=np.broadcast_to(np.int32(NO_ANCHOR), (size,)), anchor_is_send=np.broadcast_to(False, (size,)), **as_int,
        )
