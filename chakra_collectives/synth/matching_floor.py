"""A floor under the finishing time of TACOS matchings that send single chunks (no merged messages).

An NPU must receive every other NPU's ``k`` chunks over its own in-channels, each carrying one
message at a time, every message of one chunk taking the channel's hop time. The earliest the
``x``-th message over a channel can arrive is ``x`` hops after 0, and the NPU's last chunk is
no earlier than the best split of its ``(N - 1) k`` chunks among its channels. A matching that
finishes at this floor cannot be beaten by another seed, so :func:`~chakra_collectives.synth.tacos.tacos`
stops trying more (a 64-NPU mesh, All-Gather of 64 MiB at one chunk per NPU: the first of
four seeds does, 641 µs -- the corner NPUs' 63 chunks over two links).

The floor is computed with the matcher's own floats: each arrival is ``start + hop``, and any
later start gives a later (or equal) arrival, so no matching's time is below it, not even by
rounding.
"""

from __future__ import annotations

import heapq

import numpy as np

from chakra_collectives.synth.channels import Channels

FLOOR_STEPS = 2**16
"""Most chunk arrivals :func:`single_chunk_floor_ns` plays out (NPU classes x chunks each); beyond, it returns 0."""


def single_chunk_floor_ns(channels: Channels, chunks_per_npu: int) -> float:
    """The floor (ns) under an All-Gather matching on ``channels`` whose messages each carry one
    chunk; 0 when there are routed channels (they deliver too) or it would take more than
    :data:`FLOOR_STEPS` steps.

    >>> from chakra_collectives.synth.channels import build_channels
    >>> from chakra_collectives.topology import mesh2d
    >>> ch = build_channels(mesh2d(8, 8), chunk_bytes=2**20)
    >>> hop = float(ch.hop_ns(ch.direct_link[:1], 1)[0])
    >>> single_chunk_floor_ns(ch, 1) == 32 * hop      # a corner: 63 chunks over two links
    True
    """
    if channels.routed or channels.num_direct == 0:
        return 0.0
    n = channels.num_npus
    need = (n - 1) * chunks_per_npu
    hops = channels.hop_ns(channels.direct_link, 1).tolist()
    into: list[list[float]] = [[] for _ in range(n)]
    for d, hop in zip(channels.direct_dst.tolist(), hops):
        into[d].append(hop)
    classes = {tuple(sorted(h)) for h in into}
    if len(classes) * need > FLOOR_STEPS:
        return 0.0
    floor = 0.0
    for links in classes:
        if not links:
            return 0.0
        arrivals = [(hop, hop) for hop in links]  # (when the next message over it arrives, its hop)
        heapq.heapify(arrivals)
        last = 0.0
        for _ in range(need):
            last, hop = heapq.heappop(arrivals)
            heapq.heappush(arrivals, (last + hop, hop))
        floor = max(floor, last)
    return floor


__all__ = ["FLOOR_STEPS", "single_chunk_floor_ns"]
