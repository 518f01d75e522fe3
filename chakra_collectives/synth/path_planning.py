"""Fastest paths for unicast pieces, spread over the links (what the forwarding matcher routes along).

A piece from ``u`` to ``w`` may take any fastest path (:class:`ChannelGraph`: single-chunk
channel times). Pieces are planned longest first (shuffled among equals), a batch at a time and hop by hop, all pieces
of a batch at once (numpy): each hop takes the channel out of the current NPU on a fastest path
whose first link, and the least loaded link after it towards ``w`` (when NPUs have at most
:data:`LOOKAHEAD_DEGREE` channels), carry the least planned load -- the serialization time of
the pieces planned over them (random among equals). Then ``passes`` rounds of *rip-up and
reroute* plan each batch again against everyone else's load. On torus2d:4x4 (all-to-all, 4 chunks
per pair) the busiest link carries 30-33 pieces (mean 32).

>>> from chakra_collectives.synth.channels import build_channels
>>> from chakra_collectives.topology import ring
>>> g = ChannelGraph.of(build_channels(ring(4), chunk_bytes=2**20))
>>> paths = plan_paths(g, np.array([0, 0]), np.array([2, 2]), rng=np.random.default_rng(0))
>>> sorted(g.dst[paths[:, 1]].tolist()), bool((paths[:, 2] == -1).all())   # one each way round
([2, 2], True)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from chakra_collectives.synth.channels import Channels

LOOKAHEAD_DEGREE = 16
"""NPUs with at most this many channels out look one hop ahead when choosing (switch
fabrics, whose NPUs have a routed channel to every other NPU, do not)."""

LINKS_PER_PIECE = 8
"""Pieces planned together: one per this many links (at least 8). They see each other's load only
after each hop, so a batch much larger than that herds onto the same links (torus2d:4x4, all-to-all of
4 chunks per pair: the busiest of 64 links carries 33 pieces with batches of 32, 42 with 1,024; mean 32)."""

REROUTE_PASSES = 1
"""Rounds of rip-up and reroute after the first plan."""


@dataclass(frozen=True)
class ChannelGraph:
    """The channels as arrays: direct channels first, then routed ones (index ``num_direct + j``)."""

    num_npus: int
    num_direct: int
    src: np.ndarray
    dst: np.ndarray
    links: np.ndarray
    """``(channels, hops)`` link ids, -1 padded."""
    weight: np.ndarray
    """Single-chunk time of each channel (ns)."""
    serial: np.ndarray
    """Per link: one chunk's serialization (ns), the load a piece puts on it."""
    out: np.ndarray
    """``(npus, degree)`` channels out of each NPU, -1 padded."""
    dist: np.ndarray
    """``(npus, npus)`` fastest single-chunk times."""
    fastest: np.ndarray | None = None
    """``fastest[u, w, j]``: channel ``out[u, j]`` lies on a fastest path from ``u`` to ``w``
    (``None`` above :data:`FASTEST_TABLE_BYTES`)."""

    @classmethod
    def of(cls, channels: Channels) -> "ChannelGraph":
        from scipy.sparse import csr_matrix  # imported when used (start-up time)
        from scipy.sparse.csgraph import dijkstra

        n = channels.num_npus
        link_lists = [(int(l),) for l in channels.direct_link] + [c.links for c in channels.routed]
        hops = max((len(l) for l in link_lists), default=1)
        links = np.full((len(link_lists), hops), -1, dtype=np.int64)
        for i, l in enumerate(link_lists):
            links[i, : len(l)] = l
        src = np.concatenate([channels.direct_src, np.array([c.src for c in channels.routed], dtype=np.int32)]).astype(np.int64)
        dst = np.concatenate([channels.direct_dst, np.array([c.dst for c in channels.routed], dtype=np.int32)]).astype(np.int64)
        valid = links >= 0
        safe = np.where(valid, links, 0)
        per_hop = channels.link_latency[safe] + channels.chunk_bytes / channels.link_rate[safe]
        weight = np.where(valid, per_hop, 0.0).sum(axis=1)
        degree = np.bincount(src, minlength=n)
        out = np.full((n, max(int(degree.max(initial=0)), 1)), -1, dtype=np.int64)
        order = np.argsort(src, kind="stable")
        position = np.arange(len(src)) - np.searchsorted(src[order], src[order], side="left")
        out[src[order], position] = order
        dist = dijkstra(csr_matrix((weight, (src, dst)), shape=(n, n)), directed=True)
        serial = channels.chunk_bytes / channels.link_rate
        graph = cls(n, channels.num_direct, src, dst, links, weight, serial, out, dist)
        if n * n * out.shape[1] > FASTEST_TABLE_BYTES:
            return graph
        fastest = np.empty((n, n, out.shape[1]), dtype=bool)
        everyone = np.arange(n)
        for u in range(n):
            fastest[u] = _productive(graph, np.full(n, u), everyone)[1]
        return replace(graph, fastest=fastest)


def _productive(graph: ChannelGraph, u: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(channels, on_a_fastest_path)``: per row, the channels out of ``u`` and which lie on a fastest path to ``w``."""
    cand = graph.out[u]
    if graph.fastest is not None:
        return np.maximum(cand, 0), graph.fastest[u, w]
    valid = cand >= 0
    safe = np.where(valid, cand, 0)
    through = graph.weight[safe] + graph.dist[graph.dst[safe], w[:, None]]
    return safe, valid & (through <= graph.dist[u, w][:, None] * (1 + 1e-9) + 1e-9)


FASTEST_TABLE_BYTES = 2**27
"""Largest ``(npus, npus, degree)`` table of which channels lie on fastest paths kept in memory
(512 NPUs of degree 6: 1.5 MB); larger fabrics compute it row by row."""


def plan_paths(graph: ChannelGraph, origin: np.ndarray, target: np.ndarray, *, rng: np.random.Generator, passes: int = REROUTE_PASSES) -> np.ndarray:
    """``(pieces, hops)`` channel ids of a fastest path per piece (-1 padded; see the module docstring).

    Every target must be reachable from its origin (``graph.dist`` finite).
    """
    pieces = len(origin)
    order = np.lexsort((rng.random(pieces), -graph.dist[origin, target]))  # longest first, shuffled among equals
    paths = np.full((pieces, 4), -1, dtype=np.int64)
    load = np.zeros(len(graph.serial))
    look = graph.out.shape[1] <= LOOKAHEAD_DEGREE
    batch_size = max(8, len(graph.serial) // LINKS_PER_PIECE)
    for round_ in range(passes + 1):
        for start in range(0, pieces, batch_size):
            batch = order[start : start + batch_size]
            if round_:
                _add_load(graph, load, paths[batch], -1.0)
                paths[batch] = -1
            u, w = origin[batch].copy(), target[batch]
            hop = 0
            active = np.flatnonzero(u != w)
            while len(active):
                if hop == paths.shape[1]:
                    paths = np.concatenate([paths, np.full((pieces, paths.shape[1]), -1, dtype=np.int64)], axis=1)
                cand, ok = _productive(graph, u[active], w[active])
                first = load[graph.links[cand, 0]]
                if look:
                    ahead = _ahead(graph, load, graph.dst[cand], w[active])
                    primary, secondary = np.maximum(first, ahead), first + ahead
                else:
                    primary, secondary = first, first
                primary = np.where(ok, primary, np.inf)
                tie = primary == primary.min(axis=1, keepdims=True)
                secondary = np.where(tie, secondary, np.inf)
                tie &= secondary == secondary.min(axis=1, keepdims=True)
                pick = np.argmax(np.where(tie, rng.random(tie.shape), -1.0), axis=1)
                chosen = cand[np.arange(len(active)), pick]
                paths[batch[active], hop] = chosen
                _add_load(graph, load, chosen[:, None], 1.0)
                u[active] = graph.dst[chosen]
                active = active[u[active] != w[active]]
                hop += 1
    return paths


def _ahead(graph: ChannelGraph, load: np.ndarray, nxt: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per (row, candidate): the least loaded first link on a fastest path from ``nxt`` to ``w`` (0 there)."""
    rows, degree = nxt.shape
    flat_next = nxt.reshape(-1)
    flat_w = np.repeat(w, degree)
    cand, ok = _productive(graph, flat_next, flat_w)
    best = np.where(ok, load[graph.links[cand, 0]], np.inf).min(axis=1)
    best[flat_next == flat_w] = 0.0
    return best.reshape(rows, degree)


def _add_load(graph: ChannelGraph, load: np.ndarray, paths: np.ndarray, sign: float) -> None:
    channels = paths[paths >= 0]
    links = graph.links[channels]
    links = links[links >= 0]
    np.add.at(load, links, sign * graph.serial[links])
