"""``gridpipe``: a route-planned, pipelined All-Gather for 2-D meshes and tori.

TACOS's greedy decides every hop anew, so what reaches a link between two of its messages is
a scatter of chunk ids, and a message (one run of consecutive chunks) stays short: on large
meshes and tori the links pay a latency every few chunks. This producer fixes every chunk's
route in advance so that what a link forwards comes in long runs of consecutive ids.

NPUs are numbered row by row (NPU ``r * C + c`` in row ``r``, column ``c``, as the grid builders
number them), so a row's chunks -- its *row block* -- are consecutive ids. Every NPU ``(r, c)``
receives:

* the chunks of its own row along the row (*row phase*): from the left those whose owner is to
  its left (on a torus: no more than half the row away), from the right the others;
* the row block of a row ``r'`` with ``r' + c`` even down its column (*column phase*): from
  below when ``r'`` is below (on a torus: no more than half the column away), else from above;
* the row block of any other row from its neighbours in its row, which have it from their own
  columns (*relay*): half of the block from each when both can (one hop).

So each column carries half of the row blocks and each row link relays a quarter. The row links
also carry the row phase, half a block more; the *balanced* plan (:class:`PlanVariant`) moves
that half to the column links (an NPU whose own row goes down its column takes a neighbouring
row's block one hop down the column too), so that on tori whose sides are multiples of 4 every
link carries ``ceil((N - 1) K / 4)`` chunks, its bound's share, and on meshes the links into the
corners ``ceil((N - 1) K / 2)``. Messages form greedily on each link, as in TACOS, under
the network model's hop cost: when a link is free it sends a run of consecutive chunks it must
forward -- its destination's own row first, then the row block that has come the fewest hops
down the column, then relayed blocks -- up to a length cap (the serialisation at most
``latency_ratio`` times the link's latency, and at most half a row block: whole-block messages
stall the column pipelines, 0.47 of the bound against 0.72 on a 1,024-NPU torus at 16 KiB
chunks). The plans of :data:`VARIANTS` are tried and the fastest kept. Reduce-Scatter is that
All-Gather run backwards in time with reductions (the reversed grid is the same grid), All-Reduce is
Reduce-Scatter then All-Gather; the lowering is TACOS's
(:mod:`~chakra_collectives.synth.lowering`), so the network model replays the schedule exactly.

>>> from chakra_collectives.topology import torus2d
>>> from chakra_collectives.verify import verify_algorithm
>>> made = _make(torus2d(4, 4), Collective.ALL_GATHER, 16, SynthesisOptions(size_bytes=2**20))
>>> made.algorithm.num_ranks, verify_algorithm(made.algorithm).ok
(16, True)
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from chakra_collectives import progress
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.processes import PARALLEL_PAIRS, ForkedJob, can_fork
from chakra_collectives.synth.channels import Channels, build_channels
from chakra_collectives.synth.lowering import all_gather_algorithm, all_reduce_algorithm, reduce_scatter_algorithm
from chakra_collectives.synth.registry import SynthesisOptions, Synthesized, Synthesizer, register
from chakra_collectives.synth.schedule import Schedule, from_messages
from chakra_collectives.topology.core import Topology

SUPPORTED = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)



@dataclass(frozen=True)
class PlanVariant:
    """How one plan routes and merges."""

    latency_ratio: float = 40.0
    """A message may grow until its serialisation is this many times the latency it pays."""
    balance: bool = True
    """An NPU whose own row travels down its column takes a neighbouring row's block from the
    column too (one hop), so its column links, which carry half a block less than its row
    links (they also carry the row phase), take that half: every link carries its share."""


VARIANTS = (PlanVariant(), PlanVariant(balance=False))
"""The plans tried (the fastest kept): one balances the links' loads, the other leaves the row
links half a block more and the columns' pipelines shorter. All-Gather 64 MiB, one chunk per
NPU, balanced / not: torus2d:32x32 0.845 / 0.852, mesh2d:32x32 0.893 / 0.889, torus2d:64x64
0.842 / 0.857; shorter messages (latency ratio 10) lost there (torus2d:64x64 0.819)."""


@dataclass(frozen=True)
class Grid:
    """A 2-D mesh or torus: ``cols`` NPUs per row (consecutive ids), ``rows`` rows."""

    cols: int
    rows: int
    wrap: bool

    @property
    def wrap_cols(self) -> bool:
        """Rows close into rings (the builders add no wrap-around link to a dimension of 2)."""
        return self.wrap and self.cols > 2

    @property
    def wrap_rows(self) -> bool:
        return self.wrap and self.rows > 2

    def links(self) -> np.ndarray:
        """Every directed link as ``src * N + dst``, sorted.

        >>> len(Grid(3, 2, wrap=False).links()), len(Grid(4, 4, wrap=True).links())  # 7 and 32 pairs, both ways
        (14, 64)
        """
        n = self.cols * self.rows
        node = np.arange(n)
        r, c = node // self.cols, node % self.cols
        pairs = []
        right = (c + 1 < self.cols) | self.wrap_cols
        pairs.append((node[right], (r * self.cols + (c + 1) % self.cols)[right]))
        up = (r + 1 < self.rows) | self.wrap_rows
        pairs.append((node[up], (((r + 1) % self.rows) * self.cols + c)[up]))
        src = np.concatenate([p[0] for p in pairs] + [p[1] for p in pairs])
        dst = np.concatenate([p[1] for p in pairs] + [p[0] for p in pairs])
        return np.unique(src.astype(np.int64) * n + dst)


def grid_of(topology: Topology) -> Grid | None:
    """The 2-D mesh or torus ``topology``'s links form (any bandwidths), or ``None``.

    >>> from chakra_collectives.topology import mesh2d, torus2d, ring
    >>> grid_of(mesh2d(4, 3)), grid_of(torus2d(8, 8)), grid_of(ring(8))
    (Grid(cols=4, rows=3, wrap=False), Grid(cols=8, rows=8, wrap=True), None)
    """
    n = topology.num_npus
    if topology.num_switches or n < 4 or not topology.links:
        return None
    src = np.array([link.src for link in topology.links], dtype=np.int64)
    dst = np.array([link.dst for link in topology.links], dtype=np.int64)
    keys = np.sort(src * n + dst)
    if len(np.unique(keys)) != len(keys):
        return None
    candidates = sorted({int(d) + e for d in dst[src == 0] if d > 1 for e in (0, 1)})
    for cols in candidates:
        if n % cols or not 2 <= cols <= n // 2:
            continue
        for wrap in (False, True):
            grid = Grid(cols, n // cols, wrap)
            expected = grid.links()
            if len(expected) == len(keys) and np.array_equal(expected, keys):
                return grid
    return None


class _Planner:
    """The event-driven run of the planned routes: messages formed greedily on every link."""

    def __init__(self, grid: Grid, channels: Channels, k: int, variant: PlanVariant) -> None:
        self.grid, self.k, self.balance = grid, k, variant.balance
        latency_ratio = variant.latency_ratio
        cols, rows = grid.cols, grid.rows
        self.width = cols * k  # chunks in a row block
        links = channels.direct_link
        self.src = channels.direct_src.astype(np.int64).tolist()
        self.dst = channels.direct_dst.astype(np.int64).tolist()
        self.latency = channels.link_latency[links].astype(float).tolist()
        self.rate = channels.link_rate[links].astype(float).tolist()
        self.chunk_bytes = channels.chunk_bytes
        serialization = channels.chunk_bytes / channels.link_rate[links]
        cap = np.floor(latency_ratio * channels.link_latency[links] / serialization)
        self.cap = np.clip(cap, 1, max(self.width // 2, 1)).astype(np.int64).tolist()
        n = cols * rows
        self.out_links: list[list[int]] = [[] for _ in range(n)]
        for index, s in enumerate(self.src):
            self.out_links[s].append(index)
        # per link: how its destination sees its source (left/right neighbour in the row, below/above)
        self.kind: list[int] = []
        self.row_mask: list[int] = []  # row-phase chunks of the destination's own row it carries
        for s, d in zip(self.src, self.dst):
            rs, cs, rd, cd = s // cols, s % cols, d // cols, d % cols
            if rs == rd:
                side = _LEFT if cs == (cd - 1) % cols and (cd > 0 or grid.wrap_cols) else _RIGHT
                self.kind.append(side)
                mask = 0
                for c in range(cols):
                    if c != cd and self._from_left(c, cd) == (side == _LEFT):
                        mask |= ((1 << k) - 1) << (c * k)
                self.row_mask.append(mask)
            else:
                self.kind.append(_BELOW if rs == (rd - 1) % rows and (rd > 0 or grid.wrap_rows) else _ABOVE)
                self.row_mask.append(0)

    def _from_left(self, c_src: int, c_dst: int) -> bool:
        if not self.grid.wrap_cols:
            return c_src < c_dst
        return 1 <= (c_dst - c_src) % self.grid.cols <= self.grid.cols // 2

    def _from_below(self, r_src: int, r_dst: int) -> bool:
        if not self.grid.wrap_rows:
            return r_src < r_dst
        return 1 <= (r_dst - r_src) % self.grid.rows <= self.grid.rows // 2

    def _in_column(self, row: int, col: int) -> bool:
        """Whether ``row``'s block travels down column ``col``."""
        return self.grid.cols == 1 or (row + col) % 2 == 0

    def _sources(self, node: int) -> list[tuple[int, int, int]]:
        """``(side, row, positions)``: which neighbour brings ``node`` each other row's block
        (``positions``: the block's chunks it brings, a bitmask; ``-1``: all of them)."""
        grid = self.grid
        cols, rows = grid.cols, grid.rows
        r, c = node // cols, node % cols
        has_left, has_right = c > 0 or grid.wrap_cols, c + 1 < cols or grid.wrap_cols
        # the neighbouring row a column link with room brings (balance): on a mesh, from the
        # side with fewer rows (its column link carries fewer blocks)
        if grid.wrap_rows:
            extra, extra_side = (r + 1) % rows, _ABOVE
        elif r + 1 < rows and (r == 0 or r >= rows // 2):
            extra, extra_side = r + 1, _ABOVE
        else:
            extra, extra_side = r - 1, _BELOW
        taken, relayed = [], []
        for row in range(rows):
            if row == r:
                continue
            if self._in_column(row, c):
                taken.append((_BELOW if self._from_below(row, r) else _ABOVE, row, -1))
            elif self.balance and row == extra and self._in_column(r, c):
                taken.append((extra_side, row, -1))  # one hop down the column: the column links have room for it
            else:
                left = has_left and self._in_column(row, (c - 1) % cols)
                right = has_right and self._in_column(row, (c + 1) % cols)
                if left and right:
                    relayed.append(row)
                else:
                    taken.append((_LEFT if left else _RIGHT, row, -1))
        half = self.width // 2
        for row in relayed:  # half of the block from each side
            taken.append((_LEFT, row, (1 << half) - 1))
            taken.append((_RIGHT, row, ((1 << self.width) - 1) ^ ((1 << half) - 1)))
        return taken

    def _carried(self) -> tuple[list[int], list[dict[int, int]]]:
        """Per link: the rows whose whole block it forwards (bit ``r``: row ``r``) and the rows it
        forwards part of (row -> positions)."""
        whole = [0] * len(self.src)
        part: list[dict[int, int]] = [{} for _ in self.src]
        into: dict[tuple[int, int], int] = {(d, self.kind[link]): link for link, d in enumerate(self.dst)}
        for node in range(self.grid.cols * self.grid.rows):
            for side, row, positions in self._sources(node):
                link = into[node, side]
                if positions < 0:
                    whole[link] |= 1 << row
                else:
                    part[link][row] = positions
        return whole, part

    def run(self) -> Schedule:
        grid, k, width = self.grid, self.k, self.width
        cols = grid.cols
        n = cols * grid.rows
        num_links = len(self.src)
        pending: list[dict[int, int]] = [{} for _ in range(num_links)]
        queue: list[list] = [[] for _ in range(num_links)]  # heaps of (rank, time, seq, row, bits)
        busy = [False] * num_links
        events: list[tuple] = []  # (end, seq, link, row, bits)
        rec: list[tuple] = []  # (chunk, count, src, dst, start, end, channel)
        seq = 0
        total = n * (n - 1) * k
        delivered = 0
        own = (1 << k) - 1

        carried_rows, carried_part = self._carried()
        row_of_dst = [d // cols for d in self.dst]
        row_mask = self.row_mask
        rows = grid.rows

        def rank(link: int, row: int) -> int:
            """Which pending chunks a link sends first: its destination's own row, then the row
            blocks that came the fewest hops down the column, then relayed blocks."""
            rd = row_of_dst[link]
            if row == rd:
                return -1
            if self.kind[link] == _BELOW:
                return (rd - row) % rows
            if self.kind[link] == _ABOVE:
                return (row - rd) % rows
            return rows

        def offer(node: int, row: int, bits: int, t: float, touched: list[int]) -> None:
            nonlocal seq
            for link in self.out_links[node]:
                if row == row_of_dst[link]:
                    carried = bits & row_mask[link]
                elif (carried_rows[link] >> row) & 1:
                    carried = bits
                elif row in carried_part[link]:
                    carried = bits & carried_part[link][row]
                else:
                    carried = 0
                if carried:
                    held = pending[link]
                    held[row] = held.get(row, 0) | carried
                    heapq.heappush(queue[link], (rank(link, row), t, seq, row, carried))
                    seq += 1
                    touched.append(link)

        def start(link: int, t: float) -> None:
            nonlocal seq
            held, waiting = pending[link], queue[link]
            while True:
                _, _, _, row, bits = waiting[0]
                left = bits & held.get(row, 0)
                if left:
                    break
                heapq.heappop(waiting)
            row_bits = held[row]
            p = (left & -left).bit_length() - 1
            above = row_bits >> p
            end = p + ((~above) & (above + 1)).bit_length() - 1
            below = ~row_bits & ((1 << p) - 1)
            first = below.bit_length()
            cap = self.cap[link]
            if end - first > cap:
                first = max(first, min(p, end - cap))
                end = first + cap
            sent = ((1 << (end - first)) - 1) << first
            row_bits &= ~sent
            if row_bits:
                held[row] = row_bits
            else:
                del held[row]
            count = end - first
            finish = t + (self.latency[link] + (count * self.chunk_bytes) / self.rate[link])
            busy[link] = True
            rec.append((row * width + first, count, self.src[link], self.dst[link], t, finish, link))
            heapq.heappush(events, (finish, seq, link, row, sent))
            seq += 1

        with progress.task("plan grid routes", total=total, unit="(NPU, chunk) pairs") as done:
            touched: list[int] = []
            for node in range(n):
                offer(node, node // cols, own << ((node % cols) * k), 0.0, touched)
            t = 0.0
            while True:
                for link in touched:
                    if not busy[link] and pending[link]:
                        start(link, t)
                if not events:
                    break
                t = events[0][0]
                touched = []
                while events and events[0][0] == t:
                    _, _, link, row, bits = heapq.heappop(events)
                    busy[link] = False
                    touched.append(link)
                    offer(self.dst[link], row, bits, t, touched)
                    delivered += bits.bit_count()
                done.update(delivered)
        if delivered != total:
            raise RuntimeError(f"grid routes delivered {delivered} of {total} (NPU, chunk) pairs")
        return _schedule(rec, n, k, num_links)


_LEFT, _RIGHT, _BELOW, _ABOVE = 0, 1, 2, 3


def _schedule(rec: list[tuple], n: int, k: int, num_links: int) -> Schedule:
    """The messages as a :class:`Schedule`: in start order, with tags and program positions."""
    columns = np.array(rec, dtype=np.float64).T if rec else np.zeros((7, 0))
    chunk, count, src, dst, start, end, channel = columns
    return from_messages(n, k, num_links, chunk, count, src, dst, start, end, channel)


def plan_all_gather(grid: Grid, channels: Channels, k: int, variant: PlanVariant = PlanVariant()) -> Schedule:
    """The All-Gather schedule of the planned routes on ``grid`` (module docstring).

    >>> from chakra_collectives.topology import mesh2d
    >>> topo = mesh2d(4, 4)
    >>> schedule = plan_all_gather(grid_of(topo), build_channels(topo, chunk_bytes=2**16), 1)
    >>> int(schedule.count.sum()) == 16 * 15   # every NPU gets every other NPU's chunk once
    True
    """
    return _Planner(grid, channels, k, variant).run()


def _best_all_gather(grid: Grid, channels: Channels, k: int) -> Schedule:
    """The fastest plan of :data:`VARIANTS` (ties: the earlier)."""
    jobs = [partial(plan_all_gather, grid, channels, k, variant) for variant in VARIANTS]
    parallel = channels.num_npus**2 * k >= PARALLEL_PAIRS and can_fork()
    if parallel:  # the first plan here, the others beside it in forked processes
        others = [ForkedJob(job) for job in jobs[1:]]
        schedules = [jobs[0](), *(other.result() for other in others)]
    else:
        schedules = [job() for job in jobs]
    return min(schedules, key=lambda s: s.time_ns)


def _make(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Synthesized:
    """The registry's factory: the planned All-Gather (and its time reversal) on a 2-D grid."""
    if collective not in SUPPORTED:
        raise InputError(f"gridpipe synthesizes {', '.join(c.value for c in SUPPORTED)}, not {collective.value}")
    if num_ranks != topology.num_npus:
        raise InputError(f"gridpipe synthesizes for the whole topology ({topology.num_npus} NPUs); this collective runs over {num_ranks} ranks")
    grid = grid_of(topology)
    if grid is None:
        raise InputError(f"gridpipe needs a 2-D mesh or torus without switches; {topology.name} is not one")
    n, k = topology.num_npus, options.chunks_per_npu
    channels = build_channels(topology, chunk_bytes=-(-options.size_bytes // (n * k)))
    gather = _best_all_gather(grid, channels, k)
    provenance = {"algorithm": "gridpipe", "topology": topology.name, "chunks_per_npu": str(k)}
    if collective is Collective.ALL_GATHER:
        algorithm = all_gather_algorithm(gather, size_bytes=options.size_bytes, name="gridpipe", provenance=provenance)
        return Synthesized(algorithm, schedule_ns=gather.time_ns)
    mirror = channels.mirror()
    if mirror is not None:  # the reversed grid is the same grid: one plan serves both phases
        reverse = replace(gather, channel=mirror[gather.channel])
    else:
        reverse = _best_all_gather(grid, channels.reversed(), k)
    if collective is Collective.REDUCE_SCATTER:
        algorithm = reduce_scatter_algorithm(reverse, size_bytes=options.size_bytes, name="gridpipe", provenance=provenance)
        return Synthesized(algorithm, schedule_ns=reverse.time_ns)
    algorithm = all_reduce_algorithm(reverse, gather, size_bytes=options.size_bytes, name="gridpipe", provenance=provenance)
    return Synthesized(algorithm, schedule_ns=reverse.time_ns + gather.time_ns)


def _fits(topology: Topology) -> bool:
    return grid_of(topology) is not None


register(
    Synthesizer(
        "gridpipe",
        _make,
        SUPPORTED,
        "route-planned pipelined All-Gather for 2-D meshes and tori (row blocks down alternate columns)",
        whole_topology=True,
        groups_refusal="it plans routes for the whole grid",
        candidate=False,
        fits=_fits,
    )
)

__all__ = ["Grid", "PlanVariant", "VARIANTS", "grid_of", "plan_all_gather"]
