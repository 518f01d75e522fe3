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
(drawn between the two passes of a round, :func:`_round_starts` and :func:`_take_runs`).

:func:`run_events` runs the matcher's whole event loop compiled (for direct channels whose
messages all merge): choosing the channels to match at an event, ordering them into rounds,
recording the messages, keeping the instants channels become free (a binary heap of ``(time,
channel)`` pairs in two arrays: a direct channel carries one message at a time, so it has at
most one entry), delivering arrivals -- in the numpy loop a few dozen numpy calls an event,
787,000 events for the All-Gather on 16,384 NPUs. The same steps in the same order, the random
draws the same ones (numba's ``Generator`` shares the caller's bit generator), so the schedule
is the same bit for bit. It stops after :data:`EVENTS_PER_CALL` events (for the progress bar) or
when the record columns may fill (the caller grows them), and resumes where it stopped.

numba compiles these on first use (seconds, once a process; :func:`run_events`' loop about 15 s,
once: it is cached, in one module with everything it calls, since numba's cache sees changes to
the cached function's own file only), so the matcher imports this module only for rows of
:data:`~.matcher.COMPILED_WORDS` words or more.

>>> held = np.array([[0b0011], [0b0100], [0b1000]], dtype=np.uint64)
>>> wanted = np.array([[0b1100], [0b1011], [0b0111]], dtype=np.uint64)
>>> src, dst = np.array([1, 2, 0]), np.array([0, 1, 2])
>>> summary = candidate_words(held, wanted, src, dst)
>>> summary.tolist()             # every channel has candidates, in word 0
[[1], [1], [1]]
"""

from __future__ import annotations

import numba
import numpy as np

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


EVENTS_PER_CALL = 4096
"""Events :func:`run_events` works before it returns (the caller updates its progress bar)."""


@numba.njit(inline="always")
def _bit_length(x):  # pragma: no cover - compiled
    length = 0
    while x:
        length += 1
        x >>= 1
    return length


@numba.njit(inline="always")
def _less(times, chans, a, b):  # pragma: no cover - compiled
    return times[a] < times[b] or (times[a] == times[b] and chans[a] < chans[b])


@numba.njit(nogil=True, cache=True)
def _heap_push(times, chans, size, time, chan):  # pragma: no cover - compiled
    i = size
    times[i], chans[i] = time, chan
    while i > 0:
        parent = (i - 1) >> 1
        if not _less(times, chans, i, parent):
            break
        times[i], times[parent] = times[parent], times[i]
        chans[i], chans[parent] = chans[parent], chans[i]
        i = parent
    return size + 1


@numba.njit(nogil=True, cache=True)
def _heap_pop(times, chans, size):  # pragma: no cover - compiled
    """Remove the top entry (read it first); returns the new size."""
    size -= 1
    times[0], chans[0] = times[size], chans[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        least = left
        if left + 1 < size and _less(times, chans, left + 1, left):
            least = left + 1
        if not _less(times, chans, least, i):
            break
        times[i], times[least] = times[least], times[i]
        chans[i], chans[least] = chans[least], chans[i]
        i = least
    return size


@numba.njit(nogil=True, cache=True)
def _match(
    t, rng, received, num_received, freed, num_freed, held, wanted, summary, held_or_zero, src_of, dst_of, other_in, cap_of,
    latency_of, rate_of, chunk_bytes, owner_start, num_chunks, out_ptr, out_channels, in_ptr, in_channels, busy_until, carrying,
    heap_time, heap_chan, state, rec_chunk, rec_count, rec_src, rec_dst, rec_start, rec_end, rec_channel, rec_tag, rec_send_seq,
    sent_on, program, reach_back, extend_held, scratch_words, scratch_starts, scratch_cand, scratch_pool,
):  # pragma: no cover - compiled
    """:meth:`~.matcher._Matcher._match_direct` at ``t``: the free channels out of the NPUs that
    ``received`` or among ``freed``, most constrained first per destination, matched round by round."""
    # the woken channels, ascending and distinct
    total = num_freed
    for i in range(num_received):
        npu = received[i]
        total += out_ptr[npu + 1] - out_ptr[npu]
    found = np.empty(total, dtype=np.int64)
    taken = 0
    for i in range(num_received):
        npu = received[i]
        for j in range(out_ptr[npu], out_ptr[npu + 1]):
            c = out_channels[j]
            if busy_until[c] == np.inf:
                found[taken] = c
                taken += 1
    for i in range(num_freed):
        c = freed[i]
        if busy_until[c] == np.inf:
            found[taken] = c
            taken += 1
    if taken == 0:
        return
    active = np.unique(found[:taken])
    src, dst = src_of[active], dst_of[active]
    options = np.empty(len(active), dtype=np.int64)
    _candidate_counts(held, wanted, summary, active, src, dst, options)
    useful = np.flatnonzero(options)
    if len(useful) == 0:
        return
    active, dst, options = active[useful], dst[useful], options[useful]
    # per destination, most constrained channel first, random among equals (np.lexsort's order)
    draws = rng.random(len(active))
    order = np.argsort(draws, kind="mergesort")
    order = order[np.argsort(options[order], kind="mergesort")]
    order = order[np.argsort(dst[order], kind="mergesort")]
    active, dst = active[order], dst[order]
    size = len(active)
    round_of = np.empty(size, dtype=np.int64)
    rounds = 0
    for i in range(size):
        round_of[i] = round_of[i - 1] + 1 if i > 0 and dst[i] == dst[i - 1] else 0
        rounds = max(rounds, round_of[i] + 1)
    sel_all = np.empty(size, dtype=np.int64)
    first_all = np.empty(size, dtype=np.int64)
    count_all = np.empty(size, dtype=np.int32)
    matched = 0
    for j in range(rounds):
        sel = active[round_of == j]
        s, d = src_of[sel], dst_of[sel]
        cap = cap_of[sel]
        longest_cap = np.int64(cap.max())
        longest_level = np.int64(1) << _bit_length(min(16, longest_cap) - 1)
        reach = min(longest_cap, 64)
        top = max(longest_level, np.int64(1) << (_bit_length(reach - 1) - 1)) if reach_back else longest_level
        row_words = np.empty(len(sel), dtype=np.int64)
        at = _round_starts(
            held, wanted, summary, sel, s, d, np.ascontiguousarray(other_in[sel]), held_or_zero, top, reach, _bit_length(longest_level),
            reach_back, extend_held, row_words, scratch_words, scratch_starts, scratch_cand, scratch_pool,
        )
        live = np.count_nonzero(row_words)
        round_draws = rng.random(live) if live else np.zeros(0)
        first = np.empty(len(sel), dtype=np.int64)
        count = np.empty(len(sel), dtype=np.int32)
        _take_runs(held, wanted, s, d, cap, owner_start, num_chunks, scratch_starts[:at], scratch_words[:at], row_words, round_draws, first, count)
        ok = first >= 0
        _set_runs(wanted, held, summary, d[ok], first[ok], count[ok], True, in_ptr, in_channels, src_of)
        for i in range(len(sel)):
            if ok[i]:
                sel_all[matched], first_all[matched], count_all[matched] = sel[i], first[i], count[i]
                matched += 1
    # record the messages (:meth:`~.matcher._Matcher._record`), busy until they arrive
    base = state[0]
    for i in range(matched):
        c = sel_all[i]
        message = base + i
        end = t + (latency_of[c] + np.float64(np.int64(count_all[i]) * chunk_bytes) / rate_of[c])
        s = src_of[c]
        rec_chunk[message], rec_count[message] = first_all[i], count_all[i]
        rec_src[message], rec_dst[message] = s, dst_of[c]
        rec_start[message], rec_end[message], rec_channel[message] = t, end, c
        rec_tag[message] = sent_on[c]
        sent_on[c] += 1
        rec_send_seq[message] = program[s]
        program[s] += 1
        state[1] -= count_all[i]
        busy_until[c] = end
        carrying[c] = message
        state[2] = _heap_push(heap_time, heap_chan, state[2], end, c)
    state[0] = base + matched


@numba.njit(nogil=True, cache=True)
def _arrive(t, received, freed, held, wanted, summary, out_ptr, out_channels, dst_of, busy_until, carrying, heap_time, heap_chan, state,
            rec_chunk, rec_count, rec_dst, rec_recv_seq, program):  # pragma: no cover - compiled
    """:meth:`~.matcher._Matcher._arrive` at ``t``: returns how many NPUs received (listed in
    ``received``, ascending by message) and channels became free (``freed``, ascending)."""
    num_freed = 0
    while state[2] and heap_time[0] == t:
        freed[num_freed] = heap_chan[0]
        num_freed += 1
        state[2] = _heap_pop(heap_time, heap_chan, state[2])
    done = np.sort(freed[:num_freed])
    freed[:num_freed] = done
    ids = np.sort(carrying[done])
    for c in done:
        busy_until[c] = np.inf
        carrying[c] = -1
    dsts = np.empty(len(ids), dtype=np.int64)
    for i in range(len(ids)):
        d = np.int64(rec_dst[ids[i]])
        dsts[i] = d
        rec_recv_seq[ids[i]] = program[d]
        program[d] += 1
        received[i] = d
    _set_runs(held, wanted, summary, dsts, rec_chunk[ids], rec_count[ids], False, out_ptr, out_channels, dst_of)
    return len(ids), num_freed


@numba.njit(nogil=True, cache=True)
def _run_events(
    events, rng, t_box, received, num_box, freed, held, wanted, summary, held_or_zero, src_of, dst_of, other_in, cap_of, latency_of,
    rate_of, chunk_bytes, owner_start, num_chunks, out_ptr, out_channels, in_ptr, in_channels, busy_until, carrying, heap_time, heap_chan,
    state, rec_chunk, rec_count, rec_src, rec_dst, rec_start, rec_end, rec_channel, rec_tag, rec_send_seq, rec_recv_seq, sent_on, program,
    reach_back, extend_held, scratch_words, scratch_starts, scratch_cand, scratch_pool,
):  # pragma: no cover - compiled
    capacity = len(rec_chunk)
    room = len(src_of)  # an event records at most one message per channel
    for _ in range(events):
        if state[0] + room > capacity:
            return 1
        t = t_box[0]
        if state[1]:
            _match(
                t, rng, received, num_box[0], freed, num_box[1], held, wanted, summary, held_or_zero, src_of, dst_of, other_in, cap_of,
                latency_of, rate_of, chunk_bytes, owner_start, num_chunks, out_ptr, out_channels, in_ptr, in_channels, busy_until,
                carrying, heap_time, heap_chan, state, rec_chunk, rec_count, rec_src, rec_dst, rec_start, rec_end, rec_channel, rec_tag,
                rec_send_seq, sent_on, program, reach_back, extend_held, scratch_words, scratch_starts, scratch_cand, scratch_pool,
            )
        if state[2] == 0:
            return 0
        t_box[0] = heap_time[0]
        num_box[0], num_box[1] = _arrive(
            t_box[0], received, freed, held, wanted, summary, out_ptr, out_channels, dst_of, busy_until, carrying, heap_time, heap_chan,
            state, rec_chunk, rec_count, rec_dst, rec_recv_seq, program,
        )
    return 2


def run_events(matcher, loop: dict, state: np.ndarray) -> int:
    """Work up to :data:`EVENTS_PER_CALL` events of ``matcher`` (a :class:`~.matcher._Matcher`
    on compiled kernels; ``loop``: where the last call stopped; ``state``: messages recorded, (NPU,
    chunk) pairs still to match, heap size, updated in place). Returns 0 when every channel is
    idle, 1 when the record columns may fill before the next event (grow them, call again), 2
    after :data:`EVENTS_PER_CALL` events."""
    ch, rec = matcher.ch, matcher.rec
    return _run_events(
        EVENTS_PER_CALL, matcher.rng, loop["t"], loop["received"], loop["counts"], loop["freed"], matcher.held, matcher.wanted,
        matcher.cand_nz, matcher.held_or_zero, matcher.direct_ends[0], matcher.direct_ends[1], matcher.other_in, matcher.direct_cap,
        loop["latency"], loop["rate"], int(ch.chunk_bytes), matcher.owner_start, matcher.num_chunks, matcher.out_ptr, matcher.out_channels,
        matcher.in_ptr, matcher.in_channels, matcher.busy_until, matcher.carrying, loop["heap_time"], loop["heap_chan"], state,
        rec["chunk"], rec["count"], rec["src"], rec["dst"], rec["start"], rec["end"], rec["channel"], rec["tag"], rec["send_seq"],
        rec["recv_seq"], matcher.sent_on, matcher.program, matcher.reach_back, matcher.extend_held, *loop["scratch"],
    )
