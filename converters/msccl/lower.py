"""Lower an MSCCL-IR program to the collective IR, with the runtime's full semantics.

Every step becomes a short chain of IR operations (SEND reads ``src``; RECV writes ``dst``;
REDUCE does ``dst (+)= src``; COPY ``dst = src``):

====== ==============================================================================
step   operations (``t`` = a scratch slot of the threadblock, appended to the scratch buffer)
====== ==============================================================================
s      SEND src
r      RECV -> dst
rcs    RECV -> dst; SEND dst
rrc    RECV -> t; REDUCE dst += t          (``src`` is ``dst``, as MSCCLang writes it)
       RECV -> dst; REDUCE dst += src      (``src`` and ``dst`` disjoint)
       RECV -> t; REDUCE t += src; COPY dst = t   (partial overlap)
rrs    RECV -> t; REDUCE t += src; SEND t  (nothing stored)
rrcs   as rrc, then SEND the result (from ``dst``, or from ``t`` on partial overlap)
cpy    COPY dst = src
re     REDUCE dst += src
nop    nothing: its dependency is added to the next real step of its threadblock
====== ==============================================================================

Overlap is decided on the storage slots address after in-place aliasing
(:meth:`CollectiveAlgorithm.resolve`). A threadblock runs its steps strictly in order, so the
first operation of a step depends on the last operation of the previous step (through a run
of nops, on everything the nops waited for) and on its own ``depid``/``deps`` step; the
threadblock's scratch slots ``t`` are reused safely from one step to the next.

Messages pair per connection ``(sender, receiver, channel)`` in FIFO order; each pair gets its
own tag (numbered per sender/receiver pair), so ``(src, dst, tag)`` names it unambiguously, as
ASTRA-sim and the verifier match them. Operations of a rank are then put in a topological
order that interleaves threadblocks step by step. Every operation records the threadblock
and channel of its step (``OpTable.threadblock``, ``OpTable.channel``), which export-msccl
keeps when it can.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.limits import check_size
from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm, OpKind, OpTable
from chakra_collectives.converters.msccl.checks import check_program, located, where
from chakra_collectives.converters.msccl.program import BUFFER_LETTERS, Gpu, Program, Step, StepType, Threadblock

_BUF = {letter: index for index, letter in enumerate(BUFFER_LETTERS)}
_SCRATCH = int(Buffer.SCRATCH)
SEND, RECV, REDUCE, COPY = int(OpKind.SEND), int(OpKind.RECV), int(OpKind.REDUCE), int(OpKind.COPY)


@dataclass
class Lowered:
    algorithm: CollectiveAlgorithm
    warnings: list[str]


def lower_program(
    program: Program,
    *,
    size_bytes: int,
    path: str | Path | None = None,
    collective: Collective | None = None,
    root: int | None = None,
) -> Lowered:
    """The :class:`CollectiveAlgorithm` ``program`` describes, for a collective of ``size_bytes``.

    ``collective`` overrides the XML's ``coll`` label; ``root`` states a broadcast/reduce root
    (inferred from the buffers otherwise).
    """
    if size_bytes < 1:
        raise InputError(f"collective size must be positive, got {size_bytes}")
    check_size(size_bytes, "collective size")
    warnings = check_program(program, path)
    gpus = sorted(program.gpus, key=lambda g: g.id)
    claimed, note = _collective(program, collective, path)
    if note:
        warnings.append(note)
    root = _root(claimed, gpus, root, program, path)
    n = program.ngpus
    shell = _shell(claimed, program, root, size_bytes)
    send_tags, recv_tags = _pair_messages(gpus, path)
    per_rank = []
    scratch = []
    for gpu in gpus:
        rank_ops = _RankLowering(gpu, shell, send_tags, recv_tags, path)
        per_rank.append(rank_ops.ordered())
        scratch.append(rank_ops.scratch_chunks)
    table = _table(per_rank)
    provenance = {"source": "msccl-ir", "coll": program.coll, "proto": program.proto}
    if path is not None:
        provenance["file"] = Path(path).name
    algo = CollectiveAlgorithm(
        collective=claimed,
        num_ranks=n,
        chunk_count=program.nchunksperloop,
        ops=table,
        input_chunks=np.array([g.i_chunks for g in gpus], dtype=np.int64),
        output_chunks=np.array([g.o_chunks for g in gpus], dtype=np.int64),
        scratch_chunks=np.array(scratch, dtype=np.int64),
        size_bytes=size_bytes,
        inplace=program.inplace,
        root=root,
        name=program.name,
        provenance=provenance,
    )
    return Lowered(algo, warnings)


# ---------------------------------------------------------------------------- what is claimed
def _collective(program: Program, override: Collective | None, path) -> tuple[Collective, str | None]:
    if override is not None:
        return override, None
    try:
        return Collective.parse(program.coll), None
    except InputError:
        return Collective.CUSTOM, located(
            f"coll={program.coll!r} has no postcondition in chakra-collectives: imported as custom "
            "(structure and deadlock are checked, not what it computes)",
            path,
            program.line,
        )


def _root(collective: Collective, gpus: list[Gpu], root: int | None, program: Program, path) -> int | None:
    if not collective.has_root:
        return root
    if root is not None:
        if not 0 <= root < len(gpus):
            raise InputError(f"root {root} is not a rank (0..{len(gpus) - 1})")
        return root
    # broadcast: only the root has an input and never receives; reduce: only it has an output and never sends
    sized = [g.id for g in gpus if (g.i_chunks if collective is Collective.BROADCAST else g.o_chunks) > 0]
    if len(sized) == 1:
        return sized[0]
    moves = StepType.receives if collective is Collective.BROADCAST else StepType.sends
    quiet = [g.id for g in gpus if not any(moves.fget(s.type) for tb in g.threadblocks for s in tb.steps)]
    if len(quiet) == 1:
        return quiet[0]
    raise InputError(f"cannot tell the {collective.value} root from the buffers: state it (--root)", path=path, line=program.line)


def _shell(collective: Collective, program: Program, root: int | None, size_bytes: int) -> CollectiveAlgorithm:
    """An operation-less algorithm, for its aliasing rules (:meth:`CollectiveAlgorithm.resolve`)."""
    zeros = np.zeros(program.ngpus, dtype=np.int64)
    return CollectiveAlgorithm(
        collective=collective,
        num_ranks=program.ngpus,
        chunk_count=program.nchunksperloop,
        ops=OpTable.from_columns(rank=[], dep_ptr=[0], dep_idx=[]),
        input_chunks=zeros,
        output_chunks=zeros,
        scratch_chunks=zeros,
        size_bytes=size_bytes,
        inplace=program.inplace,
        root=root,
    )


# ---------------------------------------------------------------------------- messages
def _pair_messages(gpus: list[Gpu], path) -> tuple[dict, dict]:
    """Tags of the send-type and receive-type steps: ``{id(tb): [tag or -1 per step]}`` each."""
    sends: dict[tuple[int, int, int], list] = {}
    recvs: dict[tuple[int, int, int], list] = {}
    send_tags: dict[int, list[int]] = {}
    recv_tags: dict[int, list[int]] = {}
    for gpu in gpus:
        g = gpu.id
        for tb in gpu.threadblocks:
            types = [step.type for step in tb.steps]
            if tb.send >= 0:
                sends.setdefault((g, tb.send, tb.chan), []).extend((g, tb, i) for i, t in enumerate(types) if t in _SENDING)
                send_tags[id(tb)] = [-1] * len(types)
            if tb.recv >= 0:
                recvs.setdefault((tb.recv, g, tb.chan), []).extend((g, tb, i) for i, t in enumerate(types) if t in _RECEIVING)
                recv_tags[id(tb)] = [-1] * len(types)
    next_tag: dict[tuple[int, int], int] = {}
    for key in sorted(sends.keys() | recvs.keys()):
        sender, receiver, chan = key
        out, inc = sends.get(key, []), recvs.get(key, [])
        if len(out) != len(inc):
            _raise_unmatched(key, out, inc, path)
        tag = next_tag.get((sender, receiver), 0)
        for (g, tb, i), (h, rtb, j) in zip(out, inc):
            step, rstep = tb.steps[i], rtb.steps[j]
            if step.cnt != rstep.cnt:
                raise AlgorithmError(
                    f"{where(g, tb, step)}: sends cnt={step.cnt} to gpu {receiver} on channel {chan}, but the matching "
                    f"receive ({where(h, rtb, rstep)}, line {rstep.line}) has cnt={rstep.cnt}",
                    path=path,
                    line=step.line or None,
                )
            send_tags[id(tb)][i] = tag
            recv_tags[id(rtb)][j] = tag
            tag += 1
        next_tag[sender, receiver] = tag
    return send_tags, recv_tags


_SENDING = frozenset(t for t in StepType if t.sends)
_RECEIVING = frozenset(t for t in StepType if t.receives)


def _raise_unmatched(key, out: list, inc: list, path) -> None:
    sender, receiver, chan = key
    k = min(len(out), len(inc))
    if len(out) > k:
        g, tb, i = out[k]
        step = tb.steps[i]
        if not inc:
            problem = f"gpu {receiver} has no threadblock receiving from gpu {sender} on channel {chan}"
        else:
            h, rtb, _ = inc[0]
            problem = f"gpu {receiver} (tb {rtb.id}) receives only {len(inc)} message(s) from gpu {sender} on channel {chan}"
        raise AlgorithmError(
            f"{where(g, tb, step)}: send #{k + 1} to gpu {receiver} on channel {chan} has no matching receive: {problem}",
            path=path,
            line=step.line or None,
        )
    h, rtb, j = inc[k]
    step = rtb.steps[j]
    if not out:
        problem = f"gpu {sender} has no threadblock sending to gpu {receiver} on channel {chan}"
    else:
        g, tb, _ = out[0]
        problem = f"gpu {sender} (tb {tb.id}) sends only {len(out)} message(s) to gpu {receiver} on channel {chan}"
    raise AlgorithmError(
        f"{where(h, rtb, step)}: receive #{k + 1} from gpu {sender} on channel {chan} has no matching send: {problem}",
        path=path,
        line=step.line or None,
    )


# ---------------------------------------------------------------------------- one rank

def _scratch_touched(gpu: Gpu) -> int:
    """Chunks of ``gpu``'s declared scratch buffer its steps read or write: the scratch the
    lowering keeps (a declared ``s_chunks`` far beyond what the program touches -- 2^31 in a
    hostile file -- would otherwise size every later buffer and verification)."""
    extent = 0
    for tb in gpu.threadblocks:
        for step in tb.steps:
            if step.srcbuf == "s" and step.srcoff >= 0:
                extent = max(extent, step.srcoff + max(step.cnt, 1))
            if step.dstbuf == "s" and step.dstoff >= 0:
                extent = max(extent, step.dstoff + max(step.cnt, 1))
    return min(extent, gpu.s_chunks)


class _RankLowering:
    """Turns one GPU's threadblocks into IR operations with rank-local dependencies.

    Operations are appended step by step (``rows``); within a step they form a chain, and the
    first operation of a step waits for ``waits[step]`` (the previous step of its threadblock
    and its ``depid``/``deps`` step, through nops).
    """

    def __init__(self, gpu: Gpu, shell: CollectiveAlgorithm, send_tags: dict, recv_tags: dict, path) -> None:
        self.gpu = gpu
        self.rank = gpu.id
        self.shell = shell
        self.path = path
        self.rows: list[tuple] = []  # (kind, peer, tag, src_buf, src_off, dst_buf, dst_off, count, threadblock, channel)
        self.starts: list[int] = []  # first operation of each real step
        self.origin: list[tuple[Threadblock, Step, int]] = []  # (tb, step, index in tb) of each real step
        self.last: dict[tuple[int, int], int] = {}  # (tb id, step index) -> last operation of the step
        next_temp = _scratch_touched(gpu)
        for tb in gpu.threadblocks:
            temp_size = 0
            sends, recvs = send_tags.get(id(tb)), recv_tags.get(id(tb))
            for index, step in enumerate(tb.steps):
                if step.type is StepType.NOP:
                    continue
                self.starts.append(len(self.rows))
                self.origin.append((tb, step, index))
                need = self._lower_step(tb, step, next_temp, sends and sends[index], recvs and recvs[index])
                self.last[tb.id, index] = len(self.rows) - 1
                temp_size = max(temp_size, need)
            next_temp += temp_size
        self.scratch_chunks = next_temp
        self.waits = self._link()

    # -- operations of one step
    def _lower_step(self, tb: Threadblock, step: Step, temp: int, send_tag: int, recv_tag: int) -> int:
        """Append the step's operations (a chain); return how many scratch slots ``t`` it needs."""
        kind = step.type
        cnt = step.cnt
        sb, so = _BUF[step.srcbuf], step.srcoff
        db, do = _BUF[step.dstbuf], step.dstoff
        need = 0
        if kind is StepType.SEND:
            ops = [(SEND, tb.send, send_tag, sb, so, -1, -1, cnt)]
        elif kind is StepType.RECV:
            ops = [(RECV, tb.recv, recv_tag, -1, -1, db, do, cnt)]
        elif kind is StepType.RECV_COPY_SEND:
            ops = [(RECV, tb.recv, recv_tag, -1, -1, db, do, cnt), (SEND, tb.send, send_tag, db, do, -1, -1, cnt)]
        elif kind is StepType.COPY:
            ops = [(COPY, -1, -1, sb, so, db, do, cnt)]
        elif kind is StepType.REDUCE:
            ops = [(REDUCE, -1, -1, sb, so, db, do, cnt)]
        elif kind is StepType.RECV_REDUCE_SEND:
            ops = [
                (RECV, tb.recv, recv_tag, -1, -1, _SCRATCH, temp, cnt),
                (REDUCE, -1, -1, sb, so, _SCRATCH, temp, cnt),
                (SEND, tb.send, send_tag, _SCRATCH, temp, -1, -1, cnt),
            ]
            need = cnt
        else:  # rrc, rrcs: dst = src (+) received
            overlap = self._overlap((sb, so), (db, do), cnt)
            receive = (RECV, tb.recv, recv_tag, -1, -1)
            if overlap == "same":
                ops = [receive + (_SCRATCH, temp, cnt), (REDUCE, -1, -1, _SCRATCH, temp, db, do, cnt)]
                result = (db, do)
                need = cnt
            elif overlap == "disjoint":
                ops = [receive + (db, do, cnt), (REDUCE, -1, -1, sb, so, db, do, cnt)]
                result = (db, do)
            else:
                ops = [
                    receive + (_SCRATCH, temp, cnt),
                    (REDUCE, -1, -1, sb, so, _SCRATCH, temp, cnt),
                    (COPY, -1, -1, _SCRATCH, temp, db, do, cnt),
                ]
                result = (_SCRATCH, temp)
                need = cnt
            if kind is StepType.RECV_REDUCE_COPY_SEND:
                ops.append((SEND, tb.send, send_tag, *result, -1, -1, cnt))
        where_ = (tb.id, tb.chan)
        self.rows.extend(op + where_ for op in ops)
        return need

    def _overlap(self, src: tuple[int, int], dst: tuple[int, int], cnt: int) -> str:
        (sb, so), (db, do) = (self.shell.resolve(self.rank, b, o) for b, o in (src, dst))
        if sb != db or so + cnt <= do or do + cnt <= so:
            return "disjoint"
        return "same" if so == do else "partial"

    # -- dependencies between steps
    def _link(self) -> list[list[int]]:
        done: dict[tuple[int, int], tuple[int, ...]] = {}
        tbs = {tb.id: tb for tb in self.gpu.threadblocks}
        last = self.last
        waits = []
        for tb, step, index in self.origin:
            if index == 0:
                previous: tuple[int, ...] = ()
            else:
                previous = (last[tb.id, index - 1],) if (tb.id, index - 1) in last else self._completion(tbs, tb.id, index - 1, done)
            if step.depid >= 0:
                waits.append(sorted(set(previous).union(self._completion(tbs, step.depid, step.deps, done))))
            else:
                waits.append(list(previous))
        return waits

    def _completion(self, tbs: dict, tb_id: int, index: int, done: dict) -> tuple[int, ...]:
        """Operations whose completion means "step ``index`` of tb ``tb_id`` has finished".

        A real step has finished when its last operation has; a nop when the step before it and
        the step it depends on have (so a run of nops accumulates dependencies).
        """
        if index < 0:
            return ()
        if (tb_id, index) in self.last:
            return (self.last[tb_id, index],)
        stack = [(tb_id, index)]
        visiting = {(tb_id, index)}
        while stack:
            current = stack[-1]
            t, i = current
            step = tbs[t].steps[i]
            needs = ([(t, i - 1)] if i > 0 else []) + ([(step.depid, step.deps)] if step.depid >= 0 else [])
            pending = [p for p in needs if p not in self.last and p not in done]
            for p in pending:
                if p in visiting:
                    raise AlgorithmError(
                        f"{where(self.rank, tbs[t], step)}: dependency cycle through nop steps", path=self.path, line=step.line or None
                    )
            if pending:
                stack.extend(pending)
                visiting.update(pending)
                continue
            ops: set[int] = set()
            for p in needs:
                ops.update((self.last[p],) if p in self.last else done[p])
            done[current] = tuple(sorted(ops))
            stack.pop()
            visiting.discard(current)
        return done[tb_id, index]

    # -- a topological order that interleaves threadblocks step by step
    def ordered(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows (n x 10), and dependencies as (owner, dependency) pairs, in a topological order.

        The preferred order is by (step index, threadblock, position in the step), which is
        topological unless a step depends on a later-numbered step of another threadblock.
        """
        rows = np.array(self.rows, dtype=np.int64).reshape(len(self.rows), len(_ROW))
        size = len(rows)
        starts = np.array(self.starts, dtype=np.int64)
        step_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, size)))
        within = np.arange(size) - starts[step_of]
        index = np.array([o[2] for o in self.origin], dtype=np.int64)
        tb_id = np.array([o[0].id for o in self.origin], dtype=np.int64)
        chained = np.flatnonzero(within > 0)
        lengths = [len(w) for w in self.waits]
        owners = np.concatenate([chained, np.repeat(starts, lengths)])
        deps = np.concatenate([chained - 1, np.array([d for w in self.waits for d in w], dtype=np.int64)])
        order = np.lexsort((within, tb_id[step_of], index[step_of]))
        position = np.empty(size, dtype=np.int64)
        position[order] = np.arange(size)
        if np.any(position[deps] >= position[owners]):
            order = np.array(self._kahn(owners, deps, (index[step_of], tb_id[step_of], within), step_of), dtype=np.int64)
            position[order] = np.arange(size)
        return rows[order], position[owners], position[deps]

    def _kahn(self, owners: np.ndarray, deps: np.ndarray, keys, step_of: np.ndarray) -> list[int]:
        size = len(self.rows)
        key = list(zip(*(k.tolist() for k in keys), range(size)))
        dependents: list[list[int]] = [[] for _ in range(size)]
        waiting = [0] * size
        for owner, dep in zip(owners.tolist(), deps.tolist()):
            dependents[dep].append(owner)
            waiting[owner] += 1
        heap = [key[i] for i in range(size) if waiting[i] == 0]
        heapq.heapify(heap)
        order: list[int] = []
        while heap:
            i = heapq.heappop(heap)[3]
            order.append(i)
            for j in dependents[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(heap, key[j])
        if len(order) < size:
            stuck = set(range(size)) - set(order)
            waits_on: dict[int, list[int]] = {}
            for owner, dep in zip(owners.tolist(), deps.tolist()):
                waits_on.setdefault(owner, []).append(dep)
            self._raise_cycle(stuck, waits_on, step_of.tolist())
        return order

    def _raise_cycle(self, stuck: set[int], waits_on: dict[int, list[int]], step_of: list[int]) -> None:
        node = min(stuck)
        seen: dict[int, int] = {}
        path: list[int] = []
        while node not in seen:
            seen[node] = len(path)
            path.append(node)
            node = next(d for d in waits_on[node] if d in stuck)
        cycle = path[seen[node] :][::-1]
        steps = []
        for i in cycle:
            tb, step, _ = self.origin[step_of[i]]
            label = f"tb {tb.id} step {step.s}"
            if not steps or steps[-1] != label:
                steps.append(label)
        tb, step, _ = self.origin[step_of[cycle[0]]]
        raise AlgorithmError(
            f"{where(self.rank, tb, step)}: dependency cycle on gpu {self.rank}: " + " -> ".join(steps[:8] + steps[:1]),
            path=self.path,
            line=step.line or None,
        )


_ROW = ("kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count", "threadblock", "channel")
"""The columns of a lowered operation's row."""


def _table(per_rank: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> OpTable:
    sizes = [len(rows) for rows, _, _ in per_rank]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    matrix = np.concatenate([rows for rows, _, _ in per_rank]) if per_rank else np.zeros((0, len(_ROW)), np.int64)
    owners = np.concatenate([o + off for (_, o, _), off in zip(per_rank, offsets)])
    deps = np.concatenate([d + off for (_, _, d), off in zip(per_rank, offsets)])
    by_owner = np.lexsort((deps, owners))
    dep_ptr = np.concatenate([[0], np.cumsum(np.bincount(owners, minlength=int(offsets[-1])))])
    return OpTable.from_columns(
        rank=np.repeat(np.arange(len(per_rank), dtype=np.int32), sizes),
        dep_ptr=dep_ptr,
        dep_idx=deps[by_owner],
        **{name: matrix[:, k] for k, name in enumerate(_ROW)},
    )


__all__ = ["Lowered", "lower_program"]
