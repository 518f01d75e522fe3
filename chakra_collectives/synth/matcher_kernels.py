"""Compiled inner loops of the TACOS matcher (:mod:`.matcher`), for long bitset rows.

Each kernel does in one pass over the words what the matcher's numpy path does in several
whole-row passes with temporaries (gathers, ``np.nonzero``, fancy-indexed scatters), and gives
the same arrays bit for bit; they draw no random numbers (the matcher draws them, in the same
order either way). numba compiles them on first use (a few seconds, once a process), so the
matcher imports this module only for rows of :data:`~.matcher.COMPILED_WORDS` words or more,
where whole-row passes dominate an event.

>>> held = np.array([[0b0011], [0b0100], [0b1000]], dtype=np.uint64)
>>> wanted = np.array([[0b1100], [0b1011], [0b0111]], dtype=np.uint64)
>>> cand, options = candidate_rows(held, wanted, np.array([1, 2]), np.array([0, 1]))
>>> cand[:, 0].tolist(), options.tolist()
([4, 8], [1, 1])
"""

from __future__ import annotations

import numba
import numpy as np

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@numba.njit(inline="always")
def _popcount(x: np.uint64) -> np.int64:
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return np.int64((x * _H01) >> np.uint64(56))


@numba.njit(nogil=True, cache=False)
def _candidate_rows(held, wanted, src, dst, cand, options):  # pragma: no cover - compiled
    words = held.shape[1]
    for i in range(len(src)):
        s, d = src[i], dst[i]
        total = 0
        for w in range(words):
            x = held[s, w] & wanted[d, w]
            cand[i, w] = x
            total += _popcount(x)
        options[i] = total


def candidate_rows(held: np.ndarray, wanted: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``held[src] & wanted[dst]`` (one row per channel ``src[i] -> dst[i]``) and each row's set bits."""
    cand = np.empty((len(src), held.shape[1]), dtype=np.uint64)
    options = np.empty(len(src), dtype=np.int64)
    _candidate_rows(held, wanted, np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64), cand, options)
    return cand, options


@numba.njit(nogil=True, cache=False)
def _scarcest(cand, others, held_or_zero, pool):  # pragma: no cover - compiled
    rows, words = cand.shape
    width = others.shape[1]
    only_of = np.empty(words, dtype=np.uint64)
    pair_of = np.empty(words, dtype=np.uint64)
    for r in range(rows):
        has_only = False
        has_pair = False
        for w in range(words):
            bits = cand[r, w]
            if bits == 0:
                continue
            one = np.uint64(0)
            more = np.uint64(0)
            for p in range(width):
                o = others[r, p]
                if o >= 0:
                    h = held_or_zero[o, w]
                    more |= one & h
                    one |= h
            only = bits & ~one
            pair = bits & one & ~more
            only_of[w] = only
            pair_of[w] = pair
            has_only |= only != 0
            has_pair |= pair != 0
        for w in range(words):
            bits = cand[r, w]
            if bits == 0:
                pool[r, w] = 0
            elif has_only:
                pool[r, w] = only_of[w]
            elif has_pair:
                pool[r, w] = pair_of[w]
            else:
                pool[r, w] = bits


def scarcest_pool(cand: np.ndarray, others: np.ndarray, held_or_zero: np.ndarray) -> np.ndarray:
    """Per row of ``cand``, the candidates held by the fewest of ``others`` (that row's other
    in-neighbours, -1 padded): those none holds, else those exactly one holds, else all
    (:meth:`~.matcher._Matcher._scarcest`)."""
    pool = np.empty_like(cand)
    _scarcest(cand, np.ascontiguousarray(others, dtype=np.int64), held_or_zero, pool)
    return pool


@numba.njit(nogil=True, cache=False)
def _window_starts(
    pool, cand, wanted, dst, before, most, top, reach, levels, reach_back, extend_held, rows_out, words_out, starts_out, row_words
):  # pragma: no cover - compiled
    num_rows, words = pool.shape
    rungs = 0
    length = 1
    while length < top:
        rungs += 1
        length *= 2
    ladder = np.empty((rungs + 1, words), dtype=np.uint64)
    link = np.zeros(words, dtype=np.bool_)
    seg = np.empty(words, dtype=np.int64)
    reached = np.empty(words, dtype=np.uint64)
    moved = np.empty(words, dtype=np.uint64)
    chosen = np.empty(words, dtype=np.uint64)
    taken = 0
    for r in range(num_rows):
        m = 0
        for w in range(words):
            marked = pool[r, w] != 0 or (w > 0 and pool[r, w - 1] != 0)
            b = 1
            while not marked and b <= before and w + b < words:
                marked = pool[r, w + b] != 0
                b += 1
            if marked:
                seg[m] = w
                m += 1
        row_words[r] = m
        if m == 0:
            continue
        if taken + m > most:
            return -1
        for i in range(m - 1):
            link[i] = seg[i + 1] == seg[i] + 1
        link[m - 1] = False
        # the run ladder: ladder[k] bit c set when bits c .. c + 2**k - 1 of cand all are
        for i in range(m):
            ladder[0, i] = cand[r, seg[i]]
        by = 1
        for k in range(rungs):
            shift, back = np.uint64(by), np.uint64(64 - by)
            for i in range(m):
                x = ladder[k, i] >> shift
                if link[i]:
                    x |= ladder[k, i + 1] << back
                ladder[k + 1, i] = ladder[k, i] & x
            by *= 2
        for i in range(m):
            reached[i] = pool[r, seg[i]]
        if reach_back:
            limit = min(reach, 64)
            step, rung = 1, 0
            while step < limit:
                shift, back = np.uint64(step), np.uint64(64 - step)
                for i in range(m):
                    x = reached[i] >> shift
                    if link[i]:
                        x |= reached[i + 1] << back
                    moved[i] = x
                for i in range(m):
                    reached[i] |= ladder[rung, i] & moved[i]
                step *= 2
                rung += 1
        # run starts: set bits whose predecessor is clear
        for i in range(m):
            up = reached[i] << np.uint64(1)
            if i > 0 and link[i - 1]:
                up |= reached[i - 1] >> np.uint64(63)
            moved[i] = reached[i] & ~up
        # the longest level (starts of runs of 2, 4, ... candidates) that has a start
        best = 0
        for level in range(min(levels, rungs + 1) - 1, 0, -1):
            found = False
            for i in range(m):
                if moved[i] & ladder[level, i]:
                    found = True
                    break
            if found:
                best = level
                break
        if best == 0 and min(levels, rungs + 1) > 1:  # no level has a start: the top one (empty too)
            any_start = False
            for i in range(m):
                if moved[i]:
                    any_start = True
                    break
            if not any_start:
                best = min(levels, rungs + 1) - 1
        for i in range(m):
            chosen[i] = moved[i] if best == 0 else moved[i] & ladder[best, i]
        if extend_held:
            d = dst[r]
            extends = False
            for i in range(m):
                up = wanted[d, seg[i]] << np.uint64(1)
                if i > 0 and link[i - 1]:
                    up |= wanted[d, seg[i - 1]] >> np.uint64(63)
                reached[i] = chosen[i] & ~up
                extends |= reached[i] != 0
            if extends:
                for i in range(m):
                    chosen[i] = reached[i]
        for i in range(m):
            rows_out[taken + i] = r
            words_out[taken + i] = seg[i]
            starts_out[taken + i] = chosen[i]
        taken += m
    return taken


@numba.njit(nogil=True, cache=False)
def _pick_bits(starts, words, row_words, draws, result):  # pragma: no cover - compiled
    at = 0
    live = 0
    for r in range(len(row_words)):
        m = row_words[r]
        result[r] = -1
        if m == 0:
            continue
        total = 0
        for i in range(at, at + m):
            total += _popcount(starts[i])
        pick = np.int64(draws[live] * total)
        live += 1
        for i in range(at, at + m):
            bits = starts[i]
            c = _popcount(bits)
            if pick < c:
                position = 0
                while True:
                    if bits & np.uint64(1):
                        if pick == 0:
                            break
                        pick -= 1
                    bits >>= np.uint64(1)
                    position += 1
                result[r] = words[i] * 64 + position
                break
            pick -= c
        at += m


def window_firsts(
    pool: np.ndarray, cand: np.ndarray, wanted: np.ndarray, dst: np.ndarray, rng: np.random.Generator, *,
    before: int, most: int, top: int, reach: int, levels: int, reach_back: bool, extend_held: bool,
) -> np.ndarray | None:
    """The first chunk of each row's run (-1: none), chosen as :meth:`~.matcher._Matcher._first_in_window`
    does in its window (the same words, the same draws from ``rng``); None, drawing nothing, when
    the window would hold more than ``most`` words or none.

    >>> pool = np.zeros((1, 4), dtype=np.uint64); pool[0, 1] = 0b110
    >>> cand = pool.copy(); wanted = np.full((1, 4), ~np.uint64(0))
    >>> window_firsts(pool, cand, wanted, np.zeros(1, dtype=np.int64), np.random.default_rng(0),
    ...               before=1, most=4, top=2, reach=2, levels=2, reach_back=False, extend_held=False).tolist()
    [65]
    """
    size = min(most, pool.size)
    rows = np.empty(size, dtype=np.int64)
    words = np.empty(size, dtype=np.int64)
    starts = np.empty(size, dtype=np.uint64)
    row_words = np.empty(len(pool), dtype=np.int64)
    taken = _window_starts(
        pool, cand, wanted, np.ascontiguousarray(dst, dtype=np.int64), before, most, top, reach, levels, reach_back, extend_held,
        rows, words, starts, row_words,
    )
    if taken <= 0:
        return None
    draws = rng.random(int(np.count_nonzero(row_words)))
    result = np.empty(len(pool), dtype=np.int64)
    _pick_bits(starts[:taken], words[:taken], row_words, draws, result)
    return result
