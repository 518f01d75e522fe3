"""Lanes for intervals that overlap: a track that shows slices side by side (a Perfetto thread,
a row of a picture) must not hold two that overlap without nesting.

>>> assign_lanes([0.0, 1, 5, 1.5], [2.0, 3, 6, 1.8]).tolist()   # the third interval reuses lane 0
[0, 1, 0, 2]
"""

from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np


def assign_lanes(start: Sequence[float] | np.ndarray, end: Sequence[float] | np.ndarray) -> np.ndarray:
    """Greedy interval colouring: the lowest-numbered lane free at each interval's start (in order
    of starts); the number of lanes is the most intervals ever open at once. Touching intervals
    (one ends when the next starts) share a lane."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    lane = np.zeros(len(start), dtype=np.int64)
    busy: list[tuple[float, int]] = []  # (end, lane) of open intervals
    free: list[int] = []
    count = 0
    for i in np.argsort(start, kind="stable").tolist():
        while busy and busy[0][0] <= start[i]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane[i] = heapq.heappop(free)
        else:
            lane[i] = count
            count += 1
        heapq.heappush(busy, (float(end[i]), int(lane[i])))
    return lane
