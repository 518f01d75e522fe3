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
from chakra_collectives.ir.dag import longest_path
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
        "placement": list(algo.placement) if algo.placement else None,
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
    """Length (in operations) of the longest chain ending at each operation (-1: never runs):
    :func:`~chakra_collectives.ir.dag.longest_path` over the dependencies (and, ``with_messages``,
    each RECV after its SEND)."""
    ops = algo.ops
    size = len(ops)
    dep_ptr, dep_idx = ops.dep_ptr, ops.dep_idx
    if with_messages:
        partner = match_messages(algo).partner
        recvs = np.flatnonzero((ops.kind == OpKind.RECV) & (partner >= 0))
        owner = np.concatenate([np.repeat(np.arange(size), np.diff(dep_ptr)), recvs])
        order = np.argsort(owner, kind="stable")
        dep_idx = np.concatenate([dep_idx, partner[recvs]])[order]
        dep_ptr = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=size))])
    depth = longest_path(dep_ptr, dep_idx, np.ones(size))
    return np.where(np.isnan(depth), -1, depth).astype(np.int64)
