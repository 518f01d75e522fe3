"""TACOS-style link-chunk matching for any demand that only moves data, with store-and-forward relays.

The all-gather matcher (:mod:`~chakra_collectives.synth.matcher`) floods every chunk to every
NPU; a general demand (:mod:`~chakra_collectives.ir.demand`: all-to-all, gather, scatter, a
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
* a link that is free serves its queue, the piece farthest from its destinations first (a
  link into a switch: of the first :data:`ROUTED_CHOICES`, the one that would arrive first
  through the switches' queues, as TACOS picks), and
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
>>> from chakra_collectives.ir.demand import demand_for
>>> from chakra_collectives.topology import ring
>>> ch = build_channels(ring(4), chunk_bytes=2**20)
>>> f = match_demand(ch, demand_for(Collective.ALL_TO_ALL, num_npus=4))
>>> f.num_messages, int(f.entry_delivered.sum())  # 12 pieces: 8 one hop away, 4 two hops
(16, 12)
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.synth.channels import Channels
from chakra_collectives.ir.demand import Demand
from chakra_collectives.synth.matcher import message_caps
from chakra_collectives.synth.path_planning import ChannelGraph, plan_paths

DEFAULT_LATENCY_RATIO = 40.0
"""How far messages merge pieces (:func:`~chakra_collectives.synth.matcher.message_caps`)."""


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
    after: np.ndarray | None = None
    """Per message, the message whose arrival at its sender it waits for before it leaves (-1:
    none; ``None``: no message waits): paces an origin's departures
    (:func:`~chakra_collectives.synth.flowpipe.pipeline_demand`'s paced order)."""

    @property
    def num_messages(self) -> int:
        return len(self.src)

    @property
    def time_ns(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0


def match_demand(
    channels: Channels, demand: Demand, *, seed: int = 0, latency_ratio: float = DEFAULT_LATENCY_RATIO, paths: dict[int, list[int]] | None = None
) -> Forwarding:
    """Match ``demand`` on ``channels`` (see the module docstring). ``paths``: the channels some
    unicast pieces follow (:func:`~chakra_collectives.synth.multipath.spread_paths`); the
    others' are planned (:func:`~chakra_collectives.synth.path_planning.plan_paths`).

    Raises
    ------
    InputError
        Some destination cannot be reached from its piece's origin.
    """
    graph = ChannelGraph.of(channels)
    first = demand.dest[demand.dest_ptr[:-1]] if demand.num_pieces else np.zeros(0, dtype=np.int64)
    unreachable = np.flatnonzero(~np.isfinite(graph.dist[np.repeat(demand.origin, np.diff(demand.dest_ptr)), demand.dest]))
    if len(unreachable):
        j = int(unreachable[0])
        piece = int(np.searchsorted(demand.dest_ptr, j, side="right") - 1)
        raise InputError(f"NPU {int(demand.dest[j])} cannot be reached from NPU {int(demand.origin[piece])}")
    rng = np.random.default_rng(seed)
    unicast = np.flatnonzero(np.diff(demand.dest_ptr) == 1)
    given = paths or {}
    if given:
        unicast = unicast[~np.isin(unicast, np.fromiter(given, dtype=np.int64, count=len(given)))]
    planned = plan_paths(graph, demand.origin[unicast].astype(np.int64), first[unicast].astype(np.int64), rng=rng)
    return _Forwarder(channels, graph, demand, rng, latency_ratio, {**dict(zip(unicast.tolist(), planned.tolist())), **given}).run()


_ARRIVE, _FREE = 0, 1

ROUTED_CHOICES = 64
"""Queued pieces a link into a switch compares by arrival time (:meth:`_Forwarder._earliest_arrival`)."""

DIST_ROWS_NPUS = 2048
"""Up to this many NPUs the distances are kept as Python lists too (faster to read one at a time)."""


class _Forwarder:
    def __init__(self, channels: Channels, graph: ChannelGraph, demand: Demand, rng: np.random.Generator, latency_ratio: float, paths: dict[int, list[int]]) -> None:
        self.ch, self.graph, self.demand = channels, graph, demand
        n = channels.num_npus
        self.ch_src, self.ch_dst = graph.src.tolist(), graph.dst.tolist()
        self.num_direct = graph.num_direct
        direct_cap, routed_cap = message_caps(channels, latency_ratio)
        self.cap = np.concatenate([direct_cap, routed_cap]).tolist()
        links = [tuple(l for l in row if l >= 0) for row in graph.links.tolist()]
        self.server = [l[0] for l in links]  # the first link: what the channel's sender serves
        latency, rate = channels.link_latency.tolist(), channels.link_rate.tolist()
        self.hops = [tuple((l, latency[l], rate[l]) for l in ls) for ls in links]
        self.chunk_bytes = channels.chunk_bytes
        self.tiebreak = rng.random(len(links)).tolist()
        self.serial = graph.serial.tolist()
        self.paths = paths
        """The planned channels of each unicast piece (:func:`~chakra_collectives.synth.path_planning.plan_paths`)."""
        self.productive: dict[int, np.ndarray] = {}
        num_links = len(latency)
        self.free_at = [0.0] * num_links
        self.planned = [0.0] * num_links
        """Per link, the serialization of the multicast pieces routed over it so far."""
        self.queue: list[list] = [[] for _ in range(num_links)]
        self.waiting = [False] * num_links  # a FREE event is pending
        self.events: list = []
        self.counter = itertools.count()
        """Tie-breaker of queue and event entries: first come, first served."""
        self.n = n
        self.dist_rows = graph.dist.tolist() if n <= DIST_ROWS_NPUS else None
        # messages
        self.m_src: list[int] = []
        self.m_dst: list[int] = []
        self.m_channel: list[int] = []
        self.m_start: list[float] = []
        self.m_end: list[float] = []
        self.m_ptr: list[int] = [0]
        self.entries: list[tuple] = []
        """Per entry: piece, via, hop (its index on the piece's path), delivered, and the destinations
        the receiver is responsible for next."""

    # ------------------------------------------------------------------ routing
    def _ways(self, u: int, w: int) -> list[int]:
        """Channels out of ``u`` on a fastest path to ``w``."""
        rows = self.productive.get(u)
        g = self.graph
        if rows is None:
            out = g.out[u][g.out[u] >= 0]
            rows = g.weight[out][:, None] + g.dist[g.dst[out]] <= g.dist[u][None, :] * (1 + 1e-9) + 1e-9
            self.productive[u] = rows
        out = g.out[u][g.out[u] >= 0]
        return out[rows[:, w]].tolist()

    def _route(self, u: int, piece: int, targets: list[int], via: int, hop: int, t: float) -> None:
        path = self.paths.get(piece)
        if path is not None:  # a unicast piece follows its planned path
            w = targets[0]
            far = self.dist_rows[u][w] if self.dist_rows is not None else float(self.graph.dist[u, w])
            self._enqueue(path[hop], u, far, piece, targets, via, hop, t)
            return
        chosen = {}
        planned, server, tiebreak = self.planned, self.server, self.tiebreak
        for w in targets:
            ways = self._ways(u, w)
            shared = [c for c in ways if c in chosen]
            if shared:
                chosen[shared[0]].append(w)
                continue
            best = min(ways, key=lambda c: (planned[server[c]], tiebreak[c]))
            for link, _, _ in self.hops[best]:
                planned[link] += self.serial[link]
            chosen[best] = [w]
        dist = self.graph.dist
        for c, ws in chosen.items():
            self._enqueue(c, u, max(float(dist[u, w]) for w in ws), piece, ws, via, hop, t)

    def _enqueue(self, c: int, u: int, far: float, piece: int, ws: list[int], via: int, hop: int, t: float) -> None:
        """Queue ``piece`` (responsible for ``ws``) on channel ``c``'s first link, farthest first."""
        server = self.server[c]
        # among equals, destinations in shifted order (u + 1, u + 2, ...): senders do not all
        # aim at one receiver at once
        heapq.heappush(self.queue[server], (-far, (ws[0] - u) % self.n, next(self.counter), c, piece, ws, via, hop))
        if not self.waiting[server]:
            self.waiting[server] = True
            heapq.heappush(self.events, (max(t, self.free_at[server]), _FREE, next(self.counter), server))

    # ------------------------------------------------------------------ events
    def run(self) -> Forwarding:
        d = self.demand
        ptr = d.dest_ptr.tolist()
        dest = d.dest.tolist()
        for p, u in enumerate(d.origin.tolist()):
            self._route(u, p, dest[ptr[p] : ptr[p + 1]], -1, 0, 0.0)
        events, entries, paths, queue, server, waiting, free_at = (
            self.events, self.entries, self.paths, self.queue, self.server, self.waiting, self.free_at
        )
        pop, push, counter, n = heapq.heappop, heapq.heappush, self.counter, self.n
        while events:
            t, kind, _, payload = pop(events)
            if kind != _ARRIVE:
                self._serve(t, payload)
                continue
            v = self.m_dst[payload]
            row = self.dist_rows[v] if self.dist_rows is not None else None
            for e in range(self.m_ptr[payload], self.m_ptr[payload + 1]):
                piece, _, hop, _, rest = entries[e]
                if not rest:
                    continue
                path = paths.get(piece)
                if path is None or row is None:
                    self._route(v, piece, rest, e, hop + 1, t)
                    continue
                # a unicast piece on its planned path (what _route and _enqueue do, inlined)
                c, w = path[hop + 1], rest[0]
                s = server[c]
                push(queue[s], (-row[w], (w - v) % n, next(counter), c, piece, rest, e, hop + 1))
                if not waiting[s]:
                    waiting[s] = True
                    push(events, (t if free_at[s] <= t else free_at[s], _FREE, next(counter), s))
        piece, via, hop, delivered, _ = zip(*entries) if entries else ((),) * 5
        return Forwarding(
            num_npus=self.ch.num_npus,
            src=np.array(self.m_src, dtype=np.int32),
            dst=np.array(self.m_dst, dtype=np.int32),
            channel=np.array(self.m_channel, dtype=np.int32),
            start=np.array(self.m_start),
            end=np.array(self.m_end),
            entry_ptr=np.array(self.m_ptr, dtype=np.int64),
            entry_piece=np.array(piece, dtype=np.int32),
            entry_via=np.array(via, dtype=np.int64),
            entry_delivered=np.array(delivered, dtype=bool),
        )

    def _earliest_arrival(self, t: float, first: tuple, queue: list) -> tuple:
        """Of the first :data:`ROUTED_CHOICES` queued pieces on a link into a switch, the one that
        would arrive first through the switches' queues (TACOS's rule for routed channels; ties:
        queue order); the others go back to the queue."""
        scanned = [first]
        while queue and len(scanned) < ROUTED_CHOICES:
            scanned.append(heapq.heappop(queue))
        nbytes = self.chunk_bytes
        free_at = self.free_at

        def arrival(item: tuple) -> float:
            hops = self.hops[item[3]]
            _, latency, rate = hops[0]
            here = t + (latency + nbytes / rate)
            for link, latency, rate in hops[1:]:
                here = max(here, free_at[link]) + (latency + nbytes / rate)
            return here

        best = min(range(len(scanned)), key=lambda i: (arrival(scanned[i]), i))
        for i, item in enumerate(scanned):
            if i != best:
                heapq.heappush(queue, item)
        return scanned[best]

    def _serve(self, t: float, server: int) -> None:
        queue = self.queue[server]
        if not queue:
            self.waiting[server] = False
            return
        first = heapq.heappop(queue)
        c = first[3]
        if c >= self.num_direct and queue:
            first = self._earliest_arrival(t, first, queue)
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
        nbytes = len(taken) * self.chunk_bytes
        hops = self.hops[c]
        free_at = self.free_at
        _, latency, rate = hops[0]
        here = t + (latency + nbytes / rate)  # the network model's hop cost
        free_at[server] = here
        for link, latency, rate in hops[1:]:
            here = max(here, free_at[link]) + (latency + nbytes / rate)
            free_at[link] = here
        message = len(self.m_src)
        v = self.ch_dst[c]
        self.m_src.append(self.ch_src[c])
        self.m_dst.append(v)
        self.m_channel.append(c if c < self.num_direct else -1 - (c - self.num_direct))
        self.m_start.append(t)
        self.m_end.append(here)
        entries = self.entries
        for item in taken:
            ws = item[5]
            if v in ws:  # delivered here; responsible for the rest
                entries.append((item[4], item[6], item[7], True, [w for w in ws if w != v] if len(ws) > 1 else ()))
            else:
                entries.append((item[4], item[6], item[7], False, ws))
        self.m_ptr.append(len(entries))
        heapq.heappush(self.events, (here, _ARRIVE, next(self.counter), message))
        heapq.heappush(self.events, (free_at[server], _FREE, next(self.counter), server))
