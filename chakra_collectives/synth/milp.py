"""``milp``: the provably fastest schedule of the link model on small fabrics (an exact MILP).

All-Gather is the time-expanded MILP of :mod:`~chakra_collectives.synth.milp_model`, solved
with HiGHS; Reduce-Scatter is the All-Gather of the reversed channels run backwards in time,
partial sums reduced where they meet (TACOS's time-reversal argument: a Reduce-Scatter and
the All-Gather of the reversed network have the same fastest time, so the MILP's optimum is
Reduce-Scatter's too); All-Reduce is that Reduce-Scatter followed by the All-Gather, each
optimal -- the optimum among Reduce-Scatter-then-All-Gather schedules, not of every All-Reduce.

The schedule is written with the same lowering as TACOS's (:mod:`~chakra_collectives.synth.lowering`):
every SEND waits for the RECV that brought its chunk and for the previous message over its
link, so the network model replays it exactly -- the same time as the MILP's on every fabric
whose hops are whole epochs (every homogeneous one); with hops rounded up to whole epochs the
replay is at most the MILP's time (``details["milp"]`` gives both). Messages carry one chunk each;
the optimum is over schedules of one-chunk messages at ``chunks_per_npu`` chunks per NPU.

Not a candidate of ``best`` (it may take a minute); ``bench/bench_optimality.py`` compares every
producer with it.

>>> from chakra_collectives.topology import ring
>>> from chakra_collectives.network import predict_time
>>> made = _make(ring(4), Collective.ALL_GATHER, 4, SynthesisOptions(size_bytes=4 * 2**20))
>>> made.details["milp"]["optimal"], predict_time(made.algorithm, ring(4)) == made.details["milp"]["optimum_ns"]
(True, True)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from chakra_collectives.errors import InputError, LimitError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.synth.channels import Channels, build_channels
from chakra_collectives.synth.lowering import all_gather_algorithm, all_reduce_algorithm, mirrored_release, reduce_scatter_algorithm
from chakra_collectives.synth.matcher import match_all_gather
from chakra_collectives.synth.milp_model import DEFAULT_TIME_LIMIT_S, MAX_VARIABLES, MilpSolution, NoScheduleFound, build_model, channel_hops, lower_epochs, solve_all_gather
from chakra_collectives.synth.registry import SynthesisOptions, Synthesized, Synthesizer, register
from chakra_collectives.synth.schedule import NO_ANCHOR, Schedule
from chakra_collectives.topology import Topology

SUPPORTED = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)

MAX_NPUS = 64
"""Largest fabric ``milp`` sizes its model for (the model grows with NPUs^2 x chunks x epochs;
:data:`~chakra_collectives.synth.milp_model.MAX_VARIABLES` refuses most above 16 NPUs)."""


def to_schedule(solution: MilpSolution, num_npus: int, chunks_per_npu: int, num_direct: int, num_routed: int) -> Schedule:
    """The solution as an All-Gather :class:`~chakra_collectives.synth.matcher.Schedule`: messages in
    start order, each NPU's program in time order (at one epoch receives, then sends), routed
    sends anchored to an operation of their NPU that completes when they leave.

    >>> from chakra_collectives.topology import ring
    >>> ch = build_channels(ring(3), chunk_bytes=64)
    >>> s = to_schedule(solve_all_gather(ch, 1), 3, 1, ch.num_direct, 0)
    >>> s.num_transfers, s.time_ns == float(ch.hop_ns(ch.direct_link[:1], 1)[0])   # both neighbours at once: one hop
    (6, True)
    """
    hops = solution.hops
    order = np.lexsort((solution.chunk, solution.channel, solution.start))
    chunk, channel, start = solution.chunk[order], solution.channel[order], solution.start[order]
    src, dst = hops.src[channel], hops.dst[channel]
    arrive = start + hops.epochs[channel]
    key = hops.key[channel]
    tag = np.zeros(len(chunk), dtype=np.int32)
    seen: dict[int, int] = {}
    for i, k in enumerate(key.tolist()):
        tag[i] = seen.get(k, 0)
        seen[k] = tag[i] + 1
    # programs: (epoch, receive before send, transfer order)
    events = sorted(
        [(int(arrive[i]), 0, i, int(dst[i])) for i in range(len(chunk))] + [(int(start[i]), 1, i, int(src[i])) for i in range(len(chunk))]
    )
    send_seq = np.zeros(len(chunk), dtype=np.int32)
    recv_seq = np.zeros(len(chunk), dtype=np.int32)
    position = [0] * num_npus
    completes: dict[tuple[int, int], tuple[int, bool]] = {}  # (npu, epoch) -> an op completing then
    for epoch, is_send, i, npu in events:
        (send_seq if is_send else recv_seq)[i] = position[npu]
        position[npu] += 1
        if not is_send:
            completes.setdefault((npu, epoch), (i, False))
    for i in range(len(chunk)):
        completes.setdefault((int(src[i]), int(arrive[i])), (i, True))  # a SEND completes on arrival
    anchor = np.full(len(chunk), NO_ANCHOR, dtype=np.int32)
    anchor_is_send = np.zeros(len(chunk), dtype=bool)
    for i in np.flatnonzero((key < 0) & (start > 0)).tolist():
        found = completes.get((int(src[i]), int(start[i])))
        if found is not None:
            anchor[i], anchor_is_send[i] = found
    epoch = solution.epoch_ns
    return Schedule(
        num_npus=num_npus, chunks_per_npu=chunks_per_npu, chunk=chunk.astype(np.int32), count=np.ones(len(chunk), np.int32),
        src=src.astype(np.int32), dst=dst.astype(np.int32), start=start * epoch, end=arrive * epoch, channel=key.astype(np.int32),
        tag=tag, send_seq=send_seq, recv_seq=recv_seq, anchor=anchor, anchor_is_send=anchor_is_send,
        max_chunks=1, num_direct=num_direct, num_routed=num_routed,
    )


def _phase(channels: Channels, options: SynthesisOptions, time_limit_s: float, name: str) -> tuple[Schedule, MilpSolution]:
    """One All-Gather phase: the MILP's schedule, or -- when the time limit passes before the MILP
    finds any -- TACOS's greedy one (one-chunk messages), with the gap to what the MILP proved."""
    try:
        solution = solve_all_gather(channels, options.chunks_per_npu, time_limit_s=time_limit_s, where=name)
    except NoScheduleFound as stopped:
        greedy = match_all_gather(channels, options.chunks_per_npu, latency_ratio=0.0)
        hops = channel_hops(channels)
        epochs = max(int(np.ceil(greedy.time_ns / hops.epoch_ns - 1e-9)), stopped.lower_epochs)
        empty = np.zeros(0, dtype=np.int64)
        note = f"{stopped}: TACOS's greedy schedule kept"
        solution = MilpSolution(empty, empty, empty, hops, epochs, stopped.lower_epochs, build_model(hops, channels.num_npus, options.chunks_per_npu, stopped.lower_epochs, matrices=False).size, time_limit_s, note)
        return greedy, solution
    schedule = to_schedule(solution, channels.num_npus, options.chunks_per_npu, channels.num_direct, len(channels.routed))
    return schedule, solution


def milp_schedule(topology: Topology, collective: Collective, options: SynthesisOptions) -> tuple[CollectiveAlgorithm, list[MilpSolution]]:
    """The MILP's algorithm for ``collective`` and the solution of each phase (see the module docstring)."""
    if collective not in SUPPORTED:
        raise InputError(f"milp synthesizes {', '.join(c.value for c in SUPPORTED)}, not {collective.value}")
    if topology.num_npus < 2:
        raise InputError("a collective needs at least 2 NPUs")
    n, k = topology.num_npus, options.chunks_per_npu
    channels = build_channels(topology, chunk_bytes=-(-options.size_bytes // (n * k)))
    if n > MAX_NPUS:  # too large to size exactly: at least one send variable per (chunk, channel)
        at_least = n * k * (channels.num_direct + len(channels.routed))
        raise LimitError(
            f"{topology.name} has {n} NPUs: its MILP has at least {at_least:,} variables; milp solves fabrics of at most {MAX_NPUS} NPUs "
            f"and {MAX_VARIABLES:,} variables (16 NPUs at a few chunks each)"
        )
    limit = DEFAULT_TIME_LIMIT_S if options.time_limit_s is None else options.time_limit_s
    provenance = {"algorithm": "milp", "topology": topology.name, "chunks_per_npu": str(k)}
    where = f"milp on {topology.name}"
    if collective is Collective.ALL_GATHER:
        schedule, solution = _phase(channels, options, limit, where)
        return all_gather_algorithm(schedule, size_bytes=options.size_bytes, name="milp", provenance=provenance), [solution]
    mirror = channels.mirror()
    if mirror is not None:  # the reversed network is the same network: one solve serves both phases
        gather, solution = _phase(channels, options, limit, where)
        reverse, phases = replace(gather, channel=mirror[gather.channel]), [solution]
    else:
        phase_limit = limit if collective is Collective.REDUCE_SCATTER else limit / 2
        reverse, solution = _phase(channels.reversed(), options, phase_limit, where)
        phases = [solution]
    if collective is Collective.REDUCE_SCATTER:
        return reduce_scatter_algorithm(reverse, size_bytes=options.size_bytes, name="milp", provenance=provenance, release=mirrored_release(reverse)), phases
    if mirror is None:
        gather, solution = _phase(channels, options, limit / 2, where)
        phases.append(solution)
    algorithm = all_reduce_algorithm(reverse, gather, size_bytes=options.size_bytes, name="milp", provenance=provenance, release=mirrored_release(reverse))
    return algorithm, phases


def describe(phases: list[MilpSolution], collective: Collective) -> dict[str, Any]:
    """What ``synth`` reports under ``milp``: the optimum proved, the gap, the model's size."""
    repeat = 2 if collective is Collective.ALL_REDUCE and len(phases) == 1 else 1
    found = sum(p.time_ns for p in phases) * repeat
    lower = sum(p.lower_epochs * p.epoch_ns for p in phases) * repeat
    return {
        "optimal": all(p.optimal for p in phases),
        "gap": (found - lower) / found,
        "optimum_ns": found,
        "lower_bound_ns": lower,
        "epoch_ns": phases[0].epoch_ns,
        "epochs": [p.epochs for p in phases],
        "lower_epochs": [p.lower_epochs for p in phases],
        "variables": max(p.size.variables for p in phases),
        "constraints": max(p.size.constraints for p in phases),
        "solve_s": sum(p.solve_s for p in phases),
        "exact_epochs": all(bool(np.allclose(p.hops.epochs * p.epoch_ns, p.hops.exact_ns)) for p in phases),
        "note": "; ".join(p.note for p in phases if p.note),
        "scope": "one-chunk messages; All-Reduce: Reduce-Scatter then All-Gather" if collective is Collective.ALL_REDUCE else "one-chunk messages",
    }


def model_variables(topology: Topology, chunks_per_npu: int, size_bytes: int) -> int:
    """The variables of one phase's model at its shortest horizon (what solving it costs grows
    with them; no solve).

    >>> from chakra_collectives.topology import ring
    >>> model_variables(ring(8), 1, 2**20) < model_variables(ring(8), 2, 2**20)
    True
    """
    n = topology.num_npus
    hops = channel_hops(build_channels(topology, chunk_bytes=-(-size_bytes // (n * chunks_per_npu))))
    return build_model(hops, n, chunks_per_npu, lower_epochs(hops, n, chunks_per_npu), matrices=False).size.variables


def _make(topology: Topology, collective: Collective, num_ranks: int, options: SynthesisOptions) -> Synthesized:
    """The registry's factory: the MILP for the whole topology, rank ``r`` on NPU ``r``."""
    if num_ranks != topology.num_npus:
        raise InputError(f"milp synthesizes for the whole topology ({topology.num_npus} NPUs); this collective runs over {num_ranks} ranks")
    algorithm, phases = milp_schedule(topology, collective, options)
    return Synthesized(algorithm, details={"milp": describe(phases, collective)})


register(
    Synthesizer(
        "milp",
        _make,
        SUPPORTED,
        "exact time-expanded MILP of the link model (HiGHS), small fabrics",
        whole_topology=True,
        candidate=False,
        chunked=False,
        switch_handling="switches are routed: a message crosses its route's switch hops store-and-forward, never waiting in a switch",
    )
)
