"""Lift a CollectiveAlgorithm to an MSCCL-IR program the MSCCL runtime can load.

1. The algorithm must be well-formed, matched and deadlock-free; it is executed once,
   breadth-first, with rendezvous sends when it finishes that way (a send completes with its
   receive; else eager sends), and every operation gets its completion position ``T``.
2. Operations are grouped into steps, receive chains fused into rcs/rrc/rrs/rrcs
   (:mod:`.fusion`); a step sits at ``K`` = the position of its last operation.
3. Channels: MSCCL pairs the messages of a connection (sender, receiver, channel) in FIFO
   order, the k-th send with the k-th receive, and a fused step's two connections must
   belong to one threadblock (one channel, one receive peer, one send peer). A message and
   the messages fused steps forward it as form a *flow*; flows are placed, in execution
   order, on the lowest channel where every connection keeps one order on both ends (sender
   order = ``K`` of the sending steps, receiver order = ``K`` of the receiving steps) and every
   rank forwards between each pair of peers on that channel one way only.
4. Threadblocks: one per connection endpoint, a receive connection and a send connection
   sharing one when fused steps forward from one to the other (or when they talk to the same
   peer); local steps join the threadblock of the dependency they wait for last.
5. Each threadblock runs its steps in ``K`` order; a dependency on another threadblock becomes
   ``depid``/``deps`` (the latest step of each threadblock waited for, minus those an earlier
   step of the same threadblock already waited for), several of them a run of ``nop`` steps;
   targets get ``hasdep="1"``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass

import numpy as np

from chakra_collectives.errors import AlgorithmError
from chakra_collectives.ir import Collective, CollectiveAlgorithm, OpKind
from chakra_collectives.ir.execution import describe_stuck, execute
from chakra_collectives.ir.matching import Matching, match_messages
from chakra_collectives.ir.ranges import split_ranges
from chakra_collectives.ir.structure import structural_problems
from chakra_collectives.converters.msccl.checks import MAX_STEPS_PER_TB, MAX_TBS_PER_CHANNEL, limit_warnings
from chakra_collectives.converters.msccl.lower import lower_program
from chakra_collectives.converters.msccl.fusion import SEND, Group, OpColumns, form_groups
from chakra_collectives.converters.msccl.options import MscclOptions
from chakra_collectives.converters.msccl.program import BUFFER_LETTERS, Gpu, Program, Step, StepType, Threadblock

_FORWARDING = frozenset({StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND})
"""Fused steps that receive a message and send one on."""

COLL_NAMES = {
    Collective.ALL_REDUCE: "allreduce",
    Collective.ALL_GATHER: "allgather",
    Collective.REDUCE_SCATTER: "reducescatter",
    Collective.ALL_TO_ALL: "alltoall",
    Collective.BROADCAST: "broadcast",
    Collective.REDUCE: "reduce",
    Collective.CUSTOM: "custom",
}
"""``coll`` as the MSCCL runtime (msccl-executor-nccl) spells it."""


@dataclass
class Lifted:
    program: Program
    warnings: list[str]
    rendezvous_free: bool
    """Whether the program finishes with rendezvous sends (checked by reading it back)."""
    layout_note: str | None = None
    """How the layout differs from the first one tried, and why (e.g. more channels)."""


def lift_algorithm(algo: CollectiveAlgorithm, options: MscclOptions | None = None) -> Lifted:
    """The MSCCL-IR program of ``algo`` (see the module docstring), with runtime-limit warnings.

    ``options.fit_limits`` spreads messages over more channels so that no threadblock gets more
    than 64 communication steps and no channel more than 32 threadblocks; a program that still
    exceeds a runtime limit is refused (:class:`~chakra_collectives.errors.AlgorithmError`
    naming the threadblock) rather than written.

    A message of several chunk ranges becomes one step per range (:func:`~chakra_collectives.ir.ranges.split_ranges`,
    with a warning).

    Rendezvous sends: when ``algo`` finishes with rendezvous sends (a send waits for its
    receive, as on a runtime whose per-connection buffers are full), the steps are ordered by
    a rendezvous execution and the program is read back and executed the same way. If that
    layout deadlocks, the layouts of :data:`_RENDEZVOUS_FALLBACKS` are tried in turn (flows
    spread over more channels, then unfused steps); if none finishes, the export is refused
    unless ``options.allow_rendezvous_deadlock`` (then a warning).
    An algorithm that itself deadlocks with rendezvous sends gets a warning that its program
    relies on the runtime's buffers.
    """
    options = options or MscclOptions()
    split_note = None
    if algo.ops.multi_range:  # MSCCL-IR steps move one run of consecutive chunks each
        messages = int(np.count_nonzero((np.diff(algo.ops.more_ptr) > 0) & (algo.ops.kind == OpKind.SEND)))
        algo = algo.with_ops(split_ranges(algo.ops))
        split_note = f"{messages} messages of several chunk ranges are sent as one step per range (MSCCL-IR steps move consecutive chunks)"
    matching = _check_exportable(algo)
    execution = execute(algo, matching.partner, semantics="rendezvous", order="fifo")
    rendezvous_free = execution.finished
    if not rendezvous_free:
        execution = execute(algo, matching.partner, semantics="eager", order="fifo")
    if not execution.finished:
        lines = describe_stuck(algo, matching.partner, execution, "eager")
        raise AlgorithmError("deadlocks, so it has no MSCCL-IR program: " + "; ".join(lines[:2]))
    position = [0] * len(algo.ops)
    for t, i in enumerate(execution.order):
        position[i] = t
    cols = OpColumns(algo)
    kept, not_kept = _imported_layout(algo, cols, matching, position, options, rendezvous_free)
    lifted = kept or _own_layout(algo, cols, matching, position, options, rendezvous_free)
    if not_kept:
        lifted.layout_note = "; ".join(filter(None, [f"the imported threadblocks are not kept: {not_kept}", lifted.layout_note]))
    if split_note:
        lifted.warnings.append(split_note)
    return lifted


_RELIES_ON_BUFFERS = (
    "the algorithm deadlocks with rendezvous sends (a send that waits for its receive), so its "
    "program relies on the MSCCL runtime's per-connection buffers"
)
KEPT_NOTE = "threadblocks and channels as imported from MSCCL-IR"
""":attr:`Lifted.layout_note` of a program laid out as the algorithm was imported."""


def _imported_layout(
    algo: CollectiveAlgorithm, cols: OpColumns, matching: Matching, position: list[int], options: MscclOptions, rendezvous_free: bool
) -> tuple[Lifted | None, str | None]:
    """The program in the threadblocks and channels the operations were imported with, if
    they carry them and the layout keeps the rules of MSCCL-IR, the runtime's limits (with
    ``fit_limits``) and the algorithm's freedom from deadlock with rendezvous sends (read back
    and run, when the algorithm has it; with buffered sends, steps in ``K`` order cannot
    deadlock, as in :class:`_Layout`); else ``None`` and why not (``None`` too when nothing
    was imported)."""
    ops = algo.ops
    placed = ops.threadblock >= 0
    if not placed.any():
        return None, None
    if not placed.all() or np.any(ops.channel < 0):
        return None, "only some operations carry one"
    layout = (ops.threadblock.tolist(), ops.channel.tolist())
    reason = ""
    for fuse in dict.fromkeys((options.fuse, False)):
        try:
            program = _program(algo, cols, matching, position, options, fuse=fuse, placed=layout)
        except _NotKept as error:
            return None, str(error)
        problems = limit_warnings(program) if options.fit_limits else []
        if problems:
            return None, f"they exceed the MSCCL runtime's limits ({problems[0]})"
        stuck = rendezvous_deadlock(program, algo) if rendezvous_free else []
        if not stuck:
            notes = [] if rendezvous_free else [_RELIES_ON_BUFFERS]
            return Lifted(program, limit_warnings(program) + notes, rendezvous_free=rendezvous_free, layout_note=KEPT_NOTE), None
        reason = f"they would deadlock with rendezvous sends ({'; '.join(stuck[1:2])})"
    return None, reason


def _own_layout(
    algo: CollectiveAlgorithm, cols: OpColumns, matching: Matching, position: list[int], options: MscclOptions, rendezvous_free: bool
) -> Lifted:
    """The program in a layout of the exporter's own (see :func:`lift_algorithm`)."""
    program = _program(algo, cols, matching, position, options, fuse=options.fuse)
    if not rendezvous_free:
        return Lifted(program, _fitted(program, options) + [_RELIES_ON_BUFFERS], rendezvous_free=False)
    layout_note = None
    stuck = rendezvous_deadlock(program, algo)
    if stuck:  # serialising flows in shared threadblocks created a cycle: try safer layouts
        for fuse, spread, note in _RENDEZVOUS_FALLBACKS:
            if fuse and not options.fuse:
                continue
            candidate = _program(algo, cols, matching, position, options, fuse=fuse, spread=spread)
            if (not options.fit_limits or not limit_warnings(candidate)) and not rendezvous_deadlock(candidate, algo):
                program, stuck, layout_note = candidate, [], note
                break
    if stuck:
        problem = (
            "its MSCCL-IR program would deadlock with rendezvous sends although the algorithm does not "
            f"(read back: {'; '.join(stuck[1:3])})"
        )
        if not options.allow_rendezvous_deadlock:
            raise AlgorithmError(problem + "; --allow-rendezvous-deadlock writes it anyway")
        return Lifted(program, _fitted(program, options) + [problem], rendezvous_free=False)
    return Lifted(program, _fitted(program, options), rendezvous_free=True, layout_note=layout_note)


_RENDEZVOUS_FALLBACKS = (
    *((True, c, f"flows are spread over {c} channels, as fewer would deadlock with rendezvous sends") for c in (2, 4, 8, 16, 32)),
    (True, 2**31, "each flow gets its own channel, as fewer channels would deadlock with rendezvous sends"),
    (False, 0, "fused receive chains would deadlock with rendezvous sends, so they are written unfused"),
)
"""Layouts tried, in order, when the first one deadlocks with rendezvous sends: (fuse, spread:
flow ``n`` starts looking for a channel at ``n % spread`` (0: at channel 0), the note that
says what was done)."""


def rendezvous_deadlock(program: Program, algo: CollectiveAlgorithm) -> list[str]:
    """Where ``program``, read back as the importer reads it, gets stuck with rendezvous sends
    (the lines of :func:`~chakra_collectives.ir.execution.describe_stuck`); empty when it
    finishes."""
    lowered = lower_program(program, size_bytes=algo.size_bytes, collective=algo.collective, root=algo.root).algorithm
    partner = match_messages(lowered).partner
    run = execute(lowered, partner, semantics="rendezvous", order="fifo")
    return [] if run.finished else describe_stuck(lowered, partner, run, "rendezvous")


def _program(
    algo: CollectiveAlgorithm,
    cols: OpColumns,
    matching: Matching,
    position: list[int],
    options: MscclOptions,
    *,
    fuse: bool,
    spread: int = 0,
    placed: tuple[list[int], list[int]] | None = None,
) -> Program:
    """Lay ``algo``'s operations (``cols``), completed in ``position`` order, out as an MSCCL-IR
    program: in the threadblocks and channels ``placed`` gives each operation (raises
    :class:`_NotKept` if they break a rule), else in a layout of its own."""
    if placed is not None:
        groups = form_groups(cols, position, fuse=fuse, together=placed[0])
        layout: _Layout = _ImportedLayout(algo.num_ranks, cols, groups, position, matching.partner.tolist(), placed)
    else:
        groups = form_groups(cols, position, fuse=fuse)
        limits = (MAX_STEPS_PER_TB, MAX_TBS_PER_CHANNEL) if options.fit_limits else (math.inf, math.inf)
        layout = _Layout(
            algo.num_ranks, cols, groups, position, matching.partner.tolist(), max_steps=limits[0], max_tbs=limits[1], spread=spread
        )
    program = Program(
        name=options.name if options.name is not None else (algo.name or "chakra-collectives"),
        coll=COLL_NAMES[algo.collective],
        ngpus=algo.num_ranks,
        nchunksperloop=algo.chunk_count,
        nchannels=0,
        inplace=algo.inplace,
        proto=options.proto,
        extra={"outofplace": str(int(not algo.inplace)), "minBytes": str(options.min_bytes), "maxBytes": str(options.max_bytes)},
    )
    layout.build(program, algo)
    return program


def _fitted(program: Program, options: MscclOptions) -> list[str]:
    """The runtime-limit warnings of ``program``; with ``fit_limits`` the first one is an error."""
    problems = limit_warnings(program)
    if problems and options.fit_limits:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise AlgorithmError(
            f"does not fit the MSCCL runtime's limits even with more channels: {problems[0]}{more}; "
            "--no-fit-limits writes it anyway"
        )
    return problems


def _check_exportable(algo: CollectiveAlgorithm) -> Matching:
    """Refuse what MSCCL-IR cannot express; return the message pairing."""
    ops = algo.ops
    problems = structural_problems(algo, limit=1)
    if problems:
        raise AlgorithmError(f"is not well-formed, so it has no MSCCL-IR program: {problems[0]}")
    for mask, what in (
        (ops.kind == OpKind.COMPUTE, "is opaque compute (MSCCL-IR has no step for it)"),
        (ops.count < 0, "moves bytes without saying which chunks (MSCCL-IR steps move chunks)"),
    ):
        bad = np.flatnonzero(mask)
        if len(bad):
            i = int(bad[0])
            raise AlgorithmError(what, rank=int(ops.rank[i]), node=int(ops.node_id[i]))
    matching = match_messages(algo, limit=1)
    if matching.problems:
        raise AlgorithmError(f"has unmatched messages, so it has no MSCCL-IR program: {matching.problems[0]}")
    return matching


class _Layout:
    """Channels, threadblocks and steps for a grouping of the operations into steps."""

    def __init__(
        self,
        num_ranks: int,
        cols: OpColumns,
        groups: list[Group],
        position: list[int],
        partner: list[int],
        *,
        max_steps: float,
        max_tbs: float,
        spread: int = 0,
    ) -> None:
        self._index(num_ranks, cols, groups, position, partner)
        self.spread = spread
        self.max_steps = max_steps
        self.max_tbs = max_tbs
        self.channel, self.pairs = self._assign_channels()

    def _index(self, num_ranks: int, cols: OpColumns, groups: list[Group], position: list[int], partner: list[int]) -> None:
        """Keep the groups with their keys ``K`` and the group of every operation."""
        self.num_ranks = num_ranks
        self.cols = cols
        self.groups = groups
        self.position = position
        self.partner = partner
        self.key = [position[g.last] for g in groups]
        self.group_of = [0] * cols.size
        for g, group in enumerate(groups):
            for op in group.ops:
                self.group_of[op] = g

    # -- 3 and 4. channels and which connections share a threadblock
    def _assign_channels(self) -> tuple[dict[int, int], dict[tuple[int, int, int], int]]:
        """Channel of every message (keyed by its send operation) and the threadblock pairings.

        A *flow* is a message and the messages fused steps forward it as; its messages share
        one channel, so every fused step finds its receive and send connection in one
        threadblock. Flows are placed in execution order on the lowest channel where (a) every
        connection keeps the same order on both ends and (b) each rank's forwarding routes
        ``recv peer -> send peer`` on that channel still pair each peer once. Returns the
        channels and ``{(rank, chan, recv peer): send peer}``.
        """
        cols, key, group_of, partner = self.cols, self.key, self.group_of, self.partner
        forward: dict[int, int] = {}  # message received by a fused step -> the message it sends on
        for group in self.groups:
            if group.type in _FORWARDING:
                forward[partner[group.ops[0]]] = group.ops[-1]
        forwarded = set(forward.values())
        heads = sorted(
            (i for i in range(cols.size) if cols.kind[i] == SEND and i not in forwarded), key=lambda i: key[group_of[i]]
        )
        placement = _Placement(self.max_steps, self.max_tbs)
        channel: dict[int, int] = {}
        for n, head in enumerate(heads):
            flow = [head]
            while flow[-1] in forward:
                flow.append(forward[flow[-1]])
            messages = [(cols.rank[m], cols.peer[m], key[group_of[m]], key[group_of[partner[m]]]) for m in flow]
            chan = n % self.spread if self.spread else 0
            while not placement.place(messages, chan):
                chan += 1
            for m in flow:
                channel[m] = chan
        self.placement = placement
        return channel, placement.pairs()

    def _endpoints(self, g: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """(send peer, channel) and (receive peer, channel) of group ``g``'s step."""
        cols, group = self.cols, self.groups[g]
        send = recv = None
        if group.type.sends:  # the send is a group's last operation, the receive its first
            op = group.ops[-1]
            send = (cols.peer[op], self.channel[op])
        if group.type.receives:
            op = group.ops[0]
            recv = (cols.peer[op], self.channel[self.partner[op]])
        return send, recv

    def build(self, program: Program, algo: CollectiveAlgorithm) -> None:
        """Fill ``program`` with GPUs, threadblocks and steps."""
        cols = self.cols
        tbs_of_rank: list[dict[tuple[int, int, int], list[int]]] = [{} for _ in range(self.num_ranks)]
        tb_of_group = [None] * len(self.groups)
        endpoints = [self._endpoints(g) for g in range(len(self.groups))]
        # communication endpoints of each rank: (send peer, chan) and (recv peer, chan)
        sends: list[set[tuple[int, int]]] = [set() for _ in range(self.num_ranks)]
        recvs: list[set[tuple[int, int]]] = [set() for _ in range(self.num_ranks)]
        for g, (send, recv) in enumerate(endpoints):
            rank = cols.rank[self.groups[g].ops[0]]
            if send:
                sends[rank].add(send)
            if recv:
                recvs[rank].add(recv)
        tb_for_send: list[dict] = [{} for _ in range(self.num_ranks)]
        tb_for_recv: list[dict] = [{} for _ in range(self.num_ranks)]
        routes: list[list[tuple[int, int, int]]] = [[] for _ in range(self.num_ranks)]
        for (rank, chan, q), p in self.pairs.items():
            routes[rank].append((p, q, chan))
        for rank in range(self.num_ranks):
            keys = routes[rank]
            paired_s = {(p, c) for p, q, c in keys}
            paired_r = {(q, c) for p, q, c in keys}
            loose_s = sorted(sends[rank] - paired_s)
            loose_r = set(recvs[rank] - paired_r)
            steps_on = self.placement.steps_on
            for p, c in loose_s:
                both = steps_on(rank, c, ("send", p)) + steps_on(rank, c, ("recv", p))
                if (p, c) in loose_r and both <= self.max_steps:  # same peer both ways: one threadblock, as MSCCLang does
                    keys.append((p, p, c))
                    loose_r.discard((p, c))
                else:
                    keys.append((p, -1, c))
            keys += [(-1, q, c) for q, c in loose_r]
            for key in keys:
                p, q, c = key
                if p >= 0:
                    tb_for_send[rank][p, c] = (p, q, c, 0)
                if q >= 0:
                    tb_for_recv[rank][q, c] = (p, q, c, 0)
        # every group to a threadblock; local steps follow the dependency they wait for last
        local = _LocalSteps(self, endpoints, tb_for_send, tb_for_recv)
        for g in sorted(range(len(self.groups)), key=self.key.__getitem__):
            send, recv = endpoints[g]
            rank = cols.rank[self.groups[g].ops[0]]
            if send is not None:
                key = tb_for_send[rank][send]
            elif recv is not None:
                key = tb_for_recv[rank][recv]
            else:
                key = local.place(g, rank, tb_of_group)
            tb_of_group[g] = key
            tbs_of_rank[rank].setdefault(key, []).append(g)
        self._emit(program, algo, tbs_of_rank)

    @staticmethod
    def _connections(key: tuple) -> tuple[int, int, int]:
        """(send peer, receive peer, channel) of the threadblock ``key`` names."""
        return key[:3]

    # -- 5. steps, dependencies, nops
    def _emit(self, program: Program, algo: CollectiveAlgorithm, tbs_of_rank) -> None:
        cols, groups, group_of = self.cols, self.groups, self.group_of
        dep_ptr, dep_idx = cols.dep_ptr, cols.dep_idx
        slot = [0] * len(groups)
        tb_number = [0] * len(groups)
        program.gpus = []
        max_chan = 0
        for rank in range(self.num_ranks):
            keys = sorted(tbs_of_rank[rank])  # MSCCLang's order: (send, recv, chan, extra local threadblock)
            tb_id = {key: n for n, key in enumerate(keys)}
            for key in keys:  # each group's threadblock and index among its real steps
                number = tb_id[key]
                for n, g in enumerate(tbs_of_rank[rank][key]):
                    slot[g] = n
                    tb_number[g] = number
            # dependency targets per group: {tb id: real-step index}, pruned
            plans: dict[tuple, list[list[tuple[int, int]]]] = {}
            for key in keys:
                mine = tb_id[key]
                waited: dict[int, int] = {}
                plan = []
                for g in tbs_of_rank[rank][key]:
                    targets: dict[int, int] = {}
                    for op in groups[g].ops:
                        for d in dep_idx[dep_ptr[op] : dep_ptr[op + 1]]:
                            h = group_of[d]
                            u = tb_number[h]
                            if h == g or u == mine:
                                continue
                            if slot[h] > targets.get(u, -1):
                                targets[u] = slot[h]
                    needed = sorted((u, j) for u, j in targets.items() if j > waited.get(u, -1))
                    for u, j in needed:
                        waited[u] = j
                    plan.append(needed)
                plans[key] = plan
            # real-step index -> final index (nops come before the step that needs them)
            final: dict[int, list[int]] = {}
            for key in keys:
                index, where_ = 0, []
                for needed in plans[key]:
                    index += max(0, len(needed) - 1)
                    where_.append(index)
                    index += 1
                final[tb_id[key]] = where_
            hasdep: set[tuple[int, int]] = set()
            for key in keys:
                for needed in plans[key]:
                    hasdep.update((u, final[u][j]) for u, j in needed)
            gpu = Gpu(
                id=rank,
                i_chunks=int(algo.input_chunks[rank]),
                o_chunks=int(algo.output_chunks[rank]),
                s_chunks=0,
            )
            for key in keys:
                p, q, c = self._connections(key)
                max_chan = max(max_chan, c)
                tb = Threadblock(id=tb_id[key], send=p, recv=q, chan=c)
                for g, needed in zip(tbs_of_rank[rank][key], plans[key]):
                    for u, j in needed[:-1]:
                        tb.steps.append(
                            Step(s=len(tb.steps), type=StepType.NOP, depid=u, deps=final[u][j])
                        )
                    step = self._step(g, len(tb.steps))
                    if needed:
                        u, j = needed[-1]
                        step.depid, step.deps = u, final[u][j]
                    step.hasdep = (tb.id, step.s) in hasdep
                    tb.steps.append(step)
                gpu.threadblocks.append(tb)
            gpu.s_chunks = max(
                [gpu_scratch_end(s) for tb in gpu.threadblocks for s in tb.steps] + [0]
            )
            program.gpus.append(gpu)
        program.nchannels = max_chan + 1

    def _step(self, g: int, s: int) -> Step:
        cols, group = self.cols, self.groups[g]
        kind = group.type
        first, last = group.ops[0], group.ops[-1]
        if group.src_from >= 0:
            src = cols.dst[group.src_from] if group.dst_as_src else cols.src[group.src_from]
        else:  # r, rcs: the sender's slot (informational)
            src = cols.src[self.partner[first]]
        if kind in (StepType.SEND, StepType.RECV_REDUCE_SEND):  # the receiver's slot (informational)
            dst = cols.dst[self.partner[last]]
        elif kind in (StepType.RECV, StepType.RECV_COPY_SEND):
            dst = cols.dst[first]
        else:
            dst = cols.dst[group.ops[1] if len(group.ops) > 1 else first]
        return Step(
            s=s,
            type=kind,
            srcbuf=BUFFER_LETTERS[src[0]],
            srcoff=src[1],
            dstbuf=BUFFER_LETTERS[dst[0]],
            dstoff=dst[1],
            cnt=cols.count[first],
        )


class _NotKept(Exception):
    """Why an algorithm's imported threadblocks cannot be its exported program's."""


class _ImportedLayout(_Layout):
    """The threadblocks and channels the operations were imported with (``OpTable.threadblock``
    and ``channel``), checked: a step's operations share a threadblock; a threadblock has one
    channel, one send peer and one receive peer; a connection belongs to one threadblock; both
    ends of a connection meet its messages in one order. Steps run in ``K`` order, as in
    :class:`_Layout`. Raises :class:`_NotKept` when a rule fails.
    """

    def __init__(self, num_ranks: int, cols: OpColumns, groups: list[Group], position: list[int], partner: list[int], placed) -> None:
        self._index(num_ranks, cols, groups, position, partner)
        threadblock, channel = placed
        self.threadblock_of = [(cols.rank[group.ops[0]], threadblock[group.ops[0]]) for group in groups]
        self.spec: dict[tuple[int, int], list[int]] = {}  # (rank, threadblock) -> [send peer, recv peer, channel]
        for g, group in enumerate(groups):
            where = self.threadblock_of[g]
            for op in group.ops:
                if threadblock[op] != where[1]:
                    raise _NotKept(f"rank {where[0]}: one step's operations come from threadblocks {where[1]} and {threadblock[op]}")
                self._agree(where, 2, channel[op], "channels")
            if group.type.sends:
                self._agree(where, 0, cols.peer[group.ops[-1]], "send peers")
            if group.type.receives:
                self._agree(where, 1, cols.peer[group.ops[0]], "receive peers")
        owner: dict[tuple, int] = {}
        for (rank, tb), (send, recv, chan) in self.spec.items():
            for role, peer in (("send", send), ("recv", recv)):
                if peer >= 0 and owner.setdefault((rank, role, peer, chan), tb) != tb:
                    does = "send to" if role == "send" else "receive from"
                    raise _NotKept(f"rank {rank}: threadblocks {owner[rank, role, peer, chan]} and {tb} both {does} {peer} on channel {chan}")
        self._check_message_order(channel)

    def _agree(self, where: tuple[int, int], field: int, value: int, what: str) -> None:
        spec = self.spec.setdefault(where, [-1, -1, -1])
        if spec[field] >= 0 and spec[field] != value:
            raise _NotKept(f"rank {where[0]}: threadblock {where[1]} has two {what} ({spec[field]} and {value})")
        spec[field] = value

    def _check_message_order(self, channel) -> None:
        """On every connection the k-th send (in ``K`` order) must meet the k-th receive."""
        cols, key, group_of, partner = self.cols, self.key, self.group_of, self.partner
        connections: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        for op in range(cols.size):
            if cols.kind[op] == SEND:
                receive = partner[op]
                if channel[receive] != channel[op]:
                    raise _NotKept(f"rank {cols.rank[op]} sends on channel {channel[op]} what rank {cols.peer[op]} receives on channel {channel[receive]}")
                connections.setdefault((cols.rank[op], cols.peer[op], channel[op]), []).append((key[group_of[op]], key[group_of[receive]]))
        for (sender, receiver, chan), messages in connections.items():
            received = [r for _, r in sorted(messages)]
            if received != sorted(received):
                raise _NotKept(f"ranks {sender} and {receiver} would pair their messages on channel {chan} in different orders")

    @staticmethod
    def _connections(key: tuple) -> tuple[int, int, int]:
        return key[1:]

    def build(self, program: Program, algo: CollectiveAlgorithm) -> None:
        tbs_of_rank: list[dict[tuple, list[int]]] = [{} for _ in range(self.num_ranks)]
        for g in sorted(range(len(self.groups)), key=self.key.__getitem__):
            rank, tb = self.threadblock_of[g]
            send, recv, chan = self.spec[rank, tb]
            tbs_of_rank[rank].setdefault((tb, send, recv, chan), []).append(g)
        self._emit(program, algo, tbs_of_rank)


class _LocalSteps:
    """Which threadblock each local step (copy, reduce) joins, within the runtime's step limit.

    A local step joins the threadblock of the dependency it waits for last, if that one keeps
    room; else the threadblock of another dependency with room (latest first), else an extra
    threadblock without peers (the last one opened with room, else a new one on the lowest
    channel with fewer than ``max_tbs`` threadblocks). A threadblock's load counts its
    communication steps from the start, and every step with the nops it may need (one per
    other step -- for a local step, other threadblock -- it waits for beyond the first:
    :meth:`_Layout._emit` writes at most that many).
    """

    def __init__(self, layout: "_Layout", endpoints: list, tb_for_send: list[dict], tb_for_recv: list[dict]) -> None:
        self.layout = layout
        self.endpoints = endpoints
        ranks = layout.num_ranks
        self.load: list[dict[tuple, int]] = [{} for _ in range(ranks)]
        self.tbs_on: list[Counter] = []
        for rank in range(ranks):
            keys = set(tb_for_send[rank].values()) | set(tb_for_recv[rank].values())
            self.tbs_on.append(Counter(key[2] for key in keys))
        self.extra: list[list[tuple]] = [[] for _ in range(ranks)]
        if layout.max_steps == math.inf or all(send or recv for send, recv in endpoints):
            return  # every local step follows its latest dependency, or there is none
        cols, group_of, groups, load = layout.cols, layout.group_of, layout.groups, self.load
        dep_ptr, dep_idx, op_rank = cols.dep_ptr, cols.dep_idx, cols.rank
        for g, (send, recv) in enumerate(endpoints):
            if send or recv:  # the step and a nop per dependency beyond the first, reserved
                ops = groups[g].ops
                rank = op_rank[ops[0]]
                key = tb_for_send[rank][send] if send else tb_for_recv[rank][recv]
                deps = [group_of[d] for op in ops for d in dep_idx[dep_ptr[op] : dep_ptr[op + 1]]]
                waited = len(set(deps) - {g}) if len(deps) > 1 else 1
                load[rank][key] = load[rank].get(key, 0) + max(1, waited)

    def _waited(self, g: int, tb_of_group: list) -> list[tuple]:
        """Threadblocks group ``g`` waits for, the one of its latest dependency first."""
        layout = self.layout
        cols, group_of, key = layout.cols, layout.group_of, layout.key
        deps = {group_of[d] for op in layout.groups[g].ops for d in cols.deps(op)} - {g}
        waited: list[tuple] = []
        for h in sorted(deps, key=key.__getitem__, reverse=True):
            if tb_of_group[h] not in waited:
                waited.append(tb_of_group[h])
        return waited

    def _cost(self, waited: list[tuple], key: tuple) -> int:
        return 1 + max(0, sum(1 for k in waited if k != key) - 1)

    def place(self, g: int, rank: int, tb_of_group: list) -> tuple:
        """The threadblock of local group ``g`` (its step and nops counted there)."""
        waited = self._waited(g, tb_of_group)
        load, limit = self.load[rank], self.layout.max_steps
        for key in waited + self.extra[rank][::-1]:
            cost = self._cost(waited, key)
            if load.get(key, 0) + cost <= limit:
                break
        else:
            key = self._open(rank)
            cost = self._cost(waited, key)
        load[key] = load.get(key, 0) + cost
        return key

    def _open(self, rank: int) -> tuple:
        tbs_on = self.tbs_on[rank]
        chan = 0
        while tbs_on[chan] >= self.layout.max_tbs:
            chan += 1
        key = (-1, -1, chan, sum(1 for k in self.extra[rank] if k[2] == chan))
        tbs_on[chan] += 1
        self.extra[rank].append(key)
        return key


def gpu_scratch_end(step: Step) -> int:
    """One past the highest scratch chunk ``step`` touches locally (0 if none)."""
    end = 0
    if step.type.reads_src and step.srcbuf == "s":
        end = step.srcoff + step.cnt
    if step.type.stores and step.dstbuf == "s":
        end = max(end, step.dstoff + step.cnt)
    return end


class _Placement:
    """Flows placed so far, and the threadblocks they imply on every (rank, channel).

    Per connection: the step keys of its messages on both ends (kept sorted, so a new message
    fits only where both orders agree). Per (rank, channel): the forwarding routes
    ``recv peer -> send peer`` and the steps of each threadblock-to-be, keyed ``("route", q, p)``,
    ``("send", p)`` or ``("recv", q)``, so that no threadblock gets more than ``max_steps``
    steps and no channel more than ``max_tbs`` threadblocks (the MSCCL runtime's limits).
    Every change is journaled, so a flow that does not fit is taken back.
    """

    def __init__(self, max_steps: int, max_tbs: int) -> None:
        self.max_steps = max_steps
        self.max_tbs = max_tbs
        self.connections: dict[tuple[int, int, int], tuple[list[int], list[int]]] = {}
        self.routes: dict[tuple[int, int], tuple[dict[int, int], dict[int, int]]] = {}
        self.steps: dict[tuple[int, int], dict[tuple, int]] = {}
        self._undo: list = []  # rare changes (new routes), as closures
        self._undo_messages: list[tuple[list[int], list[int], int]] = []
        self._undo_counts: list[tuple[dict, tuple, int | None]] = []

    def place(self, messages: list[tuple[int, int, int, int]], chan: int) -> bool:
        """Put a flow of ``(sender, receiver, sender key, receiver key)`` on ``chan`` if it fits."""
        self._undo.clear()
        self._undo_messages.clear()
        self._undo_counts.clear()
        if self._fits(messages, chan):
            return True
        for senders, receivers, at in reversed(self._undo_messages):
            del senders[at]
            del receivers[at]
        for counts, key, before in reversed(self._undo_counts):
            if before is None:
                del counts[key]
            else:
                counts[key] = before
        for undo in reversed(self._undo):
            undo()
        return False

    def _fits(self, messages, chan: int) -> bool:
        for n, (sender, receiver, sent, received) in enumerate(messages):
            if not self._message(sender, receiver, chan, sent, received):
                return False
            if n == 0 and not self._add_step(sender, chan, self._send_key(sender, chan, receiver)):
                return False
            if n + 1 < len(messages):
                if not self._forward(receiver, chan, sender, messages[n + 1][1]):
                    return False
            elif not self._add_step(receiver, chan, self._recv_key(receiver, chan, sender)):
                return False
        return True

    def _message(self, sender: int, receiver: int, chan: int, sent: int, received: int) -> bool:
        senders, receivers = self.connections.setdefault((sender, receiver, chan), ([], []))
        at = bisect_left(senders, sent)
        if bisect_left(receivers, received) != at:  # the two ends would disagree on the order
            return False
        senders.insert(at, sent)
        receivers.insert(at, received)
        self._undo_messages.append((senders, receivers, at))
        return True

    def _send_key(self, rank: int, chan: int, peer: int) -> tuple:
        _, out = self.routes.get((rank, chan), ({}, {}))
        return ("route", out[peer], peer) if peer in out else ("send", peer)

    def _recv_key(self, rank: int, chan: int, peer: int) -> tuple:
        into, _ = self.routes.get((rank, chan), ({}, {}))
        return ("route", peer, into[peer]) if peer in into else ("recv", peer)

    def _add_step(self, rank: int, chan: int, key: tuple, count: int = 1) -> bool:
        counts = self.steps.setdefault((rank, chan), {})
        before = counts.get(key)
        if before is None and len(counts) >= self.max_tbs:
            return False
        after = (before or 0) + count
        if after > self.max_steps:
            return False
        counts[key] = after
        self._undo_counts.append((counts, key, before))
        return True

    def _forward(self, rank: int, chan: int, q: int, p: int) -> bool:
        """A fused step on ``rank`` receives from ``q`` and sends to ``p``: one route threadblock."""
        into, out = self.routes.setdefault((rank, chan), ({}, {}))
        if into.get(q) == p:
            return self._add_step(rank, chan, ("route", q, p))
        if q in into or p in out:  # a threadblock has one receive peer and one send peer
            return False
        counts = self.steps.setdefault((rank, chan), {})
        merged = [(k, counts[k]) for k in (("send", p), ("recv", q)) if k in counts]
        for k, _ in merged:  # both endpoints become the route's threadblock
            del counts[k]
        self._undo.append(lambda: counts.update(merged))
        into[q] = p
        out[p] = q
        self._undo.append(lambda: (into.pop(q), out.pop(p)))
        return self._add_step(rank, chan, ("route", q, p), 1 + sum(c for _, c in merged))

    def pairs(self) -> dict[tuple[int, int, int], int]:
        """``{(rank, chan, recv peer): send peer}`` of every route."""
        return {(rank, chan, q): p for (rank, chan), (into, _) in self.routes.items() for q, p in into.items()}

    def steps_on(self, rank: int, chan: int, key: tuple) -> int:
        """Communication steps placed so far in threadblock ``key`` of ``rank`` on ``chan``."""
        return self.steps.get((rank, chan), {}).get(key, 0)


__all__ = ["COLL_NAMES", "Lifted", "lift_algorithm"]
