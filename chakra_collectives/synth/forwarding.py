"""TACOS-style link-chunk matching for any demand that only moves data, with store-and-forward relays.

The all-gather matcher (:mod:`~chakra_collectives.synth.matcher`) floods every chunk to every
NPU; a general demand (:mod:`~chakra_collectives.synth.demands`: all-to-all, gather, scatter, a
pattern) sends each piece only towards the NPUs that need it, and NPUs on the way -- members
or not -- receive it and pass it on. Time advances from event to event, as in TACOS:

* a piece that arrives at (or starts on) NPU ``u`` with the set ``W`` of destinations it is
  still responsible for is split by next channel: each destination ``w`` of ``W`` takes a
  channel ``u -> v`` on a fastest path to ``w`` (``hop(u, v) + dist(v, w) = dist(u, w)``, single-chunk
  hop times), preferring a channel another destination of ``W`` already took (the piece then
  crosses it once: a multicast tree), else the one whose link frees first counting what is
  queued on it (random among equals); the piece joins that link's queue responsible for its part
  of ``W``. Responsibility for a destination is never shared, so no NPU is sent a piece
  twice for the same destination, and a unicast piece (all-to-all) crosses only links that
  bring it closer to its one destination;
* a link that is free serves its queue, the piece farthest from its destinations first, and
  merges up to ``cap`` queued pieces for the same channel into one message (they pay the latency
  once, :func:`~chakra_collectives.synth.matcher.message_caps`);
* a direct channel is busy until its message has arrived (``latency + bytes / bandwidth``, the
  network model's hop cost); a channel through switches occupies its first link for one hop and
  crosses the others store-and-forward, FIFO.

The result is a :class:`Forwarding`: every message, in start-time order, with its pieces
(*entries*), each naming the entry that brought the piece to the sender (``-1``: the origin)
and whether the receiver is one of its destinations. :mod:`.forwarding_lowering` turns it into
operations.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.channels import build_channels
>>> from chakra_collectives.synth.demands import demand_for
>>> from chakra_collectives.topology import ring
>>> ch = build_channels(ring(4), chunk_bytes=2**20)
>>> f = match_demand(ch, demand_for(Collective.ALL_TO_ALL, num_npus=4))
>>> f.num_messages, int(f.entry_delivered.sum())  # 12 pieces: 8 one hop away, 4 two hops
(16, 12)
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from chakra_collectives.errors import InputError
from chakra_collectives.synth.channels import Channels
from chakra_collectives.synth.demands import Demand
from chakra_collectives.synth.matcher import message_caps

DEFAULT_LATENCY_RATIO = 40.0
"""How far messages merge pieces (:func:`~chakra_collectives.synth.matcher.message_caps`)."""

REROUTE_PASSES = 2
"""Passes of rip-up and reroute over the unicast pieces' planned paths."""


@dataclass(frozen=True)
class Forwarding:
    """Every message of a demand's schedule, in start order, and the pieces each carries."""

    num_npus: int
    src: np.ndarray
    dst: np.ndarray
    channel: np.ndarray
    """Direct channel ``i`` (>= 0) or ``-1 - j`` for routed channel ``j``."""
    start: np.ndarray
    end: np.ndarray
    entry_ptr: np.ndarray
    """Message ``m`` carries entries ``entry_ptr[m] .. entry_ptr[m + 1] - 1``."""
    entry_piece: np.ndarray
    entry_via: np.ndarray
    """The entry that brought the piece to the sender (-1: the sender is its origin)."""
    entry_delivered: np.ndarray
    """The receiver is one of the piece's destinations."""

    @property
    def num_messages(self) -> int:
        return len(self.src)

    @property
    def time_ns(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0


def channel_distances(channels: Channels) -> tuple[np.ndarray, np.ndarray, list[tuple[int, ...]]]:
    """``(dist, weight, links)``: single-chunk fastest-path times between NPUs over the channels,
    each channel's single-chunk time, and each channel's links (direct first, then routed)."""
    n = channels.num_npus
    links = [(int(l),) for l in channels.direct_link] + [c.links for c in channels.routed]
    src = np.concatenate([channels.direct_src, np.array([c.src for c in channels.routed], dtype=np.int32)])
    dst = np.concatenate([channels.direct_dst, np.array([c.dst for c in channels.routed], dtype=np.int32)])
    weight = np.array([float(channels.hop_ns(np.array(l), 1).sum()) for l in links]) if links else np.zeros(0)
    graph = csr_matrix((weight, (src, dst)), shape=(n, n))
    return dijkstra(graph, directed=True), weight, links


def match_demand(channels: Channels, demand: Demand, *, seed: int = 0, latency_ratio: float = DEFAULT_LATENCY_RATIO) -> Forwarding:
    """Match ``demand`` on ``channels`` (see the module docstring).

    Raises
    ------
    InputError
        Some destination cannot be reached from its piece's origin.
    """
    return _Forwarder(channels, demand, seed, latency_ratio).run()


_ARRIVE, _FREE = 0, 1


class _Forwarder:
    def __init__(self, channels: Channels, demand: Demand, seed: int, latency_ratio: float) -> None:
        self.ch, self.demand = channels, demand
        self.dist, self.weight, self.links = channel_distances(channels)
        n = channels.num_npus
        self.ch_src = np.concatenate([channels.direct_src, np.array([c.src for c in channels.routed], dtype=np.int32)]).tolist()
        self.ch_dst = np.concatenate([channels.direct_dst, np.array([c.dst for c in channels.routed], dtype=np.int32)]).tolist()
        self.num_direct = channels.num_direct
        direct_cap, routed_cap = message_caps(channels, latency_ratio)
        self.cap = np.concatenate([direct_cap, routed_cap]).tolist()
        self.server = [l[0] for l in self.links]  # the first link: what the channel's sender serves
        self.out: list[list[int]] = [[] for _ in range(n)]
        for c, s in enumerate(self.ch_src):
            self.out[s].append(c)
        self.out_arr = [np.array(cs, dtype=np.int64) for cs in self.out]
        rng = np.random.default_rng(seed)
        self.tiebreak = rng.random(len(self.links)).tolist()
        self.serial = [float(channels.hop_ns(np.array(l[:1]), 1)[0]) for l in self.links]
        self.productive: dict[int, np.ndarray] = {}
        num_links = len(channels.link_rate)
        self.free_at = [0.0] * num_links
        self.planned = [0.0] * num_links
        """Per link, the single-chunk time of the pieces routed over it so far."""
        self.path: dict[int, list[int]] = {}
        """The planned channels of each unicast piece."""
        self.queue: list[list] = [[] for _ in range(num_links)]
        self.waiting = [False] * num_links  # a FREE event is pending
        self.events: list = []
        self.seq = 0
        self.dist_rows = self.dist.tolist() if n <= 4096 else None
        # messages
        self.m_src: list[int] = []
        self.m_dst: list[int] = []
        self.m_channel: list[int] = []
        self.m_start: list[float] = []
        self.m_end: list[float] = []
        self.m_ptr: list[int] = [0]
        self.e_piece: list[int] = []
        self.e_via: list[int] = []
        self.e_delivered: list[bool] = []
        self.e_hop: list[int] = []
        self._responsible: list[list[int]] = []
        """Per entry, the destinations the receiver is responsible for next."""

    # ------------------------------------------------------------------ routing
    def _ways(self, u: int, w: int) -> list[int]:
        """Channels out of ``u`` on a fastest path to ``w``."""
        rows = self.productive.get(u)
        if rows is None:
            out = self.out_arr[u]
            if len(out) == 0:
                rows = np.zeros((0, self.ch.num_npus), dtype=bool)
            else:
                through = self.weight[out][:, None] + self.dist[np.array(self.ch_dst)[out]]
                rows = through <= self.dist[u][None, :] * (1 + 1e-9) + 1e-9
            self.productive[u] = rows
        return self.out_arr[u][rows[:, w]].tolist()

    def _least_loaded(self, ways: list[int]) -> int:
        planned, server, tiebreak = self.planned, self.server, self.tiebreak
        return min(ways, key=lambda c: (planned[server[c]], tiebreak[c]))

    def _least_loaded_ahead(self, ways: list[int], w: int) -> int:
        """The channel whose link, plus the least loaded link after it towards ``w``, carries least."""
        planned, server, tiebreak, dst = self.planned, self.server, self.tiebreak, self.ch_dst

        def cost(c: int) -> tuple[float, float, float]:
            v = dst[c]
            ahead = min((planned[server[x]] for x in self._ways(v, w)), default=0.0) if v != w else 0.0
            return (max(planned[server[c]], ahead), planned[server[c]] + ahead, tiebreak[c])

        return min(ways, key=cost)

    def _plan_path(self, u: int, w: int) -> list[int]:
        """A fastest path ``u -> w``, hop by hop on the channel whose first link has the least planned load."""
        path = []
        while u != w:
            ways = self._ways(u, w)
            if not ways:
                raise InputError(f"NPU {w} cannot be reached from NPU {u}")
            c = ways[0] if len(ways) == 1 else self._least_loaded_ahead(ways, w)
            for link in self.links[c]:
                self.planned[link] += self.serial[c]
            path.append(c)
            u = self.ch_dst[c]
        return path

    def _route(self, u: int, piece: int, targets: list[int], via: int, t: float) -> None:
        path = self.path.get(piece)
        if path is not None:  # a unicast piece follows its planned path
            chosen = {path[self.hops_done(via)]: targets}
        else:
            chosen = {}
            for w in targets:
                ways = self._ways(u, w)
                if not ways:
                    raise InputError(f"NPU {w} cannot be reached from NPU {u}")
                shared = [c for c in ways if c in chosen]
                if shared:
                    chosen[shared[0]].append(w)
                    continue
                best = self._least_loaded(ways)
                for link in self.links[best]:
                    self.planned[link] += self.serial[best]
                chosen[best] = [w]
        row = self.dist_rows[u] if self.dist_rows is not None else self.dist[u].tolist()
        for c, ws in chosen.items():
            server = self.server[c]
            far = max(row[w] for w in ws)
            self.seq += 1
            # among equals, destinations in shifted order (u + 1, u + 2, ...): senders do not all
            # aim at one receiver at once
            heapq.heappush(self.queue[server], (-far, (ws[0] - u) % self.ch.num_npus, self.seq, c, piece, ws, via))
            if not self.waiting[server]:
                self.waiting[server] = True
                self._push(max(t, self.free_at[server]), _FREE, server)

    def hops_done(self, via: int) -> int:
        """Hops a piece has made when entry ``via`` brought it (-1: at its origin)."""
        return 0 if via < 0 else self.e_hop[via] + 1

    def _push(self, t: float, kind: int, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, payload))

    # ------------------------------------------------------------------ events
    def run(self) -> Forwarding:
        d = self.demand
        ptr = d.dest_ptr.tolist()
        dest = d.dest.tolist()
        origin = d.origin.tolist()
        unicast = [p for p in range(d.num_pieces) if ptr[p + 1] - ptr[p] == 1]
        # longest paths first: they are the hardest to fit
        unicast.sort(key=lambda p: -self.dist[origin[p], dest[ptr[p]]])
        for p in unicast:
            self.path[p] = self._plan_path(origin[p], dest[ptr[p]])
        for _ in range(REROUTE_PASSES):  # rip up and reroute: each piece against everyone else's load
            for p in unicast:
                for c in self.path[p]:
                    for link in self.links[c]:
                        self.planned[link] -= self.serial[c]
                self.path[p] = self._plan_path(origin[p], dest[ptr[p]])
        for p, u in enumerate(origin):
            self._route(u, p, dest[ptr[p] : ptr[p + 1]], -1, 0.0)
        events = self.events
        while events:
            t, kind, _, payload = heapq.heappop(events)
            if kind == _ARRIVE:
                self._arrive(t, payload)
            else:
                self._serve(t, payload)
        return Forwarding(
            num_npus=self.ch.num_npus,
            src=np.array(self.m_src, dtype=np.int32),
            dst=np.array(self.m_dst, dtype=np.int32),
            channel=np.array(self.m_channel, dtype=np.int32),
            start=np.array(self.m_start),
            end=np.array(self.m_end),
            entry_ptr=np.array(self.m_ptr, dtype=np.int64),
            entry_piece=np.array(self.e_piece, dtype=np.int32),
            entry_via=np.array(self.e_via, dtype=np.int64),
            entry_delivered=np.array(self.e_delivered, dtype=bool),
        )

    def _arrive(self, t: float, message: int) -> None:
        v = self.m_dst[message]
        for e in range(self.m_ptr[message], self.m_ptr[message + 1]):
            rest = self._responsible[e]
            if rest:
                self._route(v, self.e_piece[e], rest, e, t)

    def _serve(self, t: float, server: int) -> None:
        queue = self.queue[server]
        if not queue:
            self.waiting[server] = False
            return
        first = heapq.heappop(queue)
        c = first[3]
        taken = [first]
        cap = self.cap[c]
        if cap > 1 and queue:
            if c < self.num_direct:  # a direct link has one channel
                while queue and len(taken) < cap:
                    taken.append(heapq.heappop(queue))
            else:
                aside = []
                while queue and len(taken) < cap and len(aside) < 4 * cap:
                    item = heapq.heappop(queue)
                    (taken if item[3] == c else aside).append(item)
                for item in aside:
                    heapq.heappush(queue, item)
        count = len(taken)
        links = self.links[c]
        hop = self.ch.hop_ns(np.array(links), count).tolist()
        here = t + hop[0]
        self.free_at[server] = here
        for l, h in zip(links[1:], hop[1:]):
            here = max(here, self.free_at[l]) + h
            self.free_at[l] = here
        message = len(self.m_src)
        v = self.ch_dst[c]
        self.m_src.append(self.ch_src[c])
        self.m_dst.append(v)
        self.m_channel.append(c if c < self.num_direct else -1 - (c - self.num_direct))
        self.m_start.append(t)
        self.m_end.append(here)
        for _, _, _, _, piece, ws, via in taken:
            self.e_piece.append(piece)
            self.e_via.append(via)
            self.e_hop.append(self.hops_done(via))
            delivered = v in ws
            self.e_delivered.append(delivered)
            self._responsible.append([w for w in ws if w != v] if delivered else ws)
        self.m_ptr.append(len(self.e_piece))
        self._push(here, _ARRIVE, message)
        self._push(self.free_at[server], _FREE, server)
