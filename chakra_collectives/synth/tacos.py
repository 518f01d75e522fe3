"""TACOS: topology-aware All-Gather, Reduce-Scatter and All-Reduce by link-chunk matching.

* All-Gather: :func:`~chakra_collectives.synth.matcher.match_all_gather` on the topology's
  channels (:mod:`~chakra_collectives.synth.channels`), ``chunks_per_npu`` chunks per NPU.
* Reduce-Scatter: the All-Gather of the *reversed* channels, run backwards in time with
  reductions (TACOS's time-reversal argument: a Reduce-Scatter is an All-Gather mirrored).
* All-Reduce: that Reduce-Scatter, then an All-Gather.

Switches are *not* unwound: a message between two NPUs that share only switches crosses the
switch hops of the topology's route, store-and-forward, with FIFO queues, exactly as the
network model replays it (see :mod:`~chakra_collectives.synth.matcher`).

**Trials.** The greedy's result depends on its random tie-breaking, so each phase is matched
``trials`` times per *variant* -- with seeds ``seed, seed+1, ...`` and for each of
:data:`MERGE_VARIANTS` (how long merged messages may grow,
:func:`~chakra_collectives.synth.matcher.message_caps`, and which runs they prefer; phases of
:data:`LARGE_PHASE_PAIRS` or more pairs run :data:`LARGE_MERGE_VARIANTS`) -- and every phase keeps its own best
trial (ties: the earlier one), so a result is reproducible from ``(seed, trials)`` -- a phase
runs no more trials of a variant once its best is at that variant's floor, below which no
matching finishes (:func:`~chakra_collectives.synth.matching_floor.matching_floor_ns`): the
same result; by default
``trials`` is :func:`auto_trials`, several for small problems, one for large ones. On a network
that looks the same reversed (every direct link has a twin the other way with the same latency
and bandwidth, :meth:`~chakra_collectives.synth.channels.Channels.mirror`), the reversed
All-Gather problem *is* the All-Gather problem with channels renamed: the best All-Gather trial
is also the best Reduce-Scatter trial, and one search serves both phases. A phase is
judged by its schedule's finishing time, which the network model reproduces exactly -- except a
Reduce-Scatter through switches: mirrored in time, its messages may meet in a switch's FIFO
queue in another order than planned, so those trials are lowered and judged by
:func:`~chakra_collectives.network.predict_time`.

>>> from chakra_collectives.topology import torus2d
>>> from chakra_collectives.verify import verify_algorithm
>>> result = tacos(torus2d(3, 3), Collective.ALL_REDUCE, 9 * 2**20, chunks_per_npu=2)
>>> result.algorithm.num_ranks, result.algorithm.chunk_count, verify_algorithm(result.algorithm).ok
(9, 18, True)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

import numpy as np

from chakra_collectives import progress

from chakra_collectives.errors import InputError
from chakra_collectives.processes import PARALLEL_PAIRS, can_fork, can_start_processes
from chakra_collectives.ir import Collective, CollectiveAlgorithm, OpKind
from chakra_collectives.network import predict_time
from chakra_collectives.network.bottleneck import Bottleneck
from chakra_collectives.network.model import Mode, NetworkModel
from chakra_collectives.ir.parts import AlgorithmParts
from chakra_collectives.ir.pattern import ChunkPattern
from chakra_collectives.synth.channels import ChannelRouting, Channels, build_channels
from chakra_collectives.synth.footprint import tacos_footprint
from chakra_collectives.synth.lowering import all_gather_algorithm, all_reduce_algorithm, lowered_in_parts, mirrored_release, reduce_scatter_algorithm
from chakra_collectives.synth.matcher import match_all_gather, message_caps
from chakra_collectives.synth.matching_floor import matching_floor_ns
from chakra_collectives.synth.schedule import Schedule
from chakra_collectives.synth.shares import share_layouts
from chakra_collectives.synth.schedule_timing import predicts_itself, schedule_prediction
from chakra_collectives.synth.registry import SynthesisOptions, Synthesized, Synthesizer, register
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.groups import group_view

if TYPE_CHECKING:  # the FORWARDED collectives' modules are imported when one is synthesized (_forwarded)
    from chakra_collectives.synth.gridpipe import Grid

FORWARDED = (Collective.ALL_TO_ALL, Collective.GATHER, Collective.SCATTER, Collective.PATTERN)
"""Collectives matched by :mod:`~chakra_collectives.synth.forwarding` (pieces sent only where
they are needed, relayed store-and-forward) instead of the All-Gather matcher."""
SUPPORTED = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE, *FORWARDED)

@dataclass(frozen=True)
class MergeVariant:
    """How one trial merges chunks into messages."""

    latency_ratio: float
    """A message may grow until its serialization is this many times the latency it pays
    (:func:`~chakra_collectives.synth.matcher.message_caps`; 0: never merges)."""
    extend_held: bool = False
    """Merged messages prefer runs that extend what their destination holds
    (:func:`~chakra_collectives.synth.matcher.match_all_gather`)."""
    reach_back: bool = False
    """A merged message may start before its scarcest chunk, where the candidates' run holding it starts."""
    ranges: int = 1
    """Runs of consecutive chunks a merged message over a direct link may carry (an All-Gather's;
    the other collectives' phases take one)."""

    def __str__(self) -> str:
        rules = [name for name, on in (("runs extend held", self.extend_held), ("runs reach back", self.reach_back)) if on]
        if self.ranges > 1:
            rules.append(f"up to {self.ranges} runs")
        return ", ".join([f"{self.latency_ratio:g}", *rules])


MERGE_VARIANTS = (MergeVariant(20.0), MergeVariant(40.0), MergeVariant(40.0, extend_held=True))
"""The trial variants. A message may grow until its serialization is 20 or 40 times the latency
it pays; with chunks that long already, every variant sends single chunks (the paper's greedy)
and only the first runs. ``MergeVariant(0.0)`` never merges: on the benchmark suite it did not
once beat the best of the others, so it is not tried by default (it is the slowest: ~16.8M
messages on a 4096-NPU torus). Runs that extend what the destination holds
(:func:`~chakra_collectives.synth.matcher.match_all_gather`) win on some topologies and lose on
others, so they are a variant, not a replacement: on the suite (10 topologies x All-Gather,
All-Reduce x 1 and 4 chunks per NPU x 1 MiB, 64 MiB) they made 20 of 80 cases faster (by
1.8-4.8%), none slower. Runs that also reach back (:data:`REACHING_BACK`) would make 12 more
faster (up to 8%, mesh2d:8x8) but take 3-4.5 times as long per matching there (more distinct
arrival times): they run in large phases only."""

REACHING_BACK = MergeVariant(40.0, extend_held=True, reach_back=True)

LARGE_PHASE_PAIRS = 2**18
"""(NPU, chunk) pairs per phase from which a phase runs :data:`LARGE_MERGE_VARIANTS` (512 NPUs at one chunk each)."""

LARGE_MERGE_VARIANTS = (MERGE_VARIANTS[2], REACHING_BACK)
"""The variants of phases of :data:`LARGE_PHASE_PAIRS` or more (NPU, chunk) pairs, two matchings (in
parallel on two cores): the plain ones never won there. All-Gather of 64 MiB, efficiency of
ratio 20 / 40 / 40 extending / 40 extending and reaching back: 1,024 NPUs torus2d 0.890 / 0.896
/ 0.905 / 0.878, mesh2d 0.899 / 0.908 / 0.920 / 0.938; 4,096 NPUs torus2d 0.796 / 0.798 / 0.818
/ 0.823, mesh2d - / 0.804 / 0.851 / 0.885."""

HUGE_PHASE_PAIRS = 2**28
"""(NPU, chunk) pairs per phase from which a phase runs :data:`REACHING_BACK` alone (16,384 NPUs
at one chunk each; the 40K All-Reduce's 1.54G): the variant that won at 4,096 NPUs on every
family measured (above; ``torus3d:16x16x16`` 239.4 against 250.3 us, 1.37M against 1.85M
messages, 22 against 32 CPU s; ``torus3d:20x20x20`` 254.8 against 269.5 us) and at 16,384
(``mesh2d:128x128`` All-Gather 64 MiB: 801.5 us). Two matchings at once there hold more than
one machine of 4 GB: on ``mesh2d:128x128`` the extending variant peaked at 1.29 GiB in this
process while reaching back peaked at 3.3 GiB in its own, sending its schedule back (this
process then 3.96 GiB); one matching of 39,304 NPUs takes about 0.85 CPU hours and holds about
4 GiB of messages. Smaller phases keep both, unchanged."""

SEVERAL_RUNS_VARIANTS = (replace(MERGE_VARIANTS[2], ranges=4), replace(REACHING_BACK, ranges=2))
""":data:`LARGE_MERGE_VARIANTS` whose messages carry up to 4 runs of consecutive chunks
(:attr:`MergeVariant.ranges`; the other collectives' phases take one): a run otherwise ends where
its sender lacks the next chunk id (53% of the messages on a 4,096-NPU torus) or its destination
has it (43%). All-Gather of 64 MiB, up to 1 / 2 / 4 runs: 4,096 NPUs torus2d extending 0.818 /
0.854 / 0.869 (2.09M / 1.65M / 1.40M messages), mesh2d reaching back 0.885 / 0.905 / 0.902
(2.34M / 1.91M / 1.71M; 126 and 191 CPU s a matching at load 15). Each further run costs the matching about what its first run does (1,024 NPUs:
2.0x the CPU seconds at 2 runs, 2.7x at 4), where the gain is smaller (1,024 NPUs extending
torus2d 0.905 / 0.917 / 0.911, mesh2d 0.920 / 0.935 / 0.928; reaching back 0.878 / 0.898 /
0.888 and 0.938 / 0.943 / 0.919; the whole command on torus2d:32x32 +47% CPU). Asked for
(``synth --several-runs``, :func:`default_variants`), not the default: at 4,096 NPUs the
whole ``synth -o`` takes 1.6-1.9x the CPU and twice the memory of one run a message."""

SWITCH_HANDLING = (
    "switches are routed, not unwound: a message crosses the route's switch hops store-and-forward "
    "with FIFO queues, as the network model replays it"
)


@dataclass(frozen=True)
class Trial:
    """One matching of one phase."""

    seed: int
    variant: MergeVariant
    schedule: Schedule
    time_ns: float
    """How the trial was judged: the schedule's time, or the model's prediction of the phase."""
    pinned: bool = False
    """A Reduce-Scatter whose routed messages leave when the mirrored schedule says
    (:func:`~chakra_collectives.synth.lowering.mirrored_release`), not as soon as their data is there."""
    plan: str = ""
    """Not a matching: the planned schedule that won (:data:`TORUS_TREES`; ``seed`` and ``variant`` then mean nothing)."""

    @property
    def latency_ratio(self) -> float:
        return self.variant.latency_ratio


@dataclass(frozen=True)
class TacosResult:
    algorithm: CollectiveAlgorithm | AlgorithmParts
    """The algorithm; in parts only when asked (``in_parts``) and it applies."""
    schedule_ns: float
    """The matcher's own finishing time (Reduce-Scatter + All-Gather for All-Reduce)."""
    phases: tuple[Trial, ...]
    """The trials kept: (All-Gather,), (reversed All-Gather,) or (reversed, All-Gather)."""
    trials: int = 1
    """Seeds tried per phase and merge variant."""
    forwarding_seed: int | None = None
    """The seed of the kept matching of a :data:`FORWARDED` collective (which has no phases)."""
    predicted_ns: float | None = None
    """The network model's time, when the schedule is its own prediction
    (:func:`~chakra_collectives.synth.schedule_timing.predicts_itself`; ``None``: not read from it)."""
    bottleneck: Bottleneck | None = None
    """... and the busiest link of that prediction."""

    @property
    def seed(self) -> int:
        """The seed of the last phase's trial (the All-Gather's for All-Reduce)."""
        return self.phases[-1].seed if self.phases else int(self.forwarding_seed or 0)

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(p.seed for p in self.phases) if self.phases else (self.seed,)


def tacos(
    topology: Topology,
    collective: Collective | str,
    size_bytes: int,
    *,
    chunks_per_npu: int = 1,
    seed: int = 0,
    trials: int | None = None,
    merge_variants: tuple[float | MergeVariant, ...] | None = None,
    root: int = 0,
    pattern: ChunkPattern | None = None,
    detours: bool = False,
    multipath: bool = False,
    flows: Mapping[int, np.ndarray] | None = None,
    to_beat_ns: float | None = None,
    in_parts: bool = False,
    several_runs: bool = False,
) -> TacosResult:
    """Synthesize ``collective`` of ``size_bytes`` on ``topology`` (see the module docstring).

    The collective's size is cut into ``num_npus * chunks_per_npu`` chunks of
    ``ceil(size / chunks)`` bytes (the IR's padding rule). Each phase runs
    ``trials * len(merge_variants)`` matchings (fewer when variants coincide) and keeps its
    best; ``trials=None`` picks :func:`auto_trials`, ``merge_variants=None``
    :func:`default_variants` (a number ``r`` means ``MergeVariant(r)``; ``several_runs``: its
    variants whose All-Gather messages carry several runs of chunk ids).
    :data:`FORWARDED` collectives (all-to-all, gather, scatter, a ``pattern``; ``root`` for
    gather and scatter) are matched by :func:`~chakra_collectives.synth.forwarding.match_demand`,
    ``trials`` seeds (at most :data:`FORWARDING_TRIALS` by default), the fastest kept, merging
    messages as the first of ``merge_variants`` says (default: latency ratio 40); a pattern's
    chunks are each cut into ``chunks_per_npu`` chunks. ``detours``: all-gather, reduce-scatter and
    all-reduce messages between NPUs that switches join take any of
    :func:`~chakra_collectives.synth.channels.detour_channels`, each SEND naming its route
    (what a process group's view of a fabric needs, :func:`tacos_for_group`); they then match
    single chunks (``MergeVariant(0.0)``) and at most :data:`DETOUR_TRIALS` seeds unless told.
    ``multipath``: a :data:`FORWARDED` collective's unicast pieces are also matched along the
    paths of the multicommodity-flow optimum (:func:`~chakra_collectives.synth.multipath.spread_paths`,
    several routes per pair, each SEND naming its route), and the faster plan is kept; ``flows``:
    that optimum's flows given (per source NPU, chunks per link: several concurrent groups' joint
    LP, :func:`~chakra_collectives.synth.multipath.joint_flows`) instead of solved for this collective alone.
    ``to_beat_ns``: a time the caller keeps unless this result is faster; on a network without
    switches, an All-Gather, Reduce-Scatter or (mirrored) All-Reduce puts off the trials of a
    variant whose floor (:func:`~chakra_collectives.synth.matching_floor.matching_floor_ns`) is
    not below it (unless no variant's is) and runs them only if the others' best is above that
    floor: the result is the same, and when it is below their floor they are never run (a
    mesh2d:8x8 All-Gather of 64 MiB at K=2, after 641 us at K=1: the two ratio-20 trials, floor
    646.7 us, the slowest of its five).
    An All-Gather on a 2-D torus, when ``merge_variants`` is not given, also has the planned
    :data:`TORUS_TREES` schedule as a candidate (kept when faster), and takes it without matching
    on a square torus from :data:`PLANNED_ONLY_PAIRS` (NPU, chunk) pairs.
    ``in_parts``: an All-Gather, Reduce-Scatter or All-Reduce that predicts itself from its
    schedules (one without switches) is returned unlowered, as
    :class:`~chakra_collectives.ir.parts.AlgorithmParts` lowered a range of ranks at a time by
    the writer (:func:`~chakra_collectives.synth.lowering.lowered_in_parts`; for a caller that
    only writes it).

    Raises
    ------
    InputError
        A collective TACOS does not synthesize, a non-positive size, chunk count or trial
        count, fewer than 2 NPUs, or a topology whose NPUs do not all reach each other.
    """
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    if collective not in SUPPORTED:
        raise InputError(f"TACOS synthesizes {', '.join(c.value for c in SUPPORTED)}, not {collective.value}")
    if not size_bytes > 0:
        raise InputError(f"collective size must be positive, got {size_bytes}")
    if chunks_per_npu < 1:
        raise InputError(f"chunks per NPU must be positive, got {chunks_per_npu}")
    explicit_trials = trials
    matchings_asked = merge_variants is not None
    if trials is None:
        trials = auto_trials(topology.num_npus, chunks_per_npu)
        if detours and collective not in FORWARDED:
            trials = min(trials, DETOUR_TRIALS)
    if trials < 1:
        raise InputError(f"trials must be positive, got {trials}")
    if merge_variants is None and detours and collective not in FORWARDED:
        variants: tuple[MergeVariant, ...] = (MergeVariant(0.0),)
    else:
        if merge_variants is None:
            merge_variants = default_variants(topology.num_npus, chunks_per_npu, switched=bool(topology.num_switches), several_runs=several_runs)
        variants = tuple(v if isinstance(v, MergeVariant) else MergeVariant(float(v)) for v in merge_variants)
    if not variants or any(v.latency_ratio < 0 or v.ranges < 1 for v in variants):
        raise InputError(f"merge variants must have non-negative latency ratios and at least one run, got {merge_variants}")
    if collective is not Collective.ALL_GATHER:  # a mirrored phase's messages carry one run each
        variants = tuple(dict.fromkeys(replace(v, ranges=1) for v in variants))
    if topology.num_npus < 2:
        raise InputError("a collective needs at least 2 NPUs")
    topology.validate()
    if collective in FORWARDED:
        from chakra_collectives.synth.forwarding import DEFAULT_LATENCY_RATIO

        forwarding_trials = min(trials, FORWARDING_TRIALS) if explicit_trials is None else trials
        ratio = DEFAULT_LATENCY_RATIO if merge_variants is None else variants[0].latency_ratio
        return _forwarded(topology, collective, size_bytes, chunks_per_npu, seed, forwarding_trials, root, pattern, ratio, multipath, flows)
    n = topology.num_npus
    chunk_bytes = -(-size_bytes // (n * chunks_per_npu))
    channels = build_channels(topology, chunk_bytes=chunk_bytes, detours=detours)
    routing = channels.routing() if channels.detours else None
    # a group's All-Reduce: which member reduces how much (synth/shares.py), each layout tried unless its floor rules it out
    layouts = share_layouts(topology, chunks_per_npu) if collective is Collective.ALL_REDUCE and channels.detours else [None]
    search = _Search(topology, channels, chunks_per_npu, size_bytes, seed, trials, variants, routing)
    mirror = channels.mirror()
    twins = channels.twins() if mirror is None and channels.detours else None
    searches = 2 if collective is Collective.ALL_REDUCE and mirror is None and twins is None else 1
    # what a phase must beat: the prediction is the phases' times added up (predicts_itself), a mirrored All-Reduce's twice its one search's
    beat = None if to_beat_ns is None or not predicts_itself(channels) else to_beat_ns / (2 if collective is Collective.ALL_REDUCE else 1)

    def phases_of(search: _Search, steps: progress.Task) -> tuple[Trial, ...]:
        if collective is Collective.ALL_GATHER:
            # the plan is a candidate unless merge variants are given (then those matchings are what is asked for)
            planned = _planned_all_gather(topology, channels, chunks_per_npu, seed) if search.owner_start is None and routing is None and not matchings_asked else None
            if planned is not None and plans_only(topology, chunks_per_npu):
                return (planned,)
            # the plan's time is a time to beat: a variant whose floor is not below it runs only if the others end above its floor
            to_beat = beat if planned is None else min(planned.time_ns, beat if beat is not None else np.inf)
            best = search.best(channels, judge_by_model=False, name="all-gather", beat_ns=to_beat)
            return (planned if planned is not None and planned.time_ns < best.time_ns else best,)
        if mirror is not None:  # the reversed network is the same network: one search serves both phases
            best = search.best(channels, judge_by_model=False, name="all-gather", beat_ns=beat)
            reversed_phase = replace(best, schedule=replace(best.schedule, channel=mirror[best.schedule.channel]))
            return (reversed_phase,) if collective is Collective.REDUCE_SCATTER else (reversed_phase, best)
        if twins is not None:  # so are detours through relays: each matching's mirror judged by the model (queues)
            best, reversed_phase = search.best_and_mirrored(channels, twins)
            return (reversed_phase,) if collective is Collective.REDUCE_SCATTER else (reversed_phase, best)
        reversed_phase = search.best(channels.reversed(), judge_by_model=bool(topology.num_switches), name="reduce-scatter")
        if collective is not Collective.ALL_REDUCE:
            return (reversed_phase,)
        steps.advance()
        return (reversed_phase, search.best(channels, judge_by_model=False, name="all-gather"))

    with progress.task("phases", total=searches * len(layouts), unit="searches") as steps:
        phases: tuple[Trial, ...] = ()
        for done, owner_start in enumerate(layouts):
            steps.update(searches * done)
            if phases and sum(p.time_ns for p in phases) <= _layout_floor_ns(topology, size_bytes, chunks_per_npu, owner_start, variants):
                continue  # this layout's phases cannot be faster
            found = phases_of(replace(search, owner_start=owner_start), steps)
            if not phases or sum(p.time_ns for p in found) < sum(p.time_ns for p in phases):
                phases = found
        steps.update(searches * len(layouts))
    predicted_ns, limit = schedule_prediction([p.schedule for p in phases], channels) if predicts_itself(channels) else (None, None)
    if in_parts and routing is None and predicted_ns is not None:
        with progress.task("lay out the lowering's parts"):
            algo: CollectiveAlgorithm | AlgorithmParts = lowered_in_parts(
                collective, [p.schedule for p in phases], size_bytes=size_bytes, provenance=_provenance(phases, topology, chunks_per_npu, seed, trials, None),
            )
    else:
        with progress.task("lower to operations"):
            algo = _lower(collective, phases, size_bytes, topology, chunks_per_npu, seed, trials, routing)
    return TacosResult(
        algorithm=algo, schedule_ns=sum(p.schedule.time_ns for p in phases), phases=phases, trials=trials, predicted_ns=predicted_ns, bottleneck=limit,
    )


TORUS_TREES = "torus trees"
"""The planned All-Gather of :func:`~chakra_collectives.synth.torus_trees.tree_all_gather` (2-D
tori), kept where it is faster than every matching: every NPU's chunks spread along the same
translated tree, one message per link and hop count. All-Gather of 64 MiB, one chunk per NPU:
``torus2d:32x32`` 0.905 -> 0.947 of the bound, ``torus2d:64x64`` 0.823 -> 0.906 (one message
per link and hop: 64 of 16 chunks, against 110 of 9.3), ``torus2d:128x128`` 0.691 -> 0.830
(128 a link); small tori keep their matchings (``torus2d:8x8``: 0.915 planned)."""


PLANNED_ONLY_PAIRS = 2**20
"""(NPU, chunk) pairs from which an All-Gather on a square 2-D torus takes :data:`TORUS_TREES`
without matching (unless merge variants are given): it beat the matchings on every square torus
tried from 16x16 (All-Gather, default variants): ``torus2d:16x16`` 1 MiB 18.7 -> 13.0 us, 64 MiB
at K=4 330.9 -> 325.4 us; ``torus2d:32x32`` 1 MiB 30.9 -> 20.9 us, 16 MiB 107.2 -> 94.4 us, 64
MiB 344.8 -> 329.7 us, 1 GiB 5,128 -> 5,036 us; ``torus2d:64x64`` 64 MiB 381.9 -> 344.8 us. The
plan takes seconds where a 4,096-NPU matching took 35-60 CPU s and a 16,384-NPU one 572."""


PLANNED_MESSAGES = 2**24
"""The most messages a :data:`TORUS_TREES` schedule is built with, counted as ``N * 2 (rows +
cols)`` (one per direction and hop count, up to the diameter, bounds an NPU's): 8.4M at
``torus2d:128x128`` (8.3M built). Its runs, one per pair of NPUs (268M there), are worked out a
range of NPUs at a time as they are lowered, never all held
(:class:`~chakra_collectives.synth.torus_trees.TreeRuns`)."""


def plans_only(topology: Topology, chunks_per_npu: int) -> bool:
    """Whether TACOS's All-Gather over all of ``topology`` takes :data:`TORUS_TREES` without
    matching (default merge variants): a square 2-D torus of direct links, from
    :data:`PLANNED_ONLY_PAIRS` pairs up to :data:`PLANNED_MESSAGES` messages.

    >>> from chakra_collectives.topology import mesh2d, torus2d
    >>> plans_only(torus2d(32, 32), 1), plans_only(torus2d(16, 16), 1), plans_only(torus2d(16, 16), 16), plans_only(mesh2d(32, 32), 1)
    (True, False, True, False)
    >>> plans_only(torus2d(128, 128), 1), plans_only(torus2d(256, 256), 1)
    (True, False)
    """
    n = topology.num_npus
    if topology.num_switches or len(topology.links) != 4 * n or n * n * chunks_per_npu < PLANNED_ONLY_PAIRS:
        return False
    grid = _plannable_grid(topology)
    return grid is not None and grid.rows == grid.cols


def _plannable_grid(topology: Topology) -> Grid | None:
    """The grid of a 2-D torus whose :data:`TORUS_TREES` schedule is built (up to
    :data:`PLANNED_MESSAGES` messages), or ``None``."""
    from chakra_collectives.synth.torus_trees import torus_grid  # imported when used: the small meshes' start-up

    grid = torus_grid(topology)
    return grid if grid is not None and topology.num_npus * 2 * (grid.rows + grid.cols) <= PLANNED_MESSAGES else None


def _planned_all_gather(topology: Topology, channels: Channels, k: int, seed: int) -> Trial | None:
    """The :data:`TORUS_TREES` All-Gather as a trial, where it applies (checked first by the
    link count: a 2-D torus of sides 3 or more has 4 links out of each NPU)."""
    if topology.num_switches or len(topology.links) != 4 * topology.num_npus or _plannable_grid(topology) is None:
        return None
    from chakra_collectives.synth.torus_trees import tree_all_gather  # imported when used: the small meshes' start-up

    with progress.task("plan torus trees"):
        schedule = tree_all_gather(topology, channels, k)
    if schedule is None:
        return None
    return Trial(seed=seed, variant=MergeVariant(0.0), schedule=schedule, time_ns=schedule.time_ns, plan=TORUS_TREES)


def _layout_floor_ns(topology: Topology, size_bytes: int, k: int, owner_start: np.ndarray | None, variants: tuple[MergeVariant, ...]) -> float:
    """No Reduce-Scatter and All-Gather over ``topology``'s NPUs whose chunks are owned as
    ``owner_start`` says (``None``: ``k`` each) take less than this together, when every message
    carries one chunk (0 when ``variants`` may merge): in the All-Gather every NPU receives every
    chunk it does not own, one message each over its in-links, and sends as many in the mirrored
    Reduce-Scatter over its out-links (:func:`group_floor_ns`'s message rates)."""
    if any(v.latency_ratio > 0 for v in variants):
        return 0.0
    n = topology.num_npus
    model = NetworkModel(topology)
    rate = 1.0 / model.hop_ns(np.arange(model.num_links), -(-size_bytes // (n * k)))  # messages per ns, per link
    into = np.bincount(model.link_dst, weights=rate, minlength=topology.num_nodes)[:n]
    out = np.bincount(model.link_src, weights=rate, minlength=topology.num_nodes)[:n]
    owned = np.full(n, k) if owner_start is None else np.diff(owner_start)
    missing = n * k - owned
    return float((missing / into).max() + (missing / out).max())


DETOUR_TRIALS = 4
"""Seeds a collective over :func:`~chakra_collectives.synth.channels.detour_channels` tries by
default, each without merged messages: a merged message crosses every relay whole, and on the
suite's groups single chunks won (torus2d:8x8 column, all-gather of 64 MiB, K=16: 0.859 of the
group's bound against 0.718 for the best of 8 seeds merging up to 40 latencies), with 8 seeds no
better than 2 there, at a quarter of the matchings."""

FORWARDING_TRIALS = 4
"""Seeds a :data:`FORWARDED` collective tries by default (fewer for large problems: :func:`auto_trials`)."""


def _forwarded(
    topology: Topology, collective: Collective, size_bytes: int, k: int, seed: int, trials: int, root: int, pattern: ChunkPattern | None,
    latency_ratio: float,
    multipath: bool = False,
    flows: Mapping[int, np.ndarray] | None = None,
) -> TacosResult:
    """TACOS for a collective that only moves data: :mod:`~chakra_collectives.synth.forwarding`
    (``multipath``: see :func:`tacos`; ties keep the one-route plan)."""
    from chakra_collectives.ir.demand import demand_for
    from chakra_collectives.synth.flowpipe import pipelined_schedules
    from chakra_collectives.synth.forwarding import match_demand
    from chakra_collectives.synth.forwarding_lowering import forwarding_algorithm, name_routes
    from chakra_collectives.synth.multipath import demand_flows, spread_paths
    from chakra_collectives.synth.path_planning import ChannelGraph

    n = topology.num_npus
    if collective is Collective.PATTERN:
        if pattern is None:
            raise InputError("a pattern collective needs its pattern (synth --pattern FILE)")
        if pattern.num_ranks != n:
            raise InputError(f"the pattern is for {pattern.num_ranks} ranks, the collective runs over {n}")
        pattern = refine_pattern(pattern, k)
        chunk_count = pattern.chunk_count
    else:
        if collective.has_root and not 0 <= root < n:
            raise InputError(f"root {root} is not a rank (0..{n - 1})")
        chunk_count = n * k
    channels = build_channels(topology, chunk_bytes=-(-size_bytes // chunk_count))
    distance = ChannelGraph.of(channels).dist
    demand = demand_for(collective, num_npus=n, chunks_per_npu=k, root=root, pattern=pattern, distance=distance)
    plans: list[tuple[Channels, dict[int, list[int]] | None]] = [(channels, None)]
    planned = flows if flows is not None or not multipath else demand_flows(channels, demand)
    spread = spread_paths(channels, demand, planned) if planned is not None else None
    if spread is not None:
        plans.append((spread.channels, spread.paths))
    best: Forwarding | None = None
    best_seed, best_channels, matching = seed, channels, "forwarding"
    with progress.task(collective.value, total=trials * len(plans), unit="trials") as done:
        for plan_channels, paths in plans:
            for trial in range(trials):
                found = match_demand(plan_channels, demand, seed=seed + trial, latency_ratio=latency_ratio, paths=paths)
                if best is None or found.time_ns < best.time_ns:
                    best, best_seed, best_channels = found, seed + trial, plan_channels
                done.advance()
    assert best is not None
    best_ns = best.time_ns
    lowered = {
        "collective": collective, "chunk_count": chunk_count, "size_bytes": size_bytes, "root": root if collective.has_root else None, "pattern": pattern,
    }
    if spread is not None and len(spread.paths) == demand.num_pieces:
        for piped, piped_channels in pipelined_schedules(channels, demand, planned, timed=flows is None):
            piped_ns = piped.time_ns
            if piped.after is not None:  # paced: the network model's time (messages meeting a link at one instant may go in another order)
                piped_ns = predict_time(name_routes(forwarding_algorithm(piped, demand, **lowered), piped, piped_channels), topology)
            if piped_ns < best_ns:
                best, best_ns, best_channels, matching = piped, piped_ns, piped_channels, "flow-pipeline"
    provenance = {
        "algorithm": "tacos",
        "topology": topology.name,
        "chunks_per_npu": str(k),
        "seed": str(best_seed),
        "trials": str(trials),
        "matching": matching,
        "switches": "routed" if topology.num_switches else "none",
    }
    with progress.task("lower to operations"):
        algo = forwarding_algorithm(best, demand, **lowered, provenance=provenance)
        if best_channels is not channels:  # several routes per pair: every SEND names its own
            algo = name_routes(algo, best, best_channels)
    return TacosResult(algorithm=algo, schedule_ns=best_ns, phases=(), trials=trials, forwarding_seed=best_seed)


def refine_pattern(pattern: ChunkPattern, k: int) -> ChunkPattern:
    """``pattern`` with every chunk cut into ``k`` chunks (chunk ``s`` becomes ``s*k .. s*k + k - 1``).

    >>> refine_pattern(ChunkPattern(2, holders=((0,),), targets=((1,),)), 2).targets
    ((1,), (1,))
    """
    if k == 1:
        return pattern
    holders = tuple(h for h in pattern.holders for _ in range(k))
    targets = tuple(t for t in pattern.targets for _ in range(k))
    return ChunkPattern(pattern.num_ranks, holders, targets, name=pattern.name)


def _lower(
    collective: Collective, phases: tuple[Trial, ...], size_bytes: int, topology: Topology, chunks_per_npu: int, seed: int, trials: int,
    routing: ChannelRouting | None = None,
) -> CollectiveAlgorithm:
    provenance = _provenance(phases, topology, chunks_per_npu, seed, trials, routing)
    schedules = [p.schedule for p in phases]
    if collective is Collective.ALL_GATHER:
        return all_gather_algorithm(schedules[0], size_bytes=size_bytes, provenance=provenance, routing=routing)
    if schedules[0].owner_start is not None:  # unequal shares: how many chunks each rank reduces
        provenance["owner_chunks"] = ",".join(map(str, np.diff(schedules[0].owner_start).tolist()))
    release = mirrored_release(schedules[0]) if phases[0].pinned else None
    if release is not None:
        provenance["reduce_scatter"] = "pinned"
    if collective is Collective.REDUCE_SCATTER:
        return reduce_scatter_algorithm(schedules[0], size_bytes=size_bytes, provenance=provenance, routing=routing, release=release)
    return all_reduce_algorithm(schedules[0], schedules[1], size_bytes=size_bytes, provenance=provenance, routing=routing, release=release)


def _provenance(
    phases: tuple[Trial, ...], topology: Topology, chunks_per_npu: int, seed: int, trials: int, routing: ChannelRouting | None
) -> dict[str, str]:
    """What the lowered algorithm records of how it was synthesized."""
    several = {"phase_ranges": ",".join(str(p.variant.ranges) for p in phases)} if any(p.variant.ranges > 1 for p in phases) else {}
    if any(p.plan for p in phases):
        several["phase_plans"] = ",".join(p.plan or "matching" for p in phases)
    return {
        "algorithm": "tacos",
        "topology": topology.name,
        "chunks_per_npu": str(chunks_per_npu),
        "seed": str(seed),
        "trials": str(trials),
        "phase_seeds": ",".join(str(p.seed) for p in phases),
        "phase_latency_ratios": ",".join(f"{p.latency_ratio:g}" for p in phases),
        "phase_extend_held": ",".join(str(int(p.variant.extend_held)) for p in phases),
        "phase_reach_back": ",".join(str(int(p.variant.reach_back)) for p in phases),
        "switches": ("detours" if routing is not None else "routed") if topology.num_switches else "none",
        **several,
    }


TRIAL_BUDGET = 2**14
"""(NPU, chunk) pairs per phase that :func:`auto_trials` spends one trial per."""


def auto_trials(num_npus: int, chunks_per_npu: int) -> int:
    """Default trials: as many as fit :data:`TRIAL_BUDGET` (1 to 8), so small problems get several
    seeds and large ones stay fast (one matching of a 1024-NPU torus takes seconds).

    >>> auto_trials(64, 1), auto_trials(64, 4), auto_trials(8, 1), auto_trials(1024, 1)
    (4, 1, 8, 1)
    """
    return max(1, min(8, TRIAL_BUDGET // (num_npus * num_npus * chunks_per_npu)))


def default_variants(num_npus: int, chunks_per_npu: int, *, switched: bool = False, several_runs: bool = False) -> tuple[MergeVariant, ...]:
    """:data:`MERGE_VARIANTS`, or :data:`LARGE_MERGE_VARIANTS` from :data:`LARGE_PHASE_PAIRS` pairs per
    phase on networks without switches (where they were measured; on switch:16, ratio 20 wins);
    ``several_runs`` (asked for): :data:`SEVERAL_RUNS_VARIANTS` on networks without switches,
    whatever the size (messages over switches carry one run); from :data:`HUGE_PHASE_PAIRS`,
    :data:`REACHING_BACK` alone.

    >>> [str(v) for v in default_variants(1024, 1)], len(default_variants(64, 1)), len(default_variants(1024, 1, switched=True))
    (['40, runs extend held', '40, runs extend held, runs reach back'], 3, 3)
    >>> [str(v) for v in default_variants(39304, 1)]    # the 40K All-Reduce: one matching
    ['40, runs extend held, runs reach back']
    >>> [str(v) for v in default_variants(4096, 1, several_runs=True)]
    ['40, runs extend held, up to 4 runs', '40, runs extend held, runs reach back, up to 2 runs']
    """
    if several_runs and not switched:
        return SEVERAL_RUNS_VARIANTS
    if switched or num_npus * num_npus * chunks_per_npu < LARGE_PHASE_PAIRS:
        return MERGE_VARIANTS
    return LARGE_MERGE_VARIANTS if num_npus * num_npus * chunks_per_npu < HUGE_PHASE_PAIRS else (REACHING_BACK,)


def distinct_variants(channels: Channels, variants: tuple[MergeVariant, ...]) -> list[MergeVariant]:
    """The variants that can produce different schedules (the first of each group of equal ones).

    With chunks much longer than a link's latency, every variant caps messages at one chunk:
    they would all produce the same schedule (which runs to prefer matters only when messages
    merge), so only the first runs.
    """
    kept: list[MergeVariant] = []
    seen: list[tuple[np.ndarray, np.ndarray, tuple[bool, bool, int]]] = []
    for variant in variants:
        direct, routed = message_caps(channels, variant.latency_ratio)
        merges = bool(direct.max(initial=1) > 1 or routed.max(initial=1) > 1)
        key = (direct, routed, (variant.extend_held and merges, variant.reach_back and merges, variant.ranges if merges and not channels.routed else 1))
        if not any(np.array_equal(direct, d) and np.array_equal(routed, r) and key[2] == rules for d, r, rules in seen):
            kept.append(variant)
            seen.append(key)
    return kept


@dataclass
class _Search:
    topology: Topology
    channels: Channels
    k: int
    size_bytes: int
    seed: int
    trials: int
    variants: tuple[MergeVariant, ...]
    routing: ChannelRouting | None = None
    owner_start: np.ndarray | None = None
    """Unequal shares of a group's All-Reduce (:func:`~chakra_collectives.synth.shares.share_layouts`); ``None``: ``k`` chunks per NPU."""

    def best(self, channels: Channels, *, judge_by_model: bool, name: str, beat_ns: float | None = None) -> Trial:
        """The best trial on ``channels`` (judged by the model for a mirrored switch schedule);
        ``beat_ns``: the trials of variants whose floor is not below it are put off (unless every
        variant's is), and run only if the best of the others is above their floor: the same
        trial as without ``beat_ns``, without them whenever it is below their floor."""
        best: Trial | None = None
        best_index = -1
        variants = distinct_variants(channels, self.variants)
        jobs = [(self.seed + trial, variant) for trial in range(self.trials) for variant in variants]
        # no trial of a variant can finish before its floor: once the best trial is at or below a
        # variant's floor, that variant's trials are not run (nor any once it is at every floor)
        floors = {variant: 0.0 for variant in variants}
        if not judge_by_model and len(jobs) > 1 and not channels.routed and self.owner_start is None:
            floors = {variant: matching_floor_ns(channels, self.k, message_caps(channels, variant.latency_ratio)[0]) for variant in variants}

        hopeless = {variant for variant in variants if beat_ns is not None and floors[variant] >= beat_ns}
        if len(hopeless) == len(variants):
            hopeless = set()

        def may_win(seed: int, variant: MergeVariant) -> bool:
            return variant not in hopeless and (best is None or floors[variant] < best.time_ns)

        put_off = []  # the hopeless variants' trials not run, by index in jobs
        with progress.task(name, total=len(jobs), unit="trials") as done:
            for index, ((seed, variant), schedule) in enumerate(zip(jobs, matchings(channels, self.k, jobs, may_win, self.owner_start))):
                done.advance()
                if schedule is None:
                    if variant in hopeless:
                        put_off.append(index)
                    continue
                judged = self.judge(schedule) if judge_by_model else schedule.time_ns
                if best is None or judged < best.time_ns:
                    best, best_index = Trial(seed=seed, variant=variant, schedule=schedule, time_ns=judged), index
                del schedule
                if best.time_ns <= min(floors.values()):
                    done.update(len(jobs))  # the trials left cannot win: settled
                    break
            assert best is not None
            # the trial all of them would keep is the first of the fastest: a put-off one can be it only from below its floor
            for index in put_off:
                seed, variant = jobs[index]
                if (floors[variant], index) < (best.time_ns, best_index):
                    schedule = _match(channels, self.k, seed, variant, self.owner_start)
                    if (schedule.time_ns, index) < (best.time_ns, best_index):
                        best, best_index = Trial(seed=seed, variant=variant, schedule=schedule, time_ns=schedule.time_ns), index
        return self.pinned(best) if judge_by_model else best

    def best_and_mirrored(self, channels: Channels, twins: np.ndarray) -> tuple[Trial, Trial]:
        """The best all-gather trial on ``channels`` and, of the same matchings renamed by
        ``twins`` (:meth:`~chakra_collectives.synth.channels.Channels.twins`), the best
        reduce-scatter trial by the model: both phases from one search."""
        best: Trial | None = None
        mirrored: Trial | None = None
        variants = distinct_variants(channels, self.variants)
        jobs = [(self.seed + trial, variant) for trial in range(self.trials) for variant in variants]
        with progress.task("all-gather and its mirror", total=len(jobs), unit="trials") as done:
            for (seed, variant), schedule in zip(jobs, matchings(channels, self.k, jobs, owner_start=self.owner_start)):
                if best is None or schedule.time_ns < best.time_ns:
                    best = Trial(seed=seed, variant=variant, schedule=schedule, time_ns=schedule.time_ns)
                renamed = replace(schedule, channel=twins[schedule.channel + len(channels.routed)])
                judged = self.judge(renamed)
                if mirrored is None or judged < mirrored.time_ns:
                    mirrored = Trial(seed=seed, variant=variant, schedule=renamed, time_ns=judged)
                del schedule, renamed
                done.advance()
        assert best is not None and mirrored is not None
        return best, self.pinned(mirrored)

    def judge(self, schedule: Schedule) -> float:
        """The model's time of the Reduce-Scatter mirrored from ``schedule``, its messages leaving
        as soon as their data is there."""
        return predict_time(reduce_scatter_algorithm(schedule, size_bytes=self.size_bytes, routing=self.routing), self.topology)

    def pinned(self, trial: Trial) -> Trial:
        """``trial`` (a Reduce-Scatter judged by :meth:`judge`) pinned where that is faster: over
        detours, its routed messages leaving when the mirrored schedule says
        (:func:`~chakra_collectives.synth.lowering.mirrored_release`; torus2d:8x8 column group,
        K=16: 369.6 us eager, 318.2 us pinned, the matcher's own time; a switch:64 row's or a
        dgx:4x8 column's are faster eager). Asked of the kept trial only (one more prediction)."""
        schedule = trial.schedule
        if self.routing is None or not (schedule.channel < 0).any():
            return trial
        release = mirrored_release(schedule)
        pinned = predict_time(reduce_scatter_algorithm(schedule, size_bytes=self.size_bytes, routing=self.routing, release=release), self.topology)
        return replace(trial, time_ns=pinned, pinned=True) if pinned < trial.time_ns else trial


def matchings(
    channels: Channels, k: int, jobs: list[tuple[int, MergeVariant]], wanted: Callable[[int, MergeVariant], bool] | None = None,
    owner_start: np.ndarray | None = None,
) -> Iterator[Schedule | None]:
    """``match_all_gather(channels, k, seed, ...)`` for every ``(seed, variant)`` of ``jobs``, in
    order. Large problems share them among the machine's cores: the first job
    runs here while processes run the others (forked when this process runs one thread,
    else spawned) -- unless this process may not start any (a Dask worker is daemonic: they
    all run here, one after another); the schedules are the same. A job run here is asked
    ``wanted(seed, variant)`` first, as it comes (None when it is not). ``owner_start``: unequal
    shares (:func:`~chakra_collectives.synth.matcher.match_all_gather`)."""
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers < 2 or channels.num_npus * channels.num_npus * k < PARALLEL_PAIRS or not can_start_processes():
        for seed, variant in jobs:
            yield _match(channels, k, seed, variant, owner_start) if wanted is None or wanted(seed, variant) else None
        return
    import multiprocessing  # imported when used (start-up time: small problems match here)
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("fork" if can_fork() else "spawn")
    with ProcessPoolExecutor(max_workers=workers - 1, mp_context=context) as pool:
        others = [pool.submit(_match, channels, k, seed, variant, owner_start) for seed, variant in jobs[1:]]
        seed, variant = jobs[0]
        yield _match(channels, k, seed, variant, owner_start)
        for future in others:
            yield future.result()


def _match(channels: Channels, k: int, seed: int, variant: MergeVariant, owner_start: np.ndarray | None = None) -> Schedule:
    return match_all_gather(
        channels, k, seed=seed, latency_ratio=variant.latency_ratio, extend_held=variant.extend_held, reach_back=variant.reach_back,
        owner_start=owner_start,
        ranges=variant.ranges,
    )


def _make(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Synthesized:
    """The registry's factory: TACOS for the whole topology (rank ``r`` on NPU ``r``) or, with
    ``options.group``, for the group on its view of the fabric (:func:`tacos_for_group`)."""
    if options.group is not None:
        if num_ranks != len(options.group):
            raise InputError(f"the group has {len(options.group)} ranks; this collective runs over {num_ranks}")
    elif num_ranks != topology.num_npus:
        raise InputError(
            f"TACOS synthesizes for the whole topology ({topology.num_npus} NPUs) or a group of it; this collective runs over {num_ranks} ranks"
        )
    # rescaled to other sizes: one chunk per message and one seed, a schedule whose shape does
    # not depend on the size it was synthesized for
    tuning = {"trials": 1, "merge_variants": (0.0,)} if options.any_size else {"trials": options.trials, "several_runs": options.several_runs}
    common = dict(chunks_per_npu=options.chunks_per_npu, seed=options.seed, root=options.root, pattern=options.pattern, **tuning)
    if options.group is not None:
        found = tacos_for_group(topology, options.group, collective, options.size_bytes, **common)
    else:
        found = tacos(topology, collective, options.size_bytes, to_beat_ns=options.to_beat_ns, in_parts=options.in_parts, **common)
    details = {
        "seed": found.seed,
        "trials": found.trials,
        "phase_seeds": found.seeds if found.phases else (),
        "phase_latency_ratios": tuple(p.latency_ratio for p in found.phases),
        "phase_merge_variants": tuple(str(p.variant) for p in found.phases),
    }
    return Synthesized(found.algorithm, schedule_ns=found.schedule_ns, predicted_ns=found.predicted_ns, bottleneck=found.bottleneck, details=details)


def tacos_for_group(topology: Topology, group: tuple[int, ...], collective: Collective | str, size_bytes: int, **options) -> TacosResult:
    """TACOS for a process group: rank ``i`` on fabric NPU ``group[i]``, the other NPUs carrying traffic.

    Synthesized on the group's view of the fabric (:func:`~chakra_collectives.topology.groups.group_view`:
    non-members are switches, crossed store-and-forward); all-gather, reduce-scatter and
    all-reduce take detours (:func:`~chakra_collectives.synth.channels.detour_channels`: every
    link out of and into a member through non-members, not only each pair's own route). The
    algorithm has ``len(group)`` ranks, ``placement == group``, and every SEND through
    non-members names its fabric path in ``routes``. ``options`` are :func:`tacos`'s.

    >>> from chakra_collectives.topology import mesh2d
    >>> from chakra_collectives.verify import verify_algorithm
    >>> found = tacos_for_group(mesh2d(4, 4), (0, 3, 12, 15), Collective.ALL_GATHER, 2**20)
    >>> found.algorithm.num_ranks, found.algorithm.placement, verify_algorithm(found.algorithm).ok
    (4, (0, 3, 12, 15), True)
    >>> all(path[0] in (0, 3, 12, 15) and path[-1] in (0, 3, 12, 15) for path in found.algorithm.routes)
    True
    """
    view = group_view(topology, group)
    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    found = tacos(view.topology, collective, size_bytes, detours=collective not in FORWARDED, multipath=collective in FORWARDED, **options)
    algo = found.algorithm
    provenance = {**algo.provenance, "topology": topology.name, "group": ",".join(map(str, group))}
    if algo.routes:  # detours: every SEND names its route already
        routes = tuple(view.to_fabric(path) for path in algo.routes)
        placed = replace(algo, routes=routes, placement=tuple(int(g) for g in group), provenance=provenance)
        return replace(found, algorithm=placed)
    paths: dict[tuple[int, int], int] = {}
    routes: list[tuple[int, ...]] = []
    for channel in build_channels(view.topology, chunk_bytes=1).routed:
        paths[channel.src, channel.dst] = len(routes)
        routes.append(tuple(int(view.fabric_node[node]) for node in (channel.src, *(view.topology.links[l].dst for l in channel.links))))
    ops = algo.ops
    route = np.full(len(ops), -1, dtype=np.int32)
    sends = np.flatnonzero(ops.kind == OpKind.SEND)
    for i, rank, peer in zip(sends.tolist(), ops.rank[sends].tolist(), ops.peer[sends].tolist()):
        route[i] = paths.get((rank, peer), -1)
    placed = replace(algo, ops=replace(ops, route=route), routes=tuple(routes), placement=tuple(int(g) for g in group), provenance=provenance)
    return replace(found, algorithm=placed)


def group_floor_ns(topology: Topology, collective: Collective, options: SynthesisOptions, network_model: str = "default") -> float:
    """A floor on TACOS's predicted time for a process group at ``options.chunks_per_npu`` chunks
    per rank, known without synthesizing it (0 where none applies: no group, another collective,
    or the astra-sim model, which pipelines latencies).

    Over detours TACOS sends single chunks, each message holding every link of its route for
    ``latency + chunk / bandwidth`` (the default model): a member receives ``(N-1)K`` messages in
    an all-gather and sends as many in a reduce-scatter (its mirror), all over its own links, so
    its links' message rates bound the time. An all-reduce, both phases, moves at least ``NK``
    messages through every member's in-links and out-links, and ``2N(N-1)K`` into members in all
    -- whatever the shares (:mod:`~chakra_collectives.synth.shares`): a member owning ``c`` chunks
    receives ``NK - c`` in the all-gather and sends its ``c`` at least once, and the mirrored
    reduce-scatter the other way round.
    More chunks pay more latencies: when this exceeds the fastest time found, ``K`` stops (a
    mesh2d:8x8 row, all-gather of 64 MiB: 0.659 ms at K = 64 against the 0.630 ms of K = 32).

    >>> from chakra_collectives.topology import ring
    >>> options = SynthesisOptions(size_bytes=2**20, chunks_per_npu=1, group=(0, 2))
    >>> hop = float(NetworkModel(ring(4)).hop_ns([0], 2**19)[0])      # one chunk over one link
    >>> group_floor_ns(ring(4), Collective.ALL_GATHER, options) == hop / 2   # two links into rank 1
    True
    """
    phases = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)  # the others merge messages
    if options.group is None or collective not in phases or Mode.parse(network_model) is Mode.ASTRA_SIM:
        return 0.0
    n, k = len(options.group), options.chunks_per_npu
    model = NetworkModel(topology)
    rate = 1.0 / model.hop_ns(np.arange(model.num_links), -(-options.size_bytes // (n * k)))  # messages per ns, per link
    members = np.asarray(options.group, dtype=np.int64)
    into = np.bincount(model.link_dst, weights=rate, minlength=topology.num_nodes)[members]
    out = np.bincount(model.link_src, weights=rate, minlength=topology.num_nodes)[members]
    per_member = (n - 1) * k
    if collective is Collective.ALL_GATHER:
        return float((per_member / into).max())
    if collective is Collective.REDUCE_SCATTER:
        return float((per_member / out).max())
    return float(max((n * k / into).max(), (n * k / out).max(), 2 * n * per_member / into.sum(), 2 * n * per_member / out.sum()))


register(
    Synthesizer(
        "tacos",
        _make,
        SUPPORTED,
        "TACOS link-chunk matching on the topology's time-expanded network",
        whole_topology=True,
        groups=True,
        floor=group_floor_ns,
        switch_handling=SWITCH_HANDLING,
        footprint=tacos_footprint,
    )
)
