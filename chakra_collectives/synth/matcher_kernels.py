"""Compiled inner loops of the TACOS matcher (:mod:`.matcher`), for long bitset rows.

A round of the matcher's direct channels (:meth:`~.matcher._Matcher._match_direct`) is, per
channel ``s -> d``: the candidates ``held[s] & wanted[d]``, the scarcest of them
(:meth:`~.matcher._Matcher._scarcest`), where a merged run may start
(:meth:`~.matcher._Matcher._pick_runs`), one uniformly random start, the run's length, and
clearing the run from ``wanted[d]``. The numpy path does each step as whole-row passes (or
windows around the scarcest candidates) with temporaries; here one compiled pass per row works
on the words that hold candidates only -- every bit operation of the run starts too: a word
without candidates is zero in all of them, and shifts do not cross between words that do not
follow each other -- found through each
channel's *candidate summary* (bit ``w`` of row ``c``: word ``w`` of ``held[s] & wanted[d]`` is
nonzero), kept right as chunks arrive and are matched (:func:`set_runs`: a word set in ``held[s]``
is checked against the wanted row of each of ``s``'s out-channels, a word cleared in
``wanted[d]`` against the held row of each of ``d``'s in-channels), so an event costs what its
candidates are, not what the rows are long, nor how many words of them are nonzero.
The results are the numpy path's bit for bit, the random draws the same ones in the same order
(the caller draws them between :func:`round_starts` and :func:`take_runs`).

numba compiles these on first use (seconds, once a process), so the matcher imports this
module only for rows of :data:`~.matcher.COMPILED_WORDS` words or more.

>>> held = np.array([[0b0011], [0b0100], [0b1000]], dtype=np.uint64)
>>> wanted = np.array([[0b1100], [0b1011], [0b0111]], dtype=np.uint64)
>>> src, dst = np.array([1, 2, 0]), np.array([0, 1, 2])
>>> summary = candidate_words(held, wanted, src, dst)
>>> candidate_counts(held, wanted, summary, np.arange(3), src, dst).tolist()
[1, 1, 2]
"""

from __future__ import annotations

import numba
import numpy as np

from chakra_collectives.ir.grouping import distinct

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
_ONE = np.uint64(1)
_ALL = ~np.uint64(0)


@numba.njit(inline="always")
def _popcount(x):  # pragma: no cover - compiled
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return np.int64((x * _H01) >> np.uint64(56))


@numba.njit(inline="always")
def _low_bit(x):  # pragma: no cover - compiled
    """Index of the lowest set bit of ``x`` (nonzero)."""
    return _popcount((x & (~x + _ONE)) - _ONE)


@numba.njit(nogil=True, cache=False)
def _candidate_words(held, wanted, src, dst, summary):  # pragma: no cover - compiled
    for c in range(len(src)):
        s, d = src[c], dst[c]
        for sw in range(summary.shape[1]):
            summary[c, sw] = 0
        for w in range(held.shape[1]):
            if held[s, w] & wanted[d, w]:
                summary[c, w >> 6] |= _ONE << np.uint64(w & 63)


def candidate_words(held: np.ndarray, wanted: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The candidate summary of channels ``src[c] -> dst[c]``: bit ``w`` of row ``c`` set when word
    ``w`` of ``held[src[c]] & wanted[dst[c]]`` is nonzero (kept right as runs are set and cleared,
    :func:`set_runs`).

    >>> held = np.array([[1, 0, 0], [0, 0, 4]], dtype=np.uint64)
    >>> wanted = np.array([[0, 2, 4], [3, 0, 0]], dtype=np.uint64)
    >>> candidate_words(held, wanted, np.array([0, 1]), np.array([1, 0])).tolist()
    [[1], [4]]
    """
    summary = np.empty((len(src), -(-held.shape[1] // 64)), dtype=np.uint64)
    _candidate_words(held, wanted, np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64), summary)
    return summary


@numba.njit(nogil=True, cache=False)
def _candidate_counts(held, wanted, summary, channels, src, dst, options):  # pragma: no cover - compiled
    for i in range(len(src)):
        c, s, d = channels[i], src[i], dst[i]
        total = 0
        for sw in range(summary.shape[1]):
            both = summary[c, sw]
            while both:
                w = sw * 64 + _low_bit(both)
                both &= both - _ONE
                total += _popcount(held[s, w] & wanted[d, w])
        options[i] = total


def candidate_counts(held, wanted, summary, channels: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Per channel ``channels[i]`` (``src[i] -> dst[i]``), how many chunks ``src`` holds that ``dst``
    still wants (``summary``: :func:`candidate_words`)."""
    options = np.empty(len(src), dtype=np.int64)
    _candidate_counts(held, wanted, summary, *(np.ascontiguousarray(a, dtype=np.int64) for a in (channels, src, dst)), options)
    return options


@numba.njit(nogil=True, cache=False)
def _set_runs(matrix, other, summary, rows, first, count, clear, ptr, channels, ends):  # pragma: no cover - compiled
    for i in range(len(rows)):
        r = rows[i]
        start = np.int64(first[i])
        end = start + np.int64(count[i])
        while start < end:
            w = start >> 6
            low = start & 63
            high = min(end - w * 64, 64)
            mask = _ALL >> np.uint64(64 - (high - low)) << np.uint64(low)
            if clear:
                matrix[r, w] &= ~mask
            else:
                matrix[r, w] |= mask
            bit = _ONE << np.uint64(w & 63)
            for j in range(ptr[r], ptr[r + 1]):
                c = channels[j]
                if matrix[r, w] & other[ends[c], w]:
                    summary[c, w >> 6] |= bit
                else:
                    summary[c, w >> 6] &= ~bit
            start = (w + 1) * 64


def set_runs(matrix, other, summary, rows, first, count, ptr, channels, ends, *, clear: bool = False) -> None:
    """Set (or clear) bits ``first .. first + count - 1`` of ``matrix[rows]`` (rows may repeat),
    keeping the candidate summary (:func:`candidate_words`) of the channels at those rows right:
    ``channels[ptr[r]:ptr[r + 1]]`` are the channels at row ``r``, ``ends[c]`` their row of
    ``other``, whose word ``w`` the summary's bit ``w`` ands with (``held`` with ``wanted`` over
    each NPU's out-channels, ``wanted`` with ``held`` over its in-channels).

    >>> held, wanted = np.zeros((2, 2), dtype=np.uint64), np.full((2, 2), 2**64 - 1, dtype=np.uint64)
    >>> wanted[1, 0] = 0                 # NPU 1 wants only word 1
    >>> out_ptr, out_channels, dst = np.array([0, 1, 1]), np.array([0]), np.array([1])   # one channel, 0 -> 1
    >>> summary = candidate_words(held, wanted, np.array([0]), dst)
    >>> set_runs(held, wanted, summary, np.array([0]), np.array([62]), np.array([4]), out_ptr, out_channels, dst); summary.tolist()
    [[2]]
    >>> in_ptr, in_channels, src = np.array([0, 0, 1]), np.array([0]), np.array([0])
    >>> set_runs(wanted, held, summary, np.array([1]), np.array([64]), np.array([2]), in_ptr, in_channels, src, clear=True); summary.tolist()
    [[0]]
    """
    as_int = (np.ascontiguousarray(a, dtype=np.int64) for a in (rows, first, count, ptr, channels, ends))
    rows, first, count, ptr, channels, ends = as_int
    _set_runs(matrix, other, summary, rows, first, count, clear, ptr, channels, ends)


@numba.njit(inline="always")
def _shifted_down(bits, i, by, link):  # pragma: no cover - compiled
    """Word ``i`` of ``bits`` shifted down by ``by`` (0 < by < 64), the next word's bits coming in where ``link[i]``."""
    x = bits[i] >> np.uint64(by)
    if link[i]:
        x |= bits[i + 1] << np.uint64(64 - by)
    return x


@numba.njit(inline="always")
def _shifted_up(bits, i, link):  # pragma: no cover - compiled
    x = bits[i] << _ONE
    if i > 0 and link[i - 1]:
        x |= bits[i - 1] >> np.uint64(63)
    return x


@numba.njit(nogil=True, cache=False)
def _row_starts(cand, pool, wanted_up, link, m, top, reach, levels, reach_back, extend_held, ladder, reached, moved, out):  # pragma: no cover - compiled
    """One row's run starts to choose from, over its ``m`` candidate words (``link``: which follow
    each other; a word not among them is all zeros): :meth:`~.matcher._Matcher._pick_runs`'s bit
    operations (``wanted_up``: the destination's wanted chunks shifted up one, per word)."""
    rungs = 0
    length = 1
    while length < top:
        rungs += 1
        length *= 2
    for i in range(m):
        ladder[0, i] = cand[i]
    # rungs from `filled` on are all zeros (no run that long): not laid out, and steps through them change nothing
    filled = rungs + 1
    by = 1
    for k in range(rungs):
        any_run = False
        for i in range(m):
            ladder[k + 1, i] = ladder[k, i] & _shifted_down(ladder[k], i, by, link)
            any_run |= ladder[k + 1, i] != 0
        by *= 2
        if not any_run:
            filled = k + 1
            break
    for i in range(m):
        reached[i] = pool[i]
    if reach_back:
        limit = min(reach, 64)
        step, rung = 1, 0
        while step < limit and rung < filled:
            for i in range(m):
                moved[i] = _shifted_down(reached, i, step, link)
            for i in range(m):
                reached[i] |= ladder[rung, i] & moved[i]
            step *= 2
            rung += 1
    for i in range(m):
        moved[i] = reached[i] & ~_shifted_up(reached, i, link)
    # per row the longest level (starts of runs of 2, 4, .. candidates) that has a start; none: the top one (empty)
    count = min(levels, rungs + 1)
    best = 0
    if count > 1:
        best = -1
        for level in range(min(count, filled) - 1, -1, -1):
            for i in range(m):
                if moved[i] & (ladder[level, i] if level else _ALL):
                    best = level
                    break
            if best >= 0:
                break
        if best < 0:
            best = count - 1
    for i in range(m):
        out[i] = moved[i] if best == 0 else (moved[i] & ladder[best, i] if best < filled else np.uint64(0))
    if extend_held:
        extends = False
        for i in range(m):
            reached[i] = out[i] & ~wanted_up[i]
            extends |= reached[i] != 0
        if extends:
            for i in range(m):
                out[i] = reached[i]


@numba.njit(nogil=True, cache=False)
def _round_starts(
    held, wanted, summary, channels, src, dst, others, held_or_zero, top, reach, levels, reach_back, extend_held,
    row_words, words_out, starts_out, cand_bits, pool_bits,
):  # pragma: no cover - compiled
    words = held.shape[1]
    width = others.shape[1]
    rungs_top = 1
    while (1 << (rungs_top - 1)) < top:
        rungs_top += 1
    ladder = np.empty((rungs_top, words), dtype=np.uint64)
    reached = np.empty(words, dtype=np.uint64)
    moved = np.empty(words, dtype=np.uint64)
    wanted_up = np.empty(words, dtype=np.uint64)
    link = np.zeros(words, dtype=np.bool_)
    at = 0
    for r in range(len(src)):
        c, s, d = channels[r], src[r], dst[r]
        begin = at
        has_only = False
        has_pair = False
        # the candidate words (through the channel's summary) and the scarcest candidates in each
        for sw in range(summary.shape[1]):
            both = summary[c, sw]
            while both:
                w = sw * 64 + _low_bit(both)
                both &= both - _ONE
                bits = held[s, w] & wanted[d, w]
                one = np.uint64(0)
                more = np.uint64(0)
                for p in range(width):
                    o = others[r, p]
                    if o >= 0:
                        h = held_or_zero[o, w]
                        more |= one & h
                        one |= h
                words_out[at] = w
                cand_bits[at] = bits
                only = bits & ~one
                pair = bits & one & ~more
                has_only |= only != 0
                has_pair |= pair != 0
                pool_bits[at] = only  # the choice among only / pair / all waits for the whole row
                starts_out[at] = pair  # scratch until the starts
                at += 1
        m = at - begin
        row_words[r] = m
        for i in range(m):
            e = begin + i
            pool_bits[e] = pool_bits[e] if has_only else (starts_out[e] if has_pair else cand_bits[e])
            w = words_out[e]
            link[i] = i + 1 < m and words_out[e + 1] == w + 1
            if extend_held:
                wanted_up[i] = wanted[d, w] << _ONE
                if w > 0:
                    wanted_up[i] |= wanted[d, w - 1] >> np.uint64(63)
        if m:
            _row_starts(cand_bits[begin:at], pool_bits[begin:at], wanted_up, link, m, top, reach, levels, reach_back, extend_held,
                        ladder, reached, moved, starts_out[begin:at])
    return at


@numba.njit(nogil=True, cache=False)
def _take_runs(held, wanted, src, dst, cap, owner_start, num_chunks, starts, words, row_words, draws, first, count):  # pragma: no cover - compiled
    at = 0
    live = 0
    for r in range(len(row_words)):
        m = row_words[r]
        first[r] = -1
        count[r] = 1
        if m == 0:
            continue
        total = 0
        for i in range(at, at + m):
            total += _popcount(starts[i])
        pick = np.int64(draws[live] * total)
        live += 1
        chunk = -1
        for i in range(at, at + m):
            bits = starts[i]
            c = _popcount(bits)
            if pick < c:
                while pick > 0:
                    bits &= bits - _ONE
                    pick -= 1
                chunk = words[i] * 64 + _low_bit(bits)
                break
            pick -= c
        at += m
        first[r] = chunk
        if chunk < 0:
            continue
        # the run: the candidates from chunk on, at most cap, never across the edge of the sender's own chunks
        s, d = src[r], dst[r]
        own_first, own_end = owner_start[s], owner_start[s + 1]
        edge = own_first if chunk < own_first else (own_end if chunk < own_end else num_chunks)
        most = min(np.int64(cap[r]), edge - chunk)
        length = 0
        position = chunk
        while length < most:
            w = position >> 6
            if not (held[s, w] & wanted[d, w]) >> np.uint64(position & 63) & _ONE:
                break
            length += 1
            position += 1
        count[r] = length


class Scratch:
    """Flat working arrays of :func:`round_starts`, kept from round to round (grown as needed):
    fresh ones each round cost page faults."""

    def __init__(self) -> None:
        self.size = 0
        self.arrays: tuple[np.ndarray, ...] = ()

    def of(self, size: int) -> tuple[np.ndarray, ...]:
        """Four arrays of at least ``size`` elements: words (int64), starts, candidate bits and the pool's (uint64)."""
        if size > self.size:
            self.size = max(size, 2 * self.size)
            self.arrays = tuple(np.empty(self.size, dtype=dtype) for dtype in (np.int64, np.uint64, np.uint64, np.uint64))
        return self.arrays


def round_starts(held, wanted, summary, channels, src, dst, others, held_or_zero, scratch: Scratch, *, top, reach, levels, reach_back, extend_held):
    """Pass one of a round: per channel (``channels``, ``src[i] -> dst[i]``), the run starts its
    first chunk is drawn from, on its candidate words (``summary``: :func:`candidate_words`; flat,
    row by row) and how many words each row has; the rows with any are the ones to draw for."""
    channels, src, dst = (np.ascontiguousarray(a, dtype=np.int64) for a in (channels, src, dst))
    row_words = np.empty(len(src), dtype=np.int64)
    words, starts, cand_bits, pool_bits = scratch.of(len(src) * held.shape[1])
    taken = _round_starts(
        held, wanted, summary, channels, src, dst, np.ascontiguousarray(others, dtype=np.int64), held_or_zero, top, reach, levels,
        reach_back, extend_held, row_words, words, starts, cand_bits, pool_bits,
    )
    return row_words, words[:taken], starts[:taken]


def take_runs(held, wanted, src, dst, cap, owner_start, num_chunks: int, row_words, words, starts, draws) -> tuple[np.ndarray, np.ndarray]:
    """Pass two of a round: per channel, its run's first chunk (-1: none) -- the ``draws[i]``-th
    fraction of the starts of the ``i``-th row that has any -- and length (at most ``cap``, within
    the candidates, never across the edge of the sender's own chunks, ``owner_start``)."""
    first = np.empty(len(row_words), dtype=np.int64)
    count = np.empty(len(row_words), dtype=np.int32)
    _take_runs(held, wanted, np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64), cap, owner_start, num_chunks,
               starts, words, row_words, draws, first, count)
    return first, count


@numba.njit(nogil=True, cache=False)
def _woken(received, freed, out_ptr, out_channels, busy_until, found):  # pragma: no cover - compiled
    taken = 0
    for npu in range(len(received)):
        if received[npu]:
            for i in range(out_ptr[npu], out_ptr[npu + 1]):
                c = out_channels[i]
                if busy_until[c] == np.inf:
                    found[taken] = c
                    taken += 1
    for c in freed:
        if busy_until[c] == np.inf:
            found[taken] = c
            taken += 1
    return taken


def woken(received: np.ndarray, freed: np.ndarray, out_ptr: np.ndarray, out_channels: np.ndarray, busy_until: np.ndarray) -> np.ndarray:
    """The free channels (``busy_until`` infinite) out of an NPU that ``received`` or among ``freed``,
    increasing (``out_channels[out_ptr[i]:out_ptr[i + 1]]``: the channels out of NPU ``i``).

    >>> woken(np.array([False, True]), np.array([0]), np.array([0, 1, 3]), np.array([0, 1, 2]), np.array([np.inf, 5.0, np.inf])).tolist()
    [0, 2]
    """
    found = np.empty(out_ptr[-1] + len(freed), dtype=np.int64)
    taken = _woken(received, freed, out_ptr, out_channels, busy_until, found)
    return distinct(found[:taken])
