"""Structure of an algorithm: well-formed operations, an acyclic dependency graph, dependents.

All checks are vectorized over the whole operation table; each finding names the rank and
node id of the first offending operation. :func:`dependents` is the reverse of the
dependency lists, which every walk over the graph (execution, race detection, fusion) needs.

>>> from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective
>>> b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=1, size_bytes=64)
>>> _ = b.send(0, 1, tag=0, src=(Buffer.INPUT, 0), count=1, deps=[1])
>>> _ = b.copy(0, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[0])
>>> _ = b.recv(1, 0, tag=0, dst=(Buffer.OUTPUT, 3), count=1)
>>> algo = b.build(input_chunks=[1, 1], output_chunks=[1, 1])
>>> structural_problems(algo)
["rank 1: node 0: writes o[3:4] beyond the buffer's 1 chunks"]
>>> find_cycle(algo)      # op 1 waits for op 0, which waits for op 1
[1, 0]
>>> dependents(algo)     # CSR: op 0 is waited for by op 1, op 1 by op 0
([0, 1, 2, 2], [1, 0])
"""

from __future__ import annotations

from collections import deque

import numpy as np

from chakra_collectives.ir.algorithm import CollectiveAlgorithm
from chakra_collectives.ir.ops import NONE, OpKind


def structural_problems(algo: CollectiveAlgorithm, limit: int = 10) -> list[str]:
    """Return up to ``limit`` one-line problems (empty when the structure is sound).

    A dependency cycle is looked for only when every operation is well-formed.
    """
    ops = algo.ops
    problems: list[str] = []
    comm = ops.kind <= OpKind.RECV
    bounds = algo.rank_bounds()
    empty = np.flatnonzero(np.diff(bounds) == 0)
    problems += [f"rank {r}: has no operations" for r in empty[:limit]]

    def report(mask: np.ndarray, what: str) -> None:
        for i in np.flatnonzero(mask)[: max(0, limit - len(problems))]:
            problems.append(f"rank {ops.rank[i]}: node {ops.node_id[i]}: {what(i) if callable(what) else what}")

    report((ops.kind < 0) | (ops.kind > OpKind.COMPUTE), "unknown operation kind")
    report(comm & ((ops.peer < 0) | (ops.peer >= algo.num_ranks)), lambda i: f"peer {ops.peer[i]} is not a rank (0..{algo.num_ranks - 1})")
    report(comm & (ops.peer == ops.rank), "sends to or receives from its own rank")
    report(comm & (ops.tag < 0), "has no tag")
    report(comm & (ops.count < 0) & (ops.nbytes <= 0), "moves no bytes")
    report((ops.count == 0), "moves 0 chunks")
    if algo.placement and (len(algo.placement) != algo.num_ranks or len(set(algo.placement)) != len(algo.placement) or min(algo.placement) < 0):
        problems.append(f"placement {list(algo.placement)} must name {algo.num_ranks} distinct NPUs, one per rank")
    npu = np.asarray(algo.placement if algo.placement and len(algo.placement) == algo.num_ranks else range(algo.num_ranks), dtype=np.int64)
    routed = ops.route >= 0
    if np.any(routed) or np.any(ops.route < -1):
        report((ops.route < -1) | (routed & (ops.route >= len(algo.routes))), lambda i: f"names route {ops.route[i]}, but the algorithm has {len(algo.routes)} routes")
        report(routed & (ops.kind != OpKind.SEND), "has a route but is not a SEND")
        ends = np.array([(r[0], r[-1]) if len(r) >= 2 else (-1, -1) for r in algo.routes] or [(-1, -1)], dtype=np.int64)
        chosen = np.clip(ops.route, 0, max(len(algo.routes) - 1, 0))
        peer = np.clip(ops.peer, 0, algo.num_ranks - 1)
        wrong_end = routed & (ops.route < len(algo.routes)) & ((ends[chosen, 0] != npu[ops.rank]) | (ends[chosen, 1] != npu[peer]))
        report(
            wrong_end,
            lambda i: f"route {ops.route[i]} runs {ends[chosen[i], 0]} -> {ends[chosen[i], 1]}, not from its rank's NPU {npu[ops.rank[i]]} to peer {ops.peer[i]}'s {npu[peer[i]]}",
        )
    moving = ops.kind != OpKind.COMPUTE
    report(moving & (ops.count > 0) & _needs_missing_ref(ops), "lacks the chunk reference its kind needs")
    for buf_col, off_col, side in ((ops.src_buf, ops.src_off, "reads"), (ops.dst_buf, ops.dst_off, "writes")):
        has = (buf_col >= 0) & (ops.count > 0)
        if not np.any(has):
            continue
        sizes = np.stack([algo.input_chunks, algo.output_chunks, algo.scratch_chunks])
        limit_of = np.zeros(len(ops), dtype=np.int64)
        limit_of[has] = sizes[buf_col[has], ops.rank[has]]
        chosen = np.flatnonzero(has)
        op, start, length = ops.runs(chosen, off_col[chosen])  # every range of a several-range message
        if len(op) > len(chosen):
            report(np.isin(np.arange(len(ops)), op[length <= 0]), "has a chunk range of no chunks (its further ranges hold all its count)")
        out = (start < 0) | (start + length > limit_of[op])
        where = dict(zip(op[out].tolist(), zip(start[out].tolist(), length[out].tolist())))
        report(
            np.isin(np.arange(len(ops)), op[out]),
            lambda i, b=buf_col, s=side: (
                f"{s} {'ios'[b[i]]}[{where[i][0]}:{where[i][0] + where[i][1]}] beyond the buffer's {limit_of[i]} chunks"
            ),
        )
    dep_owner = np.repeat(np.arange(len(ops)), np.diff(ops.dep_ptr))
    cross = (ops.dep_idx < 0) | (ops.dep_idx >= len(ops))
    cross[~cross] = ops.rank[ops.dep_idx[~cross]] != ops.rank[dep_owner[~cross]]
    report(np.isin(np.arange(len(ops)), dep_owner[cross]), "depends on an operation of another rank")
    self_dep = ops.dep_idx == dep_owner
    report(np.isin(np.arange(len(ops)), dep_owner[self_dep]), "depends on itself")
    if not problems:
        cycle = find_cycle(algo)
        if cycle:
            first = cycle[0]
            ids = " -> ".join(str(ops.node_id[i]) for i in cycle[:8]) + (" ..." if len(cycle) > 8 else "")
            problems.append(f"rank {ops.rank[first]}: node {ops.node_id[first]}: dependency cycle {ids}")
    return problems[:limit]


def _needs_missing_ref(ops) -> np.ndarray:
    kind = ops.kind
    no_src = ops.src_buf == NONE
    no_dst = ops.dst_buf == NONE
    return ((kind == OpKind.SEND) & no_src) | ((kind == OpKind.RECV) & no_dst) | (
        ((kind == OpKind.REDUCE) | (kind == OpKind.COPY)) & (no_src | no_dst)
    )


def find_cycle(algo: CollectiveAlgorithm) -> list[int]:
    """Operations on one dependency cycle (empty when the graph is acyclic).

    Dependencies that all point backwards in program order cannot form a cycle, which is
    the common case and is checked without a graph walk.
    """
    ops = algo.ops
    owner = np.repeat(np.arange(len(ops)), np.diff(ops.dep_ptr))
    if np.all(ops.dep_idx < owner):
        return []
    indegree = np.diff(ops.dep_ptr).astype(np.int64)
    ptr, idx = dependents(algo)
    queue = deque(np.flatnonzero(indegree == 0).tolist())
    left = indegree.tolist()
    while queue:
        i = queue.popleft()
        for j in idx[ptr[i] : ptr[i + 1]]:
            left[j] -= 1
            if left[j] == 0:
                queue.append(j)
    remaining = [i for i, n in enumerate(left) if n > 0]
    if not remaining:
        return []
    # walk backwards along unfinished dependencies until a node repeats
    unfinished = set(remaining)
    node, seen, path = remaining[0], {}, []
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = next(int(d) for d in ops.deps_of(node) if int(d) in unfinished)
    cycle = path[seen[node] :]
    return cycle[::-1]


def dependents(algo: CollectiveAlgorithm, extra: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[list[int], list[int]]:
    """Reverse CSR: for each op, the ops that depend on it (plus ``extra`` edges ``from -> to``)."""
    ops = algo.ops
    owner = np.repeat(np.arange(len(ops), dtype=np.int64), np.diff(ops.dep_ptr))
    source = ops.dep_idx
    if extra is not None:
        source = np.concatenate([source, extra[0]])
        owner = np.concatenate([owner, extra[1]])
    order = np.argsort(source, kind="stable")
    counts = np.bincount(source, minlength=len(ops)) if len(source) else np.zeros(len(ops), dtype=np.int64)
    ptr = np.concatenate([[0], np.cumsum(counts)])
    return ptr.tolist(), owner[order].tolist()


__all__ = ["dependents", "find_cycle", "structural_problems"]
