"""An exact time-expanded MILP of the link model for All-Gather, solved with HiGHS.

The network model (:mod:`~chakra_collectives.network.model`, default mode) moves messages whole,
store-and-forward, one message at a time per link in FIFO order, a hop of ``S`` bytes taking
``latency + S / bandwidth``. This module asks for the *fastest* All-Gather schedule of one-chunk
messages over a topology's channels (:mod:`~chakra_collectives.synth.channels`: NPU-to-NPU
links and routes through switches), in the style of TE-CCL and TACCL:

* **time** is cut into epochs of :func:`epoch_ns` (the shortest one-chunk hop); a hop over
  link ``l`` holds it for ``D_l = ceil(hop_ns / epoch)`` epochs (exact when every link's hop
  is a whole number of epochs, as on every homogeneous fabric; otherwise each hop is rounded
  *up* to whole epochs and the optimum is the optimum over that discretization);
* **chunks are commodities**: ``x[c, ch, t] = 1`` when chunk ``c`` leaves on channel ``ch`` at
  the start of epoch ``t``; a routed channel's message crosses its hops one after the other
  without waiting in a switch (hop ``j`` during ``[t + o_j, t + o_j + D_j)``);
* **store-and-forward**: a chunk may leave an NPU only once it has arrived there (``h[c, n, t]``
  counts the arrivals up to epoch ``t``);
* **one message at a time per link**: in each epoch at most one message occupies a link;
* every NPU receives every chunk it does not own **exactly once** by the horizon ``T``.

:func:`solve_all_gather` tries horizons ``T = T_lo, T_lo + 1, ...``: the first feasible one is
optimal, *proved* by HiGHS finding ``T - 1`` infeasible (``T_lo`` is a lower bound: every NPU
must receive ``(N - 1) K`` chunks over its in-links, the farthest chunk must travel, and every
chunk must enter each island of directly linked NPUs -- a DGX server -- in time to spread
through it, :func:`lower_epochs`).
Among schedules of the optimal horizon it prefers early sends (the objective is the sum of
start epochs), so messages leave as soon as their data and link allow -- what the network
model's replay does too. A time limit stops the search: the best schedule found is returned
with the horizon it proved infeasible, and the gap between them.

>>> from chakra_collectives.topology import ring
>>> from chakra_collectives.synth.channels import build_channels
>>> found = solve_all_gather(build_channels(ring(4), chunk_bytes=2**20), chunks_per_npu=1)
>>> found.epochs, found.lower_epochs, found.optimal, len(found.chunk)   # 2 hops each way: 2 epochs
(2, 2, True, 12)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from chakra_collectives.errors import LimitError
from chakra_collectives.synth.channels import Channels

if TYPE_CHECKING:
    from scipy.optimize import LinearConstraint

MAX_VARIABLES = 250_000
"""Largest model (binary send variables plus held-chunk counters) :func:`solve_all_gather` builds."""

DEFAULT_TIME_LIMIT_S = 60.0
"""Seconds the horizon search may take in all, unless told otherwise."""


@dataclass(frozen=True)
class ChannelHops:
    """Channels as the MILP sees them: per channel its NPUs and the epochs of its hops."""

    src: np.ndarray
    dst: np.ndarray
    key: np.ndarray
    """The :class:`~chakra_collectives.synth.matcher.Schedule` channel key: ``i`` for direct
    channel ``i``, ``-1 - i`` for routed channel ``i``."""
    hops: list[tuple[tuple[int, int, int], ...]]
    """Per channel: ``(link, first epoch after the send's, epochs held)`` of each hop."""
    epochs: np.ndarray
    """Per channel: epochs from the send to the arrival (the sum of its hops')."""
    epoch_ns: float
    exact_ns: np.ndarray
    """Per channel: the network model's time for one chunk (ns), hop after hop."""
    exact_hops: list[tuple[float, ...]]
    """Per channel: each hop's time in epochs, not rounded."""


def epoch_ns(channels: Channels) -> float:
    """The epoch (ns): a whole fraction ``h / m`` (``m`` = 1 .. :data:`EPOCH_SPLITS`) of one link's
    one-chunk hop ``h``, the one that stretches the hops rounded up to whole epochs the least
    (their largest ``ceil(hop / epoch) x epoch / hop``), then the longest of those within
    :data:`EPOCH_SLACK` of it (a smaller model). On a homogeneous fabric: the hop itself.

    >>> from chakra_collectives.topology import ring
    >>> from chakra_collectives.synth.channels import build_channels
    >>> epoch_ns(build_channels(ring(4), chunk_bytes=2**20)) == 500 + 2**20 / (50 * 2**30 / 1e9)
    True
    """
    links = np.unique(np.concatenate([channels.direct_link, *[np.asarray(c.links) for c in channels.routed]]))
    hop = np.unique(channels.model.hop_ns(links, channels.chunk_bytes))
    candidates = np.unique(np.concatenate([hop / m for m in range(1, EPOCH_SPLITS + 1)]))
    stretch = np.array([(np.ceil(hop / tau - 1e-9) * tau / hop).max() for tau in candidates])
    good = candidates[stretch <= stretch.min() + EPOCH_SLACK]
    return float(good.max())


EPOCH_SPLITS = 4
"""Most epochs one link's hop is cut into when choosing the epoch."""

EPOCH_SLACK = 0.005
"""Stretch an epoch may add over the least stretching one to be preferred for being longer."""


def channel_hops(channels: Channels) -> ChannelHops:
    """Every channel's hops in whole epochs of :func:`epoch_ns` (rounded up)."""
    epoch = epoch_ns(channels)
    per_link = channels.model.hop_ns(np.arange(channels.model.num_links), channels.chunk_bytes) / epoch
    held = np.ceil(per_link - 1e-9).astype(np.int64)
    src, dst, key, hops = [], [], [], []
    for i, (s, d, link) in enumerate(zip(channels.direct_src.tolist(), channels.direct_dst.tolist(), channels.direct_link.tolist())):
        src.append(s), dst.append(d), key.append(i), hops.append(((link, 0, int(held[link])),))
    for i, routed in enumerate(channels.routed):
        offset, path = 0, []
        for link in routed.links:
            path.append((link, offset, int(held[link])))
            offset += int(held[link])
        src.append(routed.src), dst.append(routed.dst), key.append(-1 - i), hops.append(tuple(path))
    epochs = np.array([sum(h[2] for h in path) for path in hops], dtype=np.int64)
    exact_hops = [tuple(float(per_link[h[0]]) for h in path) for path in hops]
    exact = np.array([sum(path) for path in exact_hops]) * epoch
    return ChannelHops(np.array(src), np.array(dst), np.array(key), hops, epochs, epoch, exact, exact_hops)


def _distances(hops: ChannelHops, n: int, *, exact: bool = False) -> np.ndarray:
    """``dist[a, b]``: fewest epochs a chunk needs from NPU ``a`` to NPU ``b`` (Floyd-Warshall;
    ``exact``: the hops' own times, not rounded up to whole epochs)."""
    dist = np.full((n, n), np.inf)
    np.fill_diagonal(dist, 0)
    for s, d, e in zip(hops.src.tolist(), hops.dst.tolist(), (hops.exact_ns / hops.epoch_ns if exact else hops.epochs).tolist()):
        dist[s, d] = min(dist[s, d], e)
    for k in range(n):
        dist = np.minimum(dist, dist[:, k : k + 1] + dist[k : k + 1, :])
    return dist


def lower_epochs(hops: ChannelHops, n: int, chunks_per_npu: int) -> int:
    """A horizon no schedule beats: the farthest chunk's trip, every NPU's in-links'
    capacity for the ``(N - 1) K`` chunks it must receive (each of its in-links carries at most
    one chunk per hop of it; a chunk's last hop ends there), and the links into each island of
    directly linked NPUs for the chunks from outside it (:func:`_enough_entries`: on dgx:2x4 at
    ``K = 4`` 11 epochs, the optimum, where the first two bounds say 8).

    >>> from chakra_collectives.topology import ring
    >>> from chakra_collectives.synth.channels import build_channels
    >>> lower_epochs(channel_hops(build_channels(ring(8), chunk_bytes=64)), 8, 1)   # 7 chunks, 2 in-links
    4
    """
    dist = _distances(hops, n)
    horizon = int(dist.max())
    need = (n - 1) * chunks_per_npu
    for node in range(n):
        last = {(path[-1][0], path[-1][2]) for path, d in zip(hops.hops, hops.dst.tolist()) if d == node}
        t = 1
        while sum((t - (hops.epochs.min() - held)) // held for _, held in last if t >= held) < need:
            t += 1
        horizon = max(horizon, t)
    exact = _distances(hops, n, exact=True)
    for group in _islands(hops, n):
        while not _enough_entries(hops, exact, group, chunks_per_npu * (n - len(group)), horizon):
            horizon += 1
    return horizon


def _islands(hops: ChannelHops, n: int) -> list[np.ndarray]:
    """NPUs joined by direct channels (a DGX server's GPUs), each group but the whole fabric."""
    parent = np.arange(n)

    def find(v: int) -> int:
        while parent[v] != v:
            v = parent[v] = parent[parent[v]]
        return int(v)

    for s, d in zip(hops.src[hops.key >= 0].tolist(), hops.dst[hops.key >= 0].tolist()):
        parent[find(s)] = find(d)
    roots = np.array([find(v) for v in range(n)])
    return [np.flatnonzero(roots == r) for r in np.unique(roots)] if len(np.unique(roots)) > 1 else []


def _enough_entries(hops: ChannelHops, dist: np.ndarray, group: np.ndarray, chunks: int, horizon: int) -> bool:
    """Whether the ``chunks`` owned outside ``group`` can all enter it in time for ``horizon``
    (``dist``: :func:`_distances` of the hops' own times: the count holds for schedules in
    real time, not only over the rounded epochs).

    Every such chunk must enter the group over a link into it (the last hop of a channel from
    outside), which holds a message for its hop time, and can start no sooner than the hops
    before it in the channel. An entry at NPU ``v`` ending by ``horizon - r_v`` (``r_v``: epochs from ``v``
    to the farthest NPU of the group) can serve the whole group; a later one only NPUs nearer
    ``v`` than ``r_v``, so a chunk without an early entry needs at least ``c`` late ones (the
    group's size over the largest such ball). Infeasible when early + late / c < chunks (dgx:2x4,
    K = 4: 16 chunks, 4 NIC downlinks of 2 epochs from epoch 2, NVLink 1 epoch: 12 early and 4
    late entries by epoch 10, c = 4: 10 epochs infeasible).

    >>> from chakra_collectives.topology import load_topology
    >>> from chakra_collectives.synth.channels import build_channels
    >>> hops = channel_hops(build_channels(load_topology("dgx:2x4"), chunk_bytes=2**25))
    >>> lower_epochs(hops, 8, 4)
    11
    """
    inside = np.zeros(len(dist), dtype=bool)
    inside[group] = True
    start: dict[int, float] = {}  # entering link -> earliest start of a message on it
    held: dict[int, float] = {}
    head: dict[int, int] = {}
    for path, times, s, d in zip(hops.hops, hops.exact_hops, hops.src.tolist(), hops.dst.tolist()):
        if not inside[s] and inside[d]:
            link, offset = path[-1][0], sum(times[:-1])
            start[link] = min(start.get(link, offset), offset)
            held[link], head[link] = times[-1], d
    within = dist[np.ix_(group, group)]
    reach = dict(zip(group.tolist(), within.max(axis=1).tolist()))
    ball = max(int((row < r - 1e-9).sum()) for row, r in zip(within, reach.values()))  # NPUs nearer than the farthest
    slots = lambda link, until: max(0, int((until - start[link]) / held[link] + 1e-9))
    early = sum(slots(link, horizon - reach[head[link]]) for link in start)
    late = sum(slots(link, horizon) for link in start) - early
    if ball == 0:
        return early >= chunks
    return early + late / -(-len(group) // ball) >= chunks


@dataclass(frozen=True)
class ModelSize:
    variables: int
    constraints: int

    def __str__(self) -> str:
        return f"{self.variables:,} variables, {self.constraints:,} constraints"


@dataclass
class _Model:
    """The MILP of one horizon: the send variables' (chunk, channel, epoch) and the matrices."""

    chunk: np.ndarray
    channel: np.ndarray
    start: np.ndarray
    size: ModelSize
    cost: np.ndarray | None = None
    rows: "LinearConstraint | None" = None
    integrality: np.ndarray | None = None


def build_model(hops: ChannelHops, n: int, chunks_per_npu: int, horizon: int, *, matrices: bool = True) -> _Model:
    """The MILP of ``horizon`` epochs (only its size when ``matrices`` is False)."""
    from scipy.optimize import LinearConstraint  # scipy.optimize takes a second to import: only when solving
    from scipy.sparse import coo_matrix

    k = chunks_per_npu
    owner = np.repeat(np.arange(n), k)
    num_chunks = n * k
    dist = _distances(hops, n)
    # a send variable per (chunk, channel, epoch) that can matter: the chunk can be at the source
    # by then, the destination does not own it, and it arrives by the horizon
    chunk_ids, channel_ids, starts = [], [], []
    for ch in range(len(hops.src)):
        s, d, e = int(hops.src[ch]), int(hops.dst[ch]), int(hops.epochs[ch])
        chunks = np.flatnonzero(owner != d)
        earliest = dist[owner[chunks], s]
        for c, first in zip(chunks.tolist(), earliest.tolist()):
            if first + e <= horizon:
                t = np.arange(int(first), horizon - e + 1)
                chunk_ids.append(np.full(len(t), c)), channel_ids.append(np.full(len(t), ch)), starts.append(t)
    chunk = np.concatenate(chunk_ids) if chunk_ids else np.zeros(0, np.int64)
    channel = np.concatenate(channel_ids) if channel_ids else np.zeros(0, np.int64)
    start = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    nx = len(chunk)
    src, dst = hops.src[channel], hops.dst[channel]
    arrive = start + hops.epochs[channel]
    # held counters h[c, v, t] for non-owners, t = 0 .. horizon: h[c,v,t] = arrivals by t
    relayed = owner[chunk] != src  # sends that need the chunk to have arrived
    num_held = num_chunks * n * (horizon + 1)
    num_vars = nx + num_held
    occupancy = sum(len(hops.hops[ch]) for ch in channel.tolist()) if nx else 0
    link_rows = len({(l) for path in hops.hops for l, _, _ in path}) * horizon
    num_rows = num_chunks * (n - 1) + num_held + int(relayed.sum()) + link_rows
    size = ModelSize(num_vars, num_rows)
    model = _Model(chunk, channel, start, size)
    if not matrices:
        return model

    def held(c, v, t):
        return nx + (c * n + v) * (horizon + 1) + t

    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0
    # 1. every non-owner receives every chunk exactly once
    delivery_row = {(c, v): i for i, (c, v) in enumerate((c, v) for c in range(num_chunks) for v in range(n) if v != owner[c])}
    idx = np.array([delivery_row[(c, v)] for c, v in zip(chunk.tolist(), dst.tolist())], dtype=np.int64)
    rows.append(idx), cols.append(np.arange(nx)), vals.append(np.ones(nx))
    lo.append(np.ones(len(delivery_row))), hi.append(np.ones(len(delivery_row)))
    r += len(delivery_row)
    # 2. held counters: h[c,v,t] - h[c,v,t-1] - arrivals at t = 0 (h[c,v,0] = 0, counted too)
    cvt = np.arange(num_held)
    t_of = cvt % (horizon + 1)
    rows.append(r + cvt), cols.append(nx + cvt), vals.append(np.ones(num_held))
    later = cvt[t_of > 0]
    rows.append(r + later), cols.append(nx + later - 1), vals.append(-np.ones(len(later)))
    rows.append(r + held(chunk, dst, arrive) - nx), cols.append(np.arange(nx)), vals.append(-np.ones(nx))
    lo.append(np.zeros(num_held)), hi.append(np.zeros(num_held))
    r += num_held
    # 3. store-and-forward: a relayed send needs its chunk held at its start
    sends = np.flatnonzero(relayed)
    rows.append(r + np.arange(len(sends))), cols.append(sends), vals.append(np.ones(len(sends)))
    rows.append(r + np.arange(len(sends))), cols.append(held(chunk[sends], src[sends], start[sends])), vals.append(-np.ones(len(sends)))
    lo.append(np.full(len(sends), -np.inf)), hi.append(np.zeros(len(sends)))
    r += len(sends)
    # 4. one message per link per epoch
    links = sorted({l for path in hops.hops for l, _, _ in path})
    link_row = {l: i for i, l in enumerate(links)}
    occ_rows, occ_cols = [], []
    for j in range(max(len(p) for p in hops.hops)):
        has = np.array([len(hops.hops[ch]) > j for ch in range(len(hops.hops))])
        for ch in np.flatnonzero(has).tolist():
            link, offset, epochs = hops.hops[ch][j]
            mine = np.flatnonzero(channel == ch)
            for e in range(epochs):
                occ_rows.append(link_row[link] * horizon + start[mine] + offset + e)
                occ_cols.append(mine)
    if occ_rows:
        rows.append(r + np.concatenate(occ_rows)), cols.append(np.concatenate(occ_cols)), vals.append(np.ones(sum(len(x) for x in occ_cols)))
    lo.append(np.full(link_rows, -np.inf)), hi.append(np.ones(link_rows))
    r += link_rows
    matrix = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, num_vars)).tocsr()
    model.rows = LinearConstraint(matrix, np.concatenate(lo), np.concatenate(hi))
    model.cost = np.concatenate([start.astype(np.float64), np.zeros(num_held)])
    model.integrality = np.concatenate([np.ones(nx), np.zeros(num_held)])
    model.size = ModelSize(num_vars, r)
    del occupancy
    return model


@dataclass(frozen=True)
class MilpSolution:
    """The best All-Gather schedule found: one row per message (one chunk each), and what was proved."""

    chunk: np.ndarray
    channel: np.ndarray
    """Index into the :class:`ChannelHops` (not the schedule's channel key)."""
    start: np.ndarray
    """Start epoch of each message."""
    hops: ChannelHops
    epochs: int
    """The schedule's horizon: every chunk has arrived by the end of this many epochs."""
    lower_epochs: int
    """No schedule (over this discretization) finishes in fewer epochs: ``epochs`` is optimal
    when they are equal."""
    size: ModelSize
    """The size of the last model solved."""
    solve_s: float
    note: str = ""
    """Why the schedule is not proved optimal (empty when it is)."""

    @property
    def optimal(self) -> bool:
        return self.epochs == self.lower_epochs

    @property
    def gap(self) -> float:
        """``(found - proved lower bound) / found`` over the discretization (0: optimal)."""
        return (self.epochs - self.lower_epochs) / self.epochs

    @property
    def epoch_ns(self) -> float:
        return self.hops.epoch_ns

    @property
    def time_ns(self) -> float:
        """The schedule's time over the discretization (``epochs x epoch``)."""
        return self.epochs * self.hops.epoch_ns


def check_size(hops: ChannelHops, n: int, chunks_per_npu: int, where: str) -> int:
    """The lower horizon, after refusing (:class:`LimitError`) a model above :data:`MAX_VARIABLES`."""
    low = lower_epochs(hops, n, chunks_per_npu)
    size = build_model(hops, n, chunks_per_npu, low, matrices=False).size
    if size.variables > MAX_VARIABLES:
        fitting = [k for k in range(chunks_per_npu - 1, 0, -1) if build_model(hops, n, k, lower_epochs(hops, n, k), matrices=False).size.variables <= MAX_VARIABLES]
        hint = f"at most {fitting[0]} chunk(s) per NPU fit on it" if fitting else "no chunk count fits on it: try a fabric of at most 16 NPUs"
        raise LimitError(f"{where}: the MILP has {size} at its shortest horizon, above the limit of {MAX_VARIABLES:,} variables ({hint})")
    return low


class NoScheduleFound(LimitError):
    """The time limit passed before the MILP found any schedule; ``lower_epochs`` was proved."""

    def __init__(self, message: str, lower_epochs: int) -> None:
        super().__init__(message)
        self.lower_epochs = lower_epochs


def solve_all_gather(channels: Channels, chunks_per_npu: int, *, time_limit_s: float = DEFAULT_TIME_LIMIT_S, where: str = "milp") -> MilpSolution:
    """The fastest All-Gather of one-chunk messages on ``channels`` (see the module docstring).

    Raises :class:`~chakra_collectives.errors.LimitError` before solving when the model is above
    :data:`MAX_VARIABLES`; :class:`NoScheduleFound` when the time limit passes before any
    schedule is found.
    """
    from scipy.optimize import Bounds, milp

    n = channels.num_npus
    hops = channel_hops(channels)
    horizon = check_size(hops, n, chunks_per_npu, where)
    proved = horizon  # every horizon below this one is infeasible
    started = time.perf_counter()
    note = ""
    while True:
        left = time_limit_s - (time.perf_counter() - started)
        if left <= 0:
            raise NoScheduleFound(f"{where}: no schedule found within the time limit of {time_limit_s:g} s (none in fewer than {proved} epochs)", proved)
        model = build_model(hops, n, chunks_per_npu, horizon)
        if model.size.variables > MAX_VARIABLES:
            raise LimitError(f"{where}: the MILP of {horizon} epochs has {model.size}, above the limit of {MAX_VARIABLES:,} variables")
        left = max(time_limit_s - (time.perf_counter() - started), 0.01)  # building the model counts too
        result = milp(model.cost, constraints=model.rows, integrality=model.integrality, bounds=Bounds(0, 1), options={"time_limit": left, "mip_rel_gap": 1.0})
        if result.x is not None and result.status in (0, 1):
            chosen = np.flatnonzero(result.x[: len(model.chunk)] > 0.5)
            if result.status == 1 and horizon > proved:
                note = f"time limit of {time_limit_s:g} s reached: {horizon} epochs found, none in fewer than {proved} proved"
            return MilpSolution(
                chunk=model.chunk[chosen], channel=model.channel[chosen], start=model.start[chosen], hops=hops,
                epochs=horizon, lower_epochs=proved, size=model.size, solve_s=time.perf_counter() - started, note=note,
            )
        if result.status == 2:  # infeasible: proved
            proved = horizon + 1
        horizon += 1


__all__ = ["NoScheduleFound", "ChannelHops", "DEFAULT_TIME_LIMIT_S", "MAX_VARIABLES", "MilpSolution", "ModelSize", "build_model", "channel_hops", "check_size", "epoch_ns", "lower_epochs", "solve_all_gather"]
