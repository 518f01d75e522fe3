"""Per-rank statistics of an algorithm: what ``chakra-coll inspect`` prints.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> stats = summarize(ring(Collective.ALL_GATHER, 4, size_bytes=4096))
>>> stats["ranks"][0]["ops"], stats["ranks"][0]["bytes_sent"], stats["totals"]["critical_path_ops"]
({'SEND': 3, 'RECV': 3, 'REDUCE': 0, 'COPY': 1, 'COMPUTE': 0}, 3072, 6)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.ir.matching import match_messages


def summarize(algo: CollectiveAlgorithm, size_bytes: int | None = None) -> dict[str, Any]:
    """Nodes by type, bytes sent/received and longest dependency chain, per rank and in total.

    The per-rank chain counts that rank's own dependencies; the total ``critical_path_ops``
    also follows messages (a RECV after its SEND), over the whole algorithm.
    """
    ops = algo.ops
    nbytes = algo.op_bytes(size_bytes)
    kinds = np.bincount(ops.rank.astype(np.int64) * len(OpKind) + ops.kind, minlength=algo.num_ranks * len(OpKind)).reshape(algo.num_ranks, len(OpKind))
    sent = np.bincount(ops.rank[ops.kind == OpKind.SEND], weights=nbytes[ops.kind == OpKind.SEND], minlength=algo.num_ranks)
    received = np.bincount(ops.rank[ops.kind == OpKind.RECV], weights=nbytes[ops.kind == OpKind.RECV], minlength=algo.num_ranks)
    local_depth = _longest_chains(algo, with_messages=False)
    global_depth = _longest_chains(algo, with_messages=True)
    bounds = algo.rank_bounds()
    ranks = []
    for r in range(algo.num_ranks):
        chain = int(local_depth[bounds[r] : bounds[r + 1]].max()) if bounds[r + 1] > bounds[r] else 0
        ranks.append(
            {
                "rank": r,
                "ops": {k.name: int(kinds[r, k]) for k in OpKind},
                "nodes": int(bounds[r + 1] - bounds[r]),
                "bytes_sent": int(sent[r]),
                "bytes_received": int(received[r]),
                "longest_chain": chain,
            }
        )
    return {
        "collective": algo.collective.value,
        "name": algo.name,
        "num_ranks": algo.num_ranks,
        "chunk_count": algo.chunk_count,
        "size_bytes": int(size_bytes or algo.size_bytes),
        "chunk_identity": algo.has_chunk_identity,
        "ranks": ranks,
        "totals": {
            "ops": {k.name: int(kinds[:, k].sum()) for k in OpKind},
            "nodes": algo.num_ops,
            "bytes_sent": int(sent.sum()),
            "bytes_received": int(received.sum()),
            "longest_chain": max((r["longest_chain"] for r in ranks), default=0),
            "critical_path_ops": int(global_depth.max()) if len(global_depth) else 0,
        },
    }


def _longest_chains(algo: CollectiveAlgorithm, *, with_messages: bool) -> np.ndarray:
    """Length (in operations) of the longest chain ending at each operation (-1: never runs).

    Kahn's order over the dependencies (and, ``with_messages``, each RECV after its SEND), one
    topological level at a time in numpy; operations on or behind a cycle or a missing
    partner never run.
    """
    ops = algo.ops
    size = len(ops)
    edge_src = ops.dep_idx.astype(np.int64)
    edge_dst = np.repeat(np.arange(size, dtype=np.int64), np.diff(ops.dep_ptr))
    if with_messages:
        partner = match_messages(algo).partner
        recvs = np.flatnonzero((ops.kind == OpKind.RECV) & (partner >= 0))
        edge_src, edge_dst = np.concatenate([edge_src, partner[recvs]]), np.concatenate([edge_dst, recvs])
    pending = np.bincount(edge_dst, minlength=size)
    succ = edge_dst[np.argsort(edge_src, kind="stable")]
    fan_out = np.bincount(edge_src, minlength=size)
    succ_ptr = np.concatenate([[0], np.cumsum(fan_out)])
    del edge_src, edge_dst
    depth = np.full(size, -1, dtype=np.int64)
    deepest = np.zeros(size, dtype=np.int64)  # the deepest dependency done so far
    stamp = np.zeros(size, dtype=np.int64)
    frontier = np.flatnonzero(pending == 0)
    while len(frontier):
        depth[frontier] = deepest[frontier] + 1
        fan = fan_out[frontier]
        total = int(fan.sum())
        if total == 0:
            break
        source = np.repeat(frontier, fan)
        targets = succ[np.repeat(succ_ptr[frontier] - (np.cumsum(fan) - fan), fan) + np.arange(total)]
        np.maximum.at(deepest, targets, depth[source])
        np.subtract.at(pending, targets, 1)
        ready = targets[pending[targets] == 0]
        stamp[ready] = np.arange(len(ready))  # an operation reached by several edges is kept once
        frontier = ready[stamp[ready] == np.arange(len(ready))]
    return depth
