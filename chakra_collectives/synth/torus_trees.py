"""Translated broadcast trees: an All-Gather schedule for 2-D tori with one message per link and hop.

TACOS's greedy decides every hop anew, so on a large torus a link's messages stay short (9.3
chunks on ``torus2d:64x64``) and pay a latency each: 110 messages per link. Here every NPU's
chunks spread along the same broadcast tree, translated to start at that NPU, and every link
sends, for each hop count ``h``, **one** message with every chunk whose tree crosses it at hop
``h`` -- as many messages as the torus's diameter (64 on ``torus2d:64x64``), each carrying the
chunks of many NPUs (a further run per NPU, worked out from the tree when the lowering asks for
it: :class:`TreeRuns`; 268M runs at 16,384 NPUs are never all held).

The tree reaches the NPU ``(dr, dc)`` rows and columns away (the nearer way round; half a
ring away, either, chosen so that opposite links carry equally) along shortest paths: along
the row first where ``|dc| / cols > |dr| / rows``, down the column first where it is less, and
on the diagonals row first where ``dr`` and ``dc`` have the same sign. Every NPU on the
way is reached the same way (its offset is nearer the same axis), so the paths form a tree; on
a square torus the four links of every NPU carry ``(N - 1) K / 4`` chunks each, the bound's
share, within 2 (``torus2d:64x64``: 1,024, 1,023, 1,025 and 1,023 of 1,023.75). Each message
leaves as soon as its link is free and the messages that bring its chunks have arrived (the
lowering's dependencies: the network model replays the schedule exactly).

The price is latency along the tree's depth: a chunk reaches the NPU farthest away after as
many messages as hops, so a link sends at least the diameter's count of messages (any schedule
that treats every NPU alike must). All-Gather of 64 MiB, one chunk per NPU, against the bound:
``torus2d:32x32`` 0.947, ``torus2d:64x64`` 0.906 (TACOS's matchings 0.905 and 0.823),
``torus2d:128x128`` 0.830 (0.691).

>>> from chakra_collectives.topology import torus2d
>>> from chakra_collectives.synth.channels import build_channels
>>> schedule = tree_all_gather(torus2d(4, 4), build_channels(torus2d(4, 4), chunk_bytes=2**16), 1)
>>> int(schedule.count.sum()) == 16 * 15, int(schedule.num_transfers)   # 64 links, up to 4 hops each
(True, 208)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from chakra_collectives.synth.channels import Channels
from chakra_collectives.synth.gridpipe import Grid, grid_of
from chakra_collectives.synth.schedule import Schedule, from_messages
from chakra_collectives.topology.core import Topology

_STEPS = ((0, 1), (0, -1), (1, 0), (-1, 0))
"""Directions of a link (row, column step): right, left, up (next row), down."""


def tree_template(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tree from NPU ``(0, 0)`` of a ``rows x cols`` torus: for every other NPU its signed
    offset ``(dr, dc)`` along the tree's path, the direction (index of :data:`_STEPS`) of the
    link that brings it, and the index of its parent (``-1``: the root).

    >>> dr, dc, direction, parent = tree_template(4, 4)
    >>> len(dr), np.bincount(direction).tolist()   # 15 NPUs; the links of each direction carry this many chunks
    (15, [4, 3, 5, 3])
    >>> np.bincount(tree_template(64, 64)[2]).tolist()   # 4,095 NPUs: 1,023.75 each is the bound's share
    [1024, 1023, 1025, 1023]
    >>> bool(np.all(np.abs(dr) + np.abs(dc) - 1 == np.where(parent >= 0, np.abs(dr[parent]) + np.abs(dc[parent]), 0)))
    True
    """
    dr = np.repeat(np.arange(rows), cols)[1:]
    dc = np.tile(np.arange(cols), rows)[1:]
    dr = np.where(dr > rows // 2, dr - rows, dr)
    dc = np.where(dc > cols // 2, dc - cols, dc)
    ar, ac = np.abs(dr) * cols, np.abs(dc) * rows  # as fractions of the sides: a long side's links carry their share
    row_first = (ac > ar) | ((ac == ar) & (np.sign(dr) == np.sign(dc)))
    # half a ring away: the other way round where the path's last leg there is free to choose
    # (a row-first path's column, a column-first path's row), on every other NPU
    flip_r = row_first & (rows % 2 == 0) & (dr == rows // 2) & (dc % 2 == 1)
    flip_c = ~row_first & (cols % 2 == 0) & (dc == cols // 2) & (dr % 2 == 1)
    dr = np.where(flip_r, -dr, dr)
    dc = np.where(flip_c, -dc, dc)
    sr, sc = np.sign(dr), np.sign(dc)
    last_in_column = np.where(row_first, dr != 0, dc == 0)
    pr = np.where(last_in_column, dr - sr, dr)
    pc = np.where(last_in_column, dc, dc - sc)
    direction = np.where(last_in_column, np.where(sr > 0, 2, 3), np.where(sc > 0, 0, 1))
    # the parent's index: offsets as keys (the parent is nearer the same axis, so it took the same way)
    key = dr.astype(np.int64) * (2 * cols + 1) + dc
    order = np.argsort(key)
    parent_key = pr.astype(np.int64) * (2 * cols + 1) + pc
    at = np.clip(np.searchsorted(key[order], parent_key), 0, len(key) - 1)
    parent = np.where((pr == 0) & (pc == 0), -1, order[at])
    if not np.all((parent < 0) | (key[order[at]] == parent_key)):
        raise AssertionError("the torus tree's paths do not form a tree")
    return dr, dc, direction, parent


def tree_levels(rows: int, cols: int) -> int:
    """How many messages every NPU sends in :func:`tree_all_gather`: one per direction and hop
    count its tree's edges take (the schedule holds ``rows * cols`` times as many).

    >>> tree_levels(64, 64)     # 1,036,288 messages at 4,096 NPUs, about 64 per link
    253
    """
    dr, dc, direction, _ = tree_template(rows, cols)
    return len(np.unique((np.abs(dr) + np.abs(dc)) * 4 + direction))


def torus_grid(topology: Topology) -> Grid | None:
    """The grid of a 2-D torus whose rows and columns both close into rings (sides of 3 or
    more), or ``None``.

    >>> from chakra_collectives.topology import mesh2d, torus2d
    >>> torus_grid(torus2d(8, 4)), torus_grid(torus2d(2, 8)), torus_grid(mesh2d(4, 4))
    (Grid(cols=8, rows=4, wrap=True), None, None)
    """
    grid = grid_of(topology)
    return grid if grid is not None and grid.wrap_cols and grid.wrap_rows else None


def tree_all_gather(topology: Topology, channels: Channels, k: int) -> Schedule | None:
    """The All-Gather schedule of the translated trees on ``topology`` (module docstring), or
    ``None`` when it is not a 2-D torus of direct links whose both rings close (sides of 3 or more).
    Its messages' runs are worked out when asked for (:class:`TreeRuns`), never all held: one per
    pair of NPUs, 268M at 16,384 NPUs."""
    grid = torus_grid(topology)
    if grid is None or channels.routed:
        return None
    rows, cols, n = grid.rows, grid.cols, topology.num_npus
    node = np.arange(n, dtype=np.int64)
    r, c = node // cols, node % cols
    i32 = np.int32  # the columns as the schedule keeps them (from_messages' copies in start order are its own)
    columns: list[list[np.ndarray]] = [[] for _ in range(8)]
    parents = []
    for g, (d, pr, pc, links, neighbour, start, end) in enumerate(_messages(grid, channels, k)):
        parents.append((pr, pc))
        # the first chunk: the least source NPU of the trees crossing u -> u + step at this hop
        first = np.full(n, n, dtype=np.int64)
        for a, b in zip(pr.tolist(), pc.tolist()):
            np.minimum(first, ((r - a) % rows) * cols + (c - b) % cols, out=first)
        for column, value in zip(columns, ((first * k).astype(i32), np.full(n, len(pr) * k, dtype=i32), node.astype(i32), neighbour.astype(i32), start, end, links.astype(i32), np.full(n, g, dtype=np.int16))):
            column.append(value)
    first, count, src, dst, start, end, channel, group = (np.concatenate(columns.pop(0)) for _ in range(8))
    further = int(count.sum()) // k - len(count)  # at most one run a tree edge: N (N - 1) in all
    runs = TreeRuns(rows, cols, k, tuple(parents), group, further)
    return from_messages(n, k, channels.num_direct, first, count, src, dst, start, end, channel, more=runs)


@dataclass(frozen=True)
class TreeRuns:
    """The runs of chunks of :func:`tree_all_gather`'s messages, worked out from the tree when
    asked for (a :class:`~chakra_collectives.synth.schedule.RunPlan`): a message of group ``g``
    from NPU ``u`` carries the chunks of the NPUs ``u - parents[g]`` (on the torus), ascending,
    in runs of consecutive ids.

    >>> runs = TreeRuns(4, 4, 1, ((np.array([0, 1]), np.array([1, 0])),), np.zeros(16, np.int16), 16)
    >>> [v.tolist() for v in runs.runs(np.array([5, 0]), np.array([5, 0]))]   # NPU 5 = (1, 1): NPUs (1, 0) and (0, 1); NPU 0: (3, 0), (0, 3)
    [[5, 5, 0, 0], [1, 4, 3, 12], [1, 1, 1, 1]]
    """

    rows: int
    cols: int
    k: int
    parents: tuple[tuple[np.ndarray, np.ndarray], ...]
    """Per group (a direction and hop count): the row and column offsets of the tree edges' parents."""
    group: np.ndarray
    """Every message's group."""
    further_runs: int
    """Runs beyond every message's first, at most (one a tree edge)."""

    def in_order(self, order: np.ndarray) -> "TreeRuns":
        return replace(self, group=self.group[order])

    def runs(self, ids: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(message, first, length)`` of every run of the messages ``ids`` (sent by ``src``),
        message by message in the order of ``ids``, each message's runs in order."""
        ids = np.asarray(ids)
        group = self.group[ids]
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(len(self.parents) + 1))
        pieces = []
        for g in np.flatnonzero(np.diff(bounds)).tolist():
            at = order[bounds[g] : bounds[g + 1]]
            pr, pc = self.parents[g]
            u = np.asarray(src)[at].astype(np.int64)
            sources = np.sort(((u // self.cols)[:, None] - pr) % self.rows * self.cols + ((u % self.cols)[:, None] - pc) % self.cols, axis=1)
            row, first, length = _row_runs(sources, self.k)
            pieces.append((at[row], first, length))
        if not pieces:
            return ids[:0], np.zeros(0, np.int32), np.zeros(0, np.int32)
        position, first, length = (np.concatenate(column) for column in zip(*pieces))
        by_message = np.argsort(position, kind="stable")
        return ids[position[by_message]], first[by_message], length[by_message]


def tree_time_ns(topology: Topology, channels: Channels, k: int) -> float | None:
    """The time of :func:`tree_all_gather`'s schedule, worked out without building it (0.4 s at
    16,384 NPUs, whose schedule takes 11 s and 2 GiB), or ``None`` where it does not apply.

    >>> from chakra_collectives.topology import torus2d
    >>> from chakra_collectives.synth.channels import build_channels
    >>> topo = torus2d(4, 4)
    >>> channels = build_channels(topo, chunk_bytes=2**16)
    >>> tree_time_ns(topo, channels, 1) == tree_all_gather(topo, channels, 1).time_ns
    True
    """
    grid = torus_grid(topology)
    if grid is None or channels.routed:
        return None
    return max(float(end.max()) for *_, end in _messages(grid, channels, k))


def translated_messages_floor(rows: int, cols: int) -> list[int]:
    """Messages a link of each direction (right, left, up, down) sends at least in *any* schedule
    that moves every NPU's chunks along these trees' paths and treats every NPU alike (the same
    messages and times, translated), whatever it merges and whenever it sends.

    Two facts give it. (1) Translated, every link of a direction starts its ``j``-th message at
    the same instant, so a chunk crossing ``l`` links straight on in one direction crosses them in
    ``l`` different messages of that direction (the next link's message starts after the last one
    ended): a link sends at least the longest straight leg of its direction. (2) In each quadrant,
    take the farthest path that runs along the row first (``a``) and the farthest that runs down
    the column first (``b``). If ``a`` leaves its row no later than ``b`` leaves its column, a row
    link sends ``a``'s row leg before that instant and ``b``'s after it, all different messages:
    the two row legs' hops together; otherwise a column link sends both column legs'. Of the four
    quadrants' alternatives the cheapest consistent choice is taken.

    Every NPU takes ``(N - 1) K`` chunks over its four in-links, so a schedule takes at least
    ``((N - 1) K s + l * sum(floor)) / 4`` (``s`` a chunk's serialization, ``l`` the latency):
    the lower bound plus the latency of the floor's *mean* -- :func:`translated_floor_ns`.

    >>> translated_messages_floor(64, 64)   # the trees send 63-64 in every direction
    [63, 62, 32, 31]
    >>> translated_messages_floor(128, 128)
    [127, 126, 64, 63]
    """
    dr, dc, direction, _ = tree_template(rows, cols)
    turned = (dr != 0) & (dc != 0)
    row_first = turned & (direction >= 2)  # the last hop is in the column: the row leg came first
    legs = [np.where(dc > 0, np.abs(dc), 0), np.where(dc < 0, np.abs(dc), 0), np.where(dr > 0, np.abs(dr), 0), np.where(dr < 0, np.abs(dr), 0)]
    straight = [int(leg.max()) for leg in legs]
    hop = np.abs(dr) + np.abs(dc)
    alternatives = []  # per quadrant: (row direction, its messages) or (column direction, its messages)
    for row_d, col_d in ((0, 2), (0, 3), (1, 2), (1, 3)):
        quadrant = turned & (legs[row_d] > 0) & (legs[col_d] > 0)
        row_paths, column_paths = np.flatnonzero(quadrant & row_first), np.flatnonzero(quadrant & ~row_first)
        if not len(row_paths) or not len(column_paths):
            continue  # (small tori) every path of the quadrant turns the same way
        a, b = row_paths[np.argmax(hop[row_paths])], column_paths[np.argmax(hop[column_paths])]
        alternatives.append(((row_d, int(legs[row_d][a] + legs[row_d][b])), (col_d, int(legs[col_d][a] + legs[col_d][b]))))
    best: list[int] | None = None
    for pick in range(2 ** len(alternatives)):
        floor = list(straight)
        for q, alternative in enumerate(alternatives):
            d, messages = alternative[(pick >> q) & 1]
            floor[d] = max(floor[d], messages)
        if best is None or sum(floor) < sum(best):
            best = floor
    assert best is not None
    return best


def translated_floor_ns(topology: Topology, channels: Channels, k: int) -> float | None:
    """A lower bound on the time of every translated schedule along the trees' paths
    (:func:`translated_messages_floor`), or ``None`` where the trees do not apply. On
    ``torus2d:64x64`` at 64 MiB it is 0.930 of the bound's speed, the 4,096-NPU target itself
    (the trees: 0.906, every link 64 messages); at 16,384 NPUs 0.868, below the 0.88 asked:
    only schedules that differ from NPU to NPU (or take other paths) can reach that.

    >>> from chakra_collectives.topology import torus2d
    >>> from chakra_collectives.synth.channels import build_channels
    >>> topo = torus2d(64, 64)
    >>> channels = build_channels(topo, chunk_bytes=2**14)
    >>> round(translated_floor_ns(topo, channels, 1)), round(tree_time_ns(topo, channels, 1))
    (335924, 344805)
    """
    grid = torus_grid(topology)
    if grid is None or channels.routed:
        return None
    link = channels.direct_link[:1]
    latency = float(channels.hop_ns(link, 0)[0])
    per_chunk = float(channels.hop_ns(link, 1)[0]) - latency
    floor = translated_messages_floor(grid.rows, grid.cols)
    return ((topology.num_npus - 1) * k * per_chunk + latency * sum(floor)) / 4


def _messages(grid: Grid, channels: Channels, k: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Every NPU's message in one direction at one hop count, hop count after hop count:
    ``(direction, parents' row offsets, parents' column offsets, channels, destinations, starts,
    ends)``, the offsets those of the tree edges it carries (one chunk run of ``k`` per edge)."""
    rows, cols = grid.rows, grid.cols
    n = rows * cols
    dr, dc, direction, parent = tree_template(rows, cols)
    hop = np.abs(dr) + np.abs(dc)
    node = np.arange(n, dtype=np.int64)
    r, c = node // cols, node % cols
    neighbour = [((r + a) % rows) * cols + (c + b) % cols for a, b in _STEPS]  # neighbour[d][u]: u's neighbour in direction d
    channel_of = {int(s) * n + int(d): i for i, (s, d) in enumerate(zip(channels.direct_src, channels.direct_dst))}
    out = [np.array([channel_of[int(u) * n + int(v)] for u, v in zip(node, neighbour[d])]) for d in range(4)]
    last_end = np.zeros(channels.num_direct)
    end_at = {}  # (direction, hop) -> end of every NPU's message in that direction at that hop
    for h in range(1, int(hop.max()) + 1):
        for d in range(4):
            edges = np.flatnonzero((hop == h) & (direction == d))
            if not len(edges):
                continue
            links = out[d]
            start = last_end[links].copy()
            fed = parent[edges][parent[edges] >= 0]
            for f in np.unique(direction[fed]):  # the message into u from direction f at hop h - 1 brought some of its chunks
                start = np.maximum(start, end_at[f, h - 1][neighbour[_OPPOSITE[f]]])
            end = start + channels.hop_ns(channels.direct_link[links], len(edges) * k)
            end_at[d, h] = last_end[links] = end
            pr = np.where(parent[edges] >= 0, dr[np.maximum(parent[edges], 0)], 0)
            pc = np.where(parent[edges] >= 0, dc[np.maximum(parent[edges], 0)], 0)
            yield d, pr, pc, links, neighbour[d], start, end


_OPPOSITE = (1, 0, 3, 2)


def _row_runs(sources: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row, first, length)`` of the runs of consecutive chunks of every row of ``sources``
    (ascending NPU ids, ``k`` chunks each), row by row.

    >>> [v.tolist() for v in _row_runs(np.array([[1, 2, 5], [0, 3, 4]]), 2)]
    [[0, 0, 1, 1], [2, 10, 0, 6], [4, 2, 2, 4]]
    """
    m, w = sources.shape
    starts = np.ones((m, w), dtype=bool)
    starts[:, 1:] = np.diff(sources, axis=1) != 1
    row, at = np.nonzero(starts)
    ends = np.append(at[1:], w)
    ends[np.append(row[1:] != row[:-1], True)] = w  # a row's last run ends with the row
    return row, (sources[row, at] * k).astype(np.int32), ((ends - at) * k).astype(np.int32)


__all__ = ["TreeRuns", "torus_grid", "translated_floor_ns", "translated_messages_floor", "tree_all_gather", "tree_levels", "tree_template", "tree_time_ns"]
