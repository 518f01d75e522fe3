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
import operator

import numpy as np

from chakra_collectives import progress
from chakra_collectives.synth.channels import Channels
from chakra_collectives.synth.schedule import NO_ANCHOR, Schedule

SMALL_CHUNKS = 512
"""Chunks (NPUs x chunks per NPU) up to which a network of direct links only is matched here
rather than by :mod:`.matcher`'s numpy bitsets. One matching, All-Gather of 64 MiB, numpy / here
in CPU seconds, same run at load ~12: mesh2d:8x8 K=1 0.014 / 0.014, K=2 (ratio 40) 0.030 /
0.021; mesh2d:16x16 K=1 ratio 20 0.70 / 0.40, ratio 40 extending 1.10 / 0.34; torus2d:16x16
0.59 / 0.32. At 1,024 chunks it still won (mesh2d:32x32 9.3 / 5.0 s, torus2d:32x32 4.9 / 4.2 s)
but from 1,024 NPUs the numpy matcher is the one tuned for scale."""

HOP_TABLE = 16
"""Message sizes (chunks) whose hop time every channel keeps at hand."""


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

_CHANNEL = operator.itemgetter(3)
"""The channel of a round's entry ``(destination, candidates' count, draw, channel, candidates)``."""


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
        self.extend_held, self.reach_back = extend_held, reach_back
        self.direct_src, self.direct_dst = channels.direct_src, channels.direct_dst
        self.src, self.dst = self.direct_src.tolist(), self.direct_dst.tolist()
        self.direct_link, self.link_latency, self.link_rate = channels.direct_link, channels.link_latency, channels.link_rate
        links = channels.direct_link
        self.latency, self.rate, self.chunk_bytes = channels.link_latency[links].tolist(), channels.link_rate[links].tolist(), channels.chunk_bytes
        self.hop = [[lat + (m * self.chunk_bytes) / r for m in range(min(top, HOP_TABLE) + 1)] for lat, r, top in zip(self.latency, self.rate, cap)]
        """``hop[c][m]``: a message of ``m`` chunks on channel ``c``, ns, up to :data:`HOP_TABLE` chunks (:meth:`_hop_ns`)."""
        self.hop1 = [times[1] for times in self.hop]
        self.uniform_hop = self.hop1[0] if self.hop1 and len(set(self.hop1)) == 1 else None
        """One chunk's hop time when every channel has the same, else None."""
        self.one_cap = len(set(cap)) == 1
        self.num_direct = len(self.src)
        block = (1 << k) - 1
        self.own = [block << (npu * k) for npu in range(n)]
        everything = (1 << (n * k)) - 1
        self.others = [~own for own in self.own]
        """Every chunk but each NPU's own (negative: all bits above too)."""
        self.cap_mask = [(1 << min(top, n * k)) - 1 for top in cap]
        """Each channel's cap as that many low bits (at most every chunk's): a message's run of candidates, cut at the cap."""
        self.held = [*self.own, 0]
        """What each NPU holds (a bitset), and a last 0: what none holds (:attr:`four_sources`)."""
        self.wanted = [everything & ~own for own in self.own]
        self.remaining = n * n * k - n * k
        self.in_neighbours: list[list[int]] = [[] for _ in range(n)]
        self.out_channels: list[list[int]] = [[] for _ in range(n)]
        for c, (s, d) in enumerate(zip(self.src, self.dst)):
            self.in_neighbours[d].append(s)
            self.out_channels[s].append(c)
        self.most_in = max(map(len, self.in_neighbours), default=1)
        """The most in-channels of an NPU: rounds of a matching instant (one channel a destination each)."""
        self.four_sources = [(*sources, *[n] * (4 - len(sources))) if len(sources) <= 4 else None for sources in self.in_neighbours]
        """Each NPU's in-neighbours, as four (the missing ones: ``n``, holding nothing), or None beyond four."""
        self.span = n * k + 1
        self.log: list[int] = []
        self.single_base = [c * self.span * self.span + 1 for c in range(self.num_direct)]
        """A one-chunk message's :attr:`log` entry on each channel, less ``first chunk * span``."""
        """Every message as one number: ``(channel * span + first chunk) * span + chunks`` (:meth:`_schedule` splits them)."""
        self.started: list[tuple[float, int]] = []
        """Every instant messages start at, and how many of the :attr:`log`'s do by then."""
        self.events = [0.0]
        """Every instant something happens (messages start or arrive), in order."""

    def run(self) -> Schedule:
        """``run``: from event to event (an instant some messages arrive), deliver them
        (``_arrive``), then match every free channel that may have a new candidate (:meth:`_match`)."""
        held, dst, out_channels, num_direct = self.held, self.dst, self.out_channels, self.num_direct
        carrying = [0] * num_direct  # the chunks (a bitset) a channel's message brings; 0: the channel is free
        ending: dict[float, list[int]] = {}  # channels by the instant their message arrives
        instants: list[float] = []  # those instants, a heap
        pairs = self.remaining
        t = 0.0
        woken: range | list[int] = range(num_direct)  # at t = 0 every channel
        with progress.task("match chunks to links", total=pairs, unit="(NPU, chunk) pairs") as matched:
            while True:
                if self.remaining:
                    self._match(t, woken, carrying, ending, instants)
                matched.update(pairs - self.remaining)
                if not instants:
                    break
                t = heapq.heappop(instants)
                self.events.append(t)
                # _arrive: deliver every message arriving at t; wake the channels freed and those out of the receivers
                done = ending.pop(t)
                for c in done:
                    held[dst[c]] |= carrying[c]
                    carrying[c] = 0
                receivers = set(map(dst.__getitem__, done))
                if len(receivers) == len(out_channels):  # every channel leaves a receiver
                    woken = range(num_direct)
                else:
                    awake = set(done)
                    for d in receivers:
                        awake.update(out_channels[d])
                    woken = sorted(awake)
        if self.remaining:
            raise RuntimeError(f"matching stopped with {self.remaining} (NPU, chunk) pairs unserved: is the topology connected?")
        return self._schedule()

    def _match(self, t: float, woken: range | list[int], carrying: list[int], ending: dict[float, list[int]], instants: list[float]) -> None:
        """``_match_direct``: every free woken channel with candidates, destination by destination
        in rounds (most constrained channel first, random among equals); each round's messages
        drawn at once (``_scarcest`` and ``_pick_runs``) and recorded (``_record``)."""
        src, dst, held, wanted, cap, rng = self.src, self.dst, self.held, self.wanted, self.cap, self.rng
        # every free woken channel with candidates, in channel order (nothing in flight: every channel is free)
        if instants:
            found = [(c, cand) for c in woken if not carrying[c] and (cand := held[src[c]] & wanted[dst[c]])]
        else:
            found = [(c, cand) for c in woken if (cand := held[src[c]] & wanted[dst[c]])]
        if not found:
            return
        rounds = self._rounds(found)
        scarce: list[tuple[int, int] | None] = [None] * self.n  # per destination: the chunks exactly one / two of its in-neighbours hold
        hop, hop1, log, k, own, others, cap_mask, span = self.hop, self.hop1, self.log, self.k, self.own, self.others, self.cap_mask, self.span
        single_base = self.single_base
        single = self.max_cap == 1
        every_merges = self.one_cap and not single  # every channel's messages may merge chunks
        reach_back, extend_held = self.reach_back, self.extend_held
        short_caps = self.max_cap <= HOP_TABLE  # every message's hop time at hand
        longest_cap = self.max_cap if self.one_cap else 1
        sent = 0
        last, arriving = -1.0, []  # the last arrival instant recorded, and its channels
        for j, sel in enumerate(rounds):
            if j:  # the destination's earlier rounds took some (held does not change within an instant)
                sel = [entry for entry in sel if entry[4] & wanted[entry[0]]]
                if not sel:
                    continue
            # one draw per channel with candidates, in order (only one channel per destination in a round:
            # what one takes does not change another's candidates)
            draws = rng.random(len(sel)).tolist()
            if single:  # one chunk per message: the loop below without runs (most small matchings; the same picks)
                sent += len(sel)
                for (d, _, _, c, pool), u in zip(sel, draws):
                    if j:
                        pool &= wanted[d]
                    if pool & (pool - 1):  # several candidates: the scarcest
                        levels = scarce[d]
                        if levels is None:
                            levels = scarce[d] = self._levels(d)
                        pool = pool & levels[0] or pool & levels[1] or pool
                        pick = int(u * pool.bit_count())
                        if pick >= 4:
                            first = _select(pool, pick)
                        else:  # the lowest few (most draws: the scarcest pools are short) by clearing bits
                            while pick:
                                pool &= pool - 1
                                pick -= 1
                            first = (pool & -pool).bit_length() - 1
                        bits = 1 << first
                    else:
                        bits = pool
                        first = bits.bit_length() - 1
                    wanted[d] ^= bits
                    log.append(single_base[c] + first * span)
                    carrying[c] = bits
                # _record: busy on its channel until it arrives (on a uniform network, the whole round together)
                channels = list(map(_CHANNEL, sel))
                for arrives, together in ([(t + self.uniform_hop, channels)] if self.uniform_hop is not None else [(t + hop1[c], (c,)) for c in channels]):
                    if arrives != last:
                        last = arrives
                        arriving = ending.get(arrives)
                        if arriving is None:
                            arriving = ending[arrives] = []
                            heapq.heappush(instants, arrives)
                    arriving.extend(together)
                continue
            if not self.one_cap:
                longest_cap = max(cap[entry[3]] for entry in sel)
            longest = min(16, longest_cap)
            for (d, _, _, c, cand), u in zip(sel, draws):
                if j:
                    cand &= wanted[d]
                if not cand & (cand - 1):  # one candidate: a message of it alone, whatever the rules (the draw unused)
                    wanted[d] ^= cand
                    sent += 1
                    log.append(single_base[c] + (cand.bit_length() - 1) * span)
                    carrying[c] = cand
                    arrives = t + hop1[c]
                    if arrives != last:
                        last = arrives
                        arriving = ending.get(arrives)
                        if arriving is None:
                            arriving = ending[arrives] = []
                            heapq.heappush(instants, arrives)
                    arriving.append(c)
                    continue
                # several candidates: the scarcest
                levels = scarce[d]
                if levels is None:
                    levels = scarce[d] = self._levels(d)
                pool = cand & levels[0] or cand & levels[1] or cand
                runs = every_merges or longest_cap > 1 and cap[c] > 1
                if runs:  # _pick_runs: where its message may start
                    if reach_back:
                        pool = self._reached(pool, cand, longest_cap)
                    starts = pool & ~(pool << 1)
                    pool, follows, length = starts, cand, 1
                    while length < longest:  # the starts of the longest runs of candidates
                        follows &= follows >> length
                        length *= 2
                        longer = starts & follows
                        if not longer:
                            break
                        pool = longer
                    if extend_held:
                        extending = pool & ~(wanted[d] << 1)
                        if extending:
                            pool = extending
                pick = int(u * pool.bit_count())
                if pick >= 4:
                    first = _select(pool, pick)
                else:  # as above
                    while pick:
                        pool &= pool - 1
                        pick -= 1
                    first = (pool & -pool).bit_length() - 1
                if runs:
                    s = src[c]
                    same = cand & own[s] if first // k == s else cand & others[s]
                    after = same >> first & cap_mask[c]
                    m = (~after & (after + 1)).bit_length() - 1  # the run of candidates from first, up to the cap
                    bits = ((1 << m) - 1) << first
                    arrives = t + (hop[c][m] if short_caps or m <= HOP_TABLE else self._hop_ns(c, m))
                else:
                    m = 1
                    bits = 1 << first
                    arrives = t + hop[c][1]
                wanted[d] ^= bits  # (they were all wanted)
                sent += m
                # _record: busy on its channel until it arrives
                log.append((c * span + first) * span + m)
                carrying[c] = bits
                if arrives != last:  # (most messages of an instant arrive together)
                    last = arrives
                    arriving = ending.get(arrives)
                    if arriving is None:
                        arriving = ending[arrives] = []
                        heapq.heappush(instants, arrives)
                arriving.append(c)
        self.remaining -= sent
        if sent:
            self.started.append((t, len(log)))

    def _levels(self, d: int) -> tuple[int, int]:
        """``_scarcest``'s levels at destination ``d``: the chunks exactly one, exactly two of its in-neighbours hold."""
        held = self.held
        four = self.four_sources[d]
        if four is not None:  # the count of holders per chunk in binary: parity, and the twos' bit (four holders: neither)
            a, b, c, e = held[four[0]], held[four[1]], held[four[2]], held[four[3]]
            low, high = a ^ b, c ^ e
            parity = low ^ high
            twos = (a & b) ^ (c & e) ^ (low & high)
            return parity & ~twos, twos & ~parity
        one = two = three = 0
        for s in self.in_neighbours[d]:
            h = held[s]
            three |= two & h
            two |= one & h
            one |= h
        return one & ~two, two & ~three

    def _rounds(self, found: list[tuple[int, int]]) -> list[list[tuple[int, int, float, int, int]]]:
        """The channels of ``found`` (``(channel, candidates)`` in channel order) in rounds: round
        ``j`` holds every destination's ``j``-th channel by (fewest candidates, a random draw,
        channel), destinations in order, as ``(destination, count, draw, channel, candidates)``.
        One draw per channel, in ``found``'s order."""
        dst = self.dst
        ordered = sorted([(dst[c], cand.bit_count(), u, c, cand) for (c, cand), u in zip(found, self.rng.random(len(found)).tolist())])
        rounds: list[list[tuple[int, int, float, int, int]]] = [[] for _ in range(self.most_in)]
        previous, j = -1, 0
        for entry in ordered:
            if entry[0] != previous:
                previous, j = entry[0], 0
            else:
                j += 1
            rounds[j].append(entry)
        while not rounds[-1]:  # (round 0 holds every destination's first)
            rounds.pop()
        return rounds

    def _hop_ns(self, c: int, m: int) -> float:
        """A message of ``m`` chunks on channel ``c``, ns (:meth:`Channels.hop_ns`, the same floats; :attr:`hop` holds the first)."""
        return self.latency[c] + (m * self.chunk_bytes) / self.rate[c]

    @staticmethod
    def _reached(pool: int, cand: int, longest_cap: int) -> int:
        """``reach_back``: ``pool`` and every candidate before one of it in a run of candidates
        (at most ``longest_cap`` long) holding it."""
        reached, path = pool, cand
        limit = min(longest_cap, 64)
        step = 1
        while step < limit:
            reached |= path & (reached >> step)
            if 2 * step < limit:
                path &= path >> step
            step *= 2
        return reached

    def _schedule(self) -> Schedule:
        """The messages as columns. A channel's tag counts its messages so far; an NPU's program
        holds its sends and receives by instant, at each instant receives first, in transfer
        order (the order of the matcher's deliveries), then sends (:meth:`_match`'s). Arrivals are
        the matcher's floats: the same operations on the same numbers."""
        size = len(self.log)
        key = np.fromiter(self.log, dtype=np.int64, count=size)
        key, count = np.divmod(key, self.span)
        channel, chunk = np.divmod(key, self.span)
        times, upto = zip(*self.started) if self.started else ((), ())
        start = np.repeat(np.array(times, dtype=np.float64), np.diff(np.array((0, *upto), dtype=np.int64)))
        links = self.direct_link[channel]
        end = start + (self.link_latency[links] + (count * self.chunk_bytes) / self.link_rate[links])
        src, dst = self.direct_src[channel], self.direct_dst[channel]
        # programs: every NPU's receives (0) and sends (1) by (instant, receive first, transfer), one integer key each
        events = np.array(self.events)
        npu = np.concatenate([dst, src]).astype(np.int64)
        instant = np.searchsorted(events, np.concatenate([end, start]))
        kind = np.repeat(np.array([0, 1], dtype=np.int64), size)
        order = _stable_order((npu * len(events) + instant) * 2 + kind, self.n * len(events) * 2)
        position = np.empty(2 * size, dtype=np.int32)
        position[order] = np.arange(2 * size) - _group_starts(npu, self.n)[npu[order]]
        by_channel = _stable_order(channel, self.num_direct)
        tag = np.empty(size, dtype=np.int64)
        tag[by_channel] = np.arange(size) - _group_starts(channel, self.num_direct)[channel[by_channel]]
        as_int = {name: values.astype(np.int32) for name, values in
                  (("chunk", chunk), ("count", count), ("src", src), ("dst", dst), ("channel", channel), ("tag", tag))}
        return Schedule(
            num_npus=self.n, chunks_per_npu=self.k, max_chunks=self.max_cap, num_direct=self.num_direct, num_routed=0,
            start=start, end=end, send_seq=position[size:], recv_seq=position[:size],
            anchor=np.broadcast_to(np.int32(NO_ANCHOR), (size,)), anchor_is_send=np.broadcast_to(False, (size,)), **as_int,
        )


def _stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of integer ``keys`` in ``[0, bound)``: as 16-bit keys
    (numpy's radix sort) when they fit, as two 16-bit digits (the low digit's stable order, then
    the high digit's among it: a 256-NPU mesh's programs, 60,000 keys below ``2**20``, 0.6 ms
    instead of 3.2) below ``2**32``, else by a sort of keys made distinct by their position.

    >>> keys = np.array([3, 1, 3, 0, 1])
    >>> _stable_order(keys, 4).tolist(), _stable_order(keys, 2**20).tolist(), _stable_order(keys, 2**40).tolist()
    ([3, 1, 4, 0, 2], [3, 1, 4, 0, 2], [3, 1, 4, 0, 2])
    >>> _stable_order(np.array([70000, 5, 65536, 70000, 4]), 2**20).tolist()
    [4, 1, 2, 0, 3]
    """
    if bound <= 2**16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    if bound <= 2**32:
        order = np.argsort(keys.astype(np.uint16), kind="stable")  # (the low 16 bits)
        return order[np.argsort((keys[order] >> 16).astype(np.uint16), kind="stable")]
    return np.argsort(keys.astype(np.int64) * len(keys) + np.arange(len(keys)))


def _group_starts(keys: np.ndarray, groups: int) -> np.ndarray:
    """Where each of ``groups`` keys (0 .. groups - 1) starts among ``keys`` sorted.

    >>> _group_starts(np.array([2, 0, 2, 3]), 4).tolist()
    [0, 1, 1, 3]
    """
    counts = np.bincount(keys, minlength=groups)
    return np.cumsum(counts) - counts
