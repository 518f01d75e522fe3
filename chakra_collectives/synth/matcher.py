"""TACOS link-chunk matching on a time-expanded network, for All-Gather.

The greedy of Won et al. (TACOS, arXiv 2304.05301): time advances from event to event (a chunk
arriving somewhere); at each event every free channel whose source holds a chunk that its
destination still needs is matched with one such chunk, so faster links carry more chunks and
heterogeneous networks are respected. A chunk is never sent to an NPU twice: a destination
stops needing a chunk the moment it is matched, not when it arrives.

Implementation (profiled on 1024- and 4096-NPU tori):

* every NPU's held and still-needed chunks are rows of numpy bitsets (``uint64`` words);
* all channels that become free at one instant are matched together, in *rounds*: round ``j``
  takes, for every destination, the ``j``-th of its free in-channels (in a seeded random
  order), so one round never gives two channels into one NPU the same chunk; inside a round
  the candidate set ``held[src] & needed[dst]`` and a uniformly random member of it are
  computed for all channels at once;
* the time of a direct channel is ``latency + chunk/bandwidth`` and it carries one chunk at a
  time (TACOS's model and ours: the link is busy until the chunk has arrived).

Routed channels (through switches, see :mod:`.channels`) are matched per NPU: a chunk
released at ``t`` waits in the first link's FIFO, crosses each hop store-and-forward and may
wait in a switch's FIFO; the matcher picks the destination with the earliest arrival. An NPU
keeps its first link busy by releasing a further chunk whenever the link would otherwise go
idle before the NPU's next event, and a chunk is never admitted to a switch queue ahead of a
chunk already scheduled there (so every queue serves chunks in the order the matcher decided,
as the FIFO network model does).

The result is a :class:`Schedule`: every transfer with its chunk, channel, start and arrival.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from chakra_collectives.synth.channels import Channels

NO_ANCHOR = -1


@dataclass(frozen=True)
class Schedule:
    """Every transfer of an All-Gather schedule (columns, in decision order)."""

    num_npus: int
    chunks_per_npu: int
    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    start: np.ndarray
    end: np.ndarray
    channel: np.ndarray
    """Index of a direct channel (>= 0) or ``-1 - i`` for routed channel ``i``."""
    anchor: np.ndarray
    """For routed sends: the transfer whose operation on ``src`` completes at ``start``
    (``NO_ANCHOR``: none needed); see :attr:`anchor_is_send`."""
    anchor_is_send: np.ndarray
    """True: the anchor is that transfer's SEND (``src`` sent it); False: its RECV on ``src``."""

    @property
    def time_ns(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0

    @property
    def num_transfers(self) -> int:
        return len(self.chunk)


def match_all_gather(channels: Channels, chunks_per_npu: int, *, seed: int = 0) -> Schedule:
    """Greedy link-chunk matching for an All-Gather of ``chunks_per_npu`` chunks per NPU.

    Chunk ``c`` starts on NPU ``c // chunks_per_npu``; every NPU must end with every chunk.
    """
    return _Matcher(channels, chunks_per_npu, np.random.default_rng(seed)).run()


# ---------------------------------------------------------------------- bit helpers
_BIT = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))


def _random_members(cand: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random set bit (as an index) per row of a bitset matrix; -1 for empty rows."""
    counts = np.bitwise_count(cand)
    cumulative = np.cumsum(counts, axis=1, dtype=np.int32)
    total = cumulative[:, -1]
    result = np.full(len(cand), -1, dtype=np.int64)
    rows = np.flatnonzero(total > 0)
    if len(rows) == 0:
        return result
    pick = (rng.random(len(rows)) * total[rows]).astype(np.int32)
    cum = cumulative[rows]
    word = (cum <= pick[:, None]).sum(axis=1)
    before = np.where(word > 0, cum[np.arange(len(rows)), np.maximum(word - 1, 0)], 0)
    k = pick - before
    bits = np.unpackbits(cand[rows, word].view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    position = (np.cumsum(bits, axis=1) <= k[:, None]).sum(axis=1)
    result[rows] = word.astype(np.int64) * 64 + position
    return result


# ---------------------------------------------------------------------- the matcher
class _Matcher:
    def __init__(self, channels: Channels, k: int, rng: np.random.Generator) -> None:
        n = channels.num_npus
        self.ch = channels
        self.n, self.k, self.rng = n, k, rng
        self.num_chunks = n * k
        self.words = -(-self.num_chunks // 64)
        chunk_ids = np.arange(self.num_chunks)
        self.held = np.zeros((n, self.words), dtype=np.uint64)
        np.bitwise_or.at(self.held, (chunk_ids // k, chunk_ids // 64), _BIT[chunk_ids % 64])
        full = np.zeros(self.words, dtype=np.uint64)
        np.bitwise_or.at(full, chunk_ids // 64, _BIT[chunk_ids % 64])
        self.wanted = np.bitwise_and(~self.held, full)
        self.remaining = n * self.num_chunks - self.num_chunks  # (npu, chunk) pairs still to match
        # direct channels
        m = len(channels.direct_src)
        self.busy_until = np.full(m, np.inf)
        self.busy = np.zeros(m, dtype=bool)
        self.carrying = np.full(m, -1, dtype=np.int64)  # transfer id in flight
        # direct in-neighbours of every NPU, padded with -1
        in_degree = np.bincount(channels.direct_dst, minlength=n)
        self.in_neighbours = np.full((n, max(int(in_degree.max(initial=0)), 1)), -1, dtype=np.int64)
        by_dst = np.argsort(channels.direct_dst, kind="stable")
        sorted_dst = channels.direct_dst[by_dst]
        slot = np.arange(len(by_dst)) - np.searchsorted(sorted_dst, sorted_dst, side="left")
        self.in_neighbours[sorted_dst, slot] = channels.direct_src[by_dst]
        # routed channels
        self.routed = channels.routed
        self.has_routed = bool(self.routed)
        if self.has_routed:
            self._init_routed()
        # records
        self.rec: dict[str, list[np.ndarray]] = {k_: [] for k_ in ("chunk", "src", "dst", "start", "end", "channel", "anchor", "anchor_is_send")}
        self.count = 0
        self.chunk_by_id = np.zeros(1024, dtype=np.int64)
        self.pending: list[tuple[float, int]] = []  # routed arrivals: (time, transfer id)

    # ------------------------------------------------------------------ records
    def _record(self, chunk, src, dst, start, end, channel, anchor, anchor_is_send) -> np.ndarray:
        size = len(chunk)
        ids = np.arange(self.count, self.count + size)
        self.count += size
        for name, value in (
            ("chunk", chunk), ("src", src), ("dst", dst), ("start", start), ("end", end),
            ("channel", channel), ("anchor", anchor), ("anchor_is_send", anchor_is_send),
        ):
            self.rec[name].append(np.asarray(value))
        return ids

    # ------------------------------------------------------------------ main loop
    def run(self) -> Schedule:
        t = 0.0
        received = np.ones(self.n, dtype=bool)  # at t = 0 every NPU "received" its own chunks
        freed = np.zeros(0, dtype=np.int64)
        events: dict[int, tuple[int, bool]] = {}
        while True:
            self._match_direct(t, received, freed)
            if self.has_routed:
                self._match_routed(t, events)
            t_next = self._next_time()
            if t_next is None:
                break
            t = t_next
            received, freed, events = self._arrive(t)
        if self.remaining:
            raise RuntimeError(f"matching stopped with {self.remaining} (NPU, chunk) pairs unserved: is the topology connected?")
        return self._schedule()

    def _next_time(self) -> float | None:
        candidates = []
        if self.busy.any():
            candidates.append(float(self.busy_until[self.busy].min()))
        if self.pending:
            candidates.append(self.pending[0][0])
        return min(candidates) if candidates else None

    def _arrive(self, t: float) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, bool]]]:
        """Deliver everything arriving at ``t``.

        Returns the NPUs that received a chunk, the direct channels that became free, and for
        routed matching, one operation of each NPU that completes at ``t``.
        """
        received = np.zeros(self.n, dtype=bool)
        events: dict[int, tuple[int, bool]] = {}
        done = np.flatnonzero(self.busy & (self.busy_until == t))
        if len(done):
            ids = self.carrying[done]
            chunks = self.chunk_by_id[ids]
            dsts = self.ch.direct_dst[done]
            np.bitwise_or.at(self.held, (dsts, chunks // 64), _BIT[chunks % 64])
            received[dsts] = True
            self.busy[done] = False
            self.busy_until[done] = np.inf
            self.carrying[done] = -1
            if self.has_routed:
                srcs = self.ch.direct_src[done]
                for transfer, d, s in zip(ids.tolist(), dsts.tolist(), srcs.tolist()):
                    events.setdefault(d, (transfer, False))
                    events.setdefault(s, (transfer, True))
        while self.pending and self.pending[0][0] == t:
            _, transfer = heapq.heappop(self.pending)
            d, s, c = self.routed_info.pop(transfer)
            self.held[d, c // 64] |= _BIT[c % 64]
            received[d] = True
            events.setdefault(d, (transfer, False))
            events.setdefault(s, (transfer, True))
        return received, done, events

    # ------------------------------------------------------------------ direct channels
    def _match_direct(self, t: float, received: np.ndarray, freed: np.ndarray) -> None:
        """Match every free direct channel that may have a new candidate: just freed, or its source just received."""
        ch = self.ch
        if len(ch.direct_src) == 0 or not self.remaining:
            return
        wake = received[ch.direct_src]
        wake[freed] = True
        active = np.flatnonzero(wake & ~self.busy)
        if len(active) == 0:
            return
        active = active[self.rng.permutation(len(active))]
        dsts = ch.direct_dst[active]
        order = np.argsort(dsts, kind="stable")
        active, dsts = active[order], dsts[order]
        group_start = np.searchsorted(dsts, dsts, side="left")
        round_of = np.arange(len(active)) - group_start
        matched_parts = []
        shared = self._shared_chunks(np.unique(dsts))
        for j in range(int(round_of.max()) + 1):
            sel = active[round_of == j]
            s, d = ch.direct_src[sel], ch.direct_dst[sel]
            cand = self.held[s] & self.wanted[d]
            # prefer chunks no other in-neighbour of the destination holds: shared ones can
            # still come over another link, so every link stays useful for longer
            exclusive = cand & ~shared[d]
            chunks = _random_members(np.where(exclusive.any(axis=1, keepdims=True), exclusive, cand), self.rng)
            ok = chunks >= 0
            if not ok.any():
                continue
            sel, d, chunks = sel[ok], d[ok], chunks[ok]
            self.wanted[d, chunks // 64] &= ~_BIT[chunks % 64]
            matched_parts.append((sel, chunks))
        if not matched_parts:
            return
        sel = np.concatenate([p[0] for p in matched_parts])
        chunks = np.concatenate([p[1] for p in matched_parts])
        end = t + ch.direct_ns[sel]
        size = len(sel)
        ids = self._record(
            chunks, ch.direct_src[sel], ch.direct_dst[sel], np.full(size, t), end, sel,
            np.full(size, NO_ANCHOR), np.zeros(size, dtype=bool),
        )
        self._remember_chunks(ids, chunks)
        self.busy[sel] = True
        self.busy_until[sel] = end
        self.carrying[sel] = ids
        self.remaining -= size
        if self.has_routed:
            self.recv_id[ch.direct_dst[sel], chunks] = ids
            self.arrival_at[ch.direct_dst[sel], chunks] = end
            for s_, e_ in zip(ch.direct_src[sel].tolist(), end.tolist()):
                heapq.heappush(self.rank_events[s_], e_)
            for d_, e_ in zip(ch.direct_dst[sel].tolist(), end.tolist()):
                heapq.heappush(self.rank_events[d_], e_)

    def _shared_chunks(self, dsts: np.ndarray) -> np.ndarray:
        """``shared[d]``: chunks held by at least two direct in-neighbours of ``d`` (rows for ``dsts`` only)."""
        shared = np.zeros((self.n, self.words), dtype=np.uint64)
        neighbours = self.in_neighbours[dsts]
        ones = np.zeros((len(dsts), self.words), dtype=np.uint64)
        twos = np.zeros_like(ones)
        for position in range(neighbours.shape[1]):
            src = neighbours[:, position]
            held = np.where((src >= 0)[:, None], self.held[np.maximum(src, 0)], np.uint64(0))
            twos |= ones & held
            ones |= held
        shared[dsts] = twos
        return shared

    def _covered(self, dsts: np.ndarray) -> np.ndarray:
        """Per destination, chunks some direct in-neighbour holds or has been matched with."""
        covered = np.zeros((len(dsts), self.words), dtype=np.uint64)
        neighbours = self.in_neighbours[dsts]
        for position in range(neighbours.shape[1]):
            src = neighbours[:, position]
            present = src >= 0
            if present.any():
                covered[present] |= ~self.wanted[src[present]]
        return covered

    def _remember_chunks(self, ids: np.ndarray, chunks: np.ndarray) -> None:
        needed = int(ids[-1]) + 1
        if needed > len(self.chunk_by_id):
            grown = np.full(max(needed, 2 * len(self.chunk_by_id)), -1, dtype=np.int64)
            grown[: len(self.chunk_by_id)] = self.chunk_by_id
            self.chunk_by_id = grown
        self.chunk_by_id[ids] = chunks

    # ------------------------------------------------------------------ routed channels
    def _init_routed(self) -> None:
        links = {l for c in self.routed for l in c.links}
        self.link_free = {l: 0.0 for l in links}
        self.link_last_arrival = {l: -np.inf for l in links}
        self.rank_events: list[list[float]] = [[] for _ in range(self.n)]
        groups: dict[tuple[int, int, int], list[int]] = {}
        for index, c in enumerate(self.routed):
            groups.setdefault((c.src, c.links[0], len(c.links)), []).append(index)
        self.groups_of: dict[int, list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
        for (src, first, hops), members in sorted(groups.items()):
            idx = np.array(members)
            dst = np.array([self.routed[i].dst for i in members])
            link_mat = np.array([self.routed[i].links for i in members])
            hop_mat = np.array([self.routed[i].hop_ns for i in members])
            self.groups_of.setdefault(src, []).append((first, idx, dst, link_mat, hop_mat))
        self.recv_id = np.full((self.n, self.num_chunks), NO_ANCHOR, dtype=np.int64)
        self.arrival_at = np.full((self.n, self.num_chunks), -1.0)
        self.routed_info: dict[int, tuple[int, int, int]] = {}

    def _match_routed(self, t: float, events: dict[int, tuple[int, bool]]) -> None:
        if not self.remaining:
            return
        ranks = range(self.n) if t == 0.0 else sorted(r for r in events if r in self.groups_of)
        for s in ranks:
            groups = self.groups_of.get(s)
            if not groups:
                continue
            heap = self.rank_events[s]
            while heap and heap[0] <= t:
                heapq.heappop(heap)
            event = events.get(s) if t > 0 else None
            for first, idx, dst, link_mat, hop_mat in groups:
                self._fill_first_link(s, t, event, first, idx, dst, link_mat, hop_mat, heap)

    def _fill_first_link(self, s, t, event, first, idx, dst, link_mat, hop_mat, heap) -> None:
        batch_anchor: tuple[int, bool] | None = None
        while True:
            next_event = heap[0] if heap else np.inf
            if not (self.link_free[first] <= t or self.link_free[first] < next_event):
                return
            # a chunk a direct in-neighbour of the destination has (or is getting) comes cheaper
            # over that link: switch hops carry only chunks no direct neighbour can supply
            cand = self.held[s] & self.wanted[dst] & ~self._covered(dst)
            usable = cand.any(axis=1)
            if not usable.any():
                return
            rows = np.flatnonzero(usable)
            arrival = np.full(len(rows), max(t, self.link_free[first]) + hop_mat[rows, 0])
            valid = np.ones(len(rows), dtype=bool)
            for hop in range(1, link_mat.shape[1]):
                links = link_mat[rows, hop]
                last = np.array([self.link_last_arrival[l] for l in links.tolist()])
                free = np.array([self.link_free[l] for l in links.tolist()])
                valid &= arrival > last
                arrival = np.maximum(arrival, free) + hop_mat[rows, hop]
            if not valid.any():
                return
            best = arrival[valid].min()
            ties = rows[valid & (arrival == best)]
            row = int(ties[self.rng.integers(len(ties))]) if len(ties) > 1 else int(ties[0])
            chunk = int(_random_members(cand[row : row + 1], self.rng)[0])
            d = int(dst[row])
            # occupy the links
            when = max(t, self.link_free[first])
            self.link_last_arrival[first] = t
            self.link_free[first] = when + hop_mat[row, 0]
            here = self.link_free[first]
            for hop in range(1, link_mat.shape[1]):
                l = int(link_mat[row, hop])
                self.link_last_arrival[l] = here
                here = max(here, self.link_free[l]) + hop_mat[row, hop]
                self.link_free[l] = here
            # the chunk's RECV on s, if it completes exactly now, is the first send's anchor
            if batch_anchor is None and t > 0:
                arrived_now = chunk // self.k != s and self.arrival_at[s, chunk] == t
                batch_anchor = (int(self.recv_id[s, chunk]), False) if arrived_now else event
            anchor = batch_anchor if batch_anchor is not None else (NO_ANCHOR, False)
            self.wanted[d, chunk // 64] &= ~_BIT[chunk % 64]
            self.remaining -= 1
            ids = self._record(
                np.array([chunk]), np.array([s]), np.array([d]), np.array([t]), np.array([here]),
                np.array([-1 - int(idx[row])]), np.array([anchor[0]]), np.array([anchor[1]]),
            )
            transfer = int(ids[0])
            self._remember_chunks(ids, np.array([chunk]))
            self.recv_id[d, chunk] = transfer
            self.arrival_at[d, chunk] = here
            self.routed_info[transfer] = (d, s, chunk)
            heapq.heappush(self.pending, (here, transfer))
            heapq.heappush(heap, here)
            heapq.heappush(self.rank_events[d], here)

    # ------------------------------------------------------------------ result
    def _schedule(self) -> Schedule:
        cols = {name: np.concatenate(parts) if parts else np.zeros(0) for name, parts in self.rec.items()}
        return Schedule(
            num_npus=self.n,
            chunks_per_npu=self.k,
            chunk=cols["chunk"].astype(np.int64),
            src=cols["src"].astype(np.int64),
            dst=cols["dst"].astype(np.int64),
            start=cols["start"].astype(np.float64),
            end=cols["end"].astype(np.float64),
            channel=cols["channel"].astype(np.int64),
            anchor=cols["anchor"].astype(np.int64),
            anchor_is_send=cols["anchor_is_send"].astype(bool),
        )
