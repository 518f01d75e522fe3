"""Lift a CollectiveAlgorithm to an MSCCL-IR program the MSCCL runtime can load.

1. The algorithm must be well-formed, matched and deadlock-free; it is executed once (eager
   sends, breadth-first) and every operation gets its completion position ``T``.
2. Operations are grouped into steps, receive chains fused into rcs/rrc/rrs/rrcs
   (:mod:`.fusion`); a step sits at ``K`` = the position of its last operation.
3. Channels: MSCCL pairs the messages of a connection (sender, receiver, channel) in FIFO
   order, the k-th send with the k-th receive. The messages from A to B are split into the
   fewest chains whose order is the same on both ends (sender order = ``K`` of the sending
   steps, receiver order = ``K`` of the receiving steps); chain ``c`` is channel ``c``.
4. Threadblocks: one per connection endpoint, a receive connection and a send connection
   sharing one when fused steps forward from one to the other (or when they talk to the same
   peer); local steps join the threadblock of the dependency they wait for last. A fused step
   whose two connections cannot share a threadblock (different channels, or a competing
   pairing) is split and the layout recomputed.
5. Each threadblock runs its steps in ``K`` order; a dependency on another threadblock becomes
   ``depid``/``deps`` (the latest step of each threadblock waited for, minus those an earlier
   step of the same threadblock already waited for), several of them a run of ``nop`` steps;
   targets get ``hasdep="1"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.errors import AlgorithmError
from chakra_collectives.ir import Collective, CollectiveAlgorithm, OpKind
from chakra_collectives.verify.execution import describe_stuck, execute
from chakra_collectives.verify.matching import match_messages
from chakra_collectives.verify.structure import structural_problems
from chakra_collectives.converters.msccl.checks import check_program
from chakra_collectives.converters.msccl.fusion import RECV, SEND, Group, OpColumns, form_groups
from chakra_collectives.converters.msccl.program import BUFFER_LETTERS, Gpu, Program, Step, StepType, Threadblock

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


def lift_algorithm(
    algo: CollectiveAlgorithm,
    *,
    fuse: bool = True,
    proto: str = "Simple",
    name: str | None = None,
    min_bytes: int = 0,
    max_bytes: int = 0,
) -> Lifted:
    """The MSCCL-IR program of ``algo`` (see the module docstring), with runtime-limit warnings."""
    _check_exportable(algo)
    matching = match_messages(algo)
    execution = execute(algo, matching.partner, semantics="eager", order="fifo")
    if not execution.finished:
        lines = describe_stuck(algo, matching.partner, execution, "eager")
        raise AlgorithmError("deadlocks, so it has no MSCCL-IR program: " + "; ".join(lines[:2]))
    position = [0] * len(algo.ops)
    for t, i in enumerate(execution.order):
        position[i] = t
    cols = OpColumns(algo)
    partner = matching.partner.tolist()
    banned: set[int] = set()
    while True:
        groups = form_groups(cols, position, fuse=fuse, banned=banned)
        layout = _Layout(algo.num_ranks, cols, groups, position, partner)
        if not layout.conflicts:
            break
        banned |= layout.conflicts
    program = Program(
        name=name if name is not None else (algo.name or "chakra-collectives"),
        coll=COLL_NAMES[algo.collective],
        ngpus=algo.num_ranks,
        nchunksperloop=algo.chunk_count,
        nchannels=0,
        inplace=algo.inplace,
        proto=proto,
        extra={"outofplace": str(int(not algo.inplace)), "minBytes": str(min_bytes), "maxBytes": str(max_bytes)},
    )
    layout.build(program, algo)
    return Lifted(program, check_program(program))


def _check_exportable(algo: CollectiveAlgorithm) -> None:
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


class _Layout:
    """Channels and threadblocks for a grouping; ``conflicts`` lists the fusions to undo."""

    def __init__(self, num_ranks: int, cols: OpColumns, groups: list[Group], position: list[int], partner: list[int]) -> None:
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
        self.channel = self._channels()
        self.pairs, self.conflicts = self._pair_connections()

    # -- 3. channels: FIFO-consistent chains of messages per (sender, receiver)
    def _channels(self) -> dict[int, int]:
        """Channel of every message, keyed by its send operation."""
        cols, key, group_of = self.cols, self.key, self.group_of
        by_pair: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        for i in range(cols.size):
            if cols.kind[i] == SEND:
                r = self.partner[i]
                by_pair.setdefault((cols.rank[i], cols.peer[i]), []).append((key[group_of[i]], key[group_of[r]], i))
        channel: dict[int, int] = {}
        for messages in by_pair.values():
            messages.sort()
            tails: list[int] = []  # receiver key of each chain's last message; decreasing
            for _, receive_key, send in messages:
                # best fit: the chain whose last receiver key is the largest one below this one
                at = _first_below(tails, receive_key)
                if at == len(tails):
                    tails.append(receive_key)
                else:
                    tails[at] = receive_key
                channel[send] = at
        return channel

    def _endpoints(self, g: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """(send peer, channel) and (receive peer, channel) of group ``g``'s step."""
        cols = self.cols
        send = recv = None
        for op in self.groups[g].ops:
            if cols.kind[op] == SEND:
                send = (cols.peer[op], self.channel[op])
            elif cols.kind[op] == RECV:
                recv = (cols.peer[op], self.channel[self.partner[op]])
        return send, recv

    # -- 4. threadblocks
    def _pair_connections(self) -> tuple[dict[tuple[int, int, int], int], set[int]]:
        """Receive/send connections that share a threadblock, and fused steps that do not fit.

        Returns ``{(rank, chan, recv peer): send peer}`` and the receive operations whose fusion
        must be undone (its two connections are on different channels, or a pairing that more
        fused steps want took one of them).
        """
        banned: set[int] = set()
        wanted: dict[tuple[int, int, int, int], list[int]] = {}
        for g, group in enumerate(self.groups):
            send, recv = self._endpoints(g)
            if send is None or recv is None:
                continue
            if send[1] != recv[1]:
                banned.add(group.ops[0])
            else:
                wanted.setdefault((self.cols.rank[group.ops[0]], send[1], recv[0], send[0]), []).append(group.ops[0])
        pairs: dict[tuple[int, int, int], int] = {}
        taken_send: set[tuple[int, int, int]] = set()
        for (rank, chan, q, p), receives in sorted(wanted.items(), key=lambda item: (-len(item[1]), item[0])):
            if (rank, chan, q) in pairs or (rank, chan, p) in taken_send:
                banned.update(receives)
            else:
                pairs[rank, chan, q] = p
                taken_send.add((rank, chan, p))
        return pairs, banned

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
        for rank in range(self.num_ranks):
            keys = []
            for (r, chan, q), p in self.pairs.items():
                if r == rank:
                    keys.append((p, q, chan))
            paired_s = {(p, c) for p, q, c in keys}
            paired_r = {(q, c) for p, q, c in keys}
            loose_s = sorted(sends[rank] - paired_s)
            loose_r = set(recvs[rank] - paired_r)
            for p, c in loose_s:
                if (p, c) in loose_r:  # same peer both ways: one threadblock, as MSCCLang does
                    keys.append((p, p, c))
                    loose_r.discard((p, c))
                else:
                    keys.append((p, -1, c))
            keys += [(-1, q, c) for q, c in loose_r]
            for key in keys:
                p, q, c = key
                if p >= 0:
                    tb_for_send[rank][p, c] = key
                if q >= 0:
                    tb_for_recv[rank][q, c] = key
        # every group to a threadblock; local steps follow the dependency they wait for last
        order = sorted(range(len(self.groups)), key=self.key.__getitem__)
        for g in order:
            send, recv = endpoints[g]
            rank = cols.rank[self.groups[g].ops[0]]
            if send is not None:
                key = tb_for_send[rank][send]
            elif recv is not None:
                key = tb_for_recv[rank][recv]
            else:
                deps = [self.group_of[d] for op in self.groups[g].ops for d in cols.deps[op]]
                key = tb_of_group[max(deps, key=self.key.__getitem__)] if deps else (-1, -1, 0)
            tb_of_group[g] = key
            tbs_of_rank[rank].setdefault(key, []).append(g)
        self._emit(program, algo, tbs_of_rank, tb_of_group)

    # -- 5. steps, dependencies, nops
    def _emit(self, program: Program, algo: CollectiveAlgorithm, tbs_of_rank, tb_of_group) -> None:
        cols = self.cols
        program.gpus = []
        max_chan = 0
        for rank in range(self.num_ranks):
            keys = sorted(tbs_of_rank[rank])  # MSCCLang's order: (send, recv, chan)
            tb_id = {key: n for n, key in enumerate(keys)}
            slot: dict[int, int] = {}  # group -> index among its threadblock's real steps
            for key in keys:
                for n, g in enumerate(tbs_of_rank[rank][key]):
                    slot[g] = n
            # dependency targets per group: {tb id: real-step index}, pruned
            plans: dict[tuple, list[list[tuple[int, int]]]] = {}
            for key in keys:
                mine = tb_id[key]
                waited: dict[int, int] = {}
                plan = []
                for g in tbs_of_rank[rank][key]:
                    members = self.groups[g].ops
                    targets: dict[int, int] = {}
                    for op in members:
                        for d in cols.deps[op]:
                            h = self.group_of[d]
                            if h == g:
                                continue
                            u = tb_id[tb_of_group[h]]
                            if u == mine:
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
                p, q, c = key
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


def gpu_scratch_end(step: Step) -> int:
    """One past the highest scratch chunk ``step`` touches locally (0 if none)."""
    end = 0
    if step.type.reads_src and step.srcbuf == "s":
        end = step.srcoff + step.cnt
    if step.type.stores and step.dstbuf == "s":
        end = max(end, step.dstoff + step.cnt)
    return end


def _first_below(tails: list[int], value: int) -> int:
    """Index of the first chain whose tail is below ``value`` (tails decrease), or len(tails)."""
    low, high = 0, len(tails)
    while low < high:
        mid = (low + high) // 2
        if tails[mid] < value:
            high = mid
        else:
            low = mid + 1
    return low


__all__ = ["COLL_NAMES", "Lifted", "lift_algorithm"]
