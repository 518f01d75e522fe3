"""TACOS link-chunk matching on a time-expanded network, for All-Gather.

The greedy of Won et al. (TACOS, arXiv 2304.05301): time advances from event to event (a
message arriving somewhere); at each event every free channel whose source holds a chunk that
its destination still needs is matched with such a chunk, so faster links carry more chunks
and heterogeneous networks are respected. A chunk is never sent to an NPU twice: a
destination stops needing a chunk the moment it is matched, not when it arrives.

Two refinements over the paper's uniformly random choice, both measured on the benchmark
suite (``bench/bench_synth.py``):

* **scarcest supplier first** -- a channel ``s -> d`` prefers the chunks the fewest direct
  in-neighbours of ``d`` hold (1 = only ``s`` can supply it now): chunks that other links
  could also bring are left to them, so every link into ``d`` stays useful for longer;
* **merged messages** -- a channel may carry a *run* of consecutive chunks (``c, c+1, ...``,
  contiguous in every buffer) that its destination needs as one message, up to its cap of
  ``max_chunks`` per message (:func:`message_caps`). A message of ``m`` chunks pays the
  link's latency once instead of ``m`` times: with small chunks the latency dominates (a
  64 KiB chunk on a 50 GB/s link takes 500 + 1,221 ns) and merging buys most of it back.
  A run starts at a scarcest chunk, preferably one that begins a long run of candidates
  (torus 8x8x8: 0.832 -> 0.92 of the bound at 1 and 4 chunks/NPU), and extends through the candidates;
  with ``extend_held``, preferably right after a chunk the destination already holds (or is
  getting), so that what it still misses stays in few, long runs that later messages can carry
  whole (All-Gather of 64 MiB, latency ratio 40: 4,096-NPU mesh 0.804 -> 0.851 of the bound,
  torus 0.798 -> 0.818; 1,024-NPU mesh 0.908 -> 0.920, torus 0.896 -> 0.905); with ``reach_back``
  a run may start a little before its scarcest chunk, where the candidates' run holding it
  starts (with ``extend_held``, 4,096-NPU mesh 0.851 -> 0.885, torus 0.818 -> 0.823; 1,024-NPU
  mesh 0.920 -> 0.938 but torus 0.905 -> 0.878: a trial variant, not a rule).

Implementation (profiled on 1024- and 4096-NPU tori):

* every NPU's held and still-needed chunks are rows of numpy bitsets (``uint64`` words);
* all channels that become free at one instant are matched together, in *rounds*: round ``j``
  takes, for every destination, its ``j``-th free in-channel (most constrained first: fewest
  candidate chunks, random among equals), so one round never gives two channels into one NPU
  the same chunk; inside a round the candidate sets and the chosen runs are computed for all
  channels at once with bit operations;
* a direct channel carries one message at a time and is busy until it has arrived
  (``latency + bytes / bandwidth``: TACOS's model and ours);
* the schedule is written into preallocated columns (no per-transfer Python objects), and it
  records the order of every NPU's sends and receives, so the lowering to IR needs no sort.

Routed channels (through switches, see :mod:`.channels`) are matched per NPU: a message
released at ``t`` waits in the first link's FIFO, crosses each hop store-and-forward and may
wait in a switch's FIFO; the matcher picks the destination with the earliest arrival. An NPU
keeps its first link busy by releasing a further message whenever the link would otherwise go
idle before the NPU's next event, and a message is never admitted to a switch queue ahead of
one already scheduled there, nor at the same instant (so every queue serves messages in the
order the matcher decided, as the FIFO network model does) -- except messages released at
time 0, which the model injects in program order, rank by rank, the order they are matched in:
they may reach the first switch together (on a 64-NPU switch, no uplink idles at the start:
66 -> 65 hops for the All-Gather).
"""

from __future__ import annotations

import heapq
import importlib.util
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from chakra_collectives import progress
from chakra_collectives.ir.grouping import occurrence
from chakra_collectives.synth.channels import Channels
from chakra_collectives.synth.schedule import NO_ANCHOR, Schedule, expand_runs
from chakra_collectives.synth.small_matcher import match_small, uses_small


def message_caps(channels: Channels, latency_ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Chunks per message allowed on each (direct, routed) channel.

    A channel may merge chunks until the message's serialization reaches ``latency_ratio`` times
    the latency it pays: ``cap = max(1, floor(latency_ratio * latency / (chunk_bytes / bandwidth)))``
    (routed channels: latencies and serializations summed over their hops). ``0`` never merges;
    on links without latency merging gains nothing, and the cap is 1.

    >>> from chakra_collectives.synth.channels import build_channels
    >>> from chakra_collectives.topology import ring
    >>> ch = build_channels(ring(4), chunk_bytes=2**16)     # 500 ns vs 1,221 ns per chunk
    >>> message_caps(ch, 20.0)[0][:2].tolist(), message_caps(ch, 0.0)[0][:2].tolist()
    ([8, 8], [1, 1])
    """
    serial = channels.chunk_bytes / channels.link_rate
    latency = channels.link_latency

    def cap(lat: np.ndarray, ser: np.ndarray) -> np.ndarray:
        return np.maximum(1, np.floor(latency_ratio * lat / ser)).astype(np.int32)

    direct = cap(latency[channels.direct_link], serial[channels.direct_link])
    if not channels.routed:
        return direct, np.zeros(0, dtype=np.int32)
    lat = np.array([latency[list(c.links)].sum() for c in channels.routed])
    ser = np.array([serial[list(c.links)].sum() for c in channels.routed])
    return direct, cap(lat, ser)


def match_all_gather(
    channels: Channels,
    chunks_per_npu: int,
    *,
    seed: int = 0,
    latency_ratio: float = 0.0,
    extend_held: bool = False,
    reach_back: bool = False,
    owner_start: np.ndarray | None = None,
    ranges: int = 1,
) -> Schedule:
    """Greedy link-chunk matching for an All-Gather of ``chunks_per_npu`` chunks per NPU.

    Chunk ``c`` starts on NPU ``c // chunks_per_npu``; every NPU must end with every chunk.
    ``owner_start``: unequal shares instead (NPU ``i`` starts with chunks ``owner_start[i] ..
    owner_start[i + 1] - 1`` of the ``num_npus * chunks_per_npu``, :mod:`~chakra_collectives.synth.shares`).
    ``latency_ratio`` sets how far messages may merge chunks (:func:`message_caps`; 0: never).
    ``extend_held``: a merged message prefers a run that extends what its destination already
    holds or is getting; ``reach_back``: it may start before its scarcest chunk, where the
    candidates' run holding that chunk starts (see the module docstring). ``ranges``: a message
    over a direct channel may carry up to this many runs (:meth:`_Matcher._more_runs`; networks
    without switches only, else 1).

    >>> from chakra_collectives.synth.channels import build_channels
    >>> from chakra_collectives.topology import torus2d
    >>> channels = build_channels(torus2d(8, 8), chunk_bytes=2**14)
    >>> one = match_all_gather(channels, 1, latency_ratio=40.0, extend_held=True)
    >>> several = match_all_gather(channels, 1, latency_ratio=40.0, extend_held=True, ranges=4)
    >>> several.multi_run, several.num_transfers < one.num_transfers
    (True, True)
    """
    caps = message_caps(channels, latency_ratio)
    rng = np.random.default_rng(seed)
    ranges = 1 if channels.routed or int(caps[0].max(initial=1)) == 1 else ranges
    if owner_start is None and ranges == 1 and uses_small(channels, chunks_per_npu):  # the same schedule, on Python integers
        return match_small(channels, chunks_per_npu, rng, caps[0], extend_held=extend_held, reach_back=reach_back)
    return _Matcher(channels, chunks_per_npu, rng, caps, extend_held=extend_held, reach_back=reach_back, owner_start=owner_start, ranges=ranges).run()


# ---------------------------------------------------------------------- bit helpers
_BIT = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))
_ONE = np.uint64(1)
_SHIFTS = tuple(np.uint64(by) for by in range(65))
"""``_SHIFTS[by]``: the shift amount as a ``uint64`` scalar (built once, not per shift)."""


UNPACK_WORDS = 2
"""Bitsets of at most this many words: :func:`_random_members` counts bit by bit in one pass
(fewer numpy calls: a 64-NPU matching is mostly call overhead); longer ones word by word first."""


def _random_members(cand: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random set bit (as an index) per row of a bitset matrix; -1 for empty rows.

    Row by row: the ``pick``-th set bit, ``pick = floor(u * count)`` with ``u`` uniform in [0, 1).
    """
    if cand.shape[1] <= UNPACK_WORDS:
        bits = np.unpackbits(np.ascontiguousarray(cand).view(np.uint8), axis=1, bitorder="little")
        cumulative = np.cumsum(bits, axis=1, dtype=np.int32)
        total = cumulative[:, -1]
        result = np.full(len(cand), -1, dtype=np.int64)
        rows = np.flatnonzero(total)
        if len(rows):
            pick = (rng.random(len(rows)) * total[rows]).astype(np.int32)
            result[rows] = (cumulative[rows] <= pick[:, None]).sum(axis=1)
        return result
    counts = np.bitwise_count(cand)
    cumulative = np.cumsum(counts, axis=1, dtype=np.int32)
    total = cumulative[:, -1]
    nonempty = total > 0
    if nonempty.all():  # usual: no row to leave out
        rows = slice(None)
        count = len(cand)
    else:
        rows = np.flatnonzero(nonempty)
        count = len(rows)
        if count == 0:
            return np.full(len(cand), -1, dtype=np.int64)
        cumulative, counts, total, cand = cumulative[rows], counts[rows], total[rows], cand[rows]
    pick = (rng.random(count) * total).astype(np.int32)
    word = (cumulative <= pick[:, None]).sum(axis=1)
    at = np.arange(count), word
    k = pick - cumulative[at] + counts[at]  # minus the set bits of earlier words
    bits = np.unpackbits(cand[at].view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    position = (np.cumsum(bits, axis=1) <= k[:, None]).sum(axis=1)
    result = np.full(len(nonempty), -1, dtype=np.int64)
    result[rows] = word * 64 + position
    return result


def _shift_up(bits: np.ndarray, link: np.ndarray | None = None) -> np.ndarray:
    """Bit ``c`` of the result is bit ``c - 1`` of ``bits``, across words (bit 0: clear).

    ``link``: ``(rows, words - 1)`` masks, all ones where word ``j + 1`` follows word ``j`` (a
    :class:`_Window`'s columns), else 0: nothing crosses between words that do not follow.
    """
    result = bits << _ONE
    if link is None:
        result[:, 1:] |= bits[:, :-1] >> _SHIFTS[63]
    else:
        result[:, 1:] |= (bits[:, :-1] >> _SHIFTS[63]) & link
    return result


def _run_ladder(bits: np.ndarray, top: int, link: np.ndarray | None = None) -> list[np.ndarray]:
    """``[F(1), F(2), F(4), ..., F(top)]`` (``top`` a power of 2): bit ``c`` of ``F(L)`` is set when
    bits ``c .. c + L - 1`` of ``bits`` all are (``F(1)`` is ``bits``), one shift per rung.

    >>> row = lambda *c: np.array([[sum(1 << i for i in c)]], dtype=np.uint64)
    >>> [int(rung[0, 0]) for rung in _run_ladder(row(2, 3, 4, 5, 9), 4)]  # {2..5, 9}, {2, 3, 4}, {2}
    [572, 28, 4]
    """
    ladder = [bits]
    length = 1
    while length < top:
        ladder.append(ladder[-1] & _shift_down(ladder[-1], length, link))
        length *= 2
    return ladder


def _reach_back(bits: np.ndarray, ladder: list[np.ndarray], reach: int, link: np.ndarray | None = None) -> np.ndarray:
    """``bits`` plus every bit of ``through = ladder[0]`` from which a bit of ``bits`` follows
    through ``through`` only, at most ``2**ceil(log2(reach)) - 1`` positions on (``bits`` within
    ``through``; doubling steps: step ``2**i`` goes through ``ladder[i]``, :func:`_run_ladder`
    up to the largest power of 2 below ``min(reach, 64)``).

    >>> row = lambda *c: np.array([[sum(1 << i for i in c)]], dtype=np.uint64)
    >>> int(_reach_back(row(5), _run_ladder(row(2, 3, 4, 5, 6), 2), 4)[0, 0]) == int(row(2, 3, 4, 5)[0, 0])
    True
    """
    reached = bits.copy()
    limit = min(reach, 64)
    step, rung = 1, 0
    while step < limit:
        reached |= ladder[rung] & _shift_down(reached, step, link)
        step *= 2
        rung += 1
    return reached


def _run_starts(bits: np.ndarray, link: np.ndarray | None = None) -> np.ndarray:
    """Set bits whose predecessor (bit index - 1) is clear: where runs of consecutive bits begin."""
    return bits & ~_shift_up(bits, link)


def _shift_down(bits: np.ndarray, by: int, link: np.ndarray | None = None) -> np.ndarray:
    """Bit ``c`` of the result is bit ``c + by`` of ``bits`` (0 < by < 64), across words
    (``link``: as in :func:`_shift_up`)."""
    result = bits >> _SHIFTS[by]
    if link is None:
        result[:, :-1] |= bits[:, 1:] << _SHIFTS[64 - by]
    else:
        result[:, :-1] |= (bits[:, 1:] << _SHIFTS[64 - by]) & link
    return result


def _run_lengths(bits: np.ndarray, first: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Length of the run of set bits starting at ``first`` in each row, at most ``cap``."""
    rows = np.arange(len(first))
    length = np.zeros(len(first), dtype=np.int64)
    position = first.astype(np.int64)
    todo = rows
    words = bits.shape[1]
    while len(todo):
        w, b = position[todo] // 64, (position[todo] % 64).astype(np.uint64)
        x = bits[todo, w] >> b
        ones = np.bitwise_count(x & ~(x + _ONE)).astype(np.int64)  # trailing ones
        length[todo] += ones
        more = (ones == 64 - b.astype(np.int64)) & (w + 1 < words) & (length[todo] < cap[todo])
        todo = todo[more]
        position[todo] = (w[more] + 1) * 64
    return np.minimum(length, cap)


_LOW = np.array([(1 << b) - 1 for b in range(65)], dtype=np.uint64)
"""``_LOW[b]``: the ``b`` lowest bits set (0 <= b <= 64)."""


def _set_runs(matrix: np.ndarray, rows: np.ndarray, first: np.ndarray, count: np.ndarray, *, clear: bool = False) -> None:
    """Set (or clear) bits ``first .. first + count - 1`` of ``matrix[rows]`` (rows may repeat).

    One word mask per (run, word) it touches: a run of up to 64 chunks touches one or two words.
    """
    if len(rows) == 0:
        return
    start = first.astype(np.int64)
    end = start + count
    word = start // 64
    while True:
        base = word * 64
        mask = _LOW[np.minimum(end - base, 64)] & ~_LOW[start - base]
        if clear:
            np.bitwise_and.at(matrix, (rows, word), ~mask)
        else:
            np.bitwise_or.at(matrix, (rows, word), mask)
        more = end > base + 64
        if not more.any():
            return
        rows, end, word = rows[more], end[more], word[more] + 1
        start = word * 64


COMPILED_WORDS = 64
"""Bitset rows of at least this many words (4,096 chunks) are worked by the compiled kernels of
:mod:`.matcher_kernels` (numba, compiled on first use, when installed: ``pip install
'.[fast]'``), shorter ones by numpy alone; the schedules are the same either way."""


def compiled_kernels(words: int) -> ModuleType | None:
    """:mod:`.matcher_kernels` for rows of ``words`` words from :data:`COMPILED_WORDS` on, when numba
    is installed (imported then: numba's start-up is kept off small matchings), else None."""
    if words < COMPILED_WORDS or importlib.util.find_spec("numba") is None:
        return None
    from chakra_collectives.synth import matcher_kernels  # imported when used

    return matcher_kernels


WINDOW_SHARE = 2
""":meth:`_Window.around` gives a window only when it takes at most ``1 / WINDOW_SHARE`` of the words..."""

WINDOW_WORDS = 32
"""... of rows of at least this many words (2,048 chunks): on shorter ones laying the window out costs
about what it saves (1,024 NPUs, 16 words: 5-9% slower; 4,096, 64 words: 3% faster; 16,384, 256
words: 2.3x on the first 1,500 events)."""


@dataclass(frozen=True)
class _Window:
    """Some words of every row of a bitset matrix, laid end to end in one row (``(1, words
    taken)``, row by row, each row's words increasing), so that the bit operations of all rows
    are one numpy call each however many words each row has.

    Shifts go through :attr:`link` (all ones where the next word taken is the next word of the
    same row, else 0: :func:`_shift_up`), so a bit never moves between words that do not follow
    each other: a word not taken reads as zero.
    """

    num_rows: int
    rows: np.ndarray
    words: np.ndarray
    """Row and word of every word taken, in order."""
    link: np.ndarray
    live: np.ndarray
    """The rows with a word taken, increasing."""
    offsets: np.ndarray
    """Where each live row's words start."""
    segment: np.ndarray
    """Per word taken, its row's position in :attr:`live`."""

    @classmethod
    def around(cls, pool: np.ndarray, before: int) -> "_Window | None":
        """The words of ``pool`` that hold a set bit, the ``before`` words before each and the word
        after, row by row; None when they are more than ``1 /`` :data:`WINDOW_SHARE` of the words
        (the whole rows then cost little more).

        Every run :meth:`_Matcher._pick_runs` may start (at a pool bit, or reaching back at most 63
        bits, into the word before) and all it reads to choose one -- the preceding bit, the next 32
        bits -- then lie inside the window.

        >>> pool = np.zeros((3, 32), dtype=np.uint64); pool[0, 5] = 1; pool[2, [0, 31]] = 2
        >>> window = _Window.around(pool, 1)
        >>> window.rows.tolist(), window.words.tolist(), window.live.tolist(), window.offsets.tolist()
        ([0, 0, 0, 2, 2, 2, 2], [4, 5, 6, 0, 1, 30, 31], [0, 2], [0, 3])
        >>> (window.link[0] > 0).tolist()
        [True, True, False, True, False, True]
        >>> window.random_bits(window.take(pool), np.random.default_rng(0)).tolist()
        [320, -1, 1]
        """
        if pool.shape[1] < WINDOW_WORDS:
            return None
        held = pool != 0
        marked = held.copy()
        marked[:, 1:] |= held[:, :-1]
        for back in range(1, before + 1):
            marked[:, :-back] |= held[:, back:]
        rows, words = np.nonzero(marked)
        if len(rows) == 0 or len(rows) * WINDOW_SHARE > marked.size:
            return None
        new_row = np.ones(len(rows), dtype=bool)
        new_row[1:] = rows[1:] != rows[:-1]
        offsets = np.flatnonzero(new_row)
        follows = ~new_row[1:] & (words[1:] == words[:-1] + 1)
        return cls(
            num_rows=len(pool), rows=rows, words=words, link=np.where(follows, ~np.uint64(0), np.uint64(0))[None, :],
            live=rows[offsets], offsets=offsets, segment=np.cumsum(new_row) - 1,
        )

    def take(self, bits: np.ndarray) -> np.ndarray:
        """``bits`` (one row per row of the window's matrix, every word) in the window."""
        return bits[self.rows, self.words][None, :]

    def take_rows(self, matrix: np.ndarray, row_of: np.ndarray) -> np.ndarray:
        """Row ``row_of[i]`` of ``matrix`` for every row ``i``, in the window."""
        return matrix[row_of[self.rows], self.words][None, :]

    def any(self, bits: np.ndarray) -> np.ndarray:
        """Per live row (last axis: the window's words), whether ``bits`` has a set bit there."""
        return np.logical_or.reduceat(bits != 0, self.offsets, axis=-1)

    def random_bits(self, bits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """:func:`_random_members` of the rows ``bits`` (in the window) hold: the same draws, the
        same bits, as chunk indexes (-1: the row has none taken; every live row has a bit)."""
        counts = np.bitwise_count(bits[0]).astype(np.int64)
        cumulative = np.cumsum(counts)
        total = np.add.reduceat(counts, self.offsets)
        pick = (rng.random(len(self.live)) * total).astype(np.int64)
        target = cumulative[self.offsets] - counts[self.offsets] + pick
        at = np.searchsorted(cumulative, target, side="right")
        k = target - (cumulative[at] - counts[at])
        unpacked = np.unpackbits(bits[0, at].view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        position = (np.cumsum(unpacked, axis=1) <= k[:, None]).sum(axis=1)
        result = np.full(self.num_rows, -1, dtype=np.int64)
        result[self.live] = self.words[at] * 64 + position
        return result


DETOUR_SLACK = 1.0
"""Over detours (:attr:`~chakra_collectives.synth.channels.Channels.detours`) a message leaves only
when it would wait in the queues past its first link for at most this many of its longest hop's
times: chunks are not committed to a congested route while another may free up."""


@dataclass(frozen=True)
class _FirstLink:
    """One NPU's routed channels that start on one link and have one number of hops, as arrays
    (row ``i``: channel ``channel[i]``), so that a message's time over every route is computed at once."""

    link: int
    channel: np.ndarray
    dst: np.ndarray
    links: np.ndarray
    """(channels, hops) link ids."""
    latency: np.ndarray
    """(channels, hops) ns."""
    rate: np.ndarray
    """(channels, hops) bytes/ns."""
    neighbours: np.ndarray
    """(channels, in-degree) the destination's direct in-neighbours, -1 padded."""
    present: np.ndarray
    """(channels, in-degree, 1) all ones where :attr:`neighbours` names an NPU, else 0 (a mask)."""
    has_neighbours: bool
    merges: bool
    """Some channel may carry several chunks per message."""


# ---------------------------------------------------------------------- the matcher
_COLUMNS = {
    "chunk": np.int32, "count": np.int32, "src": np.int32, "dst": np.int32, "start": np.float64,
    "end": np.float64, "channel": np.int32, "tag": np.int32, "send_seq": np.int32, "recv_seq": np.int32,
}


_DEFAULTS = {"more": 0, "anchor": NO_ANCHOR, "anchor_is_send": False}
"""Record columns that start filled (the others are written as each message is recorded)."""

FIRST_CAPACITY = 2**16
"""Messages the record columns hold at first (:meth:`_Matcher._reserve` doubles them as they fill)."""


class _Matcher:
    def __init__(
        self,
        channels: Channels,
        k: int,
        rng: np.random.Generator,
        caps: tuple[np.ndarray, np.ndarray],
        *,
        extend_held: bool = False,
        reach_back: bool = False,
        owner_start: np.ndarray | None = None,
        ranges: int = 1,
    ) -> None:
        n = channels.num_npus
        self.ch = channels
        self.extend_held, self.reach_back = extend_held, reach_back
        self.ranges = ranges
        self.n, self.k, self.rng = n, k, rng
        self.num_chunks = n * k
        self.given_owner_start = owner_start
        self.owner_start = np.arange(n + 1, dtype=np.int64) * k if owner_start is None else np.asarray(owner_start, dtype=np.int64)
        if self.owner_start[0] != 0 or self.owner_start[-1] != self.num_chunks or (np.diff(self.owner_start) < 0).any():
            raise ValueError(f"owner offsets must rise from 0 to {self.num_chunks}, got {self.owner_start.tolist()}")
        self.words = -(-self.num_chunks // 64)
        chunk_ids = np.arange(self.num_chunks)
        own = np.zeros((n, self.words), dtype=np.uint64)
        np.bitwise_or.at(own, (np.repeat(np.arange(n), np.diff(self.owner_start)), chunk_ids // 64), _BIT[chunk_ids % 64])
        self.held_or_zero = np.zeros((n + 1, self.words), dtype=np.uint64)
        """Every NPU's held chunks (:attr:`held`), then a zero row: what index -1 (no NPU) reads."""
        self.held_or_zero[:n] = own
        self.held = self.held_or_zero[:n]
        full = np.zeros(self.words, dtype=np.uint64)
        np.bitwise_or.at(full, chunk_ids // 64, _BIT[chunk_ids % 64])
        self.wanted = np.bitwise_and(~self.held, full)
        self.remaining = n * self.num_chunks - self.num_chunks  # (npu, chunk) pairs still to match
        self.pairs = self.remaining
        self.direct_cap, self.routed_cap = caps
        self.max_cap = int(max(self.direct_cap.max(initial=1), self.routed_cap.max(initial=1)))
        # long rows, direct channels only, every message merging and one run each: the compiled rounds
        compiled = not channels.routed and ranges == 1 and bool((self.direct_cap > 1).all())
        self.kernels = compiled_kernels(self.words) if compiled else None
        if self.kernels is not None:  # which words of each channel's candidates are nonzero, kept as they change
            self.cand_nz = self.kernels.candidate_words(self.held, self.wanted, channels.direct_src, channels.direct_dst)
            self.loop: dict | None = None
            self.out_channels = np.argsort(channels.direct_src, kind="stable")  # direct channels by source NPU
            self.out_ptr = np.searchsorted(channels.direct_src[self.out_channels], np.arange(n + 1))
            self.in_channels = np.argsort(channels.direct_dst, kind="stable")  # ... and by destination
            self.in_ptr = np.searchsorted(channels.direct_dst[self.in_channels], np.arange(n + 1))
            self.direct_ends = channels.direct_src.astype(np.int64), channels.direct_dst.astype(np.int64)  # not converted at every call
        # direct channels
        m = channels.num_direct
        self.busy_until = np.full(m, np.inf)
        self.freeing: dict[float, list[np.ndarray]] = {}
        """The direct channels that become free at each instant of :attr:`free_times`."""
        self.free_times: list[float] = []
        """A heap of the instants at which some direct channel becomes free: no pass over every
        channel per event (235,824 at 39,304 NPUs)."""
        self.carrying = np.full(m, -1, dtype=np.int64)  # transfer in flight
        if ranges > 1:  # the further runs of the message in flight, per direct channel (length 0: none)
            self.carrying_first = np.zeros((m, ranges - 1), dtype=np.int64)
            self.carrying_length = np.zeros((m, ranges - 1), dtype=np.int64)
            self.more: list[tuple[np.ndarray, ...]] = []  # (message, slot, first, length) per matching
        # direct in-neighbours of every NPU, padded with -1
        in_degree = np.bincount(channels.direct_dst, minlength=n)
        self.in_neighbours = np.full((n, max(int(in_degree.max(initial=0)), 1)), -1, dtype=np.int64)
        by_dst = np.argsort(channels.direct_dst, kind="stable")
        sorted_dst = channels.direct_dst[by_dst]
        slot = np.arange(len(by_dst)) - np.searchsorted(sorted_dst, sorted_dst, side="left")
        self.in_neighbours[sorted_dst, slot] = channels.direct_src[by_dst]
        # per direct channel, the other direct in-neighbours of its destination (its own slot left out)
        own_slot = np.empty(m, dtype=np.int64)
        own_slot[by_dst] = slot
        width = self.in_neighbours.shape[1]
        others = np.arange(width)[None, :] != own_slot[:, None]
        self.other_in = self.in_neighbours[channels.direct_dst][others].reshape(m, width - 1)
        # per NPU: how fast its direct in-links together bring chunks (chunks per ns)
        one_chunk = channels.hop_ns(channels.direct_link, 1) if m else np.zeros(0)
        self.direct_intake = np.bincount(channels.direct_dst, weights=1.0 / one_chunk, minlength=n) if m else np.zeros(n)
        # per channel (direct, then routed) message counters: the tags
        self.sent_on = np.zeros(m + len(channels.routed), dtype=np.int64)
        # per NPU: sends and receives recorded so far (the program positions)
        self.program = np.zeros(n, dtype=np.int64)
        # records: never more messages than (NPU, chunk) pairs to serve; grown as they fill (_reserve)
        capacity = min(self.remaining, FIRST_CAPACITY)
        self.rec = {name: np.empty(capacity, dtype=dtype) for name, dtype in _COLUMNS.items()}
        self.size = 0
        # routed channels
        self.routed = channels.routed
        self.has_routed = bool(self.routed)
        if ranges > 1:
            self.rec["more"] = np.zeros(capacity, dtype=np.int32)  # chunks in a message's further runs
        if self.has_routed:
            self.rec["anchor"] = np.full(capacity, NO_ANCHOR, dtype=np.int32)
            self.rec["anchor_is_send"] = np.zeros(capacity, dtype=bool)
            self._init_routed()

    # ------------------------------------------------------------------ records
    def _reserve(self, extra: int) -> None:
        """Room in the record columns for ``extra`` more messages: they double when full (at most
        to the pairs there were to match), so the address space they take follows the messages
        matched, not the ``N^2 K`` a matching could need (74 GB at 39,304 NPUs: beyond an
        address-space limit such as ``ulimit -v 16GiB``); columns with a default keep it."""
        capacity = len(self.rec["chunk"])
        if self.size + extra <= capacity:
            return
        grown = min(max(2 * capacity, self.size + extra), self.pairs)
        for name, column in self.rec.items():
            bigger = np.empty(grown, dtype=column.dtype)
            bigger[: self.size] = column[: self.size]
            if name in _DEFAULTS:
                bigger[self.size :] = _DEFAULTS[name]
            self.rec[name] = bigger

    def _record(self, chunk, count, src, dst, start, end, channel) -> np.ndarray:
        size = len(chunk)
        self._reserve(size)
        first = self.size
        ids = np.arange(first, first + size, dtype=np.int64)
        self.size += size
        rec = self.rec
        for name, value in (("chunk", chunk), ("count", count), ("src", src), ("dst", dst), ("start", start), ("end", end), ("channel", channel)):
            rec[name][first : first + size] = value
        key = np.asarray(channel, dtype=np.int64)
        key = np.where(key >= 0, key, self.ch.num_direct - 1 - key)
        rec["tag"][first : first + size] = self.sent_on[key]
        self.sent_on[key] += 1  # a channel appears at most once per call
        src = np.asarray(src, dtype=np.int64)
        if size == 1:
            rec["send_seq"][first] = self.program[src[0]]
            self.program[src[0]] += 1
        else:
            rec["send_seq"][first : first + size] = self.program[src] + occurrence(src)
            np.add.at(self.program, src, 1)  # not a bincount over every NPU: an event's are few
        self.remaining -= int(count.sum())
        return ids

    def _record_one(self, chunk: int, count: int, src: int, dst: int, start: float, end: float, channel: int) -> int:
        """:meth:`_record` for one message (a routed channel's, ``channel < 0``), without arrays."""
        self._reserve(1)
        transfer = self.size
        self.size += 1
        rec = self.rec
        for name, value in (("chunk", chunk), ("count", count), ("src", src), ("dst", dst), ("start", start), ("end", end), ("channel", channel)):
            rec[name][transfer] = value
        key = channel if channel >= 0 else self.ch.num_direct - 1 - channel
        rec["tag"][transfer] = self.sent_on[key]
        self.sent_on[key] += 1
        rec["send_seq"][transfer] = self.program[src]
        self.program[src] += 1
        self.remaining -= count
        return transfer

    # ------------------------------------------------------------------ main loop
    def run(self) -> Schedule:
        t = 0.0
        received = np.ones(self.n, dtype=bool)  # at t = 0 every NPU "received" its own chunks
        freed = np.zeros(0, dtype=np.int64)
        events: dict[int, tuple[int, bool]] = {}
        pairs = self.remaining
        with progress.task("match chunks to links", total=pairs, unit="(NPU, chunk) pairs") as matched:
            if self.kernels is not None:  # the whole loop compiled (the same steps, draws and schedule)
                while self._run_compiled(matched):
                    pass
            else:
                while True:
                    self._match_direct(t, received, freed)
                    if self.has_routed:
                        self._match_routed(t, events)
                    matched.update(pairs - self.remaining)
                    t_next = self._next_time()
                    if t_next is None:
                        break
                    t = t_next
                    received, freed, events = self._arrive(t)
        if self.remaining:
            raise RuntimeError(f"matching stopped with {self.remaining} (NPU, chunk) pairs unserved: is the topology connected?")
        return self._schedule()

    def _run_compiled(self, matched: progress.Task) -> int:
        """Work events by :func:`.matcher_kernels.run_events` from where the last call stopped; 0 once
        every channel is idle (else the record columns were grown, or the progress bar updated)."""
        if self.loop is None:
            ch = self.ch
            n, m = self.n, ch.num_direct
            self.loop = {
                # the NPUs that received (every one at t = 0; later one per arriving message) and how many, the channels freed
                "t": np.zeros(1), "received": np.arange(max(n, m), dtype=np.int64), "counts": np.array([n, 0], dtype=np.int64),
                "freed": np.empty(m, dtype=np.int64), "heap_time": np.empty(m), "heap_chan": np.empty(m, dtype=np.int64),
                "scratch": tuple(np.empty(n * self.words, dtype=dtype) for dtype in (np.int64, np.uint64, np.uint64, np.uint64)),
                "latency": ch.link_latency[ch.direct_link].astype(np.float64), "rate": ch.link_rate[ch.direct_link].astype(np.float64),
            }
        loop = self.loop
        state = np.array([self.size, self.remaining, loop.get("heap_size", 0)], dtype=np.int64)
        status = self.kernels.run_events(self, loop, state)
        self.size, self.remaining, loop["heap_size"] = (int(v) for v in state)
        if status == 1:
            self._reserve(self.ch.num_direct)
        matched.update(self.pairs - self.remaining)
        return status

    def _next_time(self) -> float | None:
        t = self.free_times[0] if self.free_times else np.inf
        if self.has_routed and self.pending:
            t = min(t, self.pending[0][0])
        return None if t == np.inf else t

    def _arrive(self, t: float) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, bool]]]:
        """Deliver everything arriving at ``t``.

        Returns the NPUs that received a chunk, the direct channels that became free, and for
        routed matching, one operation of each NPU that completes at ``t``.
        """
        if self.free_times and self.free_times[0] == t:
            heapq.heappop(self.free_times)
            freeing = self.freeing.pop(t)
            done = np.sort(freeing[0] if len(freeing) == 1 else np.concatenate(freeing))
        else:
            done = np.zeros(0, dtype=np.int64)
        ids = self.carrying[done]
        self.busy_until[done] = np.inf
        self.carrying[done] = -1
        if self.ranges > 1:
            self._arrive_more(done, ids)
        if self.has_routed:
            routed = []
            while self.pending and self.pending[0][0] == t:
                routed.append(heapq.heappop(self.pending)[1])
            if routed:
                ids = np.concatenate([ids, np.array(routed, dtype=np.int64)])
        ids = np.sort(ids)
        rec = self.rec
        dsts = rec["dst"][ids].astype(np.int64)
        rec["recv_seq"][ids] = self.program[dsts] + occurrence(dsts)
        np.add.at(self.program, dsts, 1)
        first_length = rec["count"][ids] if self.ranges == 1 else rec["count"][ids] - rec["more"][ids]
        _set_runs(self.held, dsts, rec["chunk"][ids], first_length)
        received = np.zeros(self.n, dtype=bool)
        received[dsts] = True
        events: dict[int, tuple[int, bool]] = {}
        if self.has_routed:
            for transfer, d, s in zip(ids.tolist(), dsts.tolist(), rec["src"][ids].tolist()):
                events.setdefault(d, (transfer, False))
                events.setdefault(s, (transfer, True))
        return received, done, events

    # ------------------------------------------------------------------ direct channels
    def _match_direct(self, t: float, received: np.ndarray, freed: np.ndarray) -> None:
        """Match every free direct channel that may have a new candidate: just freed, or its source just received."""
        ch = self.ch
        if ch.num_direct == 0 or not self.remaining:
            return
        wake = received[ch.direct_src]
        wake[freed] = True
        active = np.flatnonzero(wake & (self.busy_until == np.inf))
        if len(active) == 0:
            return
        s, d = ch.direct_src[active], ch.direct_dst[active]
        first_cand = self.held[s] & self.wanted[d]
        options = np.bitwise_count(first_cand).sum(axis=1, dtype=np.int64)
        useful = np.flatnonzero(options)
        if not len(useful):
            return
        active, d, options = active[useful], d[useful], options[useful]
        # per destination, most constrained channel first (random among equals)
        order = np.lexsort((self.rng.random(len(active)), options, d))
        active, d = active[order], d[order]
        round_of = np.arange(len(active)) - np.searchsorted(d, d, side="left")
        parts = []
        for j in range(int(round_of.max()) + 1):
            in_round = round_of == j
            sel = active[in_round]
            s, d = ch.direct_src[sel], ch.direct_dst[sel]
            # the first round's candidates are the ones just counted (no channel has been matched since)
            cand = first_cand[useful[order[in_round]]] if j == 0 else self.held[s] & self.wanted[d]
            pool = self._scarcest(cand, sel)
            first, count = self._pick_runs(pool, cand, s, d, self.direct_cap[sel])
            ok = first >= 0
            if not ok.any():
                continue
            sel, d, first, count = sel[ok], d[ok], first[ok], count[ok]
            _set_runs(self.wanted, d.astype(np.int64), first, count, clear=True)
            more = self._more_runs(cand[ok], sel, s[ok], d, first, count, self.direct_cap[sel]) if self.ranges > 1 else None
            parts.append((sel, first, count, more))
        if not parts:
            return
        sel = np.concatenate([p[0] for p in parts])
        first = np.concatenate([p[1] for p in parts])
        count = np.concatenate([p[2] for p in parts])
        if self.ranges > 1:
            more = [p[3] for p in parts]
            sizes = np.cumsum([0] + [len(p[0]) for p in parts])
            row = np.concatenate([rows + sizes[i] for i, (rows, _, _, _) in enumerate(more)])
            slot = np.concatenate([m[1] for m in more])
            more_first = np.concatenate([m[2] for m in more])
            more_length = np.concatenate([m[3] for m in more])
            extra = np.bincount(row, weights=more_length, minlength=len(sel)).astype(np.int32)
            count = count + extra
        end = t + ch.hop_ns(ch.direct_link[sel], count)
        src, dst = ch.direct_src[sel], ch.direct_dst[sel]
        ids = self._record(first, count, src, dst, t, end, sel)
        self.busy_until[sel] = end
        self._free_at(sel, end)
        self.carrying[sel] = ids
        if self.ranges > 1:
            self.rec["more"][ids] = extra
            self.carrying_length[sel] = 0
            self.carrying_first[sel[row], slot] = more_first
            self.carrying_length[sel[row], slot] = more_length
            if len(row):  # kept compact until the schedule is laid out: millions of runs at 4,096 NPUs
                self.more.append((ids[row].astype(np.int32), slot.astype(np.int8), more_first.astype(np.int32), more_length.astype(np.int32)))
        if self.has_routed:
            self._note_deliveries(dst, first, count, ids, end)
            for s_, e_ in zip(src.tolist(), end.tolist()):
                heapq.heappush(self.rank_events[s_], e_)
            for d_, e_ in zip(dst.tolist(), end.tolist()):
                heapq.heappush(self.rank_events[d_], e_)

    def _free_at(self, channels: np.ndarray, end: np.ndarray) -> None:
        """Note that ``channels`` become free at ``end`` (their messages' arrivals)."""
        if len(end) == 1:
            times, at = end, [channels]
        else:  # grouped by instant (one sort)
            order = np.argsort(end)
            ordered = end[order]
            cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
            times, at = ordered[np.concatenate(([0], cuts))], np.split(channels[order], cuts)
        for time, group in zip(times.tolist(), at):
            if time in self.freeing:
                self.freeing[time].append(group)
            else:
                self.freeing[time] = [group]
                heapq.heappush(self.free_times, time)

    def _more_runs(
        self, cand: np.ndarray, channels: np.ndarray, src: np.ndarray, dst: np.ndarray, first: np.ndarray, count: np.ndarray, cap: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Further runs for the messages just matched (``first``, ``count``: their first runs;
        ``cand``: what ``src`` held for ``dst`` before), up to :attr:`ranges` runs and ``cap`` chunks
        a message: each the run :meth:`_pick_runs` takes among the candidates the earlier runs left,
        starting at one of the scarcest (:meth:`_scarcest`, worked out once for all of them; all
        candidates once none is left) (``dst``'s wanted chunks are cleared as they are taken). Only messages that forward received
        chunks take more (the sender's own chunks live in another buffer), and only of those.

        Returns ``(row, slot, first, length)``: the row of each further run and its position
        (0 for the second run of a message, ...)."""
        total = count.astype(np.int64)
        own_first = src.astype(np.int64) * self.k
        received = (first < own_first) | (first >= own_first + self.k)
        rows = np.flatnonzero(received & (total < cap))
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        if len(rows):
            cand = cand[rows] & self.wanted[dst[rows]]  # the first run is no longer wanted
            _set_runs(cand, np.arange(len(rows)), own_first[rows], np.full(len(rows), self.k), clear=True)
            scarce = self._scarcest(cand, channels[rows])  # as the first run: chunks few others can bring (worked out once)
        for slot in range(self.ranges - 1):
            if not len(rows):
                break
            if slot:
                cand &= self.wanted[dst[rows]]
                scarce &= cand
            pool = np.where(scarce.any(axis=1, keepdims=True), scarce, cand)
            more_first, more_length = self._pick_runs(pool, cand, src[rows], dst[rows], (cap[rows] - total[rows]).astype(np.int32))
            got = more_first >= 0
            rows, cand, scarce, more_first, more_length = rows[got], cand[got], scarce[got], more_first[got], more_length[got]
            _set_runs(self.wanted, dst[rows].astype(np.int64), more_first, more_length, clear=True)
            found.append((rows, np.full(len(rows), slot), more_first, more_length.astype(np.int64)))
            total[rows] += more_length
            keep = total[rows] < cap[rows]
            rows, cand, scarce = rows[keep], cand[keep], scarce[keep]
        if not found:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, empty
        return tuple(np.concatenate(column) for column in zip(*found))  # type: ignore[return-value]

    def _arrive_more(self, done: np.ndarray, ids: np.ndarray) -> None:
        """Deliver the further runs of the messages ``ids`` arriving over direct channels ``done``."""
        lengths = self.carrying_length[done]
        at, slot = np.nonzero(lengths)
        if len(at):
            _set_runs(self.held, self.rec["dst"][ids[at]].astype(np.int64), self.carrying_first[done[at], slot], lengths[at, slot])

    def _scarcest(self, cand: np.ndarray, channels: np.ndarray) -> np.ndarray:
        """Per row (direct channel ``channels[i]``, ``s -> d``), the candidates held by the fewest
        direct in-neighbours of ``d``: those only ``s`` holds, else those exactly one other holds,
        else all of them. Worked out on the candidates' nonzero words only: each is a word of
        ``s``'s held chunks, so the count is ``1 +`` the other in-neighbours' holding it."""
        rows, words = np.nonzero(cand)
        bits = cand[rows, words]
        others = self.other_in[channels]  # -1 pads: the zero row of held_or_zero
        one, more = np.zeros_like(bits), np.zeros_like(bits)
        for position in range(others.shape[1]):
            held = self.held_or_zero[others[rows, position], words]
            more |= one & held
            one |= held
        only = bits & ~one
        pair = bits & one & ~more
        has_only = np.zeros(len(cand), dtype=bool)
        has_only[rows[only != 0]] = True
        has_pair = np.zeros(len(cand), dtype=bool)
        has_pair[rows[pair != 0]] = True
        pool = np.zeros_like(cand)
        pool[rows, words] = np.where(has_only[rows], only, np.where(has_pair[rows], pair, bits))
        return pool

    def _pick_runs(
        self, pool: np.ndarray, cand: np.ndarray, src: np.ndarray, dst: np.ndarray, cap: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """A run of consecutive chunks per row (at most ``cap`` long; -1: none) from ``src`` to
        ``dst``: its first chunk from ``pool``, the rest from ``cand``.

        Rows that may merge start where ``pool`` has a run start (``reach_back``: where a run of
        ``cand`` that holds ``pool`` chunks starts, if at most ``cap`` chunks before one), preferring
        starts of the longest runs of ``cand`` (16, 8, 4 or 2 chunks: fewer, fuller messages), then
        (``extend_held``) starts right after a chunk ``dst`` does not want, at random among equals;
        a run never mixes chunks its sender owns with chunks it received (they live in different
        buffers).
        """
        merge = cap > 1
        if not merge.any():
            first = _random_members(pool, self.rng)
            return first, np.ones(len(first), dtype=np.int32)
        every = bool(merge.all())  # usual: one cap for all channels
        longest_level, reach, top = self._run_reach(cap)
        # a run starts in a word of the pool or (reaching back) the word before: the starts are
        # worked out on those words and their neighbours only, when they are few
        window = _Window.around(pool, 2 if self.reach_back else 1) if every else None
        if window is not None:
            first = self._first_in_window(window, pool, cand, dst, top, reach, longest_level)
        else:
            merging_pool, follows = (pool, cand) if every else (pool[merge], cand[merge])
            ladder = _run_ladder(follows, top)  # shared by the reach back and the levels
            starts = _run_starts(_reach_back(merging_pool, ladder, reach) if self.reach_back else merging_pool)
            levels = [starts] + [starts & rung for rung in ladder[1 : longest_level.bit_length()]]
            if len(levels) > 1:  # per row, the longest level that has a start wins
                stacked = np.stack(levels)
                found = stacked.any(axis=2)
                longest = len(levels) - 1 - np.argmax(found[::-1], axis=0)
                starts = stacked[longest, np.arange(stacked.shape[1])]
            if self.extend_held:  # keep what the destination wants in few, long runs
                extending = starts & ~_shift_up(self.wanted[dst if every else dst[merge]])
                starts = np.where(extending.any(axis=1, keepdims=True), extending, starts)
            if every:
                choose_from = starts
            else:
                choose_from = pool.copy()
                choose_from[merge] = starts
            first = _random_members(choose_from, self.rng)
        count = np.ones(len(first), dtype=np.int32)
        rows = np.flatnonzero(merge & (first >= 0))
        if len(rows):
            # a run never crosses the edge of the sender's own chunks (owner_start[src] .. owner_start[src + 1] - 1)
            c = first[rows]
            own_first, own_end = self.owner_start[src[rows]], self.owner_start[src[rows] + 1]
            edge = np.where(c < own_first, own_first, np.where(c < own_end, own_end, self.num_chunks))
            every_row = len(rows) == len(first)
            count[rows] = _run_lengths(cand if every_row else cand[rows], c, np.minimum(cap if every_row else cap[rows], edge - c))
        return first, count

    def _run_reach(self, cap: np.ndarray) -> tuple[int, int, int]:
        """For merged runs of at most ``cap`` chunks: the longest run level :meth:`_pick_runs` prefers
        (2, 4, .. up to 16), how far a run may reach back and the top of the run ladder it needs."""
        longest_cap = int(cap.max())
        longest_level = 1 << (min(16, longest_cap) - 1).bit_length()  # runs of 2, 4, .. this many preferred
        reach = min(longest_cap, 64)
        top = max(longest_level, 1 << ((reach - 1).bit_length() - 1)) if self.reach_back else longest_level
        return longest_level, reach, top

    def _first_in_window(
        self, window: _Window, pool: np.ndarray, cand: np.ndarray, dst: np.ndarray, top: int, reach: int, longest_level: int
    ) -> np.ndarray:
        """:meth:`_pick_runs`' first chunks when every row merges, worked out in ``window`` (the
        same bit operations on the words taken; per-row choices by segment)."""
        link = window.link
        ladder = _run_ladder(window.take(cand), top, link)
        pool_taken = window.take(pool)
        starts = _run_starts(_reach_back(pool_taken, ladder, reach, link) if self.reach_back else pool_taken, link)
        levels = [starts] + [starts & rung for rung in ladder[1 : longest_level.bit_length()]]
        if len(levels) > 1:
            stacked = np.concatenate(levels)
            found = window.any(stacked)
            longest = len(levels) - 1 - np.argmax(found[::-1], axis=0)
            starts = stacked[longest[window.segment], np.arange(stacked.shape[1])][None, :]
        if self.extend_held:
            extending = starts & ~_shift_up(window.take_rows(self.wanted, dst), link)
            starts = np.where(window.any(extending[0])[window.segment], extending, starts)
        return window.random_bits(starts, self.rng)

    # ------------------------------------------------------------------ routed channels
    def _init_routed(self) -> None:
        links = {l for c in self.routed for l in c.links}
        size = max(links) + 1 if links else 0  # indexed by link id
        self.link_free = np.zeros(size)
        self.link_last_arrival = np.full(size, -np.inf)
        self.link_opened = np.zeros(size, dtype=bool)  # every message admitted so far was released at t = 0
        self.rank_events: list[list[float]] = [[] for _ in range(self.n)]
        self.pending: list[tuple[float, int]] = []  # routed arrivals: (time, transfer id)
        self.stalled: set[int] = set()
        """NPUs with chunks to send whose every message would overtake one already admitted to a
        switch queue (or, over detours, wait for a busy route), and no event of their own ahead:
        they try again at every later event (something is then in flight). Their message then
        has no operation to be released by: the network model may send it earlier than planned."""
        groups: dict[tuple[int, int, int], list[int]] = {}
        for index, c in enumerate(self.routed):
            groups.setdefault((c.src, c.links[0], len(c.links)), []).append(index)
        latency, rate = self.ch.link_latency, self.ch.link_rate
        self.groups_of: dict[int, list[_FirstLink]] = {}
        for (src, first, _), members in sorted(groups.items()):
            idx = np.array(members)
            dst = np.array([self.routed[i].dst for i in members])
            link_mat = np.array([self.routed[i].links for i in members])
            neighbours = self.in_neighbours[dst]
            self.groups_of.setdefault(src, []).append(
                _FirstLink(
                    link=first, channel=idx, dst=dst, links=link_mat, latency=latency[link_mat], rate=rate[link_mat],
                    neighbours=neighbours, present=np.where(neighbours >= 0, ~np.uint64(0), np.uint64(0))[:, :, None],
                    has_neighbours=bool((neighbours >= 0).any()), merges=bool((self.routed_cap[idx] > 1).any()),
                )
            )
        self.recv_id = np.full((self.n, self.num_chunks), NO_ANCHOR, dtype=np.int64)
        self.arrival_at = np.full((self.n, self.num_chunks), -1.0)

    def _note_deliveries(self, dst, first, count, ids, end) -> None:
        """Remember which transfer brings each chunk of these runs to ``dst``, and when."""
        message, offset = expand_runs(count)
        rows, chunks = dst[message], first[message] + offset
        self.recv_id[rows, chunks] = ids[message]
        self.arrival_at[rows, chunks] = end[message]

    def _match_routed(self, t: float, events: dict[int, tuple[int, bool]]) -> None:
        if not self.remaining:
            return
        ranks = range(self.n) if t == 0.0 else sorted({r for r in events if r in self.groups_of} | self.stalled)
        self.stalled = set()
        for s in ranks:
            groups = self.groups_of.get(s)
            if not groups:
                continue
            heap = self.rank_events[s]
            while heap and heap[0] <= t:
                heapq.heappop(heap)
            event = events.get(s) if t > 0 else None
            for group in groups:
                self._fill_first_link(s, t, event, group, heap)

    def _covered(self, group: _FirstLink, rows: np.ndarray | slice) -> np.ndarray:
        """Per destination of ``group``'s ``rows``, chunks some direct in-neighbour holds or has been matched with."""
        wanted = self.wanted[group.neighbours[rows]]  # (rows, in-neighbours, words); padding reads the last NPU's
        return np.bitwise_or.reduce(~wanted & group.present[rows], axis=1)

    def _fill_first_link(self, s: int, t: float, event: tuple[int, bool] | None, group: _FirstLink, heap: list[float]) -> None:
        """Release messages from ``s`` over ``group``'s first link while it would otherwise go idle
        before ``s``'s next event: each time the destination and chunk that arrive first over
        their route (times computed for all of ``group``'s channels at once)."""
        batch_anchor: tuple[int, bool] | None = None
        ch = self.ch
        first = group.link
        hops = group.links.shape[1]
        all_rows = np.arange(len(group.dst))
        while True:
            next_event = heap[0] if heap else np.inf
            first_free = float(self.link_free[first])
            if not (first_free <= t or first_free < next_event):
                return
            # a chunk a direct in-neighbour of the destination has (or is getting) comes cheaper
            # over that link: switch hops carry only chunks no direct neighbour can supply --
            # except detours, whose point is to bring what a direct link could bring, beside it
            cand = self.held[s] & self.wanted[group.dst]
            if not ch.detours and group.has_neighbours:
                cand &= ~self._covered(group, slice(None))
            usable = cand.any(axis=1)
            if usable.all():
                rows = all_rows
            else:
                rows = np.flatnonzero(usable)
                if not len(rows):
                    return
                cand = cand[rows]
            dst = group.dst[rows]
            if group.merges:
                caps = self.routed_cap[group.channel[rows]]
                chunk_of, count_of = self._pick_runs(cand, cand, np.full(len(rows), s, dtype=np.int32), dst, caps)
                hop_time = group.latency[rows] + (count_of.astype(np.int64) * ch.chunk_bytes)[:, None] / group.rate[rows]
            else:  # one chunk per message: the model's hop cost of a chunk (Channels.hop_ns, the same floats)
                chunk_of, count_of = None, None  # the chunks are drawn once some route turns out valid
                hop_time = group.latency[rows] + ch.chunk_bytes / group.rate[rows]
            # time each candidate message over its route: arrival[h] once past hop h
            links = group.links[rows]
            last, free = self.link_last_arrival[links], self.link_free[links]
            arrival = np.empty((hops, len(rows)))
            arrival[0] = max(t, first_free) + hop_time[:, 0]
            unloaded = arrival[0].copy()
            valid = np.ones(len(rows), dtype=bool)
            for hop in range(1, hops):
                ahead = arrival[hop - 1]
                if t == 0 and hop == 1:
                    # messages released at 0 reach the first switch in the order the network model
                    # injects them (program order, rank by rank), which is the order matched here
                    valid &= (ahead > last[:, 1]) | ((ahead == last[:, 1]) & self.link_opened[links[:, 1]])
                else:
                    valid &= ahead > last[:, hop]
                if not valid.any():  # every message would overtake one queued there: none leaves
                    break
                np.add(np.maximum(ahead, free[:, hop]), hop_time[:, hop], out=arrival[hop])
                unloaded += hop_time[:, hop]
            done = arrival[-1]
            if ch.detours and valid.any():  # wait for a route that is free rather than queue behind others
                valid &= done - unloaded <= DETOUR_SLACK * hop_time.max(axis=1)
            if chunk_of is None:
                if not valid.any():
                    self.rng.random(len(rows))  # what drawing the chunks takes from the generator
                else:
                    chunk_of = _random_members(cand, self.rng)
            if ch.detours and group.has_neighbours and valid.any():
                # leave the last chunks a direct in-neighbour holds (or is getting) to the direct
                # links, when those bring them sooner
                covered = self._covered(group, rows)
                supplied = (covered[np.arange(len(rows)), chunk_of // 64] >> (chunk_of % 64).astype(np.uint64)) & _ONE
                wanted = np.bitwise_count(self.wanted[dst] & covered).sum(axis=1)
                intake = self.direct_intake[dst]
                valid &= (supplied == 0) | (done - t <= wanted / np.maximum(intake, 1e-30))
            if not valid.any():
                if not heap:  # no event of its own to try again at
                    self.stalled.add(s)
                return
            best = done[valid].min()
            ties = np.flatnonzero(valid & (done == best))
            pick = int(ties[self.rng.integers(len(ties))]) if len(ties) > 1 else int(ties[0])
            row = int(rows[pick])
            chunk, count = int(chunk_of[pick]), 1 if count_of is None else int(count_of[pick])
            d = int(group.dst[row])
            here = float(done[pick])
            # occupy the links: each hop busy until the message is past it
            self.link_last_arrival[first] = t
            self.link_free[first] = arrival[0, pick]
            if hops > 1:
                later = links[pick, 1:]
                second = int(later[0])  # opened: only messages released at 0 were admitted to it
                opened = t == 0 and bool(self.link_opened[second] or self.link_last_arrival[second] == -np.inf)
                self.link_opened[later] = False
                self.link_opened[second] = opened
                self.link_last_arrival[later] = arrival[:-1, pick]
                self.link_free[later] = arrival[1:, pick]
            # the RECV on s of the run's chunks, if one completes exactly now, is the first send's anchor
            if batch_anchor is None and t > 0:
                arrived_now = not self.owner_start[s] <= chunk < self.owner_start[s + 1] and self.arrival_at[s, chunk] == t
                batch_anchor = (int(self.recv_id[s, chunk]), False) if arrived_now else event
            anchor = batch_anchor if batch_anchor is not None else (NO_ANCHOR, False)
            if count == 1:
                self.wanted[d, chunk // 64] &= ~_BIT[chunk % 64]
            else:
                _set_runs(self.wanted, np.array([d]), np.array([chunk]), np.array([count]), clear=True)
            transfer = self._record_one(chunk, count, s, d, t, here, -1 - int(group.channel[row]))
            self.rec["anchor"][transfer] = anchor[0]
            self.rec["anchor_is_send"][transfer] = anchor[1]
            self.recv_id[d, chunk : chunk + count] = transfer
            self.arrival_at[d, chunk : chunk + count] = here
            heapq.heappush(self.pending, (here, transfer))
            heapq.heappush(heap, here)
            heapq.heappush(self.rank_events[d], here)

    # ------------------------------------------------------------------ result
    def _schedule(self) -> Schedule:
        size = self.size
        cols = {name: values[:size] for name, values in self.rec.items()}
        if size < len(self.rec["chunk"]) // 2:  # merged messages: do not keep the unused capacity
            cols = {name: values.copy() for name, values in cols.items()}
        more: dict[str, np.ndarray] = {}
        if self.ranges > 1:
            del cols["more"]
            if self.more:
                message, slot, first, length = (np.concatenate(column) for column in zip(*self.more))
            else:
                message = slot = first = length = np.zeros(0, dtype=np.int64)
            order = np.lexsort((slot, message))
            more = {
                "more_ptr": np.searchsorted(message[order], np.arange(size + 1)).astype(np.int64),
                "more_chunk": first[order].astype(np.int32), "more_count": length[order].astype(np.int32),
            }
        if not self.has_routed:
            cols["anchor"] = np.broadcast_to(np.int32(NO_ANCHOR), (size,))
            cols["anchor_is_send"] = np.broadcast_to(False, (size,))
        return Schedule(
            num_npus=self.n, chunks_per_npu=self.k, max_chunks=self.max_cap,
            num_direct=self.ch.num_direct, num_routed=len(self.routed), owner_start=self.given_owner_start, **cols, **more,
        )
