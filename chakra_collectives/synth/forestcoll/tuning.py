"""How many pipeline pieces per tree: a latency/bandwidth model, checked by prediction.

More pieces shorten the pipeline's fill and drain (a tree of hop depth ``D`` delivers its last
piece ``D`` hops after its root sent it) but every piece is a message per tree edge, and each
message costs its link a latency. For a forest whose busiest link carries ``m`` tree edges, a
piece of ``W`` ns on that link and a latency ``a``, the time is about
``T_bw + D (W / P + a) + m P a``, least at ``P* = sqrt(D W / (m a))``.
The model tends to overshoot (links interleave other trees while a pipeline drains), so
:func:`candidate_pieces` starts at half of it and, when predicting is cheap, tries its
neighbours.

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.synth.forestcoll import build_trees
>>> t = load_topology("dgx:2x4")
>>> trees = build_trees(t, [1] * 8, reverse=False)
>>> shape = forest_shape(trees, t)
>>> shape.depth_hops, shape.messages_per_piece >= 1      # NIC, switch, NIC... then NVLink
(3, True)
>>> model_pieces(shape, share_bytes=2**27, k=trees.optimum.k) >= 8
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from chakra_collectives.units import bytes_per_ns

MAX_PIECES = 256


@dataclass(frozen=True)
class ForestShape:
    depth_hops: int
    """Most link hops from a root to a node of its tree."""
    messages_per_piece: int
    """Tree edges crossing the most loaded link (relative to its bandwidth)."""
    unit_ns_per_byte: float
    """Per byte of a tree unit's share: ns the most loaded link needs (1 / bandwidth)."""
    latency_ns: float
    """That link's latency."""
    mean_weight: float
    tree_edges: int
    """Tree edge parts (messages per piece over the whole forest)."""


def forest_shape(trees, topology) -> ForestShape:
    """Depth, load and message count of a phase's forest on ``topology``."""
    logical = trees.logical
    forest = trees.forest
    link_of: dict[tuple[int, int], int] = {}
    for index, link in enumerate(topology.links):
        key = (link.dst, link.src) if trees.reverse else (link.src, link.dst)
        link_of.setdefault(key, index)
    route: dict[tuple[int, int], list[int]] = {}
    for edge, pieces in logical.paths.items():
        path = pieces[0][0]
        route[edge] = [link_of[(a, b)] for a, b in zip(path, path[1:])]
    crossed: list[int] = []  # every link of every tree edge, and the edge's tree weight (whole units: sums exact)
    weights: list[int] = []
    depth = 0
    parts = 0
    for tree in forest.trees:
        hops = [0] * forest.num_npus
        parent = tree.parent.tolist()
        for v in tree.order[1:].tolist():
            p = parent[v]
            links = route[(p, v)]
            hops[v] = hops[p] + len(links)
            crossed += links
            weights += [tree.weight] * len(links)
            parts += len(logical.paths[(p, v)])
        depth = max(depth, max(hops))
    count = np.bincount(crossed, minlength=len(topology.links)).astype(np.float64)
    load = np.bincount(crossed, weights=weights, minlength=len(topology.links))
    rate = np.array([bytes_per_ns(link.bandwidth_gbps) for link in topology.links])
    busiest = int(np.argmax(load / rate))
    return ForestShape(
        depth_hops=depth,
        messages_per_piece=int(count[busiest]),
        unit_ns_per_byte=1.0 / float(rate[busiest]),
        latency_ns=float(topology.links[busiest].latency_ns),
        mean_weight=float(np.mean([t.weight for t in forest.trees])),
        tree_edges=parts,
    )


def model_pieces(shape: ForestShape, *, share_bytes: float, k: int) -> int:
    """``P*`` of the module docstring, as a power of two within ``1 .. MAX_PIECES``."""
    piece_ns = shape.mean_weight * share_bytes / k * shape.unit_ns_per_byte
    latency = max(shape.latency_ns, 1.0)
    best = math.sqrt(shape.depth_hops * piece_ns / (max(shape.messages_per_piece, 1) * latency))
    return int(min(MAX_PIECES, max(1, 2 ** round(math.log2(max(best, 1.0))))))


def estimate_ns(shape: ForestShape, *, share_bytes: float, k: int, pieces: int, bandwidth_ns: float) -> float:
    """The model's time of a phase: bandwidth term, pipeline drain, latency of the messages."""
    piece_ns = shape.mean_weight * share_bytes / k * shape.unit_ns_per_byte / pieces
    latency = shape.latency_ns
    return bandwidth_ns + shape.depth_hops * (piece_ns + latency) + shape.messages_per_piece * pieces * latency


def operations_per_piece(shapes: list[ForestShape]) -> int:
    """Operations one more piece per tree adds (a SEND and a RECV per tree edge part)."""
    return 2 * sum(s.tree_edges for s in shapes)


def candidate_pieces(shapes: list[ForestShape], *, share_bytes: float, k: int, affordable: int) -> list[int]:
    """Pieces to try, best guess first: half the model's ``P*``, then its neighbours while the
    operations they make stay within ``affordable`` (one guess when even that is too many)."""
    model = max(model_pieces(s, share_bytes=share_bytes, k=k) for s in shapes)
    guess = max(1, model // 2)
    per_piece = operations_per_piece(shapes)
    options = [guess] + [p for p in (guess // 2, guess * 2) if 1 <= p <= MAX_PIECES and p != guess]
    chosen = [p for p in options if p * per_piece <= affordable]
    return chosen if len(chosen) > 1 else [guess]


@dataclass(frozen=True)
class Measured:
    """A lowered candidate's predicted time and what its busiest link did."""

    time_ns: float
    transfer_ns: float
    """The busiest link's bytes / bandwidth (the same for every ``P``)."""
    latency_ns: float
    """The busiest link's messages times its latency (grows with ``P``)."""

    @property
    def fill_ns(self) -> float:
        """What the busiest link does not explain: pipeline fill and drain, about one piece per hop."""
        return max(self.time_ns - self.transfer_ns - self.latency_ns, 0.0)


def next_pieces(pieces: int, measured: Measured) -> int:
    """The power of two nearest the least ``T(P) = A + B P + C / P`` calibrated at ``pieces``:
    the busiest link's latency grows as ``P`` (``B``), the fill and drain shrink as ``1/P``
    (``C``), the transfer stays (``A``).

    >>> next_pieces(8, Measured(time_ns=1100.0, transfer_ns=1000.0, latency_ns=4.0, ))   # sqrt(96 * 8 / 0.5) = 39
    32
    >>> next_pieces(8, Measured(time_ns=1100.0, transfer_ns=1000.0, latency_ns=99.0))    # latency-bound: fewer
    1
    """
    per_piece = measured.latency_ns / pieces
    drain = measured.fill_ns * pieces
    best = math.sqrt(drain / per_piece) if per_piece > 0 else float(MAX_PIECES)
    return int(min(MAX_PIECES, max(1, 2 ** round(math.log2(max(best, 1.0))))))


def search_pieces(first: int, measure: Callable[[int], Measured], affordable: Callable[[int], bool], *, most: int = 3) -> int:
    """The pieces per tree with the least measured time among at most ``most`` predictions:
    from ``first``, jump to :func:`next_pieces` of the latest measurement (halved until
    ``affordable``) while that names a power of two not measured yet; when a jump was slower,
    try the power of two between it and the best so far.

    The model's ``P*`` is only a guess (on a100:2, 1 GiB All-Gather, it says 8 where the
    network model's best is 32: the pipeline's fill over four store-and-forward NIC hops costs
    more than it reckons); one prediction calibrates the latency and fill terms, so one or two
    more find the best (where walking the powers of two one by one took three to five).

    >>> curve = lambda p: Measured(1000.0 + 2.0 * p + 512.0 / p, 1000.0, 2.0 * p)   # least at P = 16
    >>> tried = []
    >>> search_pieces(2, lambda p: tried.append(p) or curve(p), lambda p: True), tried
    (16, [2, 16])
    """
    times: dict[int, Measured] = {}
    pieces = first
    while len(times) < most:
        times[pieces] = measure(pieces)
        best = min(times, key=lambda p: times[p].time_ns)
        target = next_pieces(pieces, times[pieces]) if pieces == best else _between(best, pieces)
        while target > 1 and not affordable(target):
            target //= 2
        if target in times or not affordable(target):
            break
        pieces = target
    return min(times, key=lambda p: times[p].time_ns)


def _between(best: int, worse: int) -> int:
    """The power of two half way (geometrically) from ``best`` towards a slower ``worse``."""
    return 2 ** round((math.log2(best) + math.log2(worse)) / 2) if abs(math.log2(worse / best)) > 1 else best


__all__ = ["ForestShape", "MAX_PIECES", "Measured", "candidate_pieces", "next_pieces", "search_pieces", "operations_per_piece", "estimate_ns", "forest_shape", "model_pieces"]
