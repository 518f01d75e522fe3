"""What producing (and predicting) an algorithm costs in memory, known before it is produced.

:func:`estimate` gives a :class:`~chakra_collectives.resources.Estimate` for one registered
producer, collective, rank count and chunking; :func:`~chakra_collectives.synth.synthesize`
refuses a producer whose estimate does not fit the memory limit (``best`` skips it and says
so), and the replayer does the same for the algorithms it builds. A producer states its own
model as :attr:`~chakra_collectives.synth.registry.Synthesizer.footprint`; the default is
:func:`pair_footprint`.

Two models, upper envelopes of measured peaks (``bench/bench_estimates.py`` measures them):

* :func:`pair_footprint` (TACOS, BFB, any producer that states none): the work is the
  ``(NPU, chunk)`` pairs each phase serves, ``N * N * K`` per phase, at :data:`PER_PAIR`
  bytes each (TACOS: about 90 bytes per pair at 1,024 NPUs, matching and prediction included).
* :func:`tacos_footprint` (TACOS's All-Gather, Reduce-Scatter and All-Reduce): the largest of
  its stages -- the matching (the matcher's bitsets and its messages' columns), the lowering
  (the operation table, the schedules and the per-``(NPU, chunk)`` rows of a range of NPUs it
  works on; asked ``in_parts``, without switches, the schedules, their messages by NPU and one
  part of :data:`~chakra_collectives.ir.parts.PART_OPS` operations instead
  of the table) and the
  prediction (the table and the level-by-level timing) -- from the messages it will send
  (:func:`tacos_messages`); the estimate says which stage holds what. An All-Gather planned
  without matching (:func:`planned_messages`: torus trees on a square 2-D torus) has planning
  for its first stage instead (no bitsets), exactly its messages, and ``N (N - 1)`` runs of
  chunks (:func:`further_runs`, as ``--several-runs`` has up to 3 more a message): the table or
  a part lists them (:data:`PER_TABLE_RUN` / :data:`PER_PART_RUN` per run a SEND or RECV
  lists); unlike ``--several-runs``' (:data:`PER_RUN`), the schedule does not hold them but
  works them out as they are lowered. All-Gather of 64 MiB: ``torus2d:64x64`` estimated 0.84
  GiB in parts (``synth -o`` measured 545 MiB RSS), 2.70 GiB lowered whole;
  ``torus2d:128x128`` 2.13 GiB in parts, the plan's peak (measured 2.06 GiB RSS), 40 GiB whole.
* :func:`message_footprint` (the baselines): every message becomes about 2.5 operations of
  :data:`PER_OP` bytes and, when predicted, one task per link it crosses (:data:`PER_HOP`); some
  baselines also keep per-chunk state for every rank (``per_slot`` bytes per ``(rank, chunk)``).

>>> from chakra_collectives.topology import load_topology
>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.registry import SynthesisOptions
>>> e = estimate("direct", load_topology("ring:4096"), Collective.ALL_REDUCE, 4096, SynthesisOptions(size_bytes=2**20))
>>> e.what, e.work
('synthesizing direct all-reduce on ring:4096', '33.5M messages, 34.4G message hops, 16.8M (rank, chunk) slots')
>>> e.nbytes > 2**40          # every message crosses 1,024 links on average: terabytes
True
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from chakra_collectives.ir.grouping import distinct
from chakra_collectives.ir import Collective
from chakra_collectives.ir.parts import PART_OPS
from chakra_collectives.resources import Estimate, count
from chakra_collectives.units import format_size
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.synth.lowering import REDUCE_SCATTER_PAIRS
from chakra_collectives.synth.schedule import DELIVERY_BYTES, RUN_BLOCK_CHUNKS
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.distances import hop_distances

PER_PAIR = 100
"""Bytes per ``(NPU, chunk)`` pair and phase of a pair-model producer, up to :data:`MERGING_FROM`
pairs (TACOS All-Gather measured 90-121 above start-up at 1,024-4,096 NPUs)."""
PAIR_BASE = 64 * 2**20
"""Fixed bytes of a pair-model producer (its tables, imports, the prediction's set-up)."""
MERGING_FROM = 2**24
"""Pairs per phase beyond which the bytes per pair fall as ``(pairs / MERGING_FROM) ** MERGING_EXPONENT``:
larger phases merge more chunks into each message (TACOS All-Gather measured 55 bytes per pair
at 4,096 NPUs and 29 at 16,384 since the lowering works block by block; this envelope gives
100 and 44)."""
MERGING_EXPONENT = -0.3
PER_OP = 600
"""Bytes per operation of a baseline, built and predicted (measured 450-490 at 256-1,024 ranks)."""
PER_HOP = 150
"""Bytes per link a predicted message crosses (measured 80-110)."""
SAMPLES = 8
"""NPUs whose distances to all others estimate a topology's mean route length."""

MERGE_SHARE = 0.8
"""A TACOS message carries at least this share of ``sqrt(cap)`` chunks, ``cap`` the median NPU
link's message cap at latency ratio 40 (:func:`~chakra_collectives.synth.matcher.message_caps`):
All-Gather of 64 MiB measured 4.3, 7.2 and 13-18 chunks per message at 1,024, 4,096 and 16,384
NPUs against ``sqrt(cap)`` = 3.9, 7.7 and 15.6."""
MERGE_RATIO = 40.0
"""The latency ratio of TACOS's large-problem merge variants (the cap :data:`MERGE_SHARE` scales)."""
PER_MESSAGE = 56
"""Bytes of a TACOS schedule per message (ten 4- and 8-byte columns, anchors)."""
PER_TABLE_OP = 64
"""Bytes of the operation table per operation (measured 58 at 4,096 NPUs)."""
PER_PART_OP = 230
"""Bytes per operation of one part lowered and encoded as it is written (``in_parts``): its table
and the lowering's and encoder's temporaries (measured at 16,384 NPUs: 1,863 MiB peak for a
schedule of 17.3M messages, about 924 MiB, and parts of 2^22 operations)."""
PER_PREDICTED_OP = 100
"""Bytes per operation the prediction holds besides the table (task graph, messages, the
level-by-level timing; measured 78 at 1,024 NPUs with 32k-edge blocks; 804 MiB peak in all for
4.68M operations at 4,096)."""
PER_LAYOUT_PAIR = 100
"""Bytes per ``(NPU, chunk)`` pair of the Reduce-Scatter's layout of one range of NPUs
(:data:`~chakra_collectives.synth.lowering.REDUCE_SCATTER_PAIRS` pairs at once: its entries,
their writers' order, the range's delivery, first- and last-writer rows). The All-Gather's
delivery index (4 bytes a pair) is laid out a range of NPUs at a time too: at most
:data:`~chakra_collectives.synth.schedule.DELIVERY_BYTES`."""
PER_INDEXED_MESSAGE = 8
"""Bytes per message of the messages sorted by sending and by receiving NPU that the parts
share (``in_parts``: two ``int32`` orders)."""
PER_CHANNEL_COLUMN = 4
"""Bytes per message of the channel column a mirrored Reduce-Scatter has of its own (its other
columns are the All-Gather's)."""
PER_BLOCK_CHUNK = 48
"""Bytes per chunk of the lowering's block of runs (:data:`~chakra_collectives.synth.schedule.RUN_BLOCK_CHUNKS`
expanded at once; measured ~30 MiB a block)."""
PER_RUN = 8
"""Bytes per further run of chunks a message carries (its first chunk and length, ``int32``;
:attr:`~chakra_collectives.synth.schedule.Schedule.more_chunk`): in the schedule, and once more
while the matching puts them in start order (a plan's are worked out as they are lowered)."""
PER_TABLE_RUN = 80
"""Bytes per further run a SEND or RECV of the whole operation table lists: its offset and count,
the lowering's positions and sort of them (measured by tracemalloc 50 at ``torus2d:32x32`` and 67
at ``torus2d:64x64``: 2.37 GiB for 31.2M listed runs, 2.76 GiB RSS in all without ``-o``)."""
PER_PLANNED_MESSAGE = 210
"""Bytes per message of :data:`~chakra_collectives.synth.tacos.TORUS_TREES`' plan besides its
schedule: the columns as built and their copies in start order (``torus2d:64x64``: 240.6 MiB
traced at the plan's peak for 1.04M messages, 243 bytes a message with the schedule's;
``torus2d:128x128``: 2,113 MiB RSS for 8.34M, 266 with the schedule's and the imports). It
holds no runs: :class:`~chakra_collectives.synth.torus_trees.TreeRuns` works them out."""
PER_PART_RUN = 150
"""Bytes per further run a SEND or RECV of one part lists, lowered and encoded as it is written
(``in_parts``; ``torus2d:64x64``: parts of 261k operations and 3.9M listed runs, the write
peaking at 897 MiB RSS, 41 of them imports; ``torus2d:32x32``, one part: 228 MiB)."""
SEVERAL_RUNS = 4
"""Runs a message of ``--several-runs`` carries at most (:data:`~chakra_collectives.synth.tacos.SEVERAL_RUNS_VARIANTS`)."""
OPS_PER_MESSAGE = {Collective.ALL_GATHER: 2.0, Collective.REDUCE_SCATTER: 3.0, Collective.ALL_REDUCE: 5.0}
"""Operations per message pair of phases: SEND and RECV; a Reduce-Scatter also reduces."""

Footprint = Callable[[Topology, Collective, int, SynthesisOptions], tuple[float, str]]
"""``footprint(topology, collective, num_ranks, options) -> (bytes, what they count)``."""

ADVICE = "use fewer NPUs or fewer chunks per NPU (--chunks-per-npu), or another algorithm (--algorithm)"
ADVICE_ONE_CHUNK = "use fewer NPUs or another algorithm (--algorithm)"
"""What to change when even one chunk per NPU is too large."""


def phases(collective: Collective) -> int:
    """All-Reduce is two phases (Reduce-Scatter, then All-Gather); every other collective one."""
    return 2 if collective is Collective.ALL_REDUCE else 1


def estimate(name: str, topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Estimate:
    """The memory producer ``name`` needs for ``collective`` over ``num_ranks`` ranks of ``topology``."""
    footprint = get(name).footprint or pair_footprint
    nbytes, work = footprint(topology, collective, num_ranks, options)
    advice = ADVICE if options.chunks_per_npu > 1 else ADVICE_ONE_CHUNK
    return Estimate(f"synthesizing {name} {collective.value} on {topology.name}", nbytes, work, advice)


def pair_footprint(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> tuple[float, str]:
    """:data:`PAIR_BASE` plus :data:`PER_PAIR` bytes per ``(NPU, chunk)`` pair and phase
    (``N * N * K`` pairs per phase), fewer per pair beyond :data:`MERGING_FROM` pairs.

    >>> from chakra_collectives.topology import load_topology
    >>> nbytes, work = pair_footprint(load_topology("torus2d:128x128"), Collective.ALL_GATHER, 16384, SynthesisOptions(size_bytes=2**26))
    >>> work, round(nbytes / 2**30, 1)      # measured: a 7.3 GiB peak
    ('268M (NPU, chunk) pairs', 10.9)
    """
    per_phase = float(num_ranks) * num_ranks * options.chunks_per_npu
    pairs = per_phase * phases(collective)
    per_pair = PER_PAIR * min(1.0, (per_phase / MERGING_FROM) ** MERGING_EXPONENT)
    return PAIR_BASE + per_pair * pairs, f"{count(pairs)} (NPU, chunk) pairs"


def tacos_messages(topology: Topology, num_ranks: int, options: SynthesisOptions) -> float:
    """Messages of one TACOS phase, at most: ``N * N * K`` pairs over the chunks a message
    carries (:data:`MERGE_SHARE`; one chunk per message when it may not merge: ``--any-size``,
    process groups, which match single chunks over detours).

    >>> from chakra_collectives.topology import load_topology
    >>> messages = tacos_messages(load_topology("mesh2d:64x64"), 4096, SynthesisOptions(size_bytes=2**26))
    >>> round(messages / 1e6, 2)    # 16 KiB chunks, 305 ns each on 500 ns links: a cap of 65, 6.45 chunks per message
    2.6
    >>> messages >= 4_680_000 / 2                   # measured: 4.68M operations, two per message
    True
    """
    pairs = float(num_ranks) * num_ranks * options.chunks_per_npu
    links = topology.link_arrays
    npu_links = (links["src"] < topology.num_npus) & (links["dst"] < topology.num_npus)
    if options.any_size or options.group is not None or not npu_links.any():
        return pairs
    chunk_bytes = -(-options.size_bytes // (num_ranks * options.chunks_per_npu))
    serial_ns = chunk_bytes / (links["bandwidth_gbps"][npu_links] * 2**30 / 1e9)
    caps = np.sort(np.maximum(1.0, np.floor(MERGE_RATIO * links["latency_ns"][npu_links] / serial_ns)))
    middle = len(caps) // 2  # their median (np.median would import numpy.ma: 15 ms of a 64-NPU synth)
    cap = float(caps[middle] if len(caps) % 2 else (caps[middle - 1] + caps[middle]) / 2)
    return pairs / max(1.0, MERGE_SHARE * cap**0.5)


def tacos_footprint(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> tuple[float, str]:
    """TACOS's peak: :data:`PAIR_BASE` plus the largest of its matching, lowering and prediction
    (see the module docstring); the work names each stage's share. Collectives it forwards
    (all-to-all, gather, scatter, patterns) follow :func:`pair_footprint`.

    >>> from chakra_collectives.topology import load_topology
    >>> nbytes, work = tacos_footprint(load_topology("torus3d:34x34x34"), Collective.ALL_REDUCE, 39304, SynthesisOptions(size_bytes=2**26))
    >>> work.split(": ")[0]
    '3.09G (NPU, chunk) pairs, 154M messages, 385M operations'
    >>> work.split(": ")[1].split(" (")[0], round(nbytes / 2**30)     # the lowering's operation table: beyond 16 GB
    ('lowering 27.77 GiB', 28)
    >>> nbytes, work = tacos_footprint(load_topology("torus3d:34x34x34"), Collective.ALL_REDUCE, 39304, SynthesisOptions(size_bytes=2**26, in_parts=True, written=True))
    >>> work.split(": ")[1].split("; ")[0]     # only written (synth -o): lowered range by range as it is written
    'lowering 6.278 GiB (schedules 4.306 GiB + messages by NPU 587.9 MiB + a part 920 MiB + Reduce-Scatter range 400 MiB + delivery rows 112 MiB, lowered as written)'
    >>> nbytes, work = tacos_footprint(load_topology("torus3d:34x34x34"), Collective.ALL_REDUCE, 39304, SynthesisOptions(size_bytes=2**26, in_parts=True))
    >>> work.split(": ")[1].split(" (")[0]     # only summarized (synth without -o): no part is ever lowered
    'lowering 5.38 GiB'
    """
    if collective not in OPS_PER_MESSAGE:
        return pair_footprint(topology, collective, num_ranks, options)
    per_phase = float(num_ranks) * num_ranks * options.chunks_per_npu
    pairs = per_phase * phases(collective)
    planned = planned_messages(topology, collective, options)
    messages = tacos_messages(topology, num_ranks, options) if planned is None else planned
    further = further_runs(topology, collective, num_ranks, options, messages, planned is not None)
    operations = OPS_PER_MESSAGE[collective] * messages + 2 * num_ranks
    words = -(-num_ranks * options.chunks_per_npu // 64)
    bitsets = 4 * 8.0 * num_ranks * words  # held, wanted, own, a round's candidates
    # held with their CSR index, but a plan's are worked out from its tree when lowered (TreeRuns)
    runs = PER_RUN * further + 8.0 * messages if further and planned is None else 0.0
    # the plan (no matching, no bitsets): its schedule and the columns' copies while put in start order
    matching = (PER_MESSAGE + PER_PLANNED_MESSAGE) * messages if planned is not None else bitsets + PER_MESSAGE * messages + 2 * runs
    table = PER_TABLE_OP * operations + PER_TABLE_RUN * 2 * further  # a message's SEND and RECV each list its further runs
    # the schedules: a mirrored All-Reduce's Reduce-Scatter is its All-Gather with the channels renamed
    shared = collective is Collective.ALL_REDUCE and not topology.num_switches and twinned(topology)
    schedules = PER_MESSAGE * messages * (1 if shared else phases(collective)) + (PER_CHANNEL_COLUMN * messages if shared else 0.0) + runs
    delivery = 0.0 if collective is Collective.REDUCE_SCATTER else min(4 * per_phase, DELIVERY_BYTES)
    layout = 0.0 if collective is Collective.ALL_GATHER else PER_LAYOUT_PAIR * min(per_phase, REDUCE_SCATTER_PAIRS)
    indexes = layout + delivery + PER_BLOCK_CHUNK * min(per_phase, RUN_BLOCK_CHUNKS)
    lowering = table + schedules + indexes
    in_parts = options.in_parts and self_predicted(topology, num_ranks, options)
    part = by_npu = 0.0
    if in_parts:  # lowered a range of ranks at a time as it is written (write_parts): the schedules, their messages by NPU and one part
        # a further run takes an operation's place in a part (AlgorithmParts.part_ops), at a table's bytes per run
        share = min(1.0, PART_OPS / (operations + 2 * further))
        part = share * (PER_PART_OP * operations + PER_PART_RUN * 2 * further) if options.written else 0.0  # not written: never lowered
        by_npu = PER_INDEXED_MESSAGE * messages
        lowering = schedules + by_npu + part + indexes
    # a phase on a network without switches is its own prediction (schedule_timing): no task graph
    prediction = 0.0 if self_predicted(topology, num_ranks, options) else table + PER_PREDICTED_OP * operations
    first = "planning" if planned is not None else "matching"
    stages = {first: matching, "lowering": lowering, "prediction": prediction}
    peak = max(stages, key=stages.get)
    per_chunk = (f"Reduce-Scatter range {format_size(layout)} + " if layout else "") + f"delivery rows {format_size(delivery + PER_BLOCK_CHUNK * min(per_phase, RUN_BLOCK_CHUNKS))}"
    placed = f" + runs {format_size(runs)} placed in start order" if runs else ""
    shares = {
        "matching": f"bitsets {format_size(bitsets)} + messages {format_size(PER_MESSAGE * messages)}{placed}",
        "planning": f"schedule {format_size(PER_MESSAGE * messages)} + columns {format_size(PER_PLANNED_MESSAGE * messages)}",
        "lowering": (
            f"schedules {format_size(schedules)} + messages by NPU {format_size(by_npu)} + a part {format_size(part)} "
            f"+ {per_chunk}, lowered as written" if in_parts and options.written
            else f"schedules {format_size(schedules)} + messages by NPU {format_size(by_npu)} + {per_chunk}, laid out, not lowered" if in_parts
            else f"table {format_size(table)} + schedules {format_size(schedules)} + {per_chunk}"
        ),
        "prediction": f"table {format_size(table)} + timing {format_size(PER_PREDICTED_OP * operations)}" if prediction else "read from the schedule, no task graph",
    }
    run_work = f", {count(further)} further runs" if further else ""
    how = " (torus trees, planned)" if planned is not None else ""
    work = (
        f"{count(pairs)} (NPU, chunk) pairs, {count(phases(collective) * messages)} messages{how}{run_work}, {count(operations)} operations: "
        f"{peak} {format_size(stages[peak])} ({shares[peak]}); "
        + ", ".join(f"{name} {format_size(nbytes) if nbytes else shares[name]}" for name, nbytes in stages.items() if name != peak)
    )
    return PAIR_BASE + stages[peak], work


def planned_messages(topology: Topology, collective: Collective, options: SynthesisOptions) -> float | None:
    """The messages of TACOS's planned All-Gather where it takes one without matching
    (:func:`~chakra_collectives.synth.tacos.plans_only`: one a link and hop level,
    :func:`~chakra_collectives.synth.torus_trees.tree_levels` an NPU), else ``None``.

    >>> from chakra_collectives.topology import load_topology
    >>> planned_messages(load_topology("torus2d:64x64"), Collective.ALL_GATHER, SynthesisOptions(size_bytes=2**26))   # measured: 1,036,288
    1036288.0
    >>> planned_messages(load_topology("mesh2d:64x64"), Collective.ALL_GATHER, SynthesisOptions(size_bytes=2**26)) is None
    True
    """
    if collective is not Collective.ALL_GATHER or options.any_size or options.group is not None or topology.num_switches:
        return None
    from chakra_collectives.synth.tacos import plans_only  # imported when used: tacos states this module's footprint

    if not plans_only(topology, options.chunks_per_npu):
        return None
    from chakra_collectives.synth.torus_trees import torus_grid, tree_levels  # only for a plan: small meshes' start-up

    grid = torus_grid(topology)
    return float(topology.num_npus * tree_levels(grid.rows, grid.cols))


def further_runs(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions, messages: float, planned: bool) -> float:
    """Runs of chunks TACOS's messages carry beyond their first, at most: a planned All-Gather's
    messages one per tree edge they carry (``N (N - 1)`` runs in all; measured 16.66M of 16.77M
    at ``torus2d:64x64``), ``--several-runs``' All-Gather messages up to :data:`SEVERAL_RUNS`
    each, others none.

    >>> from chakra_collectives.topology import load_topology
    >>> round(further_runs(load_topology("torus2d:64x64"), Collective.ALL_GATHER, 4096, SynthesisOptions(size_bytes=2**26), 1036288.0, True) / 1e6, 2)   # measured: 15.62M
    15.74
    """
    if planned:
        return float(num_ranks) * (num_ranks - 1) - messages
    if options.several_runs and collective is Collective.ALL_GATHER and not topology.num_switches and not options.any_size:
        return (SEVERAL_RUNS - 1) * messages
    return 0.0


def self_predicted(topology: Topology, num_ranks: int, options: SynthesisOptions) -> bool:
    """Whether TACOS takes its prediction from its schedule here (no switches, whole topology),
    as :func:`~chakra_collectives.synth.schedule_timing.predicts_itself` decides on the channels.

    >>> from chakra_collectives.topology import load_topology
    >>> self_predicted(load_topology("torus2d:64x64"), 4096, SynthesisOptions(size_bytes=2**26))
    True
    >>> self_predicted(load_topology("switch:1024"), 1024, SynthesisOptions(size_bytes=2**26))
    False
    """
    return not topology.num_switches and options.group is None


def twinned(topology: Topology) -> bool:
    """Whether every link joining two NPUs has a twin the other way with the same latency and
    bandwidth (TACOS then serves both phases of an All-Reduce with one matching).

    >>> from chakra_collectives.topology import load_topology
    >>> twinned(load_topology("torus2d:4x4")), twinned(load_topology("ring:4"))
    (True, True)
    """
    links = topology.link_arrays
    npu = (links["src"] < topology.num_npus) & (links["dst"] < topology.num_npus)
    src, dst = links["src"][npu].astype(np.int64), links["dst"][npu].astype(np.int64)
    forward, backward = np.argsort(src * topology.num_npus + dst), np.argsort(dst * topology.num_npus + src)
    return all(np.array_equal(a[forward], b[backward]) for a, b in ((src, dst), (dst, src), *((links[name][npu],) * 2 for name in ("latency_ns", "bandwidth_gbps"))))


def message_footprint(messages: Callable[[Collective, int, int], float], pattern: str, *, per_slot: float = 0.0) -> Footprint:
    """A baseline's footprint from its message count ``messages(collective, N, K)`` and
    ``pattern``, which partners its messages go between: ``neighbour`` (rank ``r`` and
    ``r + 1``) or ``any`` (all pairs); ``per_slot`` bytes of per-chunk state per rank."""

    def footprint(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> tuple[float, str]:
        sent = float(messages(collective, num_ranks, options.chunks_per_npu))
        hops = sent * mean_route_length(topology, num_ranks, pattern)
        slots = float(num_ranks) * num_ranks * options.chunks_per_npu
        nbytes = PER_OP * 2.5 * sent + PER_HOP * hops + per_slot * slots
        state = f", {count(slots)} (rank, chunk) slots" if per_slot else ""
        return nbytes, f"{count(sent)} messages, {count(hops)} message hops{state}"

    return footprint


def mean_route_length(topology: Topology, num_ranks: int, pattern: str) -> float:
    """Mean number of links a message crosses between partners of ``pattern``, from the
    distances of up to :data:`SAMPLES` NPUs (hops through switches count)."""
    n = min(num_ranks, topology.num_npus)
    if n < 2:
        return 1.0
    sources = distinct(np.linspace(0, n - 1, min(SAMPLES, n)).astype(np.int64))
    arrays = topology.link_arrays
    distances = hop_distances(topology.num_nodes, arrays["src"], arrays["dst"], sources=sources)
    if pattern == "neighbour":
        hops = distances[np.arange(len(sources)), (sources + 1) % n]
    else:
        hops = distances[:, :n][np.arange(n)[None, :] != sources[:, None]]
    hops = hops[np.isfinite(hops)]
    return float(hops.mean()) if len(hops) else 1.0


__all__ = [
    "ADVICE", "Footprint", "PER_HOP", "PER_OP", "PER_PAIR", "estimate", "mean_route_length", "message_footprint", "pair_footprint", "phases",
    "further_runs", "planned_messages", "tacos_footprint", "tacos_messages",
]
