"""A floor under the finishing time of every TACOS All-Gather matching of given message caps.

An NPU must receive every other NPU's ``k`` chunks over its own in-channels, each carrying one
message at a time, a message of ``m`` chunks (at most the channel's cap) taking the channel's
hop time for ``m`` chunks. The least time a channel needs to bring ``x`` chunks is the cheapest
way to cut them into messages, and the NPU's last chunk is no earlier than the best split of its
``(N - 1) k`` chunks among its channels. A matching that finishes at this floor cannot be beaten
by another seed or variant, so :func:`~chakra_collectives.synth.tacos.tacos` stops trying more
(a 64-NPU mesh, All-Gather of 64 MiB at one chunk per NPU: the first of four seeds does, 641
µs -- a corner NPU's 63 chunks over two links; a 64-NPU torus, 320.5 µs; a 16-NPU mesh at two
chunks per NPU, 593.4 µs).

Exact arithmetic: the hop times are floats with power-of-two denominators, so the floor is
summed in integers of the smallest such unit, and it is returned (exactly) only when every
instant below it is a float the matcher computes without rounding (below ``2**53`` units):
then no matching's time is below it, not even by rounding. Otherwise, and with routed channels
(switches also deliver), the floor is 0.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from chakra_collectives.synth.channels import Channels

FLOOR_STEPS = 2**20
"""Most steps :func:`matching_floor_ns` takes (channels x cap, and NPU classes' channels x chunks
x cap); beyond, it returns 0."""


def matching_floor_ns(channels: Channels, chunks_per_npu: int, caps: np.ndarray) -> float:
    """The floor (ns) under an All-Gather matching on ``channels`` whose direct channel ``c``
    carries at most ``caps[c]`` chunks per message (0 when none can be given, see the module
    docstring).

    >>> from chakra_collectives.synth.channels import build_channels
    >>> from chakra_collectives.topology import mesh2d
    >>> ch = build_channels(mesh2d(8, 8), chunk_bytes=2**20)
    >>> hop = float(ch.hop_ns(ch.direct_link[:1], 1)[0])
    >>> matching_floor_ns(ch, 1, np.ones(ch.num_direct, dtype=np.int32)) == 32 * hop   # a corner: 63 chunks, two links
    True
    >>> ch = build_channels(mesh2d(8, 8), chunk_bytes=2**19)        # 126 chunks: 63 per link, in 31 pairs and one
    >>> one, two = ch.hop_ns(ch.direct_link[:2], [1, 2]).tolist()
    >>> matching_floor_ns(ch, 2, np.full(ch.num_direct, 2)) == 31 * two + one
    True
    """
    if channels.routed or channels.num_direct == 0:
        return 0.0
    n = channels.num_npus
    need = (n - 1) * chunks_per_npu
    caps = np.minimum(np.maximum(np.asarray(caps, dtype=np.int64), 1), need)
    links = channels.direct_link
    largest = int(caps.max())
    if len(links) * largest > FLOOR_STEPS:  # (large networks: one matching takes seconds, and more trials are few)
        return 0.0
    hops = channels.hop_ns(np.repeat(links, largest), np.tile(np.arange(1, largest + 1), len(links))).reshape(len(links), largest)
    ratios = [value.as_integer_ratio() for value in hops.ravel().tolist()]
    unit = max(q for _, q in ratios)  # a power of two: every hop is a whole number of 1 / unit ns
    scaled = np.array([p * (unit // q) for p, q in ratios], dtype=object).reshape(hops.shape)
    into: list[list[tuple]] = [[] for _ in range(n)]
    for c, d in enumerate(channels.direct_dst.tolist()):
        into[d].append(tuple(scaled[c, : int(caps[c])].tolist()))
    classes = {tuple(sorted(kinds)) for kinds in into}
    if sum(len(kinds) for kinds in classes) * need * largest > FLOOR_STEPS:
        return 0.0
    least: dict[tuple, list[int]] = {}
    floor = 0
    for kinds in classes:
        if not kinds:
            return 0.0
        times = []
        for kind in kinds:
            if kind not in least:
                least[kind] = _least_times(kind, need)
            times.append(least[kind])
        floor = max(floor, _split(times, need))
    if floor >= 2**53:
        return 0.0
    return floor / unit


def _least_times(hop: tuple[int, ...], need: int) -> list[int]:
    """``[T(1), T(2), ...]``: the least time to bring ``x`` chunks in messages of at most
    ``len(hop)`` chunks (``hop[m - 1]``: a message of ``m``), never decreasing in ``x`` (a time
    that more chunks could beat is lowered to theirs).

    >>> _least_times((10, 15), 4)
    [10, 15, 25, 30]
    """
    least = [0]
    for x in range(1, need + 1):
        least.append(min(least[x - m] + hop[m - 1] for m in range(1, min(len(hop), x) + 1)))
    for x in range(need - 1, 0, -1):
        least[x] = min(least[x], least[x + 1])
    return least[1:]


def _split(times: list[list[int]], need: int) -> int:
    """The least ``T`` by which the channels together can bring ``need`` chunks (``times[l][x - 1]``:
    channel ``l``'s least time for ``x``).

    >>> _split([[10, 20, 30], [15, 30, 45]], 3)
    20
    """
    candidates = sorted({t for channel in times for t in channel})
    low, high = 0, len(candidates) - 1
    while low < high:
        middle = (low + high) // 2
        if sum(bisect_right(channel, candidates[middle]) for channel in times) >= need:
            high = middle
        else:
            low = middle + 1
    return candidates[low]


__all__ = ["FLOOR_STEPS", "matching_floor_ns"]
