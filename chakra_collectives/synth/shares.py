"""Unequal shares of a process group's All-Reduce: which member reduces how much of the buffer.

TACOS's All-Reduce is a Reduce-Scatter mirrored from an All-Gather schedule, then that
All-Gather. In the All-Gather member ``i`` receives every chunk it does not own, ``(1 - s_i) M``
of an ``M``-byte buffer when it owns the share ``s_i``; the mirrored Reduce-Scatter takes as long.
With equal shares the member with the fewest links sets the time: a mesh row's corners have 2
links, the others 3, so the row's All-Reduce is held to ``2 (7/8) M / 2`` while the group's bound is
``2 (N-1) M`` over the members' summed bandwidth ``sum b`` (the mesh2d:8x8 row: 1,093.8 against
795.5 us at 64 MiB). Shares that make every member receive for the same time ``T``,
``1 - s_i = T b_i / M``, sum to one when ``T = (N-1) M / sum b``: twice that is exactly the bound.
A member that would get a negative share (more bandwidth than the others can feed) gets none and
``T`` is worked out again over the rest (water filling).

``b_i`` is the smaller of a member's in- and out-bandwidth over the fabric's links (relays carry
the detours). The shares are rounded to whole chunks (:func:`owner_starts`, every member at least
one), so with one chunk per member they are equal: the search over chunk counts decides.

>>> shares = bandwidth_shares(np.array([2.0, 3, 3, 3, 3, 3, 3, 2]))   # a mesh row: corners 2 links
>>> (shares * 22).round(6).tolist()
[8.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 8.0]
>>> owner_starts(shares, 64).tolist()
[0, 23, 26, 29, 32, 35, 38, 41, 64]
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.tiers import bandwidth_tiers, island_bandwidths


def member_bandwidths(topology: Topology) -> np.ndarray:
    """Per NPU of ``topology`` (a group's view: its members the NPUs), the smaller of the
    bandwidths (GB/s) of its links in and out."""
    n = topology.num_npus
    into = np.zeros(n)
    out = np.zeros(n)
    for link in topology.links:
        if link.dst < n:
            into[link.dst] += link.bandwidth_gbps
        if link.src < n:
            out[link.src] += link.bandwidth_gbps
    return np.minimum(into, out)


def bandwidth_shares(bandwidth: np.ndarray) -> np.ndarray:
    """The share of the buffer each member owns so that all receive their All-Gather in the same
    time (module docstring): ``s_i = 1 - (A - 1) b_i / sum_A b`` over the members ``A`` whose share
    is not negative, 0 for the others; equal bandwidths give equal shares.

    >>> bandwidth_shares(np.array([1.0, 1, 1, 1])).tolist()
    [0.25, 0.25, 0.25, 0.25]
    >>> bandwidth_shares(np.array([10.0, 1, 1])).tolist()   # the fast member receives everything, owns nothing
    [0.0, 0.5, 0.5]
    """
    bandwidth = np.asarray(bandwidth, dtype=float)
    active = bandwidth > 0
    shares = np.zeros(len(bandwidth))
    while active.any():
        time = (active.sum() - 1) / bandwidth[active].sum()
        shares = np.where(active, 1 - time * bandwidth, 0.0)
        if (shares >= 0).all():
            break
        active &= shares > 0
    return shares / shares.sum()


def owner_starts(shares: np.ndarray, num_chunks: int) -> np.ndarray:
    """``shares`` as whole chunks: ``num_members + 1`` offsets, member ``i`` owning chunks
    ``start[i] .. start[i + 1] - 1``; every member at least one chunk (when there are as many
    chunks as members: taken from the largest), rounded by largest remainder.

    >>> owner_starts(np.array([0.5, 0.25, 0.25]), 3).tolist()
    [0, 1, 2, 3]
    >>> owner_starts(np.array([0.0, 0.5, 0.5]), 6).tolist()
    [0, 1, 3, 6]
    """
    exact = np.asarray(shares, dtype=float) * num_chunks
    counts = np.floor(exact).astype(np.int64)
    left = num_chunks - int(counts.sum())
    counts[np.argsort(-(exact - counts), kind="stable")[:left]] += 1
    if num_chunks >= len(counts):
        for member in np.flatnonzero(counts == 0).tolist():  # one chunk each, from the largest
            counts[int(np.argmax(counts))] -= 1
            counts[member] = 1
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


SHARE_BLENDS = (1.0, 0.5, 0.0)
"""The owner layouts TACOS tries for a group's All-Reduce: the bandwidth shares blended with equal
ones, ``w * s + (1 - w) / N`` (0: equal shares). Bandwidth shares alone win on a mesh row
(1,087 against 1,157 us at w = 0.5 and 1,328 us equal, mesh2d:8x8, 64 MiB, K = 32); on a random
8-subset of that mesh, whose interior members would own one chunk each and a corner 51 of 128, the
half blend does (1,365 us against 1,601 us, equal 1,458 us, K = 16): there distance, not only
bandwidth, sets the time."""


def island_shares(topology: Topology) -> list[np.ndarray]:
    """Shares by island (:func:`~chakra_collectives.topology.tiers.bandwidth_tiers`: a DGX
    cluster's servers), one per tier: each island's part of the buffer from
    :func:`bandwidth_shares` of the islands' bandwidths (the smaller of their links in and out),
    split equally among its members; the NPUs of ``topology`` (a group's view) outside islands own
    none. Between islands an All-Reduce moves what its islands do not reduce, so islands that
    hold several members reduce no more than those that hold one: then every island receives for
    the same time, and reduce-scatter + all-gather reaches the islands' bound
    (:func:`~chakra_collectives.bounds.multiway_cut_bound`). Rails
    (:mod:`~chakra_collectives.synth.rails`) owns chunks so; as a TACOS layout it gained little
    (dgx:4x8's random group, 64 MiB: 777 -> 764 us; its matching limits it) for one more layout
    searched at every chunk count (that group's synthesis 10 -> 40 s of CPU), so TACOS does not
    try it.

    >>> from chakra_collectives.topology import load_topology
    >>> from chakra_collectives.topology.groups import group_view
    >>> view = group_view(load_topology("dgx:4x8"), (1, 8, 13, 15, 16, 24, 28, 31)).topology   # 1, 3, 1, 3 per server
    >>> [(shares * 12).round(6).tolist() for shares in island_shares(view)]
    [[3.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0]]
    """
    n = topology.num_npus
    found = []
    for labels in bandwidth_tiers(topology):
        into, out = island_bandwidths(topology, labels)
        island = bandwidth_shares(np.minimum(into, out))
        members = np.bincount(labels[:n], minlength=len(into))
        found.append(island[labels[:n]] / members[labels[:n]])
    return found


def share_layouts(topology: Topology, chunks_per_npu: int) -> list[np.ndarray | None]:
    """The distinct owner offsets (:attr:`~chakra_collectives.synth.schedule.Schedule.owner_start`)
    of :data:`SHARE_BLENDS` for an All-Reduce over the NPUs of ``topology`` (a group's view) at
    ``chunks_per_npu`` chunks per NPU on average, from :func:`member_bandwidths`; ``None`` stands
    for equal shares (last; alone where the bandwidths are equal).

    >>> from chakra_collectives.topology import load_topology
    >>> from chakra_collectives.topology.groups import group_view
    >>> layouts = share_layouts(group_view(load_topology("mesh2d:4x4"), (0, 1, 2, 3)).topology, 4)   # corners 2 links, middle 3
    >>> [None if starts is None else np.diff(starts).tolist() for starts in layouts]
    [[6, 2, 2, 6], [5, 3, 3, 5], None]
    >>> share_layouts(group_view(load_topology("torus2d:4x4"), (0, 1, 2, 3)).topology, 4)
    [None]
    """
    n = topology.num_npus
    shares = bandwidth_shares(member_bandwidths(topology))
    equal = np.arange(n + 1) * chunks_per_npu
    layouts: list[np.ndarray | None] = []
    for weight in SHARE_BLENDS:
        starts = owner_starts(weight * shares + (1 - weight) / n, n * chunks_per_npu)
        if not np.array_equal(starts, equal) and not any(np.array_equal(starts, seen) for seen in layouts):
            layouts.append(starts)
    return [*layouts, None]


__all__ = ["SHARE_BLENDS", "bandwidth_shares", "island_shares", "member_bandwidths", "owner_starts", "share_layouts"]
