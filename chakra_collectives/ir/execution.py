"""Run an algorithm's dependency + message graph to completion, or find where it gets stuck.

Two send semantics:

* ``eager`` -- a SEND completes as soon as its dependencies have (the message is buffered);
  a RECV completes once its dependencies and its matching SEND have. This is ASTRA-sim's
  behaviour: a send never waits for the receive to be posted.
* ``rendezvous`` -- a SEND and its RECV complete together, once both have their dependencies
  done (MPI synchronous sends; bounded-buffer runtimes such as NCCL/MSCCL with large messages).

An algorithm that finishes under ``rendezvous`` also finishes under ``eager``; the converse is
not true (rank A: send-then-recv, rank B: send-then-recv deadlocks only under rendezvous).

``order`` picks which ready operation runs next: ``"fifo"`` (breadth-first) or ``"lifo"``
(depth-first). The verifier executes the data semantics under both to expose races.

Two ranks that both send first and then receive finish with eager sends and deadlock with
rendezvous sends:

>>> from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective
>>> from chakra_collectives.ir.matching import match_messages
>>> b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=1, size_bytes=64)
>>> for r in range(2):
...     s = b.send(r, 1 - r, tag=0, src=(Buffer.INPUT, 0), count=1)
...     _ = b.recv(r, 1 - r, tag=0, dst=(Buffer.OUTPUT, 0), count=1, deps=[s])
>>> algo = b.build(input_chunks=[1, 1], output_chunks=[1, 1])
>>> partner = match_messages(algo).partner
>>> execute(algo, partner).order         # both SENDs, then both RECVs
[0, 2, 3, 1]
>>> stuck = execute(algo, partner, semantics="rendezvous")
>>> stuck.finished, stuck.stuck
(False, [0, 1, 2, 3])
>>> for line in describe_stuck(algo, partner, stuck, "rendezvous"):
...     print(line)
4 of 4 operations never complete; blocked frontier per rank:
rank 0: node 0 SEND to rank 1 waits for its RECV (node 1 on rank 1) to be posted
rank 1: node 0 SEND to rank 0 waits for its RECV (node 1 on rank 0) to be posted
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.ir.algorithm import CollectiveAlgorithm
from chakra_collectives.ir.ops import OpKind
from chakra_collectives.ir.structure import dependents


@dataclass
class Execution:
    order: list[int]
    """Operations in the order they completed."""
    stuck: list[int]
    """Operations that never completed (empty when the algorithm finishes)."""

    @property
    def finished(self) -> bool:
        return not self.stuck


def execute(
    algo: CollectiveAlgorithm,
    partner: np.ndarray,
    *,
    semantics: str = "eager",
    order: str = "fifo",
) -> Execution:
    """Execute ``algo`` with the message pairing ``partner`` (from
    :func:`~chakra_collectives.ir.matching.match_messages`).

    Unpaired operations (``partner == -1``) do not wait for a partner, so passing all -1
    walks the plain dependency graph; the verifier checks pairing before it executes.
    :class:`~chakra_collectives.errors.InputError` for an unknown ``semantics`` or ``order``.
    """
    if semantics not in ("eager", "rendezvous"):
        raise InputError(f"unknown send semantics {semantics!r} (valid: eager, rendezvous)")
    if order not in ("fifo", "lifo"):
        raise InputError(f"unknown execution order {order!r} (valid: fifo, lifo)")
    ops = algo.ops
    size = len(ops)
    rendezvous = semantics == "rendezvous"
    comm = (ops.kind <= OpKind.RECV) & (partner >= 0)
    waiting = np.diff(ops.dep_ptr).astype(np.int64)
    if not rendezvous:
        waiting[(ops.kind == OpKind.RECV) & (partner >= 0)] += 1  # a matched RECV also waits for its SEND
        # a completed SEND releases its RECV like a dependency: append that edge to the dependents
        extra_from = np.flatnonzero((ops.kind == OpKind.SEND) & (partner >= 0))
        dep_ptr, dep_list = dependents(algo, extra=(extra_from, partner[extra_from]))
    else:
        dep_ptr, dep_list = dependents(algo)
    waiting_list = waiting.tolist()
    ready: deque[int] = deque(np.flatnonzero(waiting == 0).tolist())
    completed: list[int] = []
    record = completed.append
    push = ready.append
    pop = ready.popleft if order == "fifo" else ready.pop
    arrive = push  # called when an operation's dependencies are all done
    if rendezvous:
        # a SEND and its RECV complete together, once both have their dependencies done
        is_comm = comm.tolist()
        partners = partner.tolist()
        posted = [False] * size

        is_send = (ops.kind == OpKind.SEND).tolist()

        def arrive(i: int) -> None:  # noqa: F811
            if is_comm[i]:
                posted[i] = True
                if posted[partners[i]]:  # the pair completes together, the SEND first
                    first, second = (i, partners[i]) if is_send[i] else (partners[i], i)
                    push(first)
                    push(second)
            else:
                push(i)

        initial = list(ready)
        ready.clear()
        for i in initial:
            arrive(i)
    while ready:
        i = pop()
        record(i)
        for j in dep_list[dep_ptr[i] : dep_ptr[i + 1]]:
            waiting_list[j] -= 1
            if waiting_list[j] == 0:
                arrive(j)
    if len(completed) == size:
        return Execution(order=completed, stuck=[])
    done = np.zeros(size, dtype=bool)
    done[completed] = True
    return Execution(order=completed, stuck=np.flatnonzero(~done).tolist())


def finishes(algo: CollectiveAlgorithm, partner: np.ndarray, *, semantics: str = "eager") -> bool:
    """Whether :func:`execute` would run ``algo`` to completion, decided with numpy (no order).

    Which operations complete does not depend on the order: with eager sends, exactly those
    outside the cycles (and behind none) of the graph of dependencies plus SEND -> RECV edges;
    with rendezvous sends, the same with each SEND and its RECV one node (they complete
    together). :func:`topological_levels` peels that graph a level at a time.

    >>> from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective
    >>> from chakra_collectives.ir.matching import match_messages
    >>> b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=1, size_bytes=64)
    >>> for r in range(2):
    ...     s = b.send(r, 1 - r, tag=0, src=(Buffer.INPUT, 0), count=1)
    ...     _ = b.recv(r, 1 - r, tag=0, dst=(Buffer.OUTPUT, 0), count=1, deps=[s])
    >>> algo = b.build(input_chunks=[1, 1], output_chunks=[1, 1])
    >>> partner = match_messages(algo).partner
    >>> finishes(algo, partner), finishes(algo, partner, semantics="rendezvous")
    (True, False)
    """
    if semantics not in ("eager", "rendezvous"):
        raise InputError(f"unknown send semantics {semantics!r} (valid: eager, rendezvous)")
    ops = algo.ops
    size = len(ops)
    src, dst = happens_before_edges(algo, partner)
    if semantics == "rendezvous":
        node = np.arange(size, dtype=np.int64)
        recvs = np.flatnonzero((ops.kind == OpKind.RECV) & (partner >= 0))
        node[recvs] = partner[recvs]  # a RECV is its SEND's node
        deps = len(ops.dep_idx)  # the dependencies; the SEND -> RECV edges follow them
        src, dst = node[src[:deps]], node[dst[:deps]]
        present = np.ones(size, dtype=bool)
        present[recvs] = False
    else:
        present = np.ones(size, dtype=bool)
    level = topological_levels(size, src, dst)
    return bool(np.all(level[present] >= 0))


def happens_before_edges(algo: CollectiveAlgorithm, partner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every edge ``from -> to`` of the graph eager execution follows: dependencies, then SEND -> RECV."""
    ops = algo.ops
    owner = np.repeat(np.arange(len(ops), dtype=np.int64), np.diff(ops.dep_ptr))
    sends = np.flatnonzero((ops.kind == OpKind.SEND) & (partner >= 0))
    return np.concatenate([ops.dep_idx.astype(np.int64), sends]), np.concatenate([owner, partner[sends].astype(np.int64)])


def topological_levels(size: int, edge_src: np.ndarray, edge_dst: np.ndarray) -> np.ndarray:
    """Longest-path level of every node (0: no predecessor), by Kahn's algorithm a level at a time;
    -1 for the nodes on or behind a cycle, which never become ready.

    >>> topological_levels(4, np.array([0, 1, 2, 3]), np.array([1, 2, 1, 3])).tolist()
    [0, -1, -1, -1]
    """
    order = np.argsort(edge_src, kind="stable")
    succ = edge_dst[order]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(edge_src, minlength=size))])
    waiting = np.bincount(edge_dst, minlength=size)
    level = np.full(size, -1, dtype=np.int64)
    frontier = np.flatnonzero(waiting == 0)
    depth = 0
    while len(frontier):
        level[frontier] = depth
        counts = ptr[frontier + 1] - ptr[frontier]
        starts = np.repeat(ptr[frontier] - np.cumsum(counts) + counts, counts)
        targets = succ[starts + np.arange(int(counts.sum()))]
        reached, times = np.unique(targets, return_counts=True)  # not a bincount over every node: levels x nodes on a long ring
        waiting[reached] -= times
        frontier = reached[waiting[reached] == 0]
        depth += 1
    return level


def describe_stuck(algo: CollectiveAlgorithm, partner: np.ndarray, execution: Execution, semantics: str, limit: int = 3) -> list[str]:
    """Why ``execution`` got stuck: a headline, then per rank its first ``limit`` blocked
    operations (those not waiting behind another stuck operation of their rank) and what each
    waits for."""
    ops = algo.ops
    stuck = set(execution.stuck)
    lines: list[str] = []
    by_rank: dict[int, list[int]] = {}
    for i in execution.stuck:
        deps = ops.deps_of(i)
        if any(int(d) in stuck for d in deps):
            continue  # blocked behind another stuck operation of its rank
        by_rank.setdefault(int(ops.rank[i]), []).append(i)
    for rank in sorted(by_rank):
        reasons = []
        for i in by_rank[rank][:limit]:
            p = int(partner[i])
            kind = OpKind(int(ops.kind[i]))
            where = f"node {ops.node_id[i]} {kind.name}"
            if kind is OpKind.RECV:
                other = f"node {ops.node_id[p]} on rank {ops.rank[p]}" if p >= 0 else "a SEND that does not exist"
                reasons.append(f"{where} from rank {ops.peer[i]} waits for {other}")
            elif kind is OpKind.SEND and semantics == "rendezvous":
                other = f"node {ops.node_id[p]} on rank {ops.rank[p]}" if p >= 0 else "a RECV that does not exist"
                reasons.append(f"{where} to rank {ops.peer[i]} waits for its RECV ({other}) to be posted")
            else:
                reasons.append(f"{where} waits")
        extra = len(by_rank[rank]) - limit
        lines.append(f"rank {rank}: " + "; ".join(reasons) + (f"; and {extra} more" if extra > 0 else ""))
    total_stuck = len(execution.stuck)
    lines.insert(0, f"{total_stuck} of {len(ops)} operations never complete; blocked frontier per rank:")
    return lines


__all__ = ["Execution", "describe_stuck", "execute", "finishes", "happens_before_edges", "topological_levels"]
