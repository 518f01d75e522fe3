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
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages


def summarize(algo: CollectiveAlgorithm, size_bytes: int | None = None) -> dict[str, Any]:
    """Nodes by type, bytes sent/received and longest dependency chain, per rank and in total.

    The per-rank chain counts that rank's own dependencies; the total ``critical_path_ops``
    also follows messages (a RECV after its SEND), over the whole algorithm.
    """
    ops = algo.ops
    nbytes = algo.op_bytes(size_bytes)
    kinds = np.zeros((algo.num_ranks, len(OpKind)), dtype=np.int64)
    np.add.at(kinds, (ops.rank, ops.kind), 1)
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
    """Length (in operations) of the longest chain ending at each operation (-1: never runs)."""
    ops = algo.ops
    size = len(ops)
    partner = match_messages(algo).partner if with_messages else np.full(size, -1)
    order = execute(algo, partner, semantics="eager").order
    depth = [-1] * size
    dep_ptr = ops.dep_ptr.tolist()
    dep_idx = ops.dep_idx.tolist()
    kind = ops.kind.tolist()
    partners = partner.tolist()
    RECV = int(OpKind.RECV)
    for i in order:
        best = 0
        for d in dep_idx[dep_ptr[i] : dep_ptr[i + 1]]:
            if depth[d] > best:
                best = depth[d]
        if kind[i] == RECV and partners[i] >= 0 and depth[partners[i]] > best:
            best = depth[partners[i]]
        depth[i] = best + 1
    return np.asarray(depth)
